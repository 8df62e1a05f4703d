/**
 * OpenClaw's agent messages (user, assistant with text and tool-call blocks, tool results) in the
 * shapes stratamem takes: captured turns, OpenAI-format chat messages for compaction, and back.
 */

import type { AgentMessage } from "openclaw/plugin-sdk/agent-harness-runtime";

import type { CaptureMessage, ChatMessage } from "./client.js";

/** Where a chat message came from in the list sent for compaction. */
const INDEX = "x_openclaw_index";
const IDENT = /[^A-Za-z0-9._:@-]/g;

/** A stratamem identifier (session, call id) from an OpenClaw one: 1-128 safe characters. */
export function identifier(value: string | undefined, fallback: string): string {
  const cleaned = (value ?? "").replace(IDENT, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 128);
  return cleaned || fallback;
}

/** The stratamem session of an OpenClaw run: its session key, else its session id. */
export function sessionOf(ctx: { sessionKey?: string; sessionId?: string }): string {
  return identifier(ctx.sessionKey ?? ctx.sessionId, "openclaw");
}

/** The text of a message's content: a string, or the text blocks of a block list. */
export function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((block): block is { type: "text"; text: string } =>
      isRecord(block) && block.type === "text" && typeof block.text === "string")
    .map((block) => block.text)
    .join("\n");
}

/** A tool's result as text: its text blocks, else its JSON. */
export function resultText(result: unknown): string {
  if (typeof result === "string") return result;
  if (isRecord(result) && Array.isArray(result.content)) {
    const text = textOf(result.content);
    if (text) return text;
  }
  return JSON.stringify(result ?? null);
}

/**
 * The finished turn to capture: the messages from the last user message on, user and
 * assistant text only (tool results go to offload), each with its time so that capturing the
 * same turn again stores nothing twice.
 */
export function finishedTurn(messages: unknown[]): CaptureMessage[] {
  let start = messages.length - 1;
  while (start > 0 && !(isRecord(messages[start]) && (messages[start] as { role?: unknown }).role === "user")) {
    start--;
  }
  const turn: CaptureMessage[] = [];
  for (const message of messages.slice(Math.max(start, 0))) {
    if (!isRecord(message) || (message.role !== "user" && message.role !== "assistant")) continue;
    const text = textOf(message.content).trim();
    if (!text) continue;
    const at = typeof message.timestamp === "number" ? message.timestamp / 1000 : undefined;
    turn.push({ role: message.role, content: text, timestamp: at });
  }
  return turn;
}

/** The messages as OpenAI chat messages, each marked with its index. */
export function toChat(messages: AgentMessage[]): ChatMessage[] {
  return messages.map((message, index) => {
    const raw = message as unknown as Record<string, unknown>;
    if (raw.role === "toolResult") {
      return { role: "tool", tool_call_id: String(raw.toolCallId), content: textOf(raw.content), [INDEX]: index };
    }
    if (raw.role === "assistant") {
      const calls = (Array.isArray(raw.content) ? raw.content : []).filter(
        (block): block is { type: "toolCall"; id: string; name: string; arguments: unknown } =>
          isRecord(block) && block.type === "toolCall");
      const toolCalls = calls.map((call) => ({
        id: call.id, type: "function", function: { name: call.name, arguments: JSON.stringify(call.arguments) },
      }));
      const chat: ChatMessage = { role: "assistant", content: textOf(raw.content) || null, [INDEX]: index };
      return toolCalls.length ? { ...chat, tool_calls: toolCalls } : chat;
    }
    return { role: String(raw.role ?? "user"), content: textOf(raw.content), [INDEX]: index };
  });
}

/**
 * The compacted chat messages back as the original agent messages: kept ones as they were,
 * tool results whose text was replaced by a summary with that text, dropped ones left out.
 * Messages stratamem added (the note on what was offloaded) are returned as `notes`.
 */
export function fromChat(compacted: ChatMessage[], original: AgentMessage[]): { messages: AgentMessage[]; notes: string[] } {
  const messages: AgentMessage[] = [];
  const notes: string[] = [];
  for (const chat of compacted) {
    const index = chat[INDEX];
    const source = typeof index === "number" ? original[index] : undefined;
    if (source === undefined) {
      if (typeof chat.content === "string") notes.push(chat.content);
      continue;
    }
    const raw = source as unknown as Record<string, unknown>;
    const replaced = raw.role === "toolResult" && chat.content !== textOf(raw.content);
    messages.push(replaced ? ({ ...raw, content: [{ type: "text", text: chat.content ?? "" }] } as unknown as AgentMessage) : source);
  }
  return { messages, notes };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
