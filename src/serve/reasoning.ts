/**
 * Reasoning in model output, as DeepSeek-R1, QwQ, Qwen3 and GLM-4.5 write it: `<think>…</think>`
 * before the answer (vLLM's `deepseek_r1`, `qwen3` and `glm45` reasoning parsers read the same tags),
 * or as Magistral does, `[THINK]…[/THINK]` (vLLM's `mistral`). With `--reasoning-parser think` (or
 * `mistral`) the server returns that text as `reasoning_content` and takes the answer's `content`
 * (and its tool calls) from the rest only. The rules below name the `<think>` tags; `[THINK]` follows
 * the same. gpt-oss's harmony format (`--reasoning-parser harmony`) has channels instead of tags: its
 * analysis messages are read by harmony.ts.
 *
 * Rules (the engine's token-level tracking, src/engine/reasoning-spans.ts, follows the same):
 * - `<think>` opens reasoning anywhere outside it; `</think>` closes it. An output may hold several
 *   reasoning spans (interleaved thinking); their texts are joined.
 * - A prompt that ends with an open `<think>` (DeepSeek-R1's template) starts the output inside
 *   reasoning, so only `</think>` appears in it ({@link promptOpensReasoning}).
 * - Without its `</think>` (cut by max_tokens), everything after `<think>` is reasoning: a stream
 *   cannot take back what it already sent as reasoning, and the whole answer must agree with it.
 * - A stray `</think>` outside reasoning, or a `<think>` inside it, stays text, as written.
 * - Whitespace right after `</think>` is dropped: templates put a blank line between the blocks.
 */
import type { ReasoningTokens } from "../engine/reasoning-spans.ts";
import type { Architecture, Tokenizer } from "../model/config.ts";
import { partialTagSuffix } from "./tool-calls.ts";

/**
 * The reasoning parsers `--reasoning-parser` accepts: "think" reads `<think>…</think>`, "mistral"
 * Magistral's `[THINK]…[/THINK]` control tokens, "harmony" gpt-oss's analysis channel (harmony.ts),
 * "seed_oss" Seed-OSS's `<seed:think>…</seed:think>` (vLLM's name), "gemma4" Gemma 4's thought channel
 * `<|channel>thought…<channel|>`; "none" leaves output as it is.
 */
export type ReasoningParserName = "think" | "mistral" | "harmony" | "seed_oss" | "gemma4" | "none";

/** The reasoning parser names, for CLIs and checks. */
export const REASONING_PARSERS: readonly ReasoningParserName[] = ["think", "mistral", "harmony", "seed_oss", "gemma4", "none"];

/** vLLM's names for the same parsers (`--reasoning-parser deepseek_r1` etc.), accepted too. */
export const REASONING_PARSER_ALIASES: Readonly<Record<string, ReasoningParserName>> = {
  deepseek_r1: "think",
  qwen3: "think",
  glm45: "think",
  openai_gptoss: "harmony",
};

/** A `--reasoning-parser` choice: a parser, or "auto" (told from the model, {@link detectReasoningParser}). */
export type ReasoningParserChoice = ReasoningParserName | "auto";

/**
 * `--reasoning-parser auto`: gpt-oss's harmony by its architecture; Magistral's `[THINK]`, Seed-OSS's `<seed:think>` or the
 * `<think>` of DeepSeek-R1, QwQ, Qwen3 and GLM-4.5 where the chat template writes or opens it; else none.
 */
export function detectReasoningParser(template: string | undefined, architecture: Architecture): ReasoningParserName {
  if (architecture === "gpt-oss") return "harmony";
  if (template === undefined) return "none";
  if (template.includes("[THINK]")) return "mistral";
  if (template.includes(SEED_THINK_TAGS.open)) return "seed_oss";
  // Gemma 4's channel tokens (harmony's are `<|channel|>`, told by gpt-oss's architecture above).
  if (template.includes("<|channel>")) return "gemma4";
  return template.includes(THINK_OPEN) ? "think" : "none";
}

/** True when `s` names a reasoning parser. */
export function isReasoningParser(s: string): s is ReasoningParserName {
  return (REASONING_PARSERS as readonly string[]).includes(s);
}

/** The tag that opens reasoning. */
export const THINK_OPEN = "<think>";
/** The tag that closes reasoning. */
export const THINK_CLOSE = "</think>";

/** The tags that open and close reasoning in one model family's output. */
export interface ReasoningTags {
  readonly open: string;
  readonly close: string;
  /** Whitespace right after the open tag is not reasoning (Gemma 4's `<|channel>thought\n`, as llama.cpp reads it). */
  readonly trimAfterOpen?: boolean;
}

/** DeepSeek-R1's, QwQ's, Qwen3's and GLM-4.5's tags. */
export const THINK_TAGS: ReasoningTags = { open: THINK_OPEN, close: THINK_CLOSE };
/** Seed-OSS's: added tokens of its vocabulary, kept in the text as Magistral's are. */
export const SEED_THINK_TAGS: ReasoningTags = { open: "<seed:think>", close: "</seed:think>" };
/** Gemma 4's thought channel: its channel tokens (control tokens, kept in the text as Magistral's are), the open one followed by "thought". */
export const GEMMA4_THOUGHT_TAGS: ReasoningTags = { open: "<|channel>thought", close: "<channel|>", trimAfterOpen: true };
/** Magistral's (Mistral's reasoning models'): control tokens, so they reach the text only with special tokens kept. */
export const MISTRAL_THINK_TAGS: ReasoningTags = { open: "[THINK]", close: "[/THINK]" };

/**
 * What opens and closes harmony's reasoning (an analysis message; control tokens of gpt-oss's
 * vocabulary). Harmony is read by its own stream (harmony.ts), not by tags: these name it in messages.
 */
export const HARMONY_ANALYSIS_TAGS: ReasoningTags = { open: "<|channel|>analysis<|message|>", close: "<|end|>" };

/** The tags a parser reads, or undefined for "none". */
export function reasoningTags(parser: ReasoningParserName): ReasoningTags | undefined {
  switch (parser) {
    case "think": return THINK_TAGS;
    case "mistral": return MISTRAL_THINK_TAGS;
    case "seed_oss": return SEED_THINK_TAGS;
    case "gemma4": return GEMMA4_THOUGHT_TAGS;
    case "harmony": return HARMONY_ANALYSIS_TAGS;
    case "none": return undefined;
  }
}

/**
 * True when a rendered prompt leaves a reasoning block open for the model: it ends with the open
 * tag and at most whitespace, as DeepSeek-R1's and Qwen3-Thinking's templates end. Only the end counts, so
 * a `<think>` a user wrote in a message (or Qwen3's closed `<think>\n\n</think>` of non-thinking
 * mode) does not turn the answer into reasoning.
 */
export function promptOpensReasoning(prompt: string, tags: ReasoningTags = THINK_TAGS): boolean {
  return prompt.trimEnd().endsWith(tags.open);
}

/**
 * The ids of the open and close tags when each is a single token of the vocabulary (what the engine
 * needs to type reasoning KV blocks), else undefined: the tags are then parsed from text only.
 */
export function reasoningTokenIds(tokenizer: Pick<Tokenizer, "encode" | "decode">, tags: ReasoningTags = THINK_TAGS): ReasoningTokens | undefined {
  const start = singleTokenId(tokenizer, tags.open);
  const end = singleTokenId(tokenizer, tags.close);
  return start === undefined || end === undefined ? undefined : { start, end };
}

/** The id of `text` when the vocabulary has it as one token (a control token's included), else undefined. */
export function singleTokenId(tokenizer: Pick<Tokenizer, "encode" | "decode">, text: string): number | undefined {
  const ids = tokenizer.encode(text, { addBos: false });
  // Control tokens (Magistral's [THINK]) decode to their text only with special tokens written.
  return ids.length === 1 && tokenizer.decode(ids, { special: true }) === text ? ids[0] : undefined;
}

/** A piece of streamed output: reasoning or answer text. */
export type ReasoningPart = { kind: "reasoning"; text: string } | { kind: "content"; text: string };

/**
 * Incremental splitter of streamed output into reasoning and content. Text is released as soon as it
 * cannot be the start of the tag that would switch sides; only such a tail is held back.
 */
export class ReasoningStream {
  private buf = "";
  private inside: boolean;
  /** Just after `</think>` (or an open tag that trims after it): whitespace is dropped until the answer (or reasoning) starts. */
  private afterClose = false;
  private everInside: boolean;

  /** `startsInReasoning`: the prompt left the open tag open ({@link promptOpensReasoning}). */
  constructor(startsInReasoning = false, private readonly tags: ReasoningTags = THINK_TAGS) {
    this.inside = startsInReasoning;
    this.everInside = startsInReasoning;
  }

  /** True once the output has been inside reasoning (even an empty `<think></think>`). */
  get opened(): boolean {
    return this.everInside;
  }

  /** Feeds the next delta; returns what can be released. */
  push(delta: string): ReasoningPart[] {
    this.buf += delta;
    const out: ReasoningPart[] = [];
    for (;;) {
      if (this.afterClose) {
        const kept = this.buf.trimStart();
        if (kept.length === 0) {
          this.buf = "";
          return out;
        }
        this.buf = kept;
        this.afterClose = false;
      }
      const tag = this.inside ? this.tags.close : this.tags.open;
      const kind = this.inside ? "reasoning" : "content";
      const at = this.buf.indexOf(tag);
      if (at < 0) {
        // Hold back a tail that could still grow into the tag.
        const keep = partialTagSuffix(this.buf, tag);
        const text = this.buf.slice(0, this.buf.length - keep);
        if (text) out.push({ kind, text });
        this.buf = this.buf.slice(this.buf.length - keep);
        return out;
      }
      if (at > 0) out.push({ kind, text: this.buf.slice(0, at) });
      this.buf = this.buf.slice(at + tag.length);
      this.afterClose = this.inside || this.tags.trimAfterOpen === true;
      this.inside = !this.inside;
      this.everInside ||= this.inside;
    }
  }

  /** The output ended: a held-back partial tag is text of the side it was on. */
  end(): ReasoningPart[] {
    const rest = this.buf;
    this.buf = "";
    return rest ? [{ kind: this.inside ? "reasoning" : "content", text: rest }] : [];
  }
}

/**
 * Splits finished output into reasoning and content, exactly as {@link ReasoningStream} would in any
 * delta sizes. `reasoning` is null when the output opened none ("" for an empty `<think></think>`).
 */
export function splitReasoning(
  text: string,
  startsInReasoning = false,
  tags: ReasoningTags = THINK_TAGS,
): { reasoning: string | null; content: string } {
  const s = new ReasoningStream(startsInReasoning, tags);
  const parts = [...s.push(text), ...s.end()];
  const pick = (kind: ReasoningPart["kind"]) => parts.filter((p) => p.kind === kind).map((p) => p.text).join("");
  return { reasoning: s.opened ? pick("reasoning") : null, content: pick("content") };
}
