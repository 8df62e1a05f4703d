/**
 * The `stratamem` context engine: before each model call, the session's messages are compacted
 * for the token budget through stratamem's offload (old tool results replaced by their summaries
 * with a ref, the oldest history dropped when needed, the task diagrams of what was dropped added
 * to the system prompt). `/compact` and overflow recovery use OpenClaw's own summarisation.
 */

import type { OpenClawPluginApi } from "openclaw/plugin-sdk/plugin-entry";

import type { StratamemClient } from "./client.js";
import { fromChat, sessionOf, toChat } from "./messages.js";

type Factory = Parameters<OpenClawPluginApi["registerContextEngine"]>[1];
export type ContextEngine = Awaited<ReturnType<Factory>>;
type CompactParams = Parameters<ContextEngine["compact"]>[0];

export const ENGINE_ID = "stratamem";

export function createEngine(client: StratamemClient): ContextEngine {
  return {
    info: { id: ENGINE_ID, name: "stratamem context offload", version: "0.1.0", ownsCompaction: false },

    async ingest() {
      return { ingested: false }; // turns are captured when the agent run ends
    },

    async assemble({ sessionId, sessionKey, messages, tokenBudget }) {
      const chat = toChat(messages);
      if (!tokenBudget) return { messages, estimatedTokens: estimate(chat) };
      const compacted = await client.compact(sessionOf({ sessionKey, sessionId }), chat, tokenBudget);
      const { messages: kept, notes } = fromChat(compacted.messages, messages);
      return {
        messages: kept,
        estimatedTokens: compacted.tokens_after,
        ...(notes.length ? { systemPromptAddition: notes.join("\n\n") } : {}),
      };
    },

    async compact(params: CompactParams) {
      const { delegateCompactionToRuntime } = await import("openclaw/plugin-sdk/core");
      return delegateCompactionToRuntime(params);
    },
  };
}

/** stratamem's own estimate: four characters a token, four tokens a message. */
function estimate(chat: Array<{ content: string | null }>): number {
  return chat.reduce((sum, message) => sum + 4 + Math.ceil((message.content ?? "").length / 4), 0);
}
