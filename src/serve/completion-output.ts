/**
 * What a completion choice holds beyond its generated text: the prompt it echoes (`echo`, with the
 * prompt tokens' log probabilities when `logprobs` is set), and which generations `best_of` keeps.
 */
import type { GenerateResult } from "../engine/engine-types.ts";
import type { TokenLogprob } from "../engine/logprobs.ts";
import type { Tokenizer } from "../model/config.ts";
import { type CompletionLogprobs, completionLogprobs, TextOffsets } from "./logprobs-json.ts";
import type { CompletionShape, EchoedPrompt } from "./openai.ts";

/**
 * The indices of the `n` generations of `group` to return, likeliest first: by mean log probability
 * per generated token (OpenAI's `best_of` ranking); a generation with no token ranks last. Ties keep
 * generation order.
 */
export function bestOf(group: readonly GenerateResult[], n: number): number[] {
  const score = (r: GenerateResult) => {
    const lps = r.logprobs ?? [];
    return lps.length === 0 ? -Infinity : lps.reduce((a, lp) => a + lp.logprob, 0) / lps.length;
  };
  const scores = group.map(score);
  return group.map((_, i) => i).sort((a, b) => scores[b] - scores[a] || a - b).slice(0, n);
}

/**
 * The echoed prompt's part of a completion's `logprobs`: each prompt token with its log probability
 * given those before it (null for the first, which nothing predicts).
 */
export function echoLogprobs(tokenizer: Tokenizer, prompt: EchoedPrompt, lps: readonly (TokenLogprob | null)[], top: number): CompletionLogprobs {
  // The engine may hold more alternatives than `logprobs` asks (prompt_logprobs asked more).
  const known = prompt.ids.map((id, i): TokenLogprob => {
    const lp = lps[i];
    return lp ? { ...lp, top: lp.top.slice(0, top) } : { id, logprob: NaN, rank: 0, top: [] };
  });
  const offsets = new TextOffsets(tokenizer);
  const out = completionLogprobs(tokenizer, known, offsets);
  prompt.ids.forEach((_, i) => {
    if (lps[i]) return;
    out.token_logprobs[i] = null;
    out.top_logprobs[i] = null;
  });
  // Offsets into the echoed text, counted back from its end: the prompt decodes whole without what
  // its first tokens show alone (a SentencePiece word's leading space, BOS), so counted from the
  // start every offset would be off by that much. Tokens before the text's start sit at 0.
  const shift = prompt.text.length - offsets.close();
  out.text_offset = out.text_offset.map((o) => Math.max(0, o + shift));
  return out;
}

/** `a` followed by `b`, whose text offsets are shifted by `shift`. */
export function joinLogprobs(a: CompletionLogprobs, b: CompletionLogprobs, shift: number): CompletionLogprobs {
  return {
    tokens: [...a.tokens, ...b.tokens],
    token_logprobs: [...a.token_logprobs, ...b.token_logprobs],
    top_logprobs: [...a.top_logprobs, ...b.top_logprobs],
    text_offset: [...a.text_offset, ...b.text_offset.map((o) => o + shift)],
  };
}

/**
 * A completion choice's text and `logprobs` (null when not asked for), echo included; `scores`: the
 * prompt's log probabilities (`r`'s own unless a sibling generation computed them).
 */
export function completionChoice(tokenizer: Tokenizer, shape: CompletionShape, prompt: number, r: GenerateResult, scores = r.promptLogprobs) {
  const generated = shape.scoreOnly ? "" : r.text;
  let logprobs: CompletionLogprobs | null = null;
  if (shape.logprobs !== null && !shape.scoreOnly) logprobs = completionLogprobs(tokenizer, r.logprobs ?? []);
  if (!shape.echo) return { text: generated, logprobs };
  const p = shape.prompts[prompt];
  if (shape.logprobs !== null) {
    const echoed = echoLogprobs(tokenizer, p, scores ?? [], shape.logprobs);
    logprobs = logprobs ? joinLogprobs(echoed, logprobs, p.text.length) : echoed;
  }
  return { text: p.text + generated, logprobs };
}
