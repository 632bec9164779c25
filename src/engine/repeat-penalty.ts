/**
 * Repetition penalty (HF's and vLLM's `repetition_penalty`): every token a request's prompt or output
 * holds has its logit divided by the factor where positive and multiplied by it where not
 * (Backend.penalizeRepeats), before the additive biases and penalties. The tokens are kept as a bit
 * per vocabulary token, updated with each step's new tokens, so a step uploads vocab / 8 bytes per
 * row whatever the prompt's length. A draft row takes the tokens after the draft tokens before it.
 */
import { TokenMask } from "./output-constraint.ts";

/** What one sampled row's logits take: the tokens seen before it, and the factor. */
export interface RepeatPenalty {
  readonly seen: TokenMask;
  readonly factor: number;
}

/** One request's seen tokens, counted incrementally. */
export class RepeatTracker {
  #seen: TokenMask;
  #counted = 0;

  /**
   * `unseen`: spans of positions [start, end) whose tokens are not the request's text (an image's
   * positions, their ids drawn from its pixels: model/vision/image-tokens.ts), so never penalized.
   */
  constructor(readonly factor: number, vocabSize: number, private readonly unseen: readonly (readonly [number, number])[] = []) {
    this.#seen = new TokenMask(vocabSize);
  }

  /** The penalty of the row after `tokens` (the request's prompt and output so far). */
  next(tokens: readonly number[]): RepeatPenalty {
    if (tokens.length < this.#counted) throw new RangeError(`RepeatTracker counted ${this.#counted} tokens, got ${tokens.length}`);
    const from = this.#counted;
    const text = (_: number, k: number) => !this.unseen.some(([s, e]) => s <= from + k && from + k < e);
    const fresh = tokens.slice(from).filter((t, k) => !this.#seen.allows(t) && text(t, k));
    if (fresh.length > 0) {
      // A mask handed out for an earlier step is never changed: the step may still hold it.
      const seen = new TokenMask(this.#seen.vocabSize);
      seen.bits.set(this.#seen.bits);
      for (const t of fresh) if (t >= 0 && t < seen.vocabSize) seen.set(t);
      this.#seen = seen;
    }
    this.#counted = tokens.length;
    return { seen: this.#seen, factor: this.factor };
  }

  /**
   * The penalties of a step's rows verifying `draft` after `tokens`: row j's after the draft's first
   * j tokens, the last the entry's own row's (after the whole draft). The tracker counts `tokens` only.
   */
  continuation(tokens: readonly number[], draft: readonly number[]): RepeatPenalty[] {
    const rows = [this.next(tokens)];
    for (const t of draft) {
      const last = rows[rows.length - 1];
      if (last.seen.allows(t) || t < 0 || t >= last.seen.vocabSize) {
        rows.push(last);
        continue;
      }
      const seen = new TokenMask(last.seen.vocabSize);
      seen.bits.set(last.seen.bits);
      seen.set(t);
      rows.push({ seen, factor: this.factor });
    }
    return rows;
  }
}
