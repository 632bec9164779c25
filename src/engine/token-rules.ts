/**
 * vLLM's `allowed_token_ids` and `bad_words` as masks on the rows a request samples: only the
 * allowed tokens may be sampled, and no row may sample the last token of a bad word whose tokens
 * before it end the output so far (a one-token word never). Pure CPU code; draft rows get the mask of
 * the output their draft prefix leads to (draft-extras.ts), so speculation keeps the same tokens.
 */
import { TokenMask } from "./output-constraint.ts";

/** A request's token rules. */
export class TokenRules {
  readonly #vocabSize: number;
  readonly #allowed: TokenMask | undefined;
  readonly #badWords: readonly (readonly number[])[];
  /** Output tokens a bad word's check looks back at: its length but one. */
  readonly #lookBack: number;

  /** `allowed`: the only tokens that may be sampled (undefined: all); `badWords`: token sequences never completed. */
  constructor(vocabSize: number, allowed: readonly number[] | undefined, badWords: readonly (readonly number[])[] = []) {
    this.#vocabSize = vocabSize;
    if (allowed !== undefined) {
      const m = new TokenMask(vocabSize);
      for (const t of allowed) m.set(t);
      this.#allowed = m;
    }
    this.#badWords = badWords.filter((w) => w.length > 0);
    this.#lookBack = Math.max(0, ...this.#badWords.map((w) => w.length - 1));
  }

  /** The output tokens a row's mask depends on: the last ones, as many as the longest bad word needs. */
  get lookBack(): number {
    return this.#lookBack;
  }

  /** The mask of a row sampling after output tokens ending in `tail` (undefined: every token may come). */
  maskAfter(tail: readonly number[]): TokenMask | undefined {
    const barred: number[] = [];
    for (const w of this.#badWords) {
      const k = w.length - 1;
      if (k > tail.length) continue;
      let match = true;
      for (let i = 0; i < k && match; i++) match = tail[tail.length - k + i] === w[i];
      if (match) barred.push(w[k]);
    }
    if (barred.length === 0) return this.#allowed;
    if (!this.#allowed) return TokenMask.allBut(this.#vocabSize, barred);
    const m = new TokenMask(this.#vocabSize);
    m.bits.set(this.#allowed.bits);
    for (const t of barred) m.set(t, false);
    // Where the bad words would bar every allowed token, the allowed ones stand (a row must sample something).
    return m.bits.some((w) => w !== 0) ? m : this.#allowed;
  }
}
