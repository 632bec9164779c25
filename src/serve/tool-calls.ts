/**
 * Tool calls in model output, in the Hermes format that Qwen 2.5/3 and Hermes models are trained on
 * (and vLLM's `hermes` parser reads): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
 * A block that is not valid JSON with a string `name` stays in the text: a malformed call is shown
 * to the client as the model wrote it, never dropped.
 */

/** One parsed call, with `arguments` as the JSON text OpenAI's API carries. */
export interface ParsedToolCall {
  name: string;
  arguments: string;
}

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** The call in one block's body, or null when the body is not a call. */
export function parseToolCallBody(body: string): ParsedToolCall | null {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return null;
  const o = v as Record<string, unknown>;
  if (typeof o.name !== "string" || o.name.length === 0) return null;
  const args = o.arguments ?? o.parameters ?? {};
  return { name: o.name, arguments: typeof args === "string" ? args : JSON.stringify(args) };
}

/** Splits finished output into text and calls; `content` is null when only calls remain. */
export function parseToolCalls(text: string): { content: string | null; calls: ParsedToolCall[] } {
  const s = new ToolCallStream();
  const parts = [...s.push(text), ...s.end()];
  const content = parts.filter((p) => p.kind === "text").map((p) => (p as { text: string }).text).join("");
  const calls = parts.flatMap((p) => (p.kind === "call" ? [p.call] : []));
  return { content: calls.length > 0 && content.trim() === "" ? null : content, calls };
}

/** A piece of streamed output: text to show now, or a complete call. */
export type ToolStreamPart = { kind: "text"; text: string } | { kind: "call"; call: ParsedToolCall };

/**
 * Incremental splitter for streamed output. Text is released as soon as it cannot be the start of
 * `<tool_call>`; a call is released whole when its closing tag arrives (arguments are not streamed
 * token by token: clients get each call in one delta, which the OpenAI stream format allows).
 */
export class ToolCallStream {
  private buf = "";
  private inCall = false;

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): ToolStreamPart[] {
    this.buf += delta;
    const out: ToolStreamPart[] = [];
    for (;;) {
      if (!this.inCall) {
        const at = this.buf.indexOf(OPEN);
        if (at < 0) {
          // Hold back a tail that could still grow into the opening tag.
          const keep = partialTagSuffix(this.buf, OPEN);
          const text = this.buf.slice(0, this.buf.length - keep);
          if (text) out.push({ kind: "text", text });
          this.buf = this.buf.slice(this.buf.length - keep);
          return out;
        }
        if (at > 0) out.push({ kind: "text", text: this.buf.slice(0, at) });
        this.buf = this.buf.slice(at + OPEN.length);
        this.inCall = true;
      }
      const end = this.buf.indexOf(CLOSE);
      if (end < 0) return out;
      const body = this.buf.slice(0, end);
      const call = parseToolCallBody(body.trim());
      out.push(call ? { kind: "call", call } : { kind: "text", text: OPEN + body + CLOSE });
      this.buf = this.buf.slice(end + CLOSE.length);
      this.inCall = false;
    }
  }

  /** The output ended: an unterminated call is parsed if it is complete JSON, else returned as text. */
  end(): ToolStreamPart[] {
    const rest = this.buf;
    this.buf = "";
    if (!this.inCall) return rest ? [{ kind: "text", text: rest }] : [];
    this.inCall = false;
    const call = parseToolCallBody(rest.trim());
    return call ? [{ kind: "call", call }] : [{ kind: "text", text: OPEN + rest }];
  }
}

/** Length of the longest suffix of `s` that is a proper prefix of `tag` (the tail a stream holds back). */
export function partialTagSuffix(s: string, tag: string): number {
  for (let k = Math.min(s.length, tag.length - 1); k > 0; k--) if (tag.startsWith(s.slice(s.length - k))) return k;
  return 0;
}
