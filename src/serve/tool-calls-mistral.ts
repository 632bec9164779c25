/**
 * Tool calls after a marker: Mistral's formats (vLLM's `mistral` parser), Granite 3.x's (`granite`),
 * Phi-4-mini's (`phi4_mini_json`) and Nemotron Nano 2's (`nemotron_json`, the list closed by
 * `</TOOLCALL>`), the latter three a JSON list like Mistral's older one
 * ({@link MarkedCallFormat}). Mistral's: each call after the control token
 * `[TOOL_CALLS]`. Tokenizers v11 and later (Mistral Small 3.1+, Magistral, Devstral) write
 * `[TOOL_CALLS]NAME[ARGS]{...}` per call, some with the call's id: `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`;
 * older ones (v3, v7: Mistral 7B v0.3, Mixtral 8x22B, Mistral Large 2407–2411) one JSON list,
 * `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`. One stream reads both, so the server needs
 * no version. Text before the first `[TOOL_CALLS]` is content; a call that does not parse (not JSON,
 * no name) is returned as the model wrote it, tag and all, never dropped (unlike vLLM, which returns
 * v11 calls with broken arguments as calls).
 *
 * Mistral's chat templates refuse any call id that is not nine characters (mistral-common checks
 * nine letters or digits), so every call gets such an id: the model's own where it wrote one, else a
 * fresh one; {@link mistralMessageIds} shortens longer ids that clients send back, as vLLM does.
 */
import type { ToolCallFormat, ToolCallSyntax } from "../engine/grammar.ts";
import { LIST_MARKERS, MISTRAL, NEMOTRON_CLOSE } from "../engine/grammar-tool-calls.ts";
import type { Tokenizer } from "../model/config.ts";
import type { ChatMessageIn } from "./schemas.ts";
import { FUNCTION_NAME, type ParsedToolCall, partialTagSuffix, type ToolStreamPart } from "./tool-calls.ts";
import { compactJson, HeldJsonValue, jsonObject, jsonParts } from "./tool-calls-json.ts";

/** A call id Mistral's templates take: nine letters or digits. */
export const MISTRAL_CALL_ID = /^[A-Za-z0-9]{9}$/;
const ALPHANUMERIC = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** A fresh call id of nine random letters and digits. */
export function mistralCallId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(9));
  // 62 letters and digits: the modulo's bias (256 = 4·62 + 8) does not matter for an id.
  return Array.from(bytes, (b) => ALPHANUMERIC[b % ALPHANUMERIC.length]).join("");
}

/** A v11 call's head, before its arguments: the name, the id, `[ARGS]` (absent where a decoder dropped it). */
const V11_HEAD = /^\s*([\p{L}\p{N}_.-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?(?:\[ARGS\])?\s*$/u;
/** What may still grow into a v11 head. */
const V11_HEAD_SO_FAR = /^\s*[\p{L}\p{N}_.-]*(?:\[CALL_ID\][A-Za-z0-9]*)?(?:\[ARGS\])?\s*$/u;

/**
 * A format whose runs of calls follow a marker: Mistral's (`[TOOL_CALLS]`, a v11 call or a JSON list),
 * Granite 3.x's (`<|tool_call|>` or `<tool_call>`, then a JSON list: vLLM's `granite`) and Phi-4-mini's
 * (`functools`, then a JSON list: vLLM's `phi4_mini_json`).
 */
export interface MarkedCallFormat {
  /** The texts a run of calls begins with (grammars write the first). */
  readonly markers: readonly string[];
  /** Calls may also come one a marker as `NAME[CALL_ID]ID[ARGS]{...}` (Mistral's tokenizers v11 and later). */
  readonly v11: boolean;
  /** A list item's call id from the `id` it wrote (undefined there if none): Mistral's nine characters; undefined leaves it to the server. */
  id(written: unknown): string | undefined;
  /** The tag that closes a list (Nemotron Nano 2's `</TOOLCALL>`), taken with it where it follows; absent: none. */
  readonly close?: string;
}

/** Mistral's calls, each with a nine-character id (the model's where it wrote one). */
export const MISTRAL_CALLS: MarkedCallFormat = {
  markers: [MISTRAL.calls],
  v11: true,
  id: (written) => (typeof written === "string" && MISTRAL_CALL_ID.test(written) ? written : mistralCallId()),
};

/** Granite 3.x's list of calls after `<|tool_call|>` (or, as vLLM also reads it, `<tool_call>`). */
export const GRANITE_CALLS: MarkedCallFormat = { markers: ["<|tool_call|>", "<tool_call>"], v11: false, id: () => undefined };

/** Phi-4-mini's list of calls after `functools`. */
export const PHI4_MINI_CALLS: MarkedCallFormat = { markers: ["functools"], v11: false, id: () => undefined };

/** Nemotron Nano 2's list of calls between `<TOOLCALL>` and `</TOOLCALL>`. */
export const NEMOTRON_CALLS: MarkedCallFormat = { markers: [LIST_MARKERS.nemotron_json], v11: false, id: () => undefined, close: NEMOTRON_CLOSE };

/** What reading the text after one `[TOOL_CALLS]` came to ("open": a JSON value began and is still open, scanned to the text's end). */
type Read = { kind: "wait" } | { kind: "open" } | { kind: "bad" } | { kind: "calls"; calls: ParsedToolCall[]; used: number };

/**
 * Incremental splitter for calls after a marker (Mistral's by default). Text is released as soon as
 * it cannot be the start of a marker; a call (or a list of calls) is released whole when its JSON closes.
 */
export class MistralToolStream {
  private buf = "";
  /** "text": passing text through; "call": just after a marker. */
  private mode: "text" | "call" = "text";
  /** The marker the run of calls being read began with. */
  private marker = "";

  constructor(private readonly format: MarkedCallFormat = MISTRAL_CALLS) {}
  /** The arguments (or the list) being read, held while they are open. */
  private readonly json = new HeldJsonValue();

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): ToolStreamPart[] {
    const buf = this.json.append(this.buf, delta);
    if (buf === null) return [];
    this.buf = buf;
    return this.read(false);
  }

  /** The output ended: what is left is released, an unfinished call as text. */
  end(): ToolStreamPart[] {
    this.buf = this.json.release(this.buf);
    return this.read(true);
  }

  private read(final: boolean): ToolStreamPart[] {
    const out: ToolStreamPart[] = [];
    for (;;) {
      if (this.mode === "text") {
        const found = this.nextMarker(this.buf);
        if (found === undefined) {
          const keep = final ? 0 : Math.max(...this.format.markers.map((m) => partialTagSuffix(this.buf, m)));
          const text = this.buf.slice(0, this.buf.length - keep);
          if (text) out.push({ kind: "text", text });
          this.buf = this.buf.slice(this.buf.length - keep);
          return out;
        }
        const { at, marker } = found;
        if (at > 0) out.push({ kind: "text", text: this.buf.slice(0, at) });
        this.buf = this.buf.slice(at + marker.length);
        this.marker = marker;
        this.mode = "call";
      }
      const r = readCalls(this.buf, final, this.json, this.format);
      if (r.kind === "wait" || (r.kind === "calls" && r.used < 0)) return out;
      if (r.kind === "open") {
        this.json.hold(this.buf);
        this.buf = "";
        return out;
      }
      this.mode = "text";
      if (r.kind === "bad") {
        // The marker and what follows it up to the next marker are text as written.
        const upTo = this.nextMarker(this.buf)?.at ?? this.buf.length;
        out.push({ kind: "text", text: this.marker + this.buf.slice(0, upTo) });
        this.buf = this.buf.slice(upTo);
        continue;
      }
      for (const call of r.calls) out.push({ kind: "call", call });
      this.buf = this.buf.slice(r.used);
    }
  }

  /** The first marker in `s` and where it stands (the longest where two begin at one place), or undefined. */
  private nextMarker(s: string): { at: number; marker: string } | undefined {
    let best: { at: number; marker: string } | undefined;
    for (const marker of this.format.markers) {
      const at = s.indexOf(marker);
      if (at >= 0 && (best === undefined || at < best.at || (at === best.at && marker.length > best.marker.length))) best = { at, marker };
    }
    return best;
  }
}

/** Reads what follows one marker: a v11 call (where the format has them), or a list of calls. */
function readCalls(s: string, final: boolean, json: HeldJsonValue, format: MarkedCallFormat): Read {
  const lead = s.length - s.trimStart().length;
  if (lead === s.length) return final ? { kind: "bad" } : { kind: "wait" };
  const list = s[lead] === "[" && !s.startsWith(MISTRAL.callId, lead) && !s.startsWith(MISTRAL.args, lead);
  if (list) return readList(s, lead, final, json, format);
  return format.v11 ? readV11(s, final, json) : { kind: "bad" };
}

/** `NAME[CALL_ID]ID[ARGS]{...}`, the id and `[ARGS]` optional. */
function readV11(s: string, final: boolean, json: HeldJsonValue): Read {
  const open = s.indexOf("{");
  const head = open < 0 ? s : s.slice(0, open);
  if (open < 0) {
    const partial = Math.max(partialTagSuffix(head, MISTRAL.callId), partialTagSuffix(head, MISTRAL.args));
    return !final && V11_HEAD_SO_FAR.test(head.slice(0, head.length - partial)) ? { kind: "wait" } : { kind: "bad" };
  }
  const m = V11_HEAD.exec(head);
  if (m === null) return { kind: "bad" };
  const end = json.end(s, open);
  if (end < 0) return final ? { kind: "bad" } : { kind: "open" };
  const args = s.slice(open, end);
  if (jsonObject(args) === null) return { kind: "bad" };
  const id = m[2] !== undefined && MISTRAL_CALL_ID.test(m[2]) ? m[2] : mistralCallId();
  return { kind: "calls", calls: [{ id, name: m[1], arguments: args }], used: end };
}

/** `[{"name": ..., "arguments": {...}, "id"?: ...}, ...]`: every item a call, or none is. */
function readList(s: string, at: number, final: boolean, json: HeldJsonValue, format: MarkedCallFormat): Read {
  const end = json.end(s, at);
  if (end < 0) return final ? { kind: "bad" } : { kind: "open" };
  let list: unknown;
  try {
    list = JSON.parse(s.slice(at, end));
  } catch {
    return { kind: "bad" };
  }
  if (!Array.isArray(list) || list.length === 0) return { kind: "bad" };
  const calls: ParsedToolCall[] = [];
  const items = jsonParts(s.slice(at, end));
  for (const [i, item] of list.entries()) {
    const o = typeof item === "object" && item !== null && !Array.isArray(item) ? item as Record<string, unknown> : null;
    if (o === null || typeof o.name !== "string" || !FUNCTION_NAME.test(o.name)) return { kind: "bad" };
    const args = o.arguments ?? {};
    if (typeof args !== "object" || args === null || Array.isArray(args)) return { kind: "bad" };
    const id = format.id(o.id);
    // The arguments as written (tool-calls.ts compactJson: numbers not rounded).
    const raw = o.arguments == null ? "{}" : jsonParts(items[i].raw).findLast((p) => p.key === "arguments")!.raw;
    calls.push({ ...(id !== undefined ? { id } : {}), name: o.name, arguments: compactJson(raw) });
  }
  return { kind: "calls", calls, used: closing(s, end, final, format.close) };
}

/**
 * Where the text after a list ends: past its closing tag (and the whitespace before it) where one
 * follows; -1 (wait) while what follows could still become it; else the list's own end.
 */
function closing(s: string, end: number, final: boolean, close: string | undefined): number {
  if (close === undefined) return end;
  const rest = s.slice(end);
  const lead = rest.length - rest.trimStart().length;
  if (rest.startsWith(close, lead)) return end + lead + close.length;
  return !final && close.startsWith(rest.slice(lead)) ? -1 : end;
}

/**
 * `messages` with every call id longer than nine characters cut to its last nine (an assistant
 * message's `tool_calls[].id`, a tool message's `tool_call_id`), as vLLM does for Mistral models:
 * their templates refuse other lengths, and clients may hold ids another server made (`call_…`).
 */
export function mistralMessageIds(messages: readonly ChatMessageIn[]): ChatMessageIn[] {
  const cut = (id: unknown) => (typeof id === "string" && id.length > 9 ? id.slice(-9) : id);
  return messages.map((m) => {
    const r = m as ChatMessageIn & { tool_calls?: unknown; tool_call_id?: unknown };
    if (r.role === "tool" && typeof r.tool_call_id === "string") return { ...r, tool_call_id: cut(r.tool_call_id) };
    if (r.role !== "assistant" || !Array.isArray(r.tool_calls)) return m;
    const calls = r.tool_calls.map((c: unknown) => (typeof c === "object" && c !== null && "id" in c ? { ...c, id: cut((c as { id: unknown }).id) } : c));
    return { ...r, tool_calls: calls };
  });
}

/**
 * How a server writes forced calls in `format` for a model with `tokenizer`: "mistral" becomes
 * "mistral_pre_v11" where the vocabulary has no `[ARGS]` token (tokenizers before v11), as vLLM
 * decides; every other format is itself.
 */
export function toolCallSyntax(format: ToolCallFormat, tokenizer: Tokenizer): ToolCallSyntax {
  if (format !== "mistral") return format;
  const ids = tokenizer.encode(MISTRAL.args);
  const hasArgs = ids.length === 1 && tokenizer.decode(ids, { special: true }) === MISTRAL.args;
  return hasArgs ? "mistral" : "mistral_pre_v11";
}
