/**
 * Block hash → a short list of numbers (the global index's holders), in insertion order, removal
 * moving the last element into the hole. Lists of up to {@link INLINE} numbers live in the hash's
 * {@link RecordTable} record, beside the hash: most blocks have one or two holders, and a lookup then
 * reads one record instead of a map slot, a list object and its elements. Longer lists are arrays.
 */
import { NO_SLOT, RecordTable } from "./record-table.ts";
import type { BlockHash } from "./types.ts";

export { NO_SLOT };

/** Numbers a record holds itself. */
const INLINE = 2;
// Record fields (field 0 is the hash): the list length, then the inline numbers.
const LENGTH = 1, FIRST = 2, STRIDE = FIRST + INLINE;

/** Hash → list of numbers, the short lists stored inline. */
export class HolderTable {
  private readonly table = new RecordTable<number[]>(STRIDE);

  /** Number of hashes with a non-empty list. */
  get size(): number {
    return this.table.size;
  }

  /** Slot of `hash`'s list, or {@link NO_SLOT} when it has none. Valid until the table next changes. */
  find(hash: BlockHash): number {
    return this.table.find(hash);
  }

  /** Length of the list at `slot`. */
  length(slot: number): number {
    return this.table.recs[slot * STRIDE + LENGTH];
  }

  /** Element `i` of the list at `slot`. */
  get(slot: number, i: number): number {
    const recs = this.table.recs;
    return recs[slot * STRIDE + LENGTH] <= INLINE ? recs[slot * STRIDE + FIRST + i] : this.table.side[slot]![i];
  }

  /** Replaces element `i` of the list at `slot`. */
  setAt(slot: number, i: number, v: number): void {
    const recs = this.table.recs;
    if (recs[slot * STRIDE + LENGTH] <= INLINE) recs[slot * STRIDE + FIRST + i] = v;
    else this.table.side[slot]![i] = v;
  }

  /** Appends `v` to `hash`'s list (a new list when it has none). */
  push(hash: BlockHash, v: number): void {
    let slot = this.table.find(hash);
    if (slot === NO_SLOT) slot = this.table.insert(hash);
    const recs = this.table.recs, r = slot * STRIDE;
    const n = recs[r + LENGTH];
    if (n < INLINE) recs[r + FIRST + n] = v;
    else if (n === INLINE) {
      const list: number[] = [];
      for (let i = 0; i < INLINE; i++) list.push(recs[r + FIRST + i]);
      list.push(v);
      this.table.side[slot] = list;
    } else this.table.side[slot]!.push(v);
    recs[r + LENGTH] = n + 1;
  }

  /** Removes element `i` of the list at `slot` (the last element takes its place); an emptied list's hash is dropped. */
  removeAt(slot: number, i: number): void {
    const recs = this.table.recs, r = slot * STRIDE;
    const n = recs[r + LENGTH];
    if (n === 1) {
      this.table.delete(slot);
      return;
    }
    if (n <= INLINE) recs[r + FIRST + i] = recs[r + FIRST + n - 1];
    else {
      const list = this.table.side[slot]!;
      list[i] = list[n - 1];
      list.pop();
      if (n - 1 === INLINE) {
        for (let k = 0; k < INLINE; k++) recs[r + FIRST + k] = list[k];
        this.table.side[slot] = undefined;
      }
    }
    recs[r + LENGTH] = n - 1;
  }

  /** Every hash with a list, in no particular order (a copy). */
  keyList(): BlockHash[] {
    return this.table.keyList();
  }
}
