/**
 * gpt-oss's answers in OpenAI's harmony format (`--reasoning-parser harmony` and `--tool-call-parser
 * harmony`; vLLM's `openai_gptoss` and `openai`), whole and streamed. After a prompt ending
 * `<|start|>assistant` the model writes messages, each a header, `<|message|>`, a body and an end tag:
 *
 *   <|channel|>analysis<|message|>…reasoning…<|end|><|start|>assistant<|channel|>final<|message|>…answer…<|return|>
 *   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location":"Tokyo"}<|call|>
 *   … <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location":"Tokyo"}<|call|>
 *
 * The analysis channel is reasoning; the final channel, and commentary without a recipient (a
 * preamble), are content; a message to `functions.NAME` is a call whose arguments are its body (a
 * JSON object), released whole when it ends. `<|call|>` and `<|return|>` end generation, so the text
 * usually ends inside a body without its end tag: a call's body is read then.
 *
 * The tags are control tokens of gpt-oss's vocabulary: the server decodes harmony answers with them
 * (openai.ts), and they reach the client only inside a message shown as written. That is what
 * becomes of anything that is not a message this parser returns, never dropped: a header that is not
 * one (another role, stray text), a call whose body is not a JSON object or whose recipient is not a
 * function, a call when calls are not read (no tools), an analysis message when reasoning is not read,
 * a message to a built-in tool, text between messages, a call cut short by max_tokens.
 */
import { HARMONY } from "../engine/grammar-tool-calls.ts";
import type { ReasoningPart } from "./reasoning.ts";
import { FUNCTION_NAME, type ParsedToolCall, partialTagSuffix } from "./tool-calls.ts";
import { jsonObject } from "./tool-calls-json.ts";

/** A piece of a streamed harmony answer (the shape of chat-output.ts `ChatPart`). */
export type HarmonyPart = ReasoningPart | { kind: "call"; call: ParsedToolCall };

/**
 * Where the prompt leaves the answer (harmony-prompt.ts `harmonyStart`): inside a message's header
 * (`header`: its role and what follows, "assistant" after `<|start|>assistant`), inside its body, or
 * between messages.
 */
export type HarmonyStart = { at: "header" | "body"; header: string } | { at: "outside" };

/** What to read: analysis as reasoning (else as written), calls (else as written). */
export interface HarmonyOptions {
  reasoning: boolean;
  calls: boolean;
}

/** A header: the role, an optional recipient, channel and content type (`<|constrain|>` optional), in either order of recipient and channel. */
const HEADER = /^assistant(?: +to=([^\s<]+))?(?:<\|channel\|>([^\s<]+))?(?: +to=([^\s<]+))?(?: *(?:<\|constrain\|>)?([^\s<]+))? *$/u;
/** What a header may hold while it is being written (a tag's start may end it). */
const HEADER_SO_FAR = /^(?:[\p{L}\p{N}_.:/=\- ]|<\|channel\|>|<\|constrain\|>)*$/u;
/** Headers are short; text that runs longer without `<|message|>` is no header. */
const MAX_HEADER = 256;
const ROLE = "assistant";
const HEADER_TAGS = [HARMONY.channel, HARMONY.constrain, HARMONY.message];
/** What ends a body: its end tags, and `<|start|>` (a message begun without the last one's end). */
const BODY_ENDS = [HARMONY.end, HARMONY.call, HARMONY.return, HARMONY.start];
/** Characters a held call's window keeps: one less than the longest end. */
const END_TAIL = Math.max(...BODY_ENDS.map((t) => t.length)) - 1;

/** How a message is read. */
type Reading = { as: "reasoning" | "content" | "text" } | { as: "call"; name: string };

/** The message `header` (role first) opens, or null when it is not a header. */
function reading(header: string, o: HarmonyOptions): Reading | null {
  const m = HEADER.exec(header);
  if (m === null) return null;
  const recipient = m[1] ?? m[3];
  if (recipient !== undefined) {
    const name = recipient.startsWith("functions.") ? recipient.slice("functions.".length) : "";
    // A built-in tool's message (browser, python), or calls not read: shown as written.
    return o.calls && FUNCTION_NAME.test(name) ? { as: "call", name } : { as: "text" };
  }
  if (m[2] === "analysis") return { as: o.reasoning ? "reasoning" : "text" };
  return { as: "content" };
}

/** True when `start` leaves the answer inside an analysis message (the engine then counts it as reasoning from its first token). */
export function startsInAnalysis(start: HarmonyStart): boolean {
  return start.at === "body" && reading(start.header, { reasoning: true, calls: true })?.as === "reasoning";
}

/** Where the first of `tags` starts in `s`, and which, or [-1, ""]. */
function firstOf(s: string, tags: readonly string[]): [number, string] {
  let best: [number, string] = [-1, ""];
  for (const t of tags) {
    const at = s.indexOf(t);
    if (at >= 0 && (best[0] < 0 || at < best[0])) best = [at, t];
  }
  return best;
}

/** Incremental reader of a harmony answer; holds back only a header, a call, or a tail that could still become a tag. */
export class HarmonyStream {
  private buf = "";
  private mode: "outside" | "header" | "body" = "outside";
  private body: Reading = { as: "content" };
  /** Header: the text written before `buf`'s output part (`<|start|>`, or nothing after the prompt), and how much of `buf` the prompt wrote. */
  private lead = "";
  private fromPrompt = 0;
  /** Body shown as written, or a call: its header as written. */
  private head = "";
  /** A call's body so far in the pieces it came in (searched only at each new delta's edge), while its end has not come. */
  private held: string[] | null = null;
  private heldTail = "";
  private sawAnalysis = false;

  constructor(start: HarmonyStart, private readonly o: HarmonyOptions) {
    if (start.at === "header") [this.mode, this.buf, this.fromPrompt] = ["header", start.header, start.header.length];
    if (start.at === "body") this.enter(reading(start.header, o) ?? { as: "text" }, "");
  }

  /** True once the answer has been inside an analysis message read as reasoning (even an empty one). */
  get opened(): boolean {
    return this.sawAnalysis;
  }

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): HarmonyPart[] {
    if (this.held !== null) {
      this.held.push(delta);
      const window = this.heldTail + delta;
      if (firstOf(window, BODY_ENDS)[0] < 0) {
        this.heldTail = window.slice(-END_TAIL);
        return [];
      }
      this.buf = this.held.join("");
      this.held = null;
    } else {
      this.buf += delta;
    }
    return this.read(false);
  }

  /** The answer ended: what is held is released (a call whose body is a JSON object as a call, else as written). */
  end(): HarmonyPart[] {
    if (this.held !== null) [this.buf, this.held] = [this.held.join(""), null];
    return this.read(true);
  }

  private read(final: boolean): HarmonyPart[] {
    const out: HarmonyPart[] = [];
    const emit = (kind: "reasoning" | "content", text: string) => {
      if (text) out.push({ kind, text });
    };
    for (;;) {
      if (this.mode === "outside") {
        const at = this.buf.indexOf(HARMONY.start);
        const upTo = at >= 0 ? at : this.buf.length - (final ? 0 : partialTagSuffix(this.buf, HARMONY.start));
        emit("content", this.buf.slice(0, upTo));
        if (at < 0) return this.rest(upTo, out);
        [this.buf, this.mode, this.lead, this.fromPrompt] = [this.buf.slice(at + HARMONY.start.length), "header", HARMONY.start, 0];
        continue;
      }
      if (this.mode === "header") {
        const at = this.buf.indexOf(HARMONY.message);
        const next = this.buf.indexOf(HARMONY.start);
        const broken = next >= 0 && (at < 0 || next < at);
        if (!broken && at < 0 && !final && this.mayBeHeader()) return out;
        // Not a header (or cut short): text as written up to the next message (or a tag's start that may begin it).
        const upTo = broken ? next : at >= 0 ? at + HARMONY.message.length : this.buf.length - (final ? 0 : partialTagSuffix(this.buf, HARMONY.start));
        const written = this.lead + this.buf.slice(Math.min(this.fromPrompt, upTo), upTo);
        const header = this.buf.slice(0, upTo);
        this.buf = this.buf.slice(upTo);
        if (broken || at < 0) {
          emit("content", written);
          this.mode = "outside";
          continue;
        }
        this.enter(reading(header.slice(0, at), this.o) ?? { as: "text" }, written);
        if (this.body.as === "text") emit("content", written);
        continue;
      }
      const [at, tag] = firstOf(this.buf, BODY_ENDS);
      if (this.body.as === "call") {
        if (at < 0 && !final) {
          [this.held, this.heldTail, this.buf] = [[this.buf], this.buf.slice(-END_TAIL), ""];
          return out;
        }
        const text = at < 0 ? this.buf : this.buf.slice(0, at);
        const args = text.trim();
        if (jsonObject(args) !== null) out.push({ kind: "call", call: { name: this.body.name, arguments: args } });
        else emit("content", this.head + text + (tag === HARMONY.start ? "" : tag));
      } else {
        const keep = at >= 0 || final ? 0 : Math.max(...BODY_ENDS.map((t) => partialTagSuffix(this.buf, t)));
        const upTo = at >= 0 ? at : this.buf.length - keep;
        emit(this.body.as === "reasoning" ? "reasoning" : "content", this.buf.slice(0, upTo));
        if (at < 0) return this.rest(upTo, out);
        if (this.body.as === "text" && tag !== HARMONY.start) emit("content", tag);
      }
      if (at < 0) return this.rest(this.buf.length, out);
      this.buf = this.buf.slice(at + tag.length);
      // `<|start|>` begins the next message's header; the end tags leave the answer between messages.
      [this.mode, this.lead, this.fromPrompt] = tag === HARMONY.start ? ["header", HARMONY.start, 0] : ["outside", "", 0];
    }
  }

  /** Keeps `buf` from `upTo` on (a tail that may become a tag) and returns `out`. */
  private rest(upTo: number, out: HarmonyPart[]): HarmonyPart[] {
    this.buf = this.buf.slice(upTo);
    return out;
  }

  /** Starts a message's body read as `r`, its header written as `head`. */
  private enter(r: Reading, head: string): void {
    [this.mode, this.body, this.head] = ["body", r, head];
    if (r.as === "reasoning") this.sawAnalysis = true;
  }

  /** Whether the header held so far may still become one: the role, then header text, at most a tag's start at its end. */
  private mayBeHeader(): boolean {
    const s = this.buf;
    if (s.length > MAX_HEADER) return false;
    if (s.length <= ROLE.length) return ROLE.startsWith(s);
    if (!s.startsWith(ROLE)) return false;
    const rest = s.slice(ROLE.length);
    // After the role comes a tag or a space (` to=`): plain text right after it is no header.
    if (rest[0] !== "<" && rest[0] !== " ") return false;
    const partial = Math.max(...HEADER_TAGS.map((t) => partialTagSuffix(rest, t)));
    return HEADER_SO_FAR.test(rest.slice(0, rest.length - partial));
  }
}
