/**
 * An open-addressing table from block hashes to fixed-size numeric records, each record stored next
 * to its key in one Float64Array (plus an optional JS value per slot for what does not fit).
 * The prefix index and the global block index look up every block of every prompt in tables far
 * larger than the cache: with the key and its fields side by side a hit reads one or two cache
 * lines, where a map from key to an object (and from there to an array) reads four or five.
 * Linear probing, backward-shift deletion (no tombstones), load factor at most 1/2, like
 * {@link BlockHashTable}; no iteration order is observed through it.
 */
import { checkKey, slotOf } from "./hash-table.ts";
import type { BlockHash } from "./types.ts";

const EMPTY = -1; // block hashes are non-negative
const MIN_BITS = 4;
/** What {@link RecordTable.find} returns when the key is absent. */
export const NO_SLOT = -1;

/** BlockHash → record of `stride − 1` numbers (fields 1.. of the slot) and one optional value. */
export class RecordTable<V> {
  /** Slot s occupies recs[s·stride] (the key, EMPTY when free) to recs[s·stride + stride − 1]. */
  recs: Float64Array;
  /** Per slot: the value that does not fit in the record (undefined when none). */
  side: (V | undefined)[];
  private mask: number;
  private shift: number;
  private count = 0;

  /** Creates an empty table of records of `stride` numbers, the key included. */
  constructor(readonly stride: number) {
    this.recs = emptyRecords(1 << MIN_BITS, stride);
    this.side = emptySlots<V>(1 << MIN_BITS);
    this.mask = (1 << MIN_BITS) - 1;
    this.shift = 32 - MIN_BITS;
  }

  /** Number of keys. */
  get size(): number {
    return this.count;
  }

  /** Slot holding `key` (its record starts at slot·stride), or {@link NO_SLOT}. Valid until the table next changes. */
  find(key: BlockHash): number {
    if (key === EMPTY) return NO_SLOT; // the free-slot marker is never a key
    const recs = this.recs, stride = this.stride;
    for (let i = slotOf(key, this.shift); ; i = (i + 1) & this.mask) {
      const k = recs[i * stride];
      if (k === key) return i;
      if (k === EMPTY) return NO_SLOT;
    }
  }

  /** Adds `key`, which must be absent, with a zeroed record and no value; returns its slot. */
  insert(key: BlockHash): number {
    checkKey(key);
    if ((this.count + 1) * 2 > this.side.length) this.grow();
    this.count++;
    const recs = this.recs, stride = this.stride;
    let i = slotOf(key, this.shift);
    while (recs[i * stride] !== EMPTY) i = (i + 1) & this.mask;
    recs[i * stride] = key;
    return i;
  }

  /** Removes the key at `slot` (from {@link find}). */
  delete(slot: number): void {
    const { recs, side, mask, stride } = this;
    // Backward-shift: pull later records of the probe run into the hole when their home allows it.
    let hole = slot;
    for (let j = (slot + 1) & mask; ; j = (j + 1) & mask) {
      const k = recs[j * stride];
      if (k === EMPTY) break;
      // Record j may move to the hole only if its home is not cyclically in (hole, j].
      if (((j - slotOf(k, this.shift)) & mask) >= ((j - hole) & mask)) {
        for (let f = 0; f < stride; f++) recs[hole * stride + f] = recs[j * stride + f];
        side[hole] = side[j];
        hole = j;
      }
    }
    recs[hole * stride] = EMPTY;
    for (let f = 1; f < stride; f++) recs[hole * stride + f] = 0;
    side[hole] = undefined;
    this.count--;
  }

  /** Every key, in no particular order (a copy: the table may change while it is walked). */
  keyList(): BlockHash[] {
    const out: BlockHash[] = [];
    for (let i = 0; i < this.side.length; i++) if (this.recs[i * this.stride] !== EMPTY) out.push(this.recs[i * this.stride]);
    return out;
  }

  private grow(): void {
    const oldRecs = this.recs, oldSide = this.side, stride = this.stride;
    const bits = 32 - this.shift + 1;
    this.recs = emptyRecords(1 << bits, stride);
    this.side = emptySlots<V>(1 << bits);
    this.mask = (1 << bits) - 1;
    this.shift = 32 - bits;
    for (let j = 0; j < oldSide.length; j++) {
      const k = oldRecs[j * stride];
      if (k === EMPTY) continue;
      let i = slotOf(k, this.shift);
      while (this.recs[i * stride] !== EMPTY) i = (i + 1) & this.mask;
      // A field loop, not set(subarray()): a view object per record made growing slow.
      for (let f = 0; f < stride; f++) this.recs[i * stride + f] = oldRecs[j * stride + f];
      this.side[i] = oldSide[j];
    }
  }
}

/** `n` free slot records (key EMPTY, fields 0). */
function emptyRecords(n: number, stride: number): Float64Array {
  const recs = new Float64Array(n * stride);
  for (let i = 0; i < n; i++) recs[i * stride] = EMPTY;
  return recs;
}

/** A packed array of `n` undefined slots (`new Array(n)` turns sparse, i.e. slow, for large n). */
function emptySlots<V>(n: number): (V | undefined)[] {
  const a: (V | undefined)[] = [];
  for (let i = 0; i < n; i++) a.push(undefined);
  return a;
}
