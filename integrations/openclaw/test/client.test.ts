/** The REST client's retries and errors, against a local HTTP server that answers from a script. */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { StratamemClient, StratamemError } from "../src/index.js";
import { retryAfterMs } from "../src/client.js";

type Answer = [number, Record<string, string>, unknown];

async function scripted(answers: Answer[], body: (client: StratamemClient, waits: number[]) => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    seen.push(`${request.method} ${request.url} ${request.headers.authorization}`);
    const [status, headers, json] = answers.shift() ?? [500, {}, {}];
    response.writeHead(status, { "Content-Type": "application/json", ...headers }).end(JSON.stringify(json));
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const waits: number[] = [];
  const client = new StratamemClient({
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: "smk_test",
    sleep: async (ms) => { waits.push(ms); },
  });
  try {
    await body(client, waits);
  } finally {
    await new Promise((done) => server.close(done));
  }
  return seen;
}

const RECALL = { context: "", stable: "", hits: [] };

test("429 and 503 with Retry-After are retried after the wait asked for", async () => {
  const seen = await scripted([
    [429, { "Retry-After": "2" }, { error: { type: "rate_limited", message: "slow down" } }],
    [503, { "Retry-After": "1" }, { error: { type: "pipeline_unavailable", message: "busy" } }],
    [200, {}, RECALL],
  ], async (client, waits) => {
    assert.deepEqual(await client.recall("q", "s1"), RECALL);
    assert.deepEqual(waits, [2000, 1000]);
  });
  assert.deepEqual(seen, Array(3).fill("POST /v1/recall Bearer smk_test"));
});

test("errors keep the service's type; a longer wait than allowed is not slept", async () => {
  await scripted([
    [404, {}, { error: { type: "not_found", message: "no memory m_1" } }],
    [429, { "Retry-After": "600" }, { error: { type: "rate_limited", message: "later" } }],
    [503, {}, { error: { type: "pipeline_unavailable", message: "no pipeline" } }],
  ], async (client, waits) => {
    await assert.rejects(client.forgetMemory("m_1"), (e: StratamemError) => e.status === 404 && e.type === "not_found" && /no memory m_1/.test(e.message));
    await assert.rejects(client.recall("q", "s"), (e: StratamemError) => e.type === "rate_limited" && e.retryAfterMs === 600_000);
    await assert.rejects(client.recall("q", "s"), (e: StratamemError) => e.status === 503); // no Retry-After: not retried
    assert.deepEqual(waits, []);
  });
});

test("an unreachable service is a typed error", async () => {
  const client = new StratamemClient({ url: "http://127.0.0.1:9", apiKey: "k", timeoutMs: 2000 });
  await assert.rejects(client.recall("q", "s"), (e: StratamemError) => e.type === "unreachable");
});

test("Retry-After in seconds or as an HTTP date", () => {
  assert.equal(retryAfterMs("3"), 3000);
  assert.equal(retryAfterMs(new Date(10_000).toUTCString(), 4_000), 6000);
  assert.equal(retryAfterMs("soon"), undefined);
});
