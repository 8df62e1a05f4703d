/**
 * The stratamem REST API, as far as the plugin uses it: every call carries the tenant's key,
 * errors come back as `StratamemError` with the service's `{"error": {"type", "message"}}`, and
 * answers 429 (or 503 with Retry-After) are retried after the wait the service asked for, within
 * `maxAttempts` and `maxDelayMs`.
 */

export class StratamemError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
    this.name = "StratamemError";
  }
}

export interface ClientOptions {
  url: string;
  apiKey: string;
  timeoutMs?: number;
  maxAttempts?: number;
  maxDelayMs?: number;
  sleep?: (ms: number) => Promise<void>;
}

export interface CaptureMessage {
  role: "user" | "assistant" | "system" | "tool";
  content: string;
  timestamp?: number;
  id?: string;
}

export interface Recall {
  context: string;
  stable: string;
  hits: Array<{ id: string; layer: string; text: string; score: number }>;
}

export interface Hit {
  id: string;
  layer: string;
  text: string;
  type: string | null;
  score: number;
}

export interface ToolPair {
  call_id: string;
  tool: string;
  params?: Record<string, unknown>;
  result?: string;
  error?: string;
  duration_ms?: number;
}

export interface ChatMessage {
  role: string;
  content: string | null;
  [extra: string]: unknown;
}

export interface Compaction {
  level: string;
  tokens_before: number;
  tokens_after: number;
  replaced: string[];
  dropped_messages: number;
  messages: ChatMessage[];
}

export interface ReadBack {
  ref_id: string;
  tool: string;
  text: string;
  complete: boolean;
  total_chars: number;
}

const RETRY_ON = new Set([429, 503]);

export class StratamemClient {
  readonly url: string;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly maxDelayMs: number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(options: ClientOptions) {
    this.url = options.url.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxAttempts = options.maxAttempts ?? 3;
    this.maxDelayMs = options.maxDelayMs ?? 30_000;
    this.sleep = options.sleep ?? ((ms) => new Promise((done) => setTimeout(done, ms)));
  }

  capture(session: string, messages: CaptureMessage[]): Promise<{ stored: string[]; duplicates: string[] }> {
    return this.request("POST", "/v1/capture", { session, messages });
  }

  recall(query: string, session?: string, budgetChars?: number): Promise<Recall> {
    return this.request("POST", "/v1/recall", { query, session, budget_chars: budgetChars });
  }

  async searchMemories(query: string, k: number): Promise<Hit[]> {
    return (await this.request<{ hits: Hit[] }>("POST", "/v1/search/memories", { query, k })).hits;
  }

  addMemory(content: string, type: string): Promise<{ id: string; content: string }> {
    return this.request("POST", "/v1/memories", { content, type });
  }

  forgetMemory(id: string): Promise<{ id: string; valid_to: number | null }> {
    return this.request("DELETE", `/v1/memories/${encodeURIComponent(id)}`);
  }

  offloadToolResults(session: string, pairs: ToolPair[]): Promise<{ stored: string[]; pending: number }> {
    return this.request("POST", `/v1/offload/sessions/${encodeURIComponent(session)}/tool-results`, { pairs });
  }

  offloadUserMessage(session: string, text: string, id?: string): Promise<{ id: string }> {
    return this.request("POST", `/v1/offload/sessions/${encodeURIComponent(session)}/user-messages`, { text, id });
  }

  compact(session: string, messages: ChatMessage[], budgetTokens: number): Promise<Compaction> {
    const path = `/v1/offload/sessions/${encodeURIComponent(session)}/compact`;
    return this.request("POST", path, { messages, budget_tokens: budgetTokens });
  }

  readBack(refId: string, query?: string, maxTokens?: number): Promise<ReadBack> {
    const params = new URLSearchParams();
    if (query) params.set("query", query);
    if (maxTokens) params.set("max_tokens", String(maxTokens));
    const tail = params.size ? `?${params}` : "";
    return this.request("GET", `/v1/offload/refs/${encodeURIComponent(refId)}${tail}`);
  }

  async request<T>(method: string, path: string, body?: Record<string, unknown>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const response = await this.send(method, path, body);
      if (response.ok) return (await response.json()) as T;
      const error = await errorOf(response, `${method} ${path}`);
      const wait = error.retryAfterMs;
      const retry = RETRY_ON.has(response.status) && (response.status === 429 || wait !== undefined);
      if (!retry || attempt >= this.maxAttempts || (wait ?? 0) > this.maxDelayMs) throw error;
      await this.sleep(wait ?? 500 * 2 ** (attempt - 1));
    }
  }

  private async send(method: string, path: string, body?: Record<string, unknown>): Promise<Response> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    try {
      return await fetch(`${this.url}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(dropUndefined(body)),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (cause) {
      const timedOut = cause instanceof DOMException && cause.name === "TimeoutError";
      const why = timedOut ? `no answer within ${this.timeoutMs} ms` : `${this.url} unreachable`;
      throw new StratamemError(0, "unreachable", `${method} ${path}: ${why}`);
    }
  }
}

async function errorOf(response: Response, where: string): Promise<StratamemError> {
  let type = "http_error";
  let message = response.statusText;
  try {
    const body = (await response.json()) as { error?: { type?: string; message?: string } };
    type = body.error?.type ?? type;
    message = body.error?.message ?? message;
  } catch {
    // not the error shape: keep the status text
  }
  const wait = retryAfterMs(response.headers.get("retry-after"));
  return new StratamemError(response.status, type, `${where} → ${response.status} ${type}: ${message}`, wait);
}

/** Milliseconds from a Retry-After header (seconds or an HTTP date), or undefined. */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const when = Date.parse(value);
  return Number.isNaN(when) ? undefined : Math.max(0, when - now);
}

function dropUndefined(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
}
