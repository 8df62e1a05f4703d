/** A real `stratamem serve` on 127.0.0.1 (a free port, a fresh data directory) for the tests. */

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dirname, "..", "..", "..", "..");
const PYTHON = process.env.STRATAMEM_PYTHON ?? join(ROOT, ".venv", "bin", "python");
const READY_MS = 60_000;

export interface Service {
  url: string;
  key: string;
  stop(): Promise<void>;
}

function environment(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith("STRATAMEM_")) env[name] = value;
  }
  return { ...env, PYTHONPATH: join(ROOT, "src"), HF_HUB_OFFLINE: "1", ...extra };
}

function stratamem(dataDir: string, ...args: string[]): string {
  const command = ["-m", "stratamem.cli.main", "--data-dir", dataDir, "--embedder", "hash:64", ...args];
  return execFileSync(PYTHON, command, { env: environment({}), encoding: "utf8" }).trim();
}

/** Start the service with one tenant, `tenant`, and return its URL and the tenant's key. */
export async function startService(tenant: string, env: Record<string, string> = {}): Promise<Service> {
  const dataDir = mkdtempSync(join(tmpdir(), "stratamem-openclaw-"));
  stratamem(dataDir, "tenants", "create", tenant);
  const key = stratamem(dataDir, "keys", "create", tenant);
  const args = ["-m", "stratamem.cli.main", "--data-dir", dataDir, "--embedder", "hash:64", "serve", "--port", "0", "--workers", "1"];
  const child = spawn(PYTHON, args, { env: environment(env), stdio: ["ignore", "pipe", "pipe"] });
  const url = await announced(child);
  return {
    url,
    key,
    async stop() {
      const exited = new Promise((done) => child.once("exit", done));
      child.kill("SIGTERM");
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

function announced(child: ChildProcess): Promise<string> {
  return new Promise((resolveUrl, reject) => {
    let log = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`stratamem serve did not start within ${READY_MS} ms:\n${log}`));
    }, READY_MS);
    const read = (chunk: Buffer) => {
      log += chunk.toString();
      const match = /listening on (http:\/\/\S+)/.exec(log);
      if (match?.[1]) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`stratamem serve exited with ${code}:\n${log}`));
    });
  });
}

/** Poll `read` until `done` says so, within `timeoutMs` (a process's background work). */
export async function waitFor<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting; last value: ${JSON.stringify(value)}`);
    await new Promise((next) => setTimeout(next, 100));
  }
}
