/**
 * Hugging Face's assisted-generation draft length ("heuristic", `num_assistant_tokens_schedule`), with
 * a pause after drafts of one token rejected outright: a sequence starts at the most tokens, adds 2
 * after a draft taken whole and takes 1 off after one that was not (1 at least), and after a draft of
 * one token rejected outright skips its next 1, 2, 4 … 16 drafts. A drafter that rarely agrees with
 * the model then costs little. Pure CPU code; draft-model.ts and mtp drafts (engine-drafts.ts) keep
 * one per sequence.
 */

/** The longest pause, in drafts skipped, after drafts of one token keep being rejected. */
const MAX_PAUSE = 16;

/** One sequence's heuristic draft length. */
export class HeuristicDraftLength {
  /** Draft length allowed next. */
  k: number;
  /** Drafts to skip before drafting again, and drafts of one token rejected in a row. */
  private pause = 0;
  private misses = 0;

  constructor(private readonly maxTokens: number) {
    this.k = maxTokens;
  }

  /** Whether the sequence drafts this time: false (and one fewer to skip) while it pauses. */
  drafts(): boolean {
    if (this.pause === 0) return true;
    this.pause--;
    return false;
  }

  /** `n` more drafts skipped (steps run in a group, where nothing drafts): the pause shortens by them. */
  skip(n: number): void {
    this.pause = Math.max(0, this.pause - n);
  }

  /** How the model verified its last draft: `accepted` of `drafted` tokens. */
  observe(drafted: number, accepted: number): void {
    if (drafted === 0) return;
    if (accepted === drafted) {
      this.k = Math.min(this.maxTokens, this.k + 2);
      this.misses = 0;
      return;
    }
    this.k = Math.max(1, this.k - 1);
    if (drafted === 1 && accepted === 0) this.pause = Math.min(MAX_PAUSE, 2 ** this.misses++);
    else this.misses = 0;
  }
}
