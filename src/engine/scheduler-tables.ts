/**
 * The block tables a step plan hands out (StepEntry.blockTable): a frozen copy of each sequence's
 * table, made again only when the table changed since the last one, instead of a copy per entry per
 * step (O(context / blockSize) each). A copy is never the sequence's own array, so nothing the
 * scheduler does later shows through a plan already handed out, and frozen, so a consumer cannot
 * write into the one later plans reuse. Pure CPU logic.
 */
import type { Sequence } from "./sequence.ts";

interface View {
  /** The sequence's array the copy was made from, and its length then. */
  table: readonly number[];
  length: number;
  copy: readonly number[];
}

/** Read-only copies of sequences' block tables, kept while the tables do not change. */
export class TableViews {
  #views = new WeakMap<Sequence, View>();

  /**
   * `seq`'s block table as a frozen copy: the last one made while the table is the same array of the
   * same length and {@link changed} was not called since. A table replaced (preemption, admission)
   * or grown is copied again by itself; a change in place that may keep the length must call `changed`.
   */
  of(seq: Sequence): readonly number[] {
    const table = seq.blockTable;
    const v = this.#views.get(seq);
    if (v !== undefined && v.table === table && v.length === table.length) return v.copy;
    const copy = Object.freeze(table.slice());
    this.#views.set(seq, { table, length: table.length, copy });
    return copy;
  }

  /** Forgets `seq`'s copy: its table changed in place (blocks cut off its end, or replaced). */
  changed(seq: Sequence): void {
    this.#views.delete(seq);
  }
}
