/**
 * Tool calls in model output, in the Hermes format that Qwen 2.5/3 and Hermes models are trained on
 * (and vLLM's `hermes` parser reads): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
 * A block that is not valid JSON with a string `name` stays in the text: a malformed call is shown
 * to the client as the model wrote it, never dropped. `ToolCallStream` also reads the other tagged
 * formats (tool-calls-sections.ts, tool-calls-pairs.ts) through their `CallSyntax`.
 */
import { compactJson, HeldJsonValue, jsonObject, jsonParts } from "./tool-calls-json.ts";

/** One parsed call, with `arguments` as the JSON text OpenAI's API carries. */
export interface ParsedToolCall {
  name: string;
  arguments: string;
  /**
   * The call's id as the model wrote it (Kimi K2's `functions.NAME:INDEX`), returned to the client as
   * the call's id so that the next turn's template writes the same text back; absent: the server makes one.
   */
  id?: string;
}

/** What a function's name may hold (OpenAI's letters, digits, `_` and `-`, plus dots and other scripts' letters). */
export const FUNCTION_NAME = /^[\p{L}\p{N}_.-]+$/u;

/** How a format marks calls: a call's body lies between `open` and `close`. */
export interface CallSyntax {
  readonly open: string;
  readonly close: string;
  /** Tags that belong to the format, not the text, dropped where they stand outside a call (Kimi K2's section tags). */
  readonly drop?: readonly string[];
  /** The call in a body (between the tags, untrimmed), or the calls where a body holds a list (LFM2's), or null when the body is not a call. */
  parse(body: string): ParsedToolCall | readonly ParsedToolCall[] | null;
  /** Whether the body so far is still open, so a closing tag after it is the body's text (in a JSON string, a raw value), not the tag; tried only where the longer body is then a call. */
  unclosed?(body: string): boolean;
}

/**
 * The Hermes format: a JSON object between `<tool_call>` and `</tool_call>`. A `</tool_call>` inside
 * the object's strings (an agent writing a file about tool calls) is the arguments' text.
 */
export const HERMES: CallSyntax = {
  open: "<tool_call>",
  close: "</tool_call>",
  parse: (body) => parseToolCallBody(body.trim()),
  unclosed: (body) => {
    const at = body.length - body.trimStart().length;
    return body[at] === "{" && new HeldJsonValue().end(body, at) < 0;
  },
};

/** The call in one block's body, or null when the body is not a call. */
export function parseToolCallBody(body: string): ParsedToolCall | null {
  const o = jsonObject(body);
  if (o === null || typeof o.name !== "string" || o.name.length === 0) return null;
  const key = o.arguments != null ? "arguments" : o.parameters != null ? "parameters" : null;
  if (key === null) return { name: o.name, arguments: "{}" };
  const args = o[key];
  if (typeof args === "string") return { name: o.name, arguments: args };
  // The value as written, not re-serialized: JSON.parse rounds 12345678901234567890 and makes 1e400 null.
  const raw = jsonParts(body.trim()).findLast((p) => p.key === key)!.raw;
  return { name: o.name, arguments: compactJson(raw) };
}

/** Splits finished Hermes-format output into text and calls; `content` is null when only calls remain. */
export function parseToolCalls(text: string): { content: string | null; calls: ParsedToolCall[] } {
  const s = new ToolCallStream(HERMES);
  const parts = [...s.push(text), ...s.end()];
  const content = parts.filter((p) => p.kind === "text").map((p) => (p as { text: string }).text).join("");
  const calls = parts.flatMap((p) => (p.kind === "call" ? [p.call] : []));
  return { content: calls.length > 0 && content.trim() === "" ? null : content, calls };
}

/** A piece of streamed output: text to show now, or a complete call. */
export type ToolStreamPart = { kind: "text"; text: string } | { kind: "call"; call: ParsedToolCall };

/**
 * Incremental splitter for streamed output in a tagged format (Hermes by default). Text is released
 * as soon as it cannot be the start of a tag; a call is released whole when its closing tag arrives
 * (arguments are not streamed token by token: clients get each call in one delta, which the OpenAI
 * stream format allows). A body that is not a call is released as text, tags and all.
 */
export class ToolCallStream {
  private buf = "";
  private inCall = false;
  /**
   * A long call's body so far, in the pieces it came in, while its closing tag has not come: only
   * each new delta (and the tag's possible start before it) is searched, and the pieces are joined
   * once — growing one string and searching it at every delta copies it each time (V8 flattens it).
   */
  private held: string[] | null = null;
  /** The end of the held body that could begin the closing tag. */
  private heldTail = "";
  private readonly tags: readonly string[];

  constructor(private readonly syntax: CallSyntax = HERMES) {
    this.tags = [syntax.open, ...(syntax.drop ?? [])];
  }

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): ToolStreamPart[] {
    const { open, close } = this.syntax;
    if (this.held !== null) {
      this.held.push(delta);
      const window = this.heldTail + delta;
      if (!window.includes(close)) {
        this.heldTail = tail(window, close.length - 1);
        return [];
      }
      this.buf = this.held.join("");
      this.held = null;
    } else {
      this.buf += delta;
    }
    const out: ToolStreamPart[] = [];
    for (;;) {
      if (!this.inCall) {
        const [at, tag] = firstTag(this.buf, this.tags);
        if (at < 0) {
          // Hold back a tail that could still grow into a tag.
          const keep = Math.max(...this.tags.map((t) => partialTagSuffix(this.buf, t)));
          const text = this.buf.slice(0, this.buf.length - keep);
          if (text) out.push({ kind: "text", text });
          this.buf = this.buf.slice(this.buf.length - keep);
          return out;
        }
        if (at > 0) out.push({ kind: "text", text: this.buf.slice(0, at) });
        this.buf = this.buf.slice(at + tag.length);
        this.inCall = tag === open;
        continue;
      }
      const first = this.buf.indexOf(close);
      let end = first;
      while (end >= 0 && this.syntax.unclosed?.(this.buf.slice(0, end))) end = this.buf.indexOf(close, end + 1);
      if (end < 0) {
        this.held = [this.buf];
        this.heldTail = tail(this.buf, close.length - 1);
        this.buf = "";
        return out;
      }
      const call = this.syntax.parse(this.buf.slice(0, end));
      // Not a call even with the tags in its strings: the block is text up to the first closing tag.
      if (call === null) end = first;
      if (call) out.push(...callParts(call));
      else out.push({ kind: "text", text: open + this.buf.slice(0, end) + close });
      this.buf = this.buf.slice(end + close.length);
      this.inCall = false;
    }
  }

  /** The output ended: an unterminated call is parsed if its body is complete, else returned as text. */
  end(): ToolStreamPart[] {
    const rest = this.held !== null ? this.held.join("") : this.buf;
    this.held = null;
    this.buf = "";
    if (!this.inCall) return rest ? [{ kind: "text", text: rest }] : [];
    this.inCall = false;
    const call = this.syntax.parse(rest);
    if (call) return callParts(call);
    // A closing tag was passed over as the body's text, but no call came of it: the block ends there after all.
    const first = rest.indexOf(this.syntax.close);
    if (first < 0) return [{ kind: "text", text: this.syntax.open + rest }];
    const block = this.syntax.open + rest.slice(0, first + this.syntax.close.length);
    return [{ kind: "text", text: block }, ...this.push(rest.slice(first + this.syntax.close.length)), ...this.end()];
  }
}

/** A body's call, or its list of calls, as stream parts. */
function callParts(call: ParsedToolCall | readonly ParsedToolCall[]): ToolStreamPart[] {
  return (Array.isArray(call) ? call as readonly ParsedToolCall[] : [call as ParsedToolCall]).map((c) => ({ kind: "call", call: c }));
}

/** The last `n` characters of `s` (none for `n` 0). */
function tail(s: string, n: number): string {
  return n > 0 ? s.slice(-n) : "";
}

/** Where the first of `tags` starts in `s` (the longest there, if several), or -1. */
function firstTag(s: string, tags: readonly string[]): [number, string] {
  let best: [number, string] = [-1, ""];
  for (const t of tags) {
    const at = s.indexOf(t);
    if (at >= 0 && (best[0] < 0 || at < best[0] || (at === best[0] && t.length > best[1].length))) best = [at, t];
  }
  return best;
}

/** Length of the longest suffix of `s` that is a proper prefix of `tag` (the tail a stream holds back). */
export function partialTagSuffix(s: string, tag: string): number {
  for (let k = Math.min(s.length, tag.length - 1); k > 0; k--) if (tag.startsWith(s.slice(s.length - k))) return k;
  return 0;
}
