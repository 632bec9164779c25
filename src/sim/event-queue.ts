/**
 * Binary min-heap of timed events. Ties break by insertion order, so a run is deterministic for a
 * seed whatever the runtime's sort does.
 * The heap keeps times and sequence numbers in typed arrays beside an array of payloads: every
 * comparison of a sift reads two numbers from the arrays instead of two event objects scattered in
 * memory, and pushing allocates no wrapper per event.
 */

/** A scheduled callback payload. */
export interface SimEvent<T> {
  time: number;
  seq: number;
  data: T;
}

/** Min-heap on (time, seq). */
export class EventQueue<T> {
  private times = new Float64Array(1024);
  private seqs = new Float64Array(1024);
  private readonly data: T[] = [];
  private seq = 0;
  // What pop() hands back: one object, refilled by every pop.
  private readonly top: SimEvent<T> = { time: 0, seq: 0, data: undefined as T };
  /** Events popped so far. */
  processed = 0;

  /** Number of pending events. */
  get size(): number {
    return this.data.length;
  }

  /** Schedules `data` at `time`. */
  push(time: number, data: T): void {
    const seq = this.seq++;
    let i = this.data.length;
    if (i === this.times.length) this.grow();
    const { times, seqs } = this;
    this.data.push(data);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!less(time, seq, times[p], seqs[p])) break;
      this.move(p, i);
      i = p;
    }
    this.put(i, time, seq, data);
  }

  /** Removes and returns the earliest event (an object refilled by the next pop: read it before that), or undefined. */
  pop(): SimEvent<T> | undefined {
    const n = this.data.length;
    if (n === 0) return undefined;
    const { times, seqs, data } = this;
    const top = this.top;
    top.time = times[0];
    top.seq = seqs[0];
    top.data = data[0];
    const lastTime = times[n - 1], lastSeq = seqs[n - 1], last = data.pop()!;
    const m = n - 1;
    if (m > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= m) break;
        const r = l + 1;
        const c = r < m && less(times[r], seqs[r], times[l], seqs[l]) ? r : l;
        if (!less(times[c], seqs[c], lastTime, lastSeq)) break;
        this.move(c, i);
        i = c;
      }
      this.put(i, lastTime, lastSeq, last);
    }
    this.processed++;
    return top;
  }

  /** Time of the earliest event, or Infinity. */
  peekTime(): number {
    return this.data.length > 0 ? this.times[0] : Infinity;
  }

  private move(from: number, to: number): void {
    this.times[to] = this.times[from];
    this.seqs[to] = this.seqs[from];
    this.data[to] = this.data[from];
  }

  private put(i: number, time: number, seq: number, data: T): void {
    this.times[i] = time;
    this.seqs[i] = seq;
    this.data[i] = data;
  }

  private grow(): void {
    const times = new Float64Array(2 * this.times.length);
    times.set(this.times);
    this.times = times;
    const seqs = new Float64Array(2 * this.seqs.length);
    seqs.set(this.seqs);
    this.seqs = seqs;
  }
}

function less(aTime: number, aSeq: number, bTime: number, bSeq: number): boolean {
  return aTime < bTime || (aTime === bTime && aSeq < bSeq);
}
