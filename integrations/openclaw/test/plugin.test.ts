/**
 * The plugin against a real `stratamem serve`, driven through OpenClaw's own hook runner (from
 * the `openclaw` package): recall before the prompt, capture after the run, tool results
 * offloaded and compacted by the context engine, and the memory tools.
 */

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import type { OpenClawPluginApi } from "openclaw/plugin-sdk/plugin-entry";
import type { AgentMessage } from "openclaw/plugin-sdk/agent-harness-runtime";
import { initializeGlobalHookRunner } from "openclaw/plugin-sdk/hook-runtime";
import { getGlobalHookRunner } from "openclaw/plugin-sdk/plugin-runtime";

import plugin, { StratamemClient } from "../src/index.js";
import type { ContextEngine } from "../src/engine.js";
import { startService, waitFor, type Service } from "./serve.js";

type Tool = { name: string; execute: (id: string, params: unknown) => Promise<{ content: Array<{ text: string }>; details: unknown }> };
type Runner = NonNullable<ReturnType<typeof getGlobalHookRunner>>;

interface Loaded {
  runner: Runner;
  tools: Map<string, Tool>;
  engines: Map<string, () => ContextEngine | Promise<ContextEngine>>;
  warnings: string[];
}

/** Register the plugin as OpenClaw's loader does (its `api` surface that the plugin uses) and
 * hand its hooks to OpenClaw's global hook runner. */
function load(pluginConfig: Record<string, unknown>): Loaded {
  const typedHooks: unknown[] = [];
  const tools = new Map<string, Tool>();
  const engines = new Map<string, () => ContextEngine | Promise<ContextEngine>>();
  const warnings: string[] = [];
  const api = {
    id: "stratamem",
    name: "Memory (stratamem)",
    source: "test",
    registrationMode: "full",
    pluginConfig,
    logger: { info() {}, debug() {}, error() {}, warn(message: string) { warnings.push(message); } },
    on(hookName: string, handler: unknown, opts?: { priority?: number }) {
      typedHooks.push({ pluginId: "stratamem", hookName, handler, priority: opts?.priority, source: "test" });
    },
    registerTool(tool: Tool) { tools.set(tool.name, tool); },
    registerContextEngine(id: string, factory: () => ContextEngine) { engines.set(id, factory); },
  } as unknown as OpenClawPluginApi;
  plugin.register(api);
  initializeGlobalHookRunner({ hooks: [], typedHooks: typedHooks as never[], plugins: [{ id: "stratamem", status: "loaded" }] });
  const runner = getGlobalHookRunner();
  assert.ok(runner);
  return { runner, tools, engines, warnings };
}

const CTX = { sessionKey: "agent:main:main", sessionId: "4f0c9a1e", agentId: "main", trigger: "user" };
const SESSION = "agent:main:main";
const T0 = Date.UTC(2026, 2, 2, 9, 0, 0);

function user(text: string, at: number): AgentMessage {
  return { role: "user", content: text, timestamp: at } as AgentMessage;
}

function assistant(text: string, at: number, calls: Array<{ id: string; name: string }> = []): AgentMessage {
  const blocks = [
    ...(text ? [{ type: "text", text }] : []),
    ...calls.map((call) => ({ type: "toolCall", id: call.id, name: call.name, arguments: { cmd: "pytest" } })),
  ];
  return { role: "assistant", content: blocks, timestamp: at } as unknown as AgentMessage;
}

function toolResult(id: string, text: string, at: number): AgentMessage {
  return { role: "toolResult", toolCallId: id, toolName: "shell", content: [{ type: "text", text }], isError: false, timestamp: at } as AgentMessage;
}

describe("the stratamem plugin on a real stratamem serve", () => {
  let service: Service;
  let loaded: Loaded;
  let api: StratamemClient;

  before(async () => {
    service = await startService("maya", { STRATAMEM_OFFLOAD_L1_BATCH: "1" });
    loaded = load({ url: service.url, apiKey: service.key });
    api = new StratamemClient({ url: service.url, apiKey: service.key });
  });

  after(async () => {
    await service?.stop();
  });

  test("each finished run is captured once, a failed one not at all", async () => {
    const messages = [user("I adopted a dog called Biscuit", T0), assistant("Congratulations on Biscuit!", T0 + 1000)];
    await loaded.runner.runAgentEnd({ messages, success: true }, CTX);
    await loaded.runner.runAgentEnd({ messages, success: true }, CTX); // delivered twice
    await loaded.runner.runAgentEnd({ messages: [user("never mind", T0 + 2000)], success: false }, CTX);
    const turns = await api.request<Array<{ role: string; text: string }>>("GET", `/v1/sessions/${SESSION}/turns`);
    assert.deepEqual(turns.map((t) => [t.role, t.text]), [
      ["user", "I adopted a dog called Biscuit"],
      ["assistant", "Congratulations on Biscuit!"],
    ]);
  });

  test("recall goes before the prompt, the stable block into the system prompt", async () => {
    const empty = await loaded.runner.runBeforePromptBuild({ prompt: "what is my dog called?", currentUserMessage: "what is my dog called?", messages: [] }, CTX);
    assert.match(empty?.prependContext ?? "", /<stratamem-recall>[\s\S]*Biscuit/);
    assert.equal(empty?.appendSystemContext, undefined); // no profile before the layers ran
    await api.request("POST", `/v1/sessions/${SESSION}/flush?wait=true`);
    const built = await loaded.runner.runBeforePromptBuild({ prompt: "plan a walk", currentUserMessage: "plan a walk", messages: [] }, CTX);
    assert.match(built?.appendSystemContext ?? "", /<stratamem-profile>/);
  });

  test("a recalled block that comes back in a captured turn is not stored again", async () => {
    const recalled = await loaded.runner.runBeforePromptBuild({ prompt: "dog?", currentUserMessage: "dog?", messages: [] }, CTX);
    const prompt = `${recalled?.prependContext}\n\nAnd its age?`;
    await loaded.runner.runAgentEnd({ messages: [user(prompt, T0 + 5000), assistant("Two years.", T0 + 6000)], success: true }, CTX);
    const turns = await api.request<Array<{ text: string }>>("GET", `/v1/sessions/${SESSION}/turns`);
    assert.equal(turns.at(-2)?.text, "And its age?");
    assert.ok(turns.every((t) => !t.text.includes("stratamem-recall")));
  });

  test("tool results are offloaded, compacted by the context engine and read back exactly", async () => {
    const logs = [0, 1, 2].map((i) => `run ${i}\n` + "test_login PASSED\n".repeat(400) + `FAILED test_logout_${i}\n`);
    for (const [i, log] of logs.entries()) {
      await loaded.runner.runAfterToolCall({ toolName: "shell", params: { cmd: "pytest" }, toolCallId: `call-${i}`, result: { content: [{ type: "text", text: log }] }, durationMs: 1200 }, { ...CTX, toolName: "shell", toolCallId: `call-${i}` });
    }
    const entries = await waitFor(
      () => api.request<Array<{ call_id: string; ref_id: string; summary: string }>>("GET", `/v1/offload/sessions/${SESSION}/entries`),
      (found) => found.length === 3,
    );
    const factory = loaded.engines.get("stratamem");
    assert.ok(factory);
    const engine = await factory();
    const messages: AgentMessage[] = [user("fix the tests", T0), assistant("", T0 + 1, [0, 1, 2].map((i) => ({ id: `call-${i}`, name: "shell" }))),
      ...logs.map((log, i) => toolResult(`call-${i}`, log, T0 + 2 + i)), user("did it pass?", T0 + 10)];
    const assembled = await engine.assemble({ sessionId: CTX.sessionId, sessionKey: CTX.sessionKey, messages, tokenBudget: 2000 });
    const results = assembled.messages.filter((m) => (m as { role: string }).role === "toolResult") as Array<{ content: Array<{ text: string }> }>;
    assert.ok(results.length > 0 && results.some((r) => r.content[0]?.text.startsWith("[offloaded result of shell")));
    assert.ok(assembled.estimatedTokens <= 2000);
    const ref = entries.find((e) => e.call_id === "call-2")?.ref_id ?? "";
    const back = await loaded.tools.get("memory_read_tool_result")?.execute("t1", { ref });
    assert.equal(back?.content[0]?.text, logs[2]);
    const untouched = await engine.assemble({ sessionId: CTX.sessionId, sessionKey: CTX.sessionKey, messages, tokenBudget: 1_000_000 });
    assert.deepEqual(untouched.messages, messages); // within budget: nothing changes
  });

  test("the memory tools state, search and forget", async () => {
    const tools = loaded.tools;
    assert.deepEqual([...tools.keys()].sort(), ["memory_add", "memory_forget", "memory_read_tool_result", "memory_search"]);
    const added = await tools.get("memory_add")?.execute("t2", { content: "Prefers distances in kilometres", type: "instruction" });
    const id = /\[(m_[0-9a-f]+)\]/.exec(added?.content[0]?.text ?? "")?.[1] ?? "";
    const found = await tools.get("memory_search")?.execute("t3", { query: "kilometres" });
    assert.match(found?.content[0]?.text ?? "", new RegExp(`\\[${id}\\] \\(instruction\\) Prefers distances in kilometres`));
    await tools.get("memory_forget")?.execute("t4", { id });
    const gone = await tools.get("memory_search")?.execute("t5", { query: "kilometres" });
    assert.ok(!(gone?.content[0]?.text ?? "").includes(id));
  });
});

describe("task boundaries", () => {
  test("a prompt rebuilt for the same request sends the same boundary id", async () => {
    const bodies: Array<Record<string, unknown>> = [];
    const server = createServer((request, response) => {
      let raw = "";
      request.on("data", (chunk: Buffer) => { raw += chunk.toString(); });
      request.on("end", () => {
        bodies.push({ path: request.url, ...(JSON.parse(raw || "{}") as Record<string, unknown>) });
        response.writeHead(200, { "Content-Type": "application/json" }).end('{"id": "x"}');
      });
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const { runner } = load({ url, apiKey: "k", autoRecall: false });
      const event = { prompt: "deploy the site", currentUserMessage: "deploy the site", currentUserMessageId: "req/7", messages: [] };
      await runner.runBeforePromptBuild(event, CTX);
      await runner.runBeforePromptBuild(event, CTX); // a retry rebuilds the prompt
    } finally {
      await new Promise((done) => server.close(done));
    }
    const path = `/v1/offload/sessions/${encodeURIComponent(SESSION)}/user-messages`;
    assert.deepEqual(bodies, Array(2).fill({ path, text: "deploy the site", id: "req-7" }));
  });
});

describe("configuration", () => {
  test("without a key the plugin registers nothing and says why", () => {
    const loaded = load({ url: "http://127.0.0.1:9" });
    assert.equal(loaded.tools.size, 0);
    assert.match(loaded.warnings[0] ?? "", /no API key/);
  });
});
