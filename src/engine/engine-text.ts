/**
 * Incremental detokenization with stop strings: turns a growing list of output ids into text
 * deltas, holds back text that may still become a stop string (or an unfinished UTF-8 character),
 * and reports when a stop string has appeared (the output is cut before it).
 *
 * Each token's text is found by decoding a short window of the last few ids, twice — without the
 * new ones and with them — and taking the difference (vLLM's and Hugging Face's incremental
 * detokenization): the window starts at the same token both times, so a decoder's handling of a
 * first token (SentencePiece drops its leading space) cancels out, and a character spread over
 * several tokens waits until its last piece arrives. Decoding the whole output at every token, as
 * this did before, cost time quadratic in the output's length (8,000 tokens: about a minute of CPU).
 */
import type { Tokenizer } from "../model/config.ts";

/** Per-request text state. */
export class OutputText {
  private readonly ids: number[] = [];
  /** The decoding window: ids from `prefixOffset` to `readOffset` are decoded already. */
  private prefixOffset = 0;
  private readOffset = 0;
  /** Text handed out, in the deltas it went out in (joined on demand: a growing string would be copied at every token). */
  private readonly emitted: string[] = [];
  /** Text decoded but held back: it may still begin a stop string. */
  private pending = "";
  stopped = false;
  /** The stop string that ended the output (the one that appears first), once `stopped`. */
  stopString: string | undefined;

  /**
   * @param special write control tokens' strings (GenerateRequest.skipSpecialTokens false)
   * @param minTokens stop strings end the output only once it holds more tokens than this (vLLM's
   *   min_tokens: a stop written before then is text, as EOS and stop tokens are barred until then)
   * @param includeStop the stop string that ends the output is part of its text (vLLM's include_stop_str_in_output)
   */
  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly stops: readonly string[],
    private readonly special = false,
    private readonly minTokens = 0,
    private readonly includeStop = false,
  ) {}

  /** All text handed out so far. */
  get text(): string {
    return this.emitted.join("");
  }

  /** Adds a token; returns the new text that is safe to emit (possibly empty). */
  push(id: number): string {
    this.ids.push(id);
    if (this.stopped || !this.decodeNew(false)) return "";
    return this.release(this.safeLength(false));
  }

  /**
   * Releases text held back for a possible stop string or a character's end (the request ended for
   * another reason). A stop string in it still cuts it (held back, a token's text ending in part of a
   * character was not searched yet), though the output's end reason stays what it was.
   */
  flush(): string {
    if (this.stopped) return "";
    this.decodeNew(true);
    const n = this.safeLength(true);
    const cut = this.stopped;
    // The end reason is the caller's: the cut is kept, the stop is not reported.
    this.stopped = false;
    this.stopString = undefined;
    const delta = this.release(n);
    if (cut) this.pending = "";
    return delta;
  }

  /** How much of `pending` may go out: up to a stop string (setting `stopped`), less a stop's beginning unless `final`. */
  private safeLength(final: boolean): number {
    let limit = this.pending.length;
    // A stop written within min_tokens stays text; one that ends past them is caught (it starts in `pending`).
    for (const s of this.ids.length > this.minTokens ? this.stops : []) {
      // Held-back text is never more than a stop's beginning, so a stop starts inside `pending`.
      const at = s.length > 0 ? this.pending.indexOf(s) : -1;
      if (at >= 0 && at < limit) {
        limit = at;
        this.stopped = true;
        this.stopString = s;
      }
    }
    if (!this.stopped) return final ? limit : limit - this.pendingStopPrefix(limit);
    return this.includeStop ? limit + this.stopString!.length : limit;
  }

  /**
   * Moves the text of the ids not decoded yet to `pending`; false (nothing moved) while they decode
   * to nothing or end in an unfinished character (U+FFFD), unless `force`: the output ended. A stop
   * string written whole before an unfinished character moves it too: the output ends at this token,
   * as vLLM's detokenizer sees it, not some tokens later (or never, at the output's end).
   */
  private decodeNew(force: boolean): boolean {
    if (this.readOffset === this.ids.length) return false;
    const before = this.decode(this.ids.slice(this.prefixOffset, this.readOffset));
    const after = this.decode(this.ids.slice(this.prefixOffset));
    if (!force && (after.length <= before.length || (after.endsWith("\ufffd") && !this.stopBefore(after.slice(before.length))))) return false;
    this.pending += after.slice(before.length);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    return true;
  }

  /** Whether `pending` and new text `added`, cut before its unfinished character, hold a stop string that may end the output now. */
  private stopBefore(added: string): boolean {
    if (this.stops.length === 0 || this.ids.length <= this.minTokens) return false;
    const text = this.pending + added.replace(/\ufffd+$/, "");
    return this.stops.some((s) => text.includes(s));
  }

  private decode(ids: readonly number[]): string {
    // Some decoders (tokenizers.js) refuse an empty list.
    return ids.length === 0 ? "" : this.tokenizer.decode(ids, { special: this.special });
  }

  /** Hands out the first `n` characters of `pending`. */
  private release(n: number): string {
    if (n <= 0) return "";
    const delta = this.pending.slice(0, n);
    this.pending = this.pending.slice(n);
    this.emitted.push(delta);
    return delta;
  }

  /** Length of the longest tail of pending[..limit] that begins some stop string. */
  private pendingStopPrefix(limit: number): number {
    let hold = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, limit); k > hold; k--) {
        if (this.pending.slice(limit - k, limit) === s.slice(0, k)) {
          hold = k;
          break;
        }
      }
    }
    return hold;
  }
}
