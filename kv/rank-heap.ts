/**
 * A ranking of session keys by score (lowest first, ties by key) that is consumed from the front.
 * Agent-aware eviction re-ranks every pool's sessions every few seconds but usually takes only the
 * first few: a binary heap built in O(n) and popped on demand yields the same sequence as a full
 * sort in O(n + k log n).
 */

/** Session keys ordered by (score, key), read from the lowest. */
export class RankHeap {
  private keys: string[] = [];
  private scores: number[] = [];

  /** Keys not yet popped. */
  get size(): number {
    return this.keys.length;
  }

  /**
   * Replaces the contents with `keys` (unique) and their `scores`. A NaN score makes the order
   * depend on the sort algorithm, so then the keys are ranked by the exact comparator and Array
   * sort the ranking used before this heap existed, and the heap replays that order.
   */
  reset(keys: string[], scores: number[]): void {
    if (scores.some((s) => Number.isNaN(s))) {
      const pairs = keys.map((k, i) => [k, scores[i]] as const);
      pairs.sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1));
      keys = pairs.map((p) => p[0]);
      scores = pairs.map((_, i) => i);
    }
    this.keys = keys;
    this.scores = scores;
    for (let i = (keys.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  /** Ranks one more key (a NaN score ranks it last). */
  push(key: string, score: number): void {
    this.keys.push(key);
    this.scores.push(Number.isNaN(score) ? Infinity : score);
    let i = this.keys.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(i, p)) return;
      const k = this.keys[i]; this.keys[i] = this.keys[p]; this.keys[p] = k;
      const sc = this.scores[i]; this.scores[i] = this.scores[p]; this.scores[p] = sc;
      i = p;
    }
  }

  /** The lowest-ranked key, or undefined when empty. */
  peek(): string | undefined {
    return this.keys[0];
  }

  /** Drops the lowest-ranked key. */
  pop(): void {
    const n = this.keys.length - 1;
    if (n < 0) return;
    this.keys[0] = this.keys[n];
    this.scores[0] = this.scores[n];
    this.keys.pop();
    this.scores.pop();
    if (n > 0) this.down(0);
  }

  private less(i: number, j: number): boolean {
    const a = this.scores[i], b = this.scores[j];
    // Same as the comparator `a - b || keyOrder` when no score is NaN (∞ − ∞ falls to the key too).
    return a < b || (!(a > b) && this.keys[i] < this.keys[j]);
  }

  private down(i: number): void {
    const n = this.keys.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) return;
      const r = l + 1;
      const m = r < n && this.less(r, l) ? r : l;
      if (!this.less(m, i)) return;
      const k = this.keys[i]; this.keys[i] = this.keys[m]; this.keys[m] = k;
      const s = this.scores[i]; this.scores[i] = this.scores[m]; this.scores[m] = s;
      i = m;
    }
  }
}
