/**
 * A chat answer's text as the client gets it: reasoning (`--reasoning-parser think`), content, and
 * tool calls (with `tools`; only the first with `parallel_tool_calls: false`), whole or streamed.
 * Tool calls (Hermes, Llama 3 JSON, Kimi K2, DeepSeek V3/V3.1, GLM, Qwen3-Coder, MiniMax M2 or Mistral: tool-calls*.ts) are parsed from the
 * content only, after reasoning is split off: a `<tool_call>` the model drafts while reasoning is
 * part of its thoughts, not a call. gpt-oss's harmony messages (harmony.ts) are read by their own
 * stream, which gives reasoning, content and calls at once. With every option off, the text passes
 * through untouched (what the server did before reasoning parsing existed).
 */
import { type ReasoningPart, ReasoningStream, type ReasoningTags } from "./reasoning.ts";
import { type HarmonyStart, HarmonyStream } from "./harmony.ts";
import type { ToolCallSyntax } from "../engine/grammar.ts";
import { toolCallTrigger } from "../engine/grammar-tool-calls.ts";
import { HERMES, type ParsedToolCall, ToolCallStream, type ToolStreamPart } from "./tool-calls.ts";
import { Llama3JsonStream } from "./tool-calls-llama3.ts";
import { GRANITE_CALLS, MistralToolStream, NEMOTRON_CALLS, PHI4_MINI_CALLS } from "./tool-calls-mistral.ts";
import { DEEPSEEK_SYNTAX, DEEPSEEK_V3_SYNTAX, KIMI_SYNTAX } from "./tool-calls-sections.ts";
import { LFM2_SYNTAX } from "./tool-calls-pythonic.ts";
import { GEMMA4_SYNTAX } from "./tool-calls-gemma4.ts";
import { glmSyntax, minimaxSyntax, qwen3CoderSyntax, seedOssSyntax, type ToolSpec } from "./tool-calls-pairs.ts";

/** How to read one chat answer. */
export interface ChatOutputOptions {
  /** Split reasoning out of the answer (`--reasoning-parser think|mistral`). */
  reasoning: boolean;
  /** Its tags; default `<think>` / `</think>`. */
  reasoningTags?: ReasoningTags;
  /** The prompt left `<think>` open, so the answer starts as reasoning (reasoning.ts `promptOpensReasoning`). */
  startsInReasoning: boolean;
  /**
   * Read the answer as harmony messages (`--reasoning-parser harmony` or `--tool-call-parser harmony`),
   * from where the prompt left it (harmony-prompt.ts `harmonyStart`): analysis is reasoning when
   * `reasoning` is set, and calls are read when `toolCalls` is set and the format is "harmony".
   */
  harmony?: HarmonyStart;
  /** Parse tool calls out of the content (tools given, tool_choice not "none"). */
  toolCalls: boolean;
  /** How the model writes them (`--tool-call-parser`; default "hermes"). */
  toolCallFormat?: ToolCallSyntax;
  /** The request's tools: GLM's, Qwen3-Coder's and MiniMax's formats write a string argument raw, and their schemas say which are strings. */
  tools?: readonly ToolSpec[];
  /** False keeps only the first call written (`parallel_tool_calls: false`); later ones are dropped. */
  parallelToolCalls: boolean;
  /**
   * The output grammar made the answer tool calls or a response format's JSON (output-grammar.ts
   * `callsOrAnswer`): content that does not open with the syntax's first tag is that JSON, shown as
   * written, never searched for calls (a tag inside its strings is its text).
   */
  callsOrAnswer?: boolean;
}

/** A piece of a streamed chat answer. */
export type ChatPart = ReasoningPart | { kind: "call"; call: ParsedToolCall };

/** Incremental splitter of a streamed chat answer; holds back only tails that could still become a tag. */
export class ChatOutputStream {
  private readonly reasoning: ReasoningStream | HarmonyStream | null;
  private readonly tools: ToolCallStream | Llama3JsonStream | MistralToolStream | null;
  private calls = 0;
  /**
   * Whitespace the tool stream released before any visible text (the newlines around and between
   * calls): held until text shows, dropped at the end if calls came and no text did. Streamed, it
   * reached clients as content ("\n\n" beside the calls) where the same answer unstreamed has none,
   * and an agent that sends that content back changes the next prompt's text.
   */
  private heldSpace = "";
  private shownText = false;
  /** With `callsOrAnswer`, "open" until the content shows which the answer is: calls, or the JSON answer. */
  private branch: "open" | "calls" | "answer" = "calls";
  /** The content held while the branch is open: whitespace, or a start of the syntax's first tag. */
  private opening = "";
  private readonly trigger: string = "";

  constructor(private readonly o: ChatOutputOptions) {
    const harmonyCalls = o.toolCalls && o.toolCallFormat === "harmony";
    if (o.harmony) this.reasoning = new HarmonyStream(o.harmony, { reasoning: o.reasoning, calls: harmonyCalls });
    else this.reasoning = o.reasoning ? new ReasoningStream(o.startsInReasoning, o.reasoningTags) : null;
    // Harmony's calls come from its stream; another format's are read out of the content it gives.
    this.tools = o.toolCalls && !harmonyCalls ? toolStream(o) : null;
    if (this.tools && o.callsOrAnswer) {
      this.trigger = toolCallTrigger(o.toolCallFormat);
      this.branch = "open";
    }
  }

  /** True once the answer has been inside reasoning (an empty `<think></think>` included). */
  get sawReasoning(): boolean {
    return this.reasoning?.opened ?? false;
  }

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): ChatPart[] {
    return this.route(this.reasoning ? this.reasoning.push(delta) : [{ kind: "content", text: delta }], false);
  }

  /** The answer ended: releases what was held back. */
  end(): ChatPart[] {
    return this.route(this.reasoning ? this.reasoning.end() : [], true);
  }

  private route(parts: ChatPart[], final: boolean): ChatPart[] {
    const out: ChatPart[] = [];
    for (const p of parts) {
      if (p.kind === "call") this.keep([p], out);
      else if (p.kind === "reasoning" || !this.tools) out.push(p);
      else this.content(p.text, out);
    }
    if (final && this.tools) {
      // Undecided at the end (whitespace, or a tag's start): what it always was, text for the tool stream.
      if (this.branch === "open") this.keep(this.tools.push(this.opening), out);
      this.branch = "calls";
      this.keep(this.tools.end(), out);
      if (this.calls === 0 && this.heldSpace !== "") out.push({ kind: "content", text: this.heldSpace });
      this.heldSpace = "";
    }
    return out;
  }

  /** Content text: through the tool stream, unless the answer is known to be the JSON of `callsOrAnswer`. */
  private content(text: string, out: ChatPart[]): void {
    if (this.branch === "answer") return this.text(text, out);
    if (this.branch === "calls") return this.keep(this.tools!.push(text), out);
    const seen = this.opening + text;
    const start = seen.trimStart();
    if (start.length < this.trigger.length && this.trigger.startsWith(start)) {
      this.opening = seen;
      return;
    }
    this.opening = "";
    this.branch = start.startsWith(this.trigger) ? "calls" : "answer";
    this.content(seen, out);
  }

  /** Moves tool-stream parts to `out`, dropping calls past the first when parallel calls are off. */
  private keep(parts: ToolStreamPart[], out: ChatPart[]): void {
    for (const p of parts) {
      if (p.kind === "text") this.text(p.text, out);
      else if (this.o.parallelToolCalls || this.calls === 0) {
        this.calls++;
        out.push(p);
      }
    }
  }

  /** Releases content text, holding whitespace that comes before any visible text. */
  private text(text: string, out: ChatPart[]): void {
    if (this.shownText) {
      out.push({ kind: "content", text });
    } else if (text.trim() === "") {
      this.heldSpace += text;
    } else {
      out.push({ kind: "content", text: this.heldSpace + text });
      this.heldSpace = "";
      this.shownText = true;
    }
  }
}

/** The splitter of `o.toolCallFormat`. */
function toolStream(o: ChatOutputOptions): ToolCallStream | Llama3JsonStream | MistralToolStream {
  switch (o.toolCallFormat) {
    case "llama3_json": return new Llama3JsonStream();
    case "kimi_k2": return new ToolCallStream(KIMI_SYNTAX);
    case "deepseek_v31": return new ToolCallStream(DEEPSEEK_SYNTAX);
    case "deepseek_v3": return new ToolCallStream(DEEPSEEK_V3_SYNTAX);
    case "minimax_m2": return new ToolCallStream(minimaxSyntax(o.tools ?? []));
    case "glm45": return new ToolCallStream(glmSyntax(o.tools ?? []));
    case "qwen3_coder": return new ToolCallStream(qwen3CoderSyntax(o.tools ?? []));
    case "seed_oss": return new ToolCallStream(seedOssSyntax(o.tools ?? []));
    case "gemma4": return new ToolCallStream(GEMMA4_SYNTAX);
    case "mistral":
    case "mistral_pre_v11": return new MistralToolStream();
    case "granite": return new MistralToolStream(GRANITE_CALLS);
    case "phi4_mini_json": return new MistralToolStream(PHI4_MINI_CALLS);
    case "nemotron_json": return new MistralToolStream(NEMOTRON_CALLS);
    case "lfm2": return new ToolCallStream(LFM2_SYNTAX);
    default: return new ToolCallStream(HERMES);
  }
}

/** A finished chat answer, split. */
export interface ParsedChatOutput {
  /** The reasoning text; null when the answer opened none (or reasoning parsing is off). */
  reasoning: string | null;
  /** The answer's text; null when only calls remain, or when reasoning was all there was. */
  content: string | null;
  calls: ParsedToolCall[];
}

/** Splits a finished answer exactly as {@link ChatOutputStream} would, in any delta sizes. */
export function parseChatOutput(text: string, o: ChatOutputOptions): ParsedChatOutput {
  const s = new ChatOutputStream(o);
  const parts = [...s.push(text), ...s.end()];
  const pick = (kind: "reasoning" | "content") => parts.flatMap((p) => (p.kind === kind ? [p.text] : [])).join("");
  const calls = parts.flatMap((p) => (p.kind === "call" ? [p.call] : []));
  const reasoning = s.sawReasoning ? pick("reasoning") : null;
  const content = pick("content");
  const none = (calls.length > 0 && content.trim() === "") || (reasoning !== null && content === "");
  return { reasoning, content: none ? null : content, calls };
}
