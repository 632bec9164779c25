/**
 * Prefix index keyed by chained block hash. A hit is only a hit when the stored tokens equal the
 * looked-up tokens AND the entry's parent is the block the walk just matched (by commit serial),
 * so a hash collision can never hand out another sequence's KV.
 * Entries are records of a {@link RecordTable} (block id, serial, parent serial, token count, and the
 * token itself for a one-token block): a prefix walk then reads one record per block, not an entry
 * object and its token array.
 */
import { NO_SLOT, RecordTable } from "./record-table.ts";
import type { BlockHash } from "./types.ts";

export { NO_SLOT };

// Record fields (field 0 is the hash).
const BLOCK = 1, SERIAL = 2, PARENT = 3, LENGTH = 4, TOKEN = 5, STRIDE = 6;

/** Hash → entry map with token and parent verification. */
export class PrefixIndex {
  // Side values: the tokens of blocks that do not hold exactly one token.
  private readonly table = new RecordTable<number[]>(STRIDE);
  private nextSerial = 0;
  /** Lookups whose hash matched but whose tokens or parent did not (collisions observed). */
  collisions = 0;

  /** Number of indexed blocks. */
  get size(): number {
    return this.table.size;
  }

  /**
   * Finds the entry for `hash` whose tokens equal `tokens` and whose parent is `parentSerial`
   * (-1 for a first block): its slot, valid until the index next changes ({@link blockAt},
   * {@link serialAt}), or {@link NO_SLOT} on a miss or a collision.
   */
  find(hash: BlockHash, tokens: ArrayLike<number>, parentSerial: number): number {
    return this.verify(this.table.find(hash), tokens, parentSerial);
  }

  /** Slot of the entry at `hash` whatever it holds, or {@link NO_SLOT}: {@link find} without verification. */
  locate(hash: BlockHash): number {
    return this.table.find(hash);
  }

  /** {@link find} for a slot from {@link locate} (the index unchanged since). */
  verify(slot: number, tokens: ArrayLike<number>, parentSerial: number): number {
    if (slot === NO_SLOT) return NO_SLOT;
    if (this.table.recs[slot * STRIDE + PARENT] !== parentSerial || !this.sameTokens(slot, tokens)) {
      this.collisions++;
      return NO_SLOT;
    }
    return slot;
  }

  /** Block id of the entry at `slot` (from {@link find}). */
  blockAt(slot: number): number {
    // Block ids are pool indices (int32): `| 0` hands them back as small integers, not doubles.
    return this.table.recs[slot * STRIDE + BLOCK] | 0;
  }

  /** Commit serial of the entry at `slot` (from {@link find}). */
  serialAt(slot: number): number {
    return this.table.recs[slot * STRIDE + SERIAL];
  }

  /** Tokens of the entry at `hash`, unverified (a copy, for offload of an evicted block); undefined when none. */
  tokensOf(hash: BlockHash): number[] | undefined {
    const slot = this.table.find(hash);
    if (slot === NO_SLOT) return undefined;
    const r = slot * STRIDE;
    return this.table.recs[r + LENGTH] === 1 ? [this.table.recs[r + TOKEN]] : this.table.side[slot]!.slice();
  }

  /** True when some entry (verified or not) already occupies `hash`. */
  has(hash: BlockHash): boolean {
    return this.table.find(hash) !== NO_SLOT;
  }

  /** Adds an entry and returns its serial; returns -1 (and adds nothing) when the hash is taken. */
  insert(hash: BlockHash, blockId: number, tokens: ArrayLike<number>, parentSerial: number): number {
    if (this.table.find(hash) !== NO_SLOT) return -1;
    const slot = this.table.insert(hash);
    const recs = this.table.recs, r = slot * STRIDE;
    const serial = this.nextSerial++;
    recs[r + BLOCK] = blockId;
    recs[r + SERIAL] = serial;
    recs[r + PARENT] = parentSerial;
    recs[r + LENGTH] = tokens.length;
    if (tokens.length === 1) recs[r + TOKEN] = tokens[0];
    else this.table.side[slot] = Array.from(tokens);
    return serial;
  }

  /** Removes the entry at `hash` if it belongs to `blockId`. */
  remove(hash: BlockHash, blockId: number): boolean {
    const slot = this.table.find(hash);
    if (slot === NO_SLOT || this.table.recs[slot * STRIDE + BLOCK] !== blockId) return false;
    this.table.delete(slot);
    return true;
  }

  private sameTokens(slot: number, tokens: ArrayLike<number>): boolean {
    const recs = this.table.recs, r = slot * STRIDE;
    if (recs[r + LENGTH] !== tokens.length) return false;
    if (tokens.length === 1) return tokens[0] === recs[r + TOKEN];
    const stored = this.table.side[slot]!;
    for (let t = 0; t < stored.length; t++) if (stored[t] !== tokens[t]) return false;
    return true;
  }
}
