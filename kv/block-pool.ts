/**
 * Paged KV block pool with reference counts and automatic prefix caching (vLLM-style).
 * A block is free (on the free list), in use (refCount > 0), or cached-and-evictable (refCount 0,
 * still indexed, reusable by a prefix hit until the retention policy evicts it).
 */
import { type BlockHasher, hashBlock } from "./hash.ts";
import { NO_SLOT, PrefixIndex } from "./prefix-index.ts";
import { type EvictableBlock, LruPolicy, type RetentionPolicy } from "./retention.ts";
import {
  type BlockHash,
  type BlockMeta,
  type Clock,
  KvCapacityError,
  type KvEventSink,
  KvStateError,
  type Tier,
} from "./types.ts";

/** Construction options for a {@link BlockPool}. */
export interface BlockPoolOptions {
  numBlocks: number;
  /** Tokens per block (16 in the engine; the simulator uses coarser content blocks). */
  blockSize: number;
  clock: Clock;
  policy?: RetentionPolicy;
  hasher?: BlockHasher;
  events?: KvEventSink;
  workerId?: string;
  tier?: Tier;
  /** Called for each cached block evicted from this pool (offload it to a lower tier here). */
  onEvict?: (block: EvictedBlock) => void;
}

/** A cached block leaving the pool, with what a lower tier needs to keep it. */
export interface EvictedBlock {
  /** The device block it leaves: its KV is still intact during the callback (copy it out then). */
  blockId: number;
  hash: BlockHash;
  parentHash: BlockHash | null;
  tokens: number[];
  meta: BlockMeta;
  depth: number;
}

/** What a prefix probe saw: the cached run of full blocks that prefixes some tokens, nothing taken. */
export interface PrefixProbe {
  /** Tokens covered by the matched blocks (matched blocks × blockSize). */
  numTokens: number;
  /** Meta of each matched block in chain order (undefined where none was given); the last is the deepest. */
  metas: (BlockMeta | undefined)[];
}

/** Result of a prefix match: the acquired cached blocks and what they cover. */
export interface PrefixMatch {
  blockIds: number[];
  hashes: BlockHash[];
  /** Tokens covered by the matched blocks (blockIds.length × blockSize). */
  numTokens: number;
}

const NO_SERIAL = -1;
// Fields of a block's record (BlockPool.rec).
const REF = 0, HASH = 1, SERIAL = 2, DEPTH = 3, PARENT = 4, STRIDE = 5;
const NO_META: BlockMeta = Object.freeze({});

/** Reference-counted block pool with a prefix cache. */
export class BlockPool {
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly workerId: string;
  readonly tier: Tier;
  private readonly clock: Clock;
  private readonly policy: RetentionPolicy;
  private readonly hasher: BlockHasher;
  private readonly events?: KvEventSink;
  private readonly onEvict?: (block: EvictedBlock) => void;
  private readonly index = new PrefixIndex();
  /**
   * Per block, one record of STRIDE numbers: reference count, chained hash (NaN = not cached), commit
   * serial, chain depth and parent hash (NaN = first block). Side by side rather than an array per
   * field: releasing a sequence touches each of its blocks once, in no cache-friendly order.
   */
  private readonly rec: Float64Array;
  private readonly metas: (BlockMeta | undefined)[];
  private readonly freeList: number[] = [];
  /** Blocks [nextFresh, numBlocks) have never been handed out: implicitly free, no list needed. */
  private nextFresh = 0;
  private readonly scratch = [0];
  private slots = new Int32Array(64); // walk()'s prefix-index slots of known hashes
  // Handed to the policy on every release; policies copy what they keep (see RetentionPolicy.add).
  private readonly evictable: EvictableBlock = { id: 0, hash: 0, meta: {}, depth: 0 };

  /** Creates a pool of `numBlocks` free blocks. */
  constructor(opts: BlockPoolOptions) {
    if (!Number.isInteger(opts.numBlocks) || opts.numBlocks < 0) {
      throw new KvStateError(`Block count must be a non-negative integer, got ${opts.numBlocks}`);
    }
    if (!Number.isInteger(opts.blockSize) || opts.blockSize < 1) {
      throw new KvStateError(`Block size must be a positive integer, got ${opts.blockSize}`);
    }
    this.numBlocks = opts.numBlocks;
    this.blockSize = opts.blockSize;
    this.clock = opts.clock;
    this.policy = opts.policy ?? new LruPolicy();
    this.hasher = opts.hasher ?? hashBlock;
    this.events = opts.events;
    this.onEvict = opts.onEvict;
    this.workerId = opts.workerId ?? "worker-0";
    this.tier = opts.tier ?? "device";
    this.rec = new Float64Array(opts.numBlocks * STRIDE);
    for (let id = 0; id < opts.numBlocks; id++) {
      this.rec[id * STRIDE + HASH] = NaN;
      this.rec[id * STRIDE + SERIAL] = NO_SERIAL;
      this.rec[id * STRIDE + PARENT] = NaN;
    }
    this.metas = [];
  }

  /** Blocks that can be allocated now: truly free plus cached-but-unreferenced. */
  numFreeBlocks(): number {
    return this.freeList.length + (this.numBlocks - this.nextFresh) + this.policy.size;
  }

  /** Blocks held by at least one sequence. */
  numUsedBlocks(): number {
    return this.numBlocks - this.numFreeBlocks();
  }

  /** Blocks currently in the prefix cache (in use or evictable). */
  numCachedBlocks(): number {
    return this.index.size;
  }

  /** Hash collisions the prefix index has seen (hash equal, tokens or parent different). */
  collisions(): number {
    return this.index.collisions;
  }

  /** Reference count of a block. */
  refCount(id: number): number {
    this.check(id);
    return this.rec[id * STRIDE + REF];
  }

  /** Chained hash of a cached block, or null when the block is not in the prefix cache. */
  hashOf(id: number): BlockHash | null {
    this.check(id);
    const h = this.rec[id * STRIDE + HASH];
    return Number.isNaN(h) ? null : h;
  }

  /** Allocates `count` fresh blocks (refCount 1), evicting cached blocks as needed, or returns null. */
  tryAllocate(count: number): number[] | null {
    if (count > this.numFreeBlocks()) return null;
    const out: number[] = [];
    const evicted: BlockHash[] = [];
    const now = this.clock();
    for (let i = 0; i < count; i++) {
      let id = this.freeList.pop();
      if (id === undefined && this.nextFresh < this.numBlocks) id = this.nextFresh++;
      if (id === undefined) {
        id = this.policy.evict(now);
        if (id === undefined) throw new KvStateError("Retention policy lost track of evictable blocks");
        evicted.push(this.uncache(id));
      }
      this.rec[id * STRIDE + REF] = 1;
      this.metas[id] = undefined;
      out.push(id);
    }
    if (evicted.length > 0) this.events?.({ kind: "removed", workerId: this.workerId, tier: this.tier, time: now, hashes: evicted });
    return out;
  }

  /** Allocates `count` fresh blocks or throws {@link KvCapacityError}. */
  allocate(count: number): number[] {
    const ids = this.tryAllocate(count);
    if (ids === null) {
      throw new KvCapacityError(`Cannot allocate ${count} KV blocks: only ${this.numFreeBlocks()} free`);
    }
    return ids;
  }

  /** Adds a reference to each block (fork / share a prefix with another sequence). */
  share(ids: readonly number[]): void {
    for (const id of ids) {
      this.check(id);
      if (this.rec[id * STRIDE + REF] === 0) throw new KvStateError(`Cannot share block ${id}: it is not in use`);
      this.rec[id * STRIDE + REF]++;
    }
  }

  /**
   * Drops one reference from each block. Freed cached blocks stay reusable until evicted; pass a
   * sequence's block table in order: blocks are released tail first so tails are evicted first.
   */
  release(ids: readonly number[], meta?: BlockMeta): void {
    const now = this.clock();
    for (let k = ids.length - 1; k >= 0; k--) {
      const id = ids[k];
      this.check(id);
      if (this.rec[id * STRIDE + REF] <= 0) throw new KvStateError(`Cannot release block ${id}: reference count is already 0`);
      if (--this.rec[id * STRIDE + REF] > 0) continue;
      if (meta !== undefined) {
        const old = this.metas[id];
        if (old === undefined || old.sessionId !== meta.sessionId || (meta.type !== undefined && old.type !== meta.type)) {
          this.metas[id] = { ...old, ...meta };
        }
      }
      if (Number.isNaN(this.rec[id * STRIDE + HASH])) this.freeList.push(id);
      else {
        const e = this.evictable;
        e.id = id;
        e.hash = this.rec[id * STRIDE + HASH];
        e.meta = this.metas[id] ?? NO_META;
        e.depth = this.rec[id * STRIDE + DEPTH];
        this.policy.add(e, now);
      }
    }
  }

  /**
   * Registers a full, in-use block in the prefix cache. `parentId` is the previous block of the same
   * sequence (null for its first block) and must itself be cached. Returns the chained hash, or null
   * when the block cannot be indexed (parent uncached, or an equal/colliding block already indexed).
   * A first block chains from `root` (a cache namespace, {@link namespaceRoot}; null: none).
   */
  commitBlock(id: number, parentId: number | null, tokens: ArrayLike<number>, meta?: BlockMeta, root: BlockHash | null = null): BlockHash | null {
    this.check(id);
    if (this.rec[id * STRIDE + REF] <= 0) throw new KvStateError(`Cannot commit block ${id}: it is not in use`);
    if (tokens.length !== this.blockSize) {
      throw new KvStateError(`Cannot commit block ${id}: it holds ${tokens.length} tokens, expected ${this.blockSize}`);
    }
    if (meta !== undefined) this.metas[id] = meta;
    if (!Number.isNaN(this.rec[id * STRIDE + HASH])) return this.rec[id * STRIDE + HASH];
    let parentHash: BlockHash | null = root;
    let parentSerial = NO_SERIAL;
    let depth = 0;
    if (parentId !== null) {
      this.check(parentId);
      if (Number.isNaN(this.rec[parentId * STRIDE + HASH])) return null;
      parentHash = this.rec[parentId * STRIDE + HASH];
      parentSerial = this.rec[parentId * STRIDE + SERIAL];
      depth = this.rec[parentId * STRIDE + DEPTH] + 1;
    }
    const hash = this.hasher(parentHash, tokens);
    const serial = this.index.insert(hash, id, tokens, parentSerial);
    if (serial < 0) return null;
    this.rec[id * STRIDE + HASH] = hash;
    this.rec[id * STRIDE + SERIAL] = serial;
    this.rec[id * STRIDE + DEPTH] = depth;
    this.rec[id * STRIDE + PARENT] = parentHash ?? NaN;
    this.events?.({
      kind: "stored", workerId: this.workerId, tier: this.tier, time: this.clock(),
      hashes: [hash], parentHash, blockSize: this.blockSize,
    });
    return hash;
  }

  /**
   * Longest cached prefix of `tokens` (full blocks only). The matched blocks are acquired (their
   * reference counts go up); release them with the sequence's block table. `root`: the cache
   * namespace the blocks chain from (null: none); blocks of another namespace never match.
   */
  matchPrefix(tokens: ArrayLike<number>, maxBlocks = Infinity, root: BlockHash | null = null): PrefixMatch {
    return this.acquire(this.walk(tokens, maxBlocks, undefined, root));
  }

  /**
   * {@link matchPrefix} for a caller that already holds the chain hashes of `tokens`' full blocks
   * under this pool's hasher (`hashes[b]` hashes block b after `hashes[b - 1]`): skips rehashing,
   * still verifies tokens and parent links. Extra trailing hashes are ignored.
   */
  matchPrefixHashed(tokens: ArrayLike<number>, hashes: readonly BlockHash[]): PrefixMatch {
    return this.acquire(this.walk(tokens, Infinity, hashes, null));
  }

  private acquire(found: PrefixMatch): PrefixMatch {
    for (const id of found.blockIds) {
      if (this.rec[id * STRIDE + REF] === 0) this.policy.remove(id);
      this.rec[id * STRIDE + REF]++;
    }
    return found;
  }

  /** Number of leading tokens of `tokens` that are cached here (in namespace `root`), without acquiring anything. */
  cachedPrefixTokens(tokens: ArrayLike<number>, maxBlocks = Infinity, root: BlockHash | null = null): number {
    return this.walk(tokens, maxBlocks, undefined, root).numTokens;
  }

  /**
   * {@link cachedPrefixTokens} plus the meta of every matched block (who committed it, what it holds),
   * without acquiring anything: reference counts and the retention policy are left as they are.
   */
  probePrefix(tokens: ArrayLike<number>, maxBlocks = Infinity, root: BlockHash | null = null): PrefixProbe {
    const found = this.walk(tokens, maxBlocks, undefined, root);
    return { numTokens: found.numTokens, metas: found.blockIds.map((id) => this.metas[id]) };
  }

  private walk(tokens: ArrayLike<number>, maxBlocks: number, known: readonly BlockHash[] | undefined, root: BlockHash | null): PrefixMatch {
    const blockIds: number[] = [];
    const hashes: BlockHash[] = [];
    const bs = this.blockSize;
    let full = Math.min(Math.floor(tokens.length / bs), maxBlocks);
    if (known !== undefined && known.length < full) full = known.length;
    let parentHash: BlockHash | null = root;
    let parentSerial = NO_SERIAL;
    // With the hashes known, every block's slot is probed before the chain is verified: the probes
    // do not depend on each other, so the CPU overlaps their cache misses (a table per pool, far
    // larger than the cache) instead of waiting for one after another.
    if (known !== undefined) {
      if (this.slots.length < full) this.slots = new Int32Array(Math.max(full, 2 * this.slots.length));
      // (The walk ends at the first block not indexed: no need to probe past it.)
      for (let b = 0; b < full; b++) if ((this.slots[b] = this.index.locate(known[b])) === NO_SLOT) break;
    }
    for (let b = 0; b < full; b++) {
      let block: ArrayLike<number>;
      if (bs === 1) { this.scratch[0] = tokens[b]; block = this.scratch; }
      else block = Array.prototype.slice.call(tokens, b * bs, (b + 1) * bs) as number[];
      const hash: BlockHash = known !== undefined ? known[b] : this.hasher(parentHash, block);
      const slot = known !== undefined ? this.index.verify(this.slots[b], block, parentSerial) : this.index.find(hash, block, parentSerial);
      if (slot === NO_SLOT) break;
      blockIds.push(this.index.blockAt(slot));
      hashes.push(hash);
      parentHash = hash;
      parentSerial = this.index.serialAt(slot);
    }
    return { blockIds, hashes, numTokens: blockIds.length * bs };
  }

  private uncache(id: number): BlockHash {
    const hash = this.rec[id * STRIDE + HASH];
    if (this.onEvict !== undefined) {
      const p = this.rec[id * STRIDE + PARENT];
      this.onEvict({
        blockId: id, hash, parentHash: Number.isNaN(p) ? null : p, tokens: this.index.tokensOf(hash) ?? [],
        meta: this.metas[id] ?? {}, depth: this.rec[id * STRIDE + DEPTH],
      });
    }
    this.index.remove(hash, id);
    this.rec[id * STRIDE + HASH] = NaN;
    this.rec[id * STRIDE + SERIAL] = NO_SERIAL;
    return hash;
  }

  private check(id: number): void {
    // Same test as Number.isInteger(id) && 0 <= id < numBlocks (block counts fit in int32), cheaper.
    if (!(id >= 0 && id < this.numBlocks && (id | 0) === id)) {
      throw new KvStateError(`Block id ${id} is out of range 0..${this.numBlocks - 1}`);
    }
  }
}
