/**
 * An open-addressing map from block hashes to values. Block hashes are 53-bit integers, which V8
 * stores as heap numbers, so a built-in Map hashes and boxes them on every call; this table keeps
 * the keys in a Float64Array with linear probing and backward-shift deletion (no tombstones), which
 * is several times faster on the per-block paths of the prefix cache and the global index.
 * It has no iteration order, so only use it where none is observed.
 */
import { type BlockHash, KvStateError } from "./types.ts";

const EMPTY = -1; // block hashes are non-negative
const TWO_POW_32 = 4294967296;
const MIN_BITS = 4;

/**
 * Throws {@link KvStateError} for a key a table cannot hold: NaN would be stored but never found again
 * (a leak), and −1 marks a free slot, so storing it would leave a record in a slot that reads as free.
 */
export function checkKey(key: BlockHash): void {
  if (key === EMPTY || Number.isNaN(key)) throw new KvStateError(`Block hash must be a non-negative number, got ${key}`);
}

/** Spreads a hash over a table of 2^(32 − shift) slots: low and high halves mixed, Fibonacci-multiplied, top bits kept. */
export function slotOf(key: number, shift: number): number {
  const hi = (key / TWO_POW_32) | 0;
  return Math.imul((key >>> 0) ^ Math.imul(hi, 0x85ebca6b), 0x9e3779b1) >>> shift;
}

/** A packed array of `n` undefined slots (`new Array(n)` turns sparse, i.e. slow, for large n). */
function emptyValues<V>(n: number): (V | undefined)[] {
  const a: (V | undefined)[] = [];
  for (let i = 0; i < n; i++) a.push(undefined);
  return a;
}

/** BlockHash → V map with O(1) get/set/delete and no per-entry allocation beyond the value. */
export class BlockHashTable<V> {
  private keys: Float64Array;
  private vals: (V | undefined)[];
  private mask: number;
  private shift: number;
  private count = 0;

  /** Creates an empty table. */
  constructor() {
    this.keys = new Float64Array(1 << MIN_BITS).fill(EMPTY);
    this.vals = emptyValues<V>(1 << MIN_BITS);
    this.mask = (1 << MIN_BITS) - 1;
    this.shift = 32 - MIN_BITS;
  }

  /** Number of keys. */
  get size(): number {
    return this.count;
  }

  /** Value at `key`, or undefined. */
  get(key: BlockHash): V | undefined {
    if (key === EMPTY) return undefined; // the free-slot marker is never a key
    const keys = this.keys;
    for (let i = slotOf(key, this.shift); ; i = (i + 1) & this.mask) {
      const k = keys[i];
      if (k === key) return this.vals[i];
      if (k === EMPTY) return undefined;
    }
  }

  /** True when `key` is present. */
  has(key: BlockHash): boolean {
    if (key === EMPTY) return false;
    const keys = this.keys;
    for (let i = slotOf(key, this.shift); ; i = (i + 1) & this.mask) {
      const k = keys[i];
      if (k === key) return true;
      if (k === EMPTY) return false;
    }
  }

  /** Inserts or replaces the value at `key`. */
  set(key: BlockHash, value: V): void {
    checkKey(key);
    const keys = this.keys;
    let i = slotOf(key, this.shift);
    for (; ; i = (i + 1) & this.mask) {
      const k = keys[i];
      if (k === key) { this.vals[i] = value; return; }
      if (k === EMPTY) break;
    }
    keys[i] = key;
    this.vals[i] = value;
    // Keep the load factor at most 1/2 so probe runs stay short.
    if (++this.count * 2 > keys.length) this.grow();
  }

  /** Inserts `value` at `key` unless the key is present; true when inserted (one probe, not two). */
  add(key: BlockHash, value: V): boolean {
    checkKey(key);
    const keys = this.keys;
    let i = slotOf(key, this.shift);
    for (; ; i = (i + 1) & this.mask) {
      const k = keys[i];
      if (k === key) return false;
      if (k === EMPTY) break;
    }
    keys[i] = key;
    this.vals[i] = value;
    if (++this.count * 2 > keys.length) this.grow();
    return true;
  }

  /** Removes `key`; true when it was present. */
  delete(key: BlockHash): boolean {
    if (key === EMPTY) return false;
    const keys = this.keys;
    const mask = this.mask;
    let i = slotOf(key, this.shift);
    for (; ; i = (i + 1) & mask) {
      const k = keys[i];
      if (k === key) break;
      if (k === EMPTY) return false;
    }
    // Backward-shift: pull later entries of the probe run into the hole when their home allows it.
    let hole = i;
    for (let j = (i + 1) & mask; ; j = (j + 1) & mask) {
      const k = keys[j];
      if (k === EMPTY) break;
      const home = slotOf(k, this.shift);
      // Entry j may move to the hole only if its home is not cyclically in (hole, j].
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        keys[hole] = k;
        this.vals[hole] = this.vals[j];
        hole = j;
      }
    }
    keys[hole] = EMPTY;
    this.vals[hole] = undefined;
    this.count--;
    return true;
  }

  /** Every key, in no particular order (a copy: the table may change while it is walked). */
  keyList(): BlockHash[] {
    const out: BlockHash[] = [];
    for (const k of this.keys) if (k !== EMPTY) out.push(k);
    return out;
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldVals = this.vals;
    const bits = 32 - this.shift + 1;
    this.keys = new Float64Array(1 << bits).fill(EMPTY);
    this.vals = emptyValues<V>(1 << bits);
    this.mask = (1 << bits) - 1;
    this.shift = 32 - bits;
    for (let j = 0; j < oldKeys.length; j++) {
      const k = oldKeys[j];
      if (k === EMPTY) continue;
      let i = slotOf(k, this.shift);
      while (this.keys[i] !== EMPTY) i = (i + 1) & this.mask;
      this.keys[i] = k;
      this.vals[i] = oldVals[j];
    }
  }
}
