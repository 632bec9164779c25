/**
 * The output side of the Anthropic Messages API: a chat answer's parts (reasoning, text, tool calls;
 * from chat-output.ts) become content blocks — `thinking`, `text`, `tool_use` — and the stream events
 * that build them (`content_block_start`, `content_block_delta`, `content_block_stop`). A
 * non-streamed message is the same builder run over the whole answer, so both forms give the same
 * blocks. A thinking block's signature (messages-thinking.ts) is streamed as a `signature_delta`
 * just before its `content_block_stop`, as Anthropic streams it; with its text omitted
 * (`thinking.display: "omitted"`) the block streams no `thinking_delta` and keeps `thinking` empty.
 */
import type { ChatPart } from "./chat-output.ts";
import { thinkingSignature } from "./messages-thinking.ts";
import type { ParsedToolCall } from "./tool-calls.ts";

type Json = Record<string, unknown>;

/** One server-sent event of a Messages stream (its `type` is also the SSE event name). */
export interface MessageEvent extends Json {
  type: string;
}

/** A random id with Anthropic's prefix for its kind (`msg`, `toolu`). */
export function anthropicId(prefix: string): string {
  return `${prefix}_01${crypto.randomUUID().replaceAll("-", "").slice(0, 22)}`;
}

/**
 * A call's arguments as a tool_use block's `input` (an object); null when they are not a JSON object
 * (a model that wrote a malformed call), which is then returned as text rather than lost.
 */
function inputOf(call: ParsedToolCall): Json | null {
  try {
    const v: unknown = JSON.parse(call.arguments === "" ? "{}" : call.arguments);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : null;
  } catch {
    return null;
  }
}

/** Builds a message's content blocks from a chat answer's parts, with the events that stream them. */
export class MessageOutput {
  /** The content blocks so far (complete ones, and the open one as it stands). */
  readonly content: Json[] = [];
  /** The calls kept, in order (the client runs them; the session waits on the first). */
  readonly calls: ParsedToolCall[] = [];
  private open: { kind: "text" | "thinking"; block: Json } | null = null;
  // Whitespace-only text is held until text follows: before a call or at the end it is dropped, as the chat API does.
  private space = "";
  /** The open thinking block's text (its signature's), shown or not. */
  private thought = "";

  /** `omitThinking`: thinking blocks keep an empty `thinking` (the text goes into their signature only). */
  constructor(private readonly omitThinking = false) {}

  /** Turns parts into blocks; returns the events that stream them. */
  push(parts: readonly ChatPart[]): MessageEvent[] {
    const events: MessageEvent[] = [];
    for (const p of parts) {
      if (p.kind === "call") this.call(p.call, events);
      else if (p.kind === "reasoning") {
        if (p.text !== "") this.extend("thinking", p.text, events);
      } else if (p.text.trim() === "" && this.open?.kind !== "text") this.space += p.text;
      else {
        const text = this.space + p.text;
        this.space = "";
        this.extend("text", text, events);
      }
    }
    return events;
  }

  /** Closes the open block; returns its stop event. */
  finish(): MessageEvent[] {
    const events: MessageEvent[] = [];
    this.close(events);
    return events;
  }

  /** Whether the model called a tool (the message stops for `tool_use`). */
  get calledTools(): boolean {
    return this.calls.length > 0;
  }

  private extend(kind: "text" | "thinking", text: string, events: MessageEvent[]): void {
    if (this.open?.kind !== kind) {
      this.close(events);
      // A thinking block's signature comes when it closes (close()).
      const block: Json = kind === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "", signature: "" };
      this.content.push(block);
      this.open = { kind, block };
      events.push({ type: "content_block_start", index: this.content.length - 1, content_block: { ...block } });
    }
    if (kind === "thinking") {
      this.thought += text;
      if (this.omitThinking) return;
    }
    const key = kind === "text" ? "text" : "thinking";
    this.open.block[key] = (this.open.block[key] as string) + text;
    const delta = kind === "text" ? { type: "text_delta", text } : { type: "thinking_delta", thinking: text };
    events.push({ type: "content_block_delta", index: this.content.length - 1, delta });
  }

  private call(call: ParsedToolCall, events: MessageEvent[]): void {
    this.close(events);
    this.space = "";
    const input = inputOf(call);
    if (input === null) {
      this.extend("text", `${call.name}(${call.arguments})`, events);
      return;
    }
    const id = call.id ?? anthropicId("toolu");
    this.calls.push({ ...call, id });
    this.content.push({ type: "tool_use", id, name: call.name, input });
    const index = this.content.length - 1;
    events.push(
      { type: "content_block_start", index, content_block: { type: "tool_use", id, name: call.name, input: {} } },
      { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: JSON.stringify(input) } },
      { type: "content_block_stop", index },
    );
  }

  private close(events: MessageEvent[]): void {
    if (!this.open) return;
    const index = this.content.length - 1;
    if (this.open.kind === "thinking") {
      const signature = thinkingSignature(this.thought, this.omitThinking);
      this.open.block.signature = signature;
      this.thought = "";
      events.push({ type: "content_block_delta", index, delta: { type: "signature_delta", signature } });
    }
    events.push({ type: "content_block_stop", index });
    this.open = null;
  }
}
