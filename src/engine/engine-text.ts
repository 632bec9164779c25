/**
 * Incremental detokenization with stop strings: turns a growing list of output ids into text
 * deltas, holds back text that may still become a stop string (or an unfinished UTF-8 character),
 * and reports when a stop string has appeared (the output is cut before it).
 */
import type { Tokenizer } from "../model/config.ts";

/** Per-request text state. */
export class OutputText {
  private readonly ids: number[] = [];
  /** Characters of the decoded text already handed out as deltas. */
  private emitted = 0;
  private full = "";
  stopped = false;

  /** @param special write control tokens' strings (GenerateRequest.skipSpecialTokens false) */
  constructor(private readonly tokenizer: Tokenizer, private readonly stops: readonly string[], private readonly special = false) {}

  /** All text handed out so far. */
  get text(): string {
    return this.full.slice(0, this.emitted);
  }

  /** Adds a token; returns the new text that is safe to emit (possibly empty). */
  push(id: number): string {
    this.ids.push(id);
    // Decoding the whole output each time keeps multi-token characters right; outputs are short.
    this.full = this.tokenizer.decode(this.ids, { special: this.special });
    let limit = this.full.length;
    for (const s of this.stops) {
      const at = this.full.indexOf(s, Math.max(0, this.emitted - s.length + 1));
      if (s.length > 0 && at >= 0 && at < limit) {
        limit = at;
        this.stopped = true;
      }
    }
    if (!this.stopped) {
      // An unfinished multi-byte character decodes to U+FFFD: wait for the next token.
      while (limit > this.emitted && this.full.charCodeAt(limit - 1) === 0xfffd) limit--;
      limit -= this.pendingStopPrefix(limit);
    }
    if (limit <= this.emitted) return "";
    const delta = this.full.slice(this.emitted, limit);
    this.emitted = limit;
    return delta;
  }

  /** Releases text held back for a possible stop string (the request ended for another reason). */
  flush(): string {
    if (this.stopped) return "";
    const delta = this.full.slice(this.emitted);
    this.emitted = this.full.length;
    return delta;
  }

  /** Length of the longest tail of full[..limit] that begins some stop string. */
  private pendingStopPrefix(limit: number): number {
    let hold = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, limit - this.emitted); k > hold; k--) {
        if (this.full.slice(limit - k, limit) === s.slice(0, k)) {
          hold = k;
          break;
        }
      }
    }
    return hold;
  }
}
