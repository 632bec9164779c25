/**
 * The output side of the Responses API: a chat answer's parts (reasoning, text, tool calls; from
 * chat-output.ts) become output items — `reasoning`, `message`, `function_call` — and the stream
 * events that build them (`response.output_item.added`, `response.output_text.delta`, …), each with
 * its sequence number. A non-streamed response is the same builder run over the whole answer, so
 * both forms give the same items.
 */
import { thinkingSignature } from "./messages-thinking.ts";
import type { TokenLogprob } from "../engine/logprobs.ts";
import type { ChatPart } from "./chat-output.ts";
import type { ParsedToolCall } from "./tool-calls.ts";

type Json = Record<string, unknown>;

/** One server-sent event of a Responses stream (its `type` is also the SSE event name). */
export interface ResponseEvent extends Json {
  type: string;
  sequence_number: number;
}

/** A random id with OpenAI's prefix for its kind (`resp`, `msg`, `rs`, `fc`, `call`). */
export function newId(prefix: string): string {
  return `${prefix}_${crypto.randomUUID().replaceAll("-", "")}`;
}

/** OpenAI's id prefix for an item of this type (a message when the type is left out). */
export function itemIdPrefix(type: unknown): string {
  switch (type ?? "message") {
    case "message":
      return "msg";
    case "reasoning":
      return "rs";
    case "function_call":
      return "fc";
    default:
      return "fco";
  }
}

interface OpenItem {
  kind: "message" | "reasoning";
  index: number;
  id: string;
  text: string;
  /** A message's token log probabilities so far (when asked). */
  logprobs: Json[];
}

/** Token log probabilities in the wire form of `output_text.logprobs` (logprobs-json.ts `chatLogprobs`'s entries). */
export type LogprobsJson = (lps: readonly TokenLogprob[]) => Json[];

/** Builds a response's output items from a chat answer's parts, with the events that stream them. */
export class ResponseOutput {
  /** The output items so far (complete ones, and the open one as it stands). */
  readonly items: Json[] = [];
  /** The calls kept, in order (the client runs them; the session waits on the first). */
  readonly calls: ParsedToolCall[] = [];
  private open: OpenItem | null = null;
  // Whitespace-only text is held until text follows: before a call it is dropped, as the chat API does.
  private space = "";
  private seq = 0;
  // Log probabilities of tokens whose text is not out yet: they go with the next text delta, and are
  // dropped when reasoning or a call comes out first (they were its tokens).
  private pending: TokenLogprob[] = [];

  /**
   * `maxToolCalls`: calls past this many are dropped (`max_tool_calls`; `parallel_tool_calls` false is 1).
   * `logprobsJson`: given when the request asked for log probabilities.
   * `namespaceOf`: the namespace of each namespaced function (its calls' items name it).
   */
  /**
   * `sealReasoning` (`include: ["reasoning.encrypted_content"]`): each reasoning item also carries its
   * text as `encrypted_content`, for a client that keeps no state (`store: false`) and sends the item
   * back without its `content` (messages-thinking.ts: a plain record, not a seal).
   */
  constructor(
    private readonly maxToolCalls = Infinity, private readonly logprobsJson?: LogprobsJson, private readonly namespaceOf?: ReadonlyMap<string, string>,
    private readonly sealReasoning = false,
  ) {}

  /** An event with the next sequence number. */
  event(type: string, fields: Json = {}): ResponseEvent {
    return { type, sequence_number: this.seq++, ...fields };
  }

  /** The events for the next parts of the answer; `logprobs`: those of the tokens that made them. */
  push(parts: readonly ChatPart[], logprobs?: readonly TokenLogprob[]): ResponseEvent[] {
    const out: ResponseEvent[] = [];
    if (logprobs) this.pending.push(...logprobs);
    for (const p of parts) {
      if (p.kind !== "content") this.pending = [];
      if (p.kind === "call") this.call(p.call, out);
      else if (p.kind === "reasoning") this.text("reasoning", p.text, out);
      else if (this.open?.kind === "message") this.text("message", p.text, out);
      else if (p.text.trim() === "") this.space += p.text;
      else {
        const text = this.space + p.text;
        this.space = "";
        this.text("message", text, out);
      }
    }
    return out;
  }

  /** The events that close the answer; `complete` false marks an open message incomplete (cut by the token limit). */
  finish(complete: boolean): ResponseEvent[] {
    const out: ResponseEvent[] = [];
    // An answer of whitespace alone is still the answer (when no call followed it).
    if (this.space && this.calls.length === 0 && this.open?.kind !== "message") this.text("message", this.space, out);
    this.space = "";
    this.close(out, complete);
    return out;
  }

  /** The message text of the output (what the SDK's `output_text` joins). */
  get outputText(): string {
    return this.items.flatMap((it) => (it.type === "message" ? (it.content as { text: string }[]).map((c) => c.text) : [])).join("");
  }

  /** The reasoning text of the output (null when it has none). */
  get reasoningText(): string | null {
    const parts = this.items.filter((it) => it.type === "reasoning").map((it) => (it.content as { text: string }[]).map((c) => c.text).join(""));
    return parts.length === 0 ? null : parts.join("");
  }

  private text(kind: "message" | "reasoning", delta: string, out: ResponseEvent[]): void {
    if (delta === "") return;
    if (this.open?.kind !== kind) {
      this.close(out, true);
      const item = kind === "message"
        ? { type: "message", id: newId("msg"), status: "in_progress", role: "assistant", content: [] }
        : { type: "reasoning", id: newId("rs"), summary: [], content: [] };
      const index = this.items.push({ ...item }) - 1;
      this.open = { kind, index, id: item.id, text: "", logprobs: [] };
      out.push(this.event("response.output_item.added", { output_index: index, item }));
      const part = kind === "message" ? { type: "output_text", text: "", annotations: [], logprobs: [] } : { type: "reasoning_text", text: "" };
      out.push(this.event("response.content_part.added", { item_id: item.id, output_index: index, content_index: 0, part }));
    }
    const o = this.open!;
    o.text += delta;
    const logprobs = kind === "message" && this.logprobsJson && this.pending.length > 0 ? this.logprobsJson(this.pending) : [];
    if (kind === "message") this.pending = [];
    o.logprobs.push(...logprobs);
    this.items[o.index] = this.itemOf(o, "in_progress");
    const type = kind === "message" ? "response.output_text.delta" : "response.reasoning_text.delta";
    out.push(this.event(type, { item_id: o.id, output_index: o.index, content_index: 0, delta, ...(kind === "message" ? { logprobs } : {}) }));
  }

  private call(c: ParsedToolCall, out: ResponseEvent[]): void {
    this.close(out, true);
    this.space = "";
    if (this.calls.length >= this.maxToolCalls) return;
    this.calls.push(c);
    const namespace = this.namespaceOf?.get(c.name);
    const item = { type: "function_call", id: newId("fc"), call_id: c.id ?? newId("call"), name: c.name, ...(namespace ? { namespace } : {}), arguments: "", status: "in_progress" };
    const index = this.items.push(item) - 1;
    const at = { item_id: item.id, output_index: index };
    out.push(this.event("response.output_item.added", { output_index: index, item: { ...item } }));
    out.push(this.event("response.function_call_arguments.delta", { ...at, delta: c.arguments }));
    out.push(this.event("response.function_call_arguments.done", { ...at, name: c.name, arguments: c.arguments }));
    this.items[index] = { ...item, arguments: c.arguments, status: "completed" };
    out.push(this.event("response.output_item.done", { output_index: index, item: this.items[index] }));
  }

  private close(out: ResponseEvent[], complete: boolean): void {
    const o = this.open;
    if (!o) return;
    this.open = null;
    const item = this.itemOf(o, complete ? "completed" : "incomplete");
    this.items[o.index] = item;
    const at = { item_id: o.id, output_index: o.index, content_index: 0 };
    if (o.kind === "message") {
      out.push(this.event("response.output_text.done", { ...at, text: o.text, logprobs: o.logprobs }));
      out.push(this.event("response.content_part.done", { ...at, part: (item.content as Json[])[0] }));
    } else {
      out.push(this.event("response.reasoning_text.done", { ...at, text: o.text }));
      out.push(this.event("response.content_part.done", { ...at, part: (item.content as Json[])[0] }));
    }
    out.push(this.event("response.output_item.done", { output_index: o.index, item }));
  }

  private itemOf(o: OpenItem, status: string): Json {
    return o.kind === "message"
      ? { type: "message", id: o.id, status, role: "assistant", content: [{ type: "output_text", text: o.text, annotations: [], logprobs: [...o.logprobs] }] }
      : {
        type: "reasoning", id: o.id, summary: [], content: [{ type: "reasoning_text", text: o.text }],
        ...(this.sealReasoning ? { encrypted_content: thinkingSignature(o.text, true) } : {}),
      };
  }
}
