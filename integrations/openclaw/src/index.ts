/**
 * stratamem for OpenClaw. With a stratamem service (`stratamem serve`) and a tenant's key:
 * - before each model call, recall: the per-turn block of relevant memories goes before the
 *   prompt, the stable block (profile, scene index) into the cacheable system prompt;
 * - after each successful run, the finished turn (user and assistant text) is captured;
 * - each finished tool call is offloaded (summary, score, ref), each user message recorded as a
 *   possible task boundary, and the `stratamem` context engine compacts context by budget;
 * - tools: memory_search, memory_add, memory_forget, memory_read_tool_result.
 */

import { definePluginEntry } from "openclaw/plugin-sdk/plugin-entry";
import type { OpenClawPluginApi } from "openclaw/plugin-sdk/plugin-entry";

import { StratamemClient } from "./client.js";
import { createEngine, ENGINE_ID } from "./engine.js";
import { finishedTurn, identifier, resultText, sessionOf } from "./messages.js";
import { memoryTools } from "./tools.js";

export { StratamemClient, StratamemError } from "./client.js";
export { createEngine, ENGINE_ID } from "./engine.js";

export interface StratamemConfig {
  url: string;
  apiKey: string;
  autoRecall: boolean;
  autoCapture: boolean;
  offload: boolean;
  recallBudgetChars?: number;
  timeoutMs: number;
}

/** The plugin's settings from its config, with STRATAMEM_URL / STRATAMEM_KEY as defaults. */
export function readConfig(raw: Record<string, unknown> | undefined, env = process.env): StratamemConfig | undefined {
  const config = raw ?? {};
  const apiKey = str(config.apiKey) ?? env.STRATAMEM_KEY;
  if (!apiKey) return undefined;
  return {
    url: str(config.url) ?? env.STRATAMEM_URL ?? "http://127.0.0.1:8420",
    apiKey,
    autoRecall: config.autoRecall !== false,
    autoCapture: config.autoCapture !== false,
    offload: config.offload !== false,
    recallBudgetChars: typeof config.recallBudgetChars === "number" ? config.recallBudgetChars : undefined,
    timeoutMs: typeof config.timeoutMs === "number" ? config.timeoutMs : 10_000,
  };
}

export function register(api: OpenClawPluginApi): void {
  const config = readConfig(api.pluginConfig);
  if (config === undefined) {
    api.logger.warn("stratamem: no API key (plugin config apiKey or STRATAMEM_KEY): memory is off");
    return;
  }
  const client = new StratamemClient({ url: config.url, apiKey: config.apiKey, timeoutMs: config.timeoutMs });
  for (const tool of memoryTools(client)) api.registerTool(tool, { optional: false });
  if (config.autoRecall || config.offload) registerRecall(api, client, config);
  if (config.autoCapture) registerCapture(api, client);
  if (config.offload) registerOffload(api, client);
  api.logger.info(`stratamem: memory from ${config.url}`);
}

function registerRecall(api: OpenClawPluginApi, client: StratamemClient, config: StratamemConfig): void {
  api.on("before_prompt_build", async (event, ctx) => {
    const query = (event.currentUserMessage ?? event.prompt).trim();
    if (!query) return undefined;
    const session = sessionOf(ctx);
    // The admitted request's id keeps a prompt rebuilt for a retry one task boundary.
    const messageId = event.currentUserMessageId ? identifier(event.currentUserMessageId, "") || undefined : undefined;
    const boundary = config.offload ? client.offloadUserMessage(session, query, messageId) : undefined;
    // With the session named, recall leaves out its last turns, which the agent holds in its
    // context; a prompt built on no messages holds none of them, so nothing is left out.
    const inContext = event.messages?.length ? session : undefined;
    const recall = config.autoRecall ? await client.recall(query, inContext, config.recallBudgetChars) : undefined;
    await boundary;
    if (!recall) return undefined;
    return {
      ...(recall.context ? { prependContext: recall.context } : {}),
      ...(recall.stable ? { appendSystemContext: recall.stable } : {}),
    };
  });
}

function registerCapture(api: OpenClawPluginApi, client: StratamemClient): void {
  api.on("agent_end", async (event, ctx) => {
    if (!event.success) return;
    const turn = finishedTurn(event.messages);
    if (turn.length) await client.capture(sessionOf(ctx), turn);
  });
}

function registerOffload(api: OpenClawPluginApi, client: StratamemClient): void {
  api.on("after_tool_call", async (event, ctx) => {
    const callId = identifier(event.toolCallId ?? ctx.toolCallId, `call-${Date.now()}`);
    const pair = {
      call_id: callId,
      tool: event.toolName,
      params: event.params,
      ...(event.result !== undefined ? { result: resultText(event.result) } : {}),
      ...(event.error !== undefined ? { error: event.error } : {}),
      ...(event.durationMs !== undefined ? { duration_ms: event.durationMs } : {}),
    };
    if (pair.result === undefined && pair.error === undefined) return;
    await client.offloadToolResults(sessionOf(ctx), [pair]);
  });
  api.registerContextEngine(ENGINE_ID, () => createEngine(client));
}

function str(value: unknown): string | undefined {
  return typeof value === "string" && value.trim() ? value.trim() : undefined;
}

export default definePluginEntry({
  id: "stratamem",
  name: "Memory (stratamem)",
  description: "Layered long-term memory and context offload from a stratamem service.",
  register,
});
