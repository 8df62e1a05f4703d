/** The memory tools an OpenClaw agent can call: search, state, forget, read an offloaded result. */

import { Type } from "typebox";
import type { OpenClawPluginApi } from "openclaw/plugin-sdk/plugin-entry";

import type { StratamemClient } from "./client.js";

type Tool = Parameters<OpenClawPluginApi["registerTool"]>[0];

function text(value: string, details: Record<string, unknown>) {
  return { content: [{ type: "text" as const, text: value }], details };
}

export function memoryTools(client: StratamemClient): Tool[] {
  return [
    {
      name: "memory_search",
      label: "Search memory",
      description: "Search long-term memory (facts about the user, past events, standing instructions) for what is relevant to a query.",
      parameters: Type.Object({ query: Type.String(), k: Type.Optional(Type.Integer({ minimum: 1, maximum: 50 })) }),
      async execute(_id: string, params: unknown) {
        const { query, k } = params as { query: string; k?: number };
        const hits = await client.searchMemories(query, k ?? 5);
        const lines = hits.map((hit) => `[${hit.id}] (${hit.type ?? hit.layer}) ${hit.text}`);
        return text(lines.join("\n") || "(nothing found)", { hits });
      },
    },
    {
      name: "memory_add",
      label: "Remember",
      description: "Store one fact the user stated directly. type: persona (who the user is, stable preferences), episodic (what happened) or instruction (a standing rule for you).",
      parameters: Type.Object({
        content: Type.String({ minLength: 1 }),
        type: Type.Optional(Type.Union([Type.Literal("persona"), Type.Literal("episodic"), Type.Literal("instruction")])),
      }),
      async execute(_id: string, params: unknown) {
        const { content, type } = params as { content: string; type?: string };
        const stored = await client.addMemory(content, type ?? "persona");
        return text(`remembered [${stored.id}]`, { memory: stored });
      },
    },
    {
      name: "memory_forget",
      label: "Forget",
      description: "Forget a memory by its id (from memory_search) when the user says it is wrong or asks to forget it.",
      parameters: Type.Object({ id: Type.String() }),
      async execute(_id: string, params: unknown) {
        const { id } = params as { id: string };
        const forgotten = await client.forgetMemory(id);
        return text(`forgot [${forgotten.id}]`, { memory: forgotten });
      },
    },
    {
      name: "memory_read_tool_result",
      label: "Read an offloaded tool result",
      description: "The exact result of an earlier tool call that was replaced by a summary (by the ref in that summary), or the part of it around a query.",
      parameters: Type.Object({
        ref: Type.String(),
        query: Type.Optional(Type.String()),
        max_tokens: Type.Optional(Type.Integer({ minimum: 1 })),
      }),
      async execute(_id: string, params: unknown) {
        const { ref, query, max_tokens } = params as { ref: string; query?: string; max_tokens?: number };
        const found = await client.readBack(ref, query, max_tokens);
        return text(found.text, { ref: found.ref_id, complete: found.complete, total_chars: found.total_chars });
      },
    },
  ];
}
