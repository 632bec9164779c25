/**
 * Binary min-heap of timed events. Ties break by insertion order, so a run is deterministic for a
 * seed whatever the runtime's sort does.
 */

/** A scheduled callback payload. */
export interface SimEvent<T> {
  time: number;
  seq: number;
  data: T;
}

/** Min-heap on (time, seq). */
export class EventQueue<T> {
  private readonly heap: SimEvent<T>[] = [];
  private seq = 0;
  /** Events popped so far. */
  processed = 0;

  /** Number of pending events. */
  get size(): number {
    return this.heap.length;
  }

  /** Schedules `data` at `time`. */
  push(time: number, data: T): void {
    const h = this.heap;
    const e: SimEvent<T> = { time, seq: this.seq++, data };
    let i = h.length;
    h.push(e);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(e, h[p])) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = e;
  }

  /** Removes and returns the earliest event. */
  pop(): SimEvent<T> | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= h.length) break;
        const r = l + 1;
        const c = r < h.length && less(h[r], h[l]) ? r : l;
        if (!less(h[c], last)) break;
        h[i] = h[c];
        i = c;
      }
      h[i] = last;
    }
    this.processed++;
    return top;
  }

  /** Time of the earliest event, or Infinity. */
  peekTime(): number {
    return this.heap.length > 0 ? this.heap[0].time : Infinity;
  }
}

function less<T>(a: SimEvent<T>, b: SimEvent<T>): boolean {
  return a.time < b.time || (a.time === b.time && a.seq < b.seq);
}
