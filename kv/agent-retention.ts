/**
 * Agent-aware retention: evict by expected benefit per byte, not by recency.
 * benefit(block) = recompute seconds saved × P(its session returns before the block would be evicted).
 * Reasoning blocks of a finished turn are worth nothing (agents drop them from the next turn) and go
 * first. Within a session, the deepest block goes first, since a prefix is only useful contiguously.
 * Blocks of no session (requests without a session key) form one group evicted least recently
 * used first, as plain prefix caching would, and priced as an idle session's: nobody is known to
 * be coming back for them.
 */
import { LruList } from "./lru-list.ts";
import { RankHeap } from "./rank-heap.ts";
import type { EvictableBlock, RetentionPolicy } from "./retention.ts";
import { type SessionHandle, SessionTracker } from "./session-tracker.ts";

/** Tunables of {@link AgentAwarePolicy}. */
export interface AgentAwareOptions {
  /** Recompute seconds saved by keeping a block at chain depth `depth` (deeper = longer attention). */
  recomputeSeconds?: (depth: number) => number;
  /** Bytes of one block (constant per pool, so it only scales scores; kept for benefit-per-byte). */
  blockBytes?: number;
  /** Horizon floor (s) for "before eviction" when the pool has not evicted anything yet. */
  minHorizonS?: number;
  /** Seconds between full re-rankings of sessions (scores drift slowly between events). */
  rerankS?: number;
}

interface Group {
  key: string;
  /** Block ids, possibly stale: an id counts only while `owner[id]` is this group. */
  ids: number[];
  /** Live blocks (ids owned by this group). */
  live: number;
  sorted: boolean;
  /** Upper bound on the depth of its blocks (exact after each sort). */
  maxDepth: number;
  /** Latest time one of its blocks became evictable. */
  newest: number;
  /** The session's tracker record, cached (re-fetched when missing or stale). */
  rec: SessionHandle | undefined;
}

const ANON = "";

/** Retention by expected benefit per byte, using a shared {@link SessionTracker}. */
export class AgentAwarePolicy implements RetentionPolicy {
  private readonly groups = new Map<string, Group>();
  // Per block id (ids are dense pool indices, so arrays beat Maps): owning group, depth, dropped flag.
  private readonly owner: (Group | undefined)[] = new Array<Group | undefined>(64).fill(undefined);
  private depthOf = new Int32Array(64);
  private isDropped = new Uint8Array(64);
  private owned = 0;
  private droppedCount = 0;
  private readonly droppedStack: number[] = [];
  private readonly recompute: (depth: number) => number;
  private readonly blockBytes: number;
  private readonly minHorizonS: number;
  private evictRate = 0;
  private lastEvictTime = -Infinity;
  private readonly rerankS: number;
  // Session keys ranked by score at the last re-ranking, lowest first, consumed from the front.
  private readonly order = new RankHeap();
  private rankedAt = -Infinity;
  // Session-less blocks in release order (value: release time); their group's ids list stays empty.
  private readonly anon = LruList.forBlockHashes<number>();
  // Sessions that continued on another worker with their prefix: their blocks here go first.
  private readonly moved = new Set<string>();
  // The group add() last found: a pool releases a sequence's blocks one by one, all of one session,
  // so this saves a Map lookup per block. Cleared whenever a group leaves `groups` (dropGroup).
  private lastGroup: Group | undefined = undefined;

  /** Creates the policy over the given session knowledge. */
  constructor(private readonly sessions: SessionTracker, opts: AgentAwareOptions = {}) {
    this.recompute = opts.recomputeSeconds ?? ((d) => 1 + d / 64);
    this.blockBytes = opts.blockBytes ?? 1;
    this.minHorizonS = opts.minHorizonS ?? 30;
    this.rerankS = opts.rerankS ?? 2;
  }

  /** Number of evictable blocks tracked. */
  get size(): number {
    return this.owned + this.droppedCount;
  }

  /** A cached block became evictable. */
  add(block: EvictableBlock, now: number): void {
    const id = block.id;
    this.remove(id);
    if (id >= this.depthOf.length) this.growTo(id);
    const sid = block.meta.sessionId;
    if (block.meta.type === "reasoning" && sid !== undefined && this.sessions.status(sid) !== "running") {
      this.isDropped[id] = 1;
      this.droppedCount++;
      this.droppedStack.push(id);
      if (this.droppedStack.length > 2 * this.droppedCount + 64) this.compactDropped();
      return;
    }
    const key = sid ?? ANON;
    // The session ran here again: its blocks are its live copy, not a stale one.
    if (sid !== undefined && this.moved.size > 0) this.moved.delete(sid);
    let g = this.lastGroup !== undefined && this.lastGroup.key === key ? this.lastGroup : this.groups.get(key);
    const fresh = g === undefined;
    if (g === undefined) {
      g = { key, ids: [], live: 0, sorted: true, maxDepth: 0, newest: now, rec: undefined };
      this.groups.set(key, g);
    }
    this.lastGroup = g;
    if (key === ANON) this.anon.set(id, now);
    else {
      if (block.depth > g.maxDepth) g.maxDepth = block.depth;
      g.ids.push(id);
      g.sorted = false;
    }
    if (now > g.newest) g.newest = now;
    g.live++;
    this.depthOf[id] = block.depth;
    this.owner[id] = g;
    this.owned++;
    // A group that appears between re-rankings joins the current ranking now; otherwise a session that
    // just went idle would not be a candidate before every already-ranked session had been drained.
    // (A chain is released tail first, so its first block already carries the group's depth.)
    if (fresh && this.order.size > 0) this.order.push(key, this.groupScore(g, now, this.horizonS()));
  }

  /** A block is no longer evictable. */
  remove(id: number): void {
    if (id >= this.depthOf.length) return;
    if (this.isDropped[id] === 1) {
      this.isDropped[id] = 0;
      this.droppedCount--;
      return;
    }
    const g = this.owner[id];
    if (g === undefined) return;
    this.owner[id] = undefined; // lazy: the id stays in g.ids and is skipped on pop
    if (g.key === ANON) this.anon.delete(id);
    this.owned--;
    if (--g.live === 0) { this.dropGroup(g.key); this.moved.delete(g.key); }
  }

  /** Evicts the block with the lowest expected benefit per byte. */
  evict(now: number): number | undefined {
    this.noteEviction(now);
    while (this.droppedStack.length > 0) {
      const id = this.droppedStack.pop()!;
      if (this.isDropped[id] === 1) { this.remove(id); return id; }
    }
    const key = this.victimGroup(now);
    if (key === undefined) return undefined;
    const g = this.groups.get(key)!;
    if (key === ANON) {
      const id = this.anon.oldest()!;
      this.remove(id);
      return id;
    }
    const owner = this.owner;
    const depth = this.depthOf;
    if (!g.sorted) {
      g.ids = g.ids.filter((id) => owner[id] === g);
      g.ids.sort((a, b) => depth[a] - depth[b]);
      g.sorted = true;
      g.maxDepth = g.ids.length > 0 ? depth[g.ids[g.ids.length - 1]] : 0;
    }
    while (g.ids.length > 0) {
      const id = g.ids.pop()!;
      if (owner[id] === g) {
        this.remove(id);
        const last = g.ids[g.ids.length - 1];
        if (last !== undefined && owner[last] === g) g.maxDepth = depth[last];
        return id;
      }
    }
    this.dropGroup(key);
    return this.evict(now);
  }

  /**
   * Makes the next eviction rank every session afresh, for a caller that changes a session's status
   * after its blocks became evictable (the engine hears of a tool call only once the server has parsed
   * the answer, after the blocks were released as an idle session's): until the next periodic
   * re-ranking (`rerankS`), the session would otherwise keep the score it was released with.
   */
  rerank(): void {
    this.rankedAt = -Infinity;
  }

  /**
   * Session `sessionId` continues on another worker that received its prefix: its blocks here are a
   * stale copy and rank below every other session's (reasoning blocks still go first).
   */
  sessionMoved(sessionId: string, now: number): void {
    const g = this.groups.get(sessionId);
    if (g === undefined) return;
    this.moved.add(sessionId);
    if (this.order.size > 0) this.order.push(sessionId, this.groupScore(g, now, this.horizonS()));
  }

  /** Expected benefit per byte of keeping session `key`'s deepest block, as of `now`. */
  score(key: string, now: number): number {
    const g = this.groups.get(key);
    return g === undefined ? 0 : this.groupScore(g, now, this.horizonS());
  }

  /**
   * What a block of session `sessionId` at chain depth `depth` would score if cached now: the same
   * benefit per byte its session's group would rank by (−1 for a session that moved away).
   */
  blockValue(sessionId: string, depth: number, now: number): number {
    if (this.moved.has(sessionId)) return -1;
    return (this.recompute(depth) * this.sessions.returnProbability(sessionId, now, this.horizonS())) / this.blockBytes;
  }

  /**
   * Evictable blocks that would go before a block worth `value`, up to `max`: reasoning blocks of
   * finished turns, then every block of a group ranked below it (a group goes whole, deepest first;
   * the session-less group is ranked by its oldest block, as eviction ranks it).
   */
  evictableBelow(value: number, now: number, max: number): number {
    let n = this.droppedCount;
    if (n >= max) return max;
    const horizon = this.horizonS();
    for (const g of this.groups.values()) {
      if (g.live > 0 && this.groupScore(g, now, horizon) < value && (n += g.live) >= max) return max;
    }
    return n;
  }

  private groupScore(g: Group, now: number, horizon: number): number {
    if (g.key === ANON) {
      // The victim would be the least recently released block: score it by its depth and release time.
      const oldest = this.anon.oldest()!;
      const p = this.sessions.anonymousReturnProbability(this.anon.get(oldest)!, now, horizon);
      return (this.recompute(this.depthOf[oldest]) * p) / this.blockBytes;
    }
    if (this.moved.has(g.key)) return -1;
    let rec = g.rec;
    if (rec === undefined || SessionTracker.isStale(rec)) rec = g.rec = this.sessions.handle(g.key);
    const p = this.sessions.returnProbabilityOf(rec, now, horizon);
    return (this.recompute(g.maxDepth) * p) / this.blockBytes;
  }

  /**
   * The session to evict from: walks the ranking from the last re-ranking, re-ranking every
   * `rerankS` seconds or when the ranking runs out (sessions that gained blocks since rank last).
   */
  private victimGroup(now: number): string | undefined {
    if (this.groups.size === 0) return undefined;
    for (let pass = 0; pass < 2; pass++) {
      if (pass === 1 || now - this.rankedAt >= this.rerankS || this.order.size === 0) {
        // Horizon depends only on the pool's size and eviction rate, fixed during a re-ranking.
        const horizon = this.horizonS();
        const keys: string[] = [];
        const scores: number[] = [];
        for (const g of this.groups.values()) { keys.push(g.key); scores.push(this.groupScore(g, now, horizon)); }
        this.order.reset(keys, scores);
        // (Not at a NaN time: the ranking would then never be refreshed by time again.)
        if (!Number.isNaN(now)) this.rankedAt = now;
      }
      for (let k = this.order.peek(); k !== undefined; this.order.pop(), k = this.order.peek()) {
        if (this.groups.has(k)) return k;
      }
    }
    return undefined;
  }

  private dropGroup(key: string): void {
    this.groups.delete(key);
    if (this.lastGroup?.key === key) this.lastGroup = undefined;
  }

  /**
   * Drops the stale entries of the dropped-block stack. A reasoning block reused by a prefix hit (a
   * client that sends its thinking back) and released again is pushed once more each turn, and stale
   * entries only go when evictions pop them: a pool that seldom fills would keep them all. Only an
   * id's topmost entry ever evicts it (every later push of the id sits above an older entry and is
   * popped first), so keeping just that entry of each still-dropped block evicts in the same order.
   */
  private compactDropped(): void {
    const stack = this.droppedStack;
    const kept = new Set<number>();
    let w = stack.length;
    for (let r = stack.length - 1; r >= 0; r--) {
      const id = stack[r];
      if (this.isDropped[id] === 1 && !kept.has(id)) { kept.add(id); stack[--w] = id; }
    }
    stack.splice(0, w);
  }

  /** Grows the per-block arrays to cover block `id`. */
  private growTo(id: number): void {
    const n = Math.max(id + 1, this.depthOf.length * 2);
    const depth = new Int32Array(n);
    depth.set(this.depthOf);
    this.depthOf = depth;
    const dropped = new Uint8Array(n);
    dropped.set(this.isDropped);
    this.isDropped = dropped;
    while (this.owner.length < n) this.owner.push(undefined);
  }

  /** Time a block would survive in this pool at the current eviction rate: size ÷ evictions per second. */
  private horizonS(): number {
    if (this.evictRate <= 0) return this.minHorizonS * 10;
    return Math.max(this.minHorizonS, this.size / this.evictRate);
  }

  private noteEviction(now: number): void {
    // A time that is not a number would make the rate, the horizon and so every score NaN for good.
    if (Number.isNaN(now)) return;
    if (this.lastEvictTime === -Infinity) { this.lastEvictTime = now; return; }
    const dt = now - this.lastEvictTime;
    if (dt <= 0) { this.evictRate += 1 / 10; return; }
    // Exponential decay over ~10 s: rate ≈ evictions in the last window ÷ window.
    this.evictRate = this.evictRate * Math.exp(-dt / 10) + 1 / 10;
    this.lastEvictTime = now;
  }
}
