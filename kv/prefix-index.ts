/**
 * Prefix index keyed by chained block hash. A hit is only a hit when the stored tokens equal the
 * looked-up tokens AND the entry's parent is the block the walk just matched (by commit serial),
 * so a hash collision can never hand out another sequence's KV.
 */
import { BlockHashTable } from "./hash-table.ts";
import type { BlockHash } from "./types.ts";

/** One indexed block. */
export interface PrefixEntry {
  blockId: number;
  /** Unique per commit within one index; a reused block id gets a new serial. */
  serial: number;
  /** Serial of the parent entry, or -1 for a first block. */
  parentSerial: number;
  tokens: number[];
}

function sameTokens(a: number[], b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Hash → entry map with token and parent verification. */
export class PrefixIndex {
  private readonly entries = new BlockHashTable<PrefixEntry>();
  private nextSerial = 0;
  /** Lookups whose hash matched but whose tokens or parent did not (collisions observed). */
  collisions = 0;

  /** Number of indexed blocks. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Finds the entry for `hash` whose tokens equal `tokens` and whose parent is `parentSerial`
   * (-1 for a first block). Undefined on a miss or a collision.
   */
  lookup(hash: BlockHash, tokens: ArrayLike<number>, parentSerial: number): PrefixEntry | undefined {
    const e = this.entries.get(hash);
    if (e === undefined) return undefined;
    if (e.parentSerial !== parentSerial || !sameTokens(e.tokens, tokens)) {
      this.collisions++;
      return undefined;
    }
    return e;
  }

  /** The entry at `hash`, unverified (for offload of an evicted block). */
  get(hash: BlockHash): PrefixEntry | undefined {
    return this.entries.get(hash);
  }

  /** True when some entry (verified or not) already occupies `hash`. */
  has(hash: BlockHash): boolean {
    return this.entries.has(hash);
  }

  /** Adds an entry; returns undefined (and adds nothing) when the hash is taken. */
  insert(hash: BlockHash, blockId: number, tokens: ArrayLike<number>, parentSerial: number): PrefixEntry | undefined {
    const copy = tokens.length === 1 ? [tokens[0]] : Array.from(tokens);
    const entry: PrefixEntry = { blockId, serial: this.nextSerial, parentSerial, tokens: copy };
    if (!this.entries.add(hash, entry)) return undefined;
    this.nextSerial++;
    return entry;
  }

  /** Removes the entry at `hash` if it belongs to `blockId`. */
  remove(hash: BlockHash, blockId: number): boolean {
    const e = this.entries.get(hash);
    if (e === undefined || e.blockId !== blockId) return false;
    this.entries.delete(hash);
    return true;
  }
}
