/**
 * One streamed request to an OpenAI-compatible server, timed: TTFT at the first content chunk,
 * inter-token gaps between content chunks, end-to-end at `data: [DONE]` (or end of stream).
 */

/** Chat message as the OpenAI API takes it. */
export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** What the driver asks for. */
export interface RequestSpec {
  url: string;
  model: string;
  apiKey?: string;
  endpoint: "chat" | "completions";
  messages: ChatMessage[];
  maxTokens: number;
  ignoreEos: boolean;
  timeoutMs: number;
  sessionId?: string;
}

/** What one request measured. Times in ms. */
export interface RequestResult {
  ok: boolean;
  error?: string;
  status?: number;
  sendMs: number;
  ttftMs: number;
  itlMs: number[];
  e2eMs: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  text: string;
  /** The session and turn (0-based) the driver sent it for. */
  session?: string;
  turn?: number;
}

interface StreamChunk {
  choices?: { delta?: { content?: string | null }; text?: string }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
}

/** Renders messages as one completion prompt (for --endpoint completions). */
export function flattenMessages(messages: readonly ChatMessage[]): string {
  return messages.map((m) => m.content).join("\n");
}

/** Sends one streamed request and measures it; never throws (errors land in the result). */
export async function timedRequest(spec: RequestSpec, now: () => number): Promise<RequestResult> {
  const sendMs = now();
  const r: RequestResult = { ok: false, sendMs, ttftMs: NaN, itlMs: [], e2eMs: NaN, promptTokens: 0, completionTokens: 0, cachedTokens: 0, text: "" };
  const body: Record<string, unknown> = {
    model: spec.model,
    max_tokens: spec.maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (spec.endpoint === "chat") body.messages = spec.messages;
  else body.prompt = flattenMessages(spec.messages);
  if (spec.ignoreEos) body.ignore_eos = true;
  if (spec.sessionId) body.prompt_cache_key = spec.sessionId;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (spec.apiKey) headers.authorization = `Bearer ${spec.apiKey}`;
  const path = spec.endpoint === "chat" ? "/v1/chat/completions" : "/v1/completions";
  try {
    const res = await fetch(spec.url + path, { method: "POST", headers, body: JSON.stringify(body), signal: AbortSignal.timeout(spec.timeoutMs) });
    r.status = res.status;
    if (!res.ok || !res.body) {
      r.error = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
      return r;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    let last = NaN;
    let chunks = 0;
    let done = false;
    while (!done) {
      const { value, done: end } = await reader.read();
      if (end) break;
      buf += value;
      let cut: number;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") {
            done = true;
            break;
          }
          const chunk = JSON.parse(data) as StreamChunk;
          const c = chunk.choices?.[0];
          const piece = c ? (c.delta?.content ?? c.text ?? "") : "";
          if (piece.length > 0) {
            const t = now();
            if (chunks === 0) r.ttftMs = t - sendMs;
            else r.itlMs.push(t - last);
            last = t;
            chunks++;
            r.text += piece;
          }
          if (chunk.usage) {
            r.promptTokens = chunk.usage.prompt_tokens ?? 0;
            r.completionTokens = chunk.usage.completion_tokens ?? 0;
            r.cachedTokens = chunk.usage.prompt_tokens_details?.cached_tokens ?? 0;
          }
        }
      }
    }
    await reader.cancel().catch(() => {});
    r.e2eMs = now() - sendMs;
    if (r.completionTokens === 0) r.completionTokens = chunks;
    if (chunks === 0) r.ttftMs = r.e2eMs;
    r.ok = true;
  } catch (e) {
    r.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  }
  return r;
}

/** The first model a server lists at GET /v1/models. */
export async function firstModel(url: string, apiKey?: string): Promise<string> {
  const res = await fetch(`${url}/v1/models`, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {} });
  if (!res.ok) throw new Error(`GET ${url}/v1/models answered ${res.status}`);
  const body = (await res.json()) as { data?: { id: string }[] };
  const id = body.data?.[0]?.id;
  if (!id) throw new Error(`GET ${url}/v1/models listed no model`);
  return id;
}
