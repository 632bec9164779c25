/**
 * Agent-aware retention: evict by expected benefit per byte, not by recency.
 * benefit(block) = recompute seconds saved × P(its session returns before the block would be evicted).
 * Reasoning blocks of a finished turn are worth nothing (agents drop them from the next turn) and go
 * first. Within a session, the deepest block goes first, since a prefix is only useful contiguously.
 */
import type { EvictableBlock, RetentionPolicy } from "./retention.ts";
import type { SessionTracker } from "./session-tracker.ts";

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
  ids: number[];
  depth: Map<number, number>;
  sorted: boolean;
  /** Upper bound on the depth of its blocks (exact after each sort). */
  maxDepth: number;
  /** Latest time one of its blocks became evictable. */
  newest: number;
}

const ANON = "";

/** Retention by expected benefit per byte, using a shared {@link SessionTracker}. */
export class AgentAwarePolicy implements RetentionPolicy {
  private readonly groups = new Map<string, Group>();
  private readonly owner = new Map<number, string>();
  private readonly dropped = new Map<number, true>();
  private readonly droppedStack: number[] = [];
  private readonly recompute: (depth: number) => number;
  private readonly blockBytes: number;
  private readonly minHorizonS: number;
  private evictRate = 0;
  private lastEvictTime = -Infinity;
  private readonly rerankS: number;
  // Session keys ranked by score at the last re-ranking, lowest first; `next` walks it.
  private order: string[] = [];
  private next = 0;
  private rankedAt = -Infinity;

  /** Creates the policy over the given session knowledge. */
  constructor(private readonly sessions: SessionTracker, opts: AgentAwareOptions = {}) {
    this.recompute = opts.recomputeSeconds ?? ((d) => 1 + d / 64);
    this.blockBytes = opts.blockBytes ?? 1;
    this.minHorizonS = opts.minHorizonS ?? 30;
    this.rerankS = opts.rerankS ?? 2;
  }

  /** Number of evictable blocks tracked. */
  get size(): number {
    return this.owner.size + this.dropped.size;
  }

  /** A cached block became evictable. */
  add(block: EvictableBlock, now: number): void {
    this.remove(block.id);
    const sid = block.meta.sessionId;
    if (block.meta.type === "reasoning" && sid !== undefined && this.sessions.status(sid) !== "running") {
      this.dropped.set(block.id, true);
      this.droppedStack.push(block.id);
      return;
    }
    const key = sid ?? ANON;
    let g = this.groups.get(key);
    if (g === undefined) {
      g = { ids: [], depth: new Map(), sorted: true, maxDepth: 0, newest: now };
      this.groups.set(key, g);
    }
    if (block.depth > g.maxDepth) g.maxDepth = block.depth;
    if (now > g.newest) g.newest = now;
    g.ids.push(block.id);
    g.depth.set(block.id, block.depth);
    g.sorted = false;
    this.owner.set(block.id, key);
  }

  /** A block is no longer evictable. */
  remove(id: number): void {
    if (this.dropped.delete(id)) return;
    const key = this.owner.get(id);
    if (key === undefined) return;
    this.owner.delete(id);
    const g = this.groups.get(key)!;
    g.depth.delete(id); // lazy: the id stays in g.ids and is skipped on pop
    if (g.depth.size === 0) this.groups.delete(key);
  }

  /** Evicts the block with the lowest expected benefit per byte. */
  evict(now: number): number | undefined {
    this.noteEviction(now);
    while (this.droppedStack.length > 0) {
      const id = this.droppedStack.pop()!;
      if (this.dropped.has(id)) { this.remove(id); return id; }
    }
    const key = this.victimGroup(now);
    if (key === undefined) return undefined;
    const g = this.groups.get(key)!;
    if (!g.sorted) {
      g.ids = g.ids.filter((id) => g.depth.has(id));
      g.ids.sort((a, b) => g.depth.get(a)! - g.depth.get(b)!);
      g.sorted = true;
      g.maxDepth = g.ids.length > 0 ? g.depth.get(g.ids[g.ids.length - 1])! : 0;
    }
    while (g.ids.length > 0) {
      const id = g.ids.pop()!;
      if (g.depth.has(id)) {
        this.remove(id);
        const last = g.ids[g.ids.length - 1];
        if (last !== undefined) g.maxDepth = g.depth.get(last) ?? g.maxDepth;
        return id;
      }
    }
    this.groups.delete(key);
    return this.evict(now);
  }

  /** Expected benefit per byte of keeping session `key`'s deepest block, as of `now`. */
  score(key: string, now: number): number {
    const g = this.groups.get(key);
    if (g === undefined) return 0;
    const horizon = this.horizonS();
    const p = key === ANON
      ? Math.exp(-(now - g.newest) / horizon)
      : this.sessions.returnProbability(key, now, horizon);
    return (this.recompute(g.maxDepth) * p) / this.blockBytes;
  }

  /**
   * The session to evict from: walks the ranking from the last re-ranking, re-ranking every
   * `rerankS` seconds or when the ranking runs out (sessions that gained blocks since rank last).
   */
  private victimGroup(now: number): string | undefined {
    if (this.groups.size === 0) return undefined;
    for (let pass = 0; pass < 2; pass++) {
      if (pass === 1 || now - this.rankedAt >= this.rerankS || this.next >= this.order.length) {
        const scored = [...this.groups.keys()].map((k) => [k, this.score(k, now)] as const);
        scored.sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1));
        this.order = scored.map((x) => x[0]);
        this.next = 0;
        this.rankedAt = now;
      }
      while (this.next < this.order.length) {
        const k = this.order[this.next];
        if (this.groups.has(k)) return k;
        this.next++;
      }
    }
    return undefined;
  }

  /** Time a block would survive in this pool at the current eviction rate: size ÷ evictions per second. */
  private horizonS(): number {
    if (this.evictRate <= 0) return this.minHorizonS * 10;
    return Math.max(this.minHorizonS, this.size / this.evictRate);
  }

  private noteEviction(now: number): void {
    if (this.lastEvictTime === -Infinity) { this.lastEvictTime = now; return; }
    const dt = now - this.lastEvictTime;
    if (dt <= 0) { this.evictRate += 1 / 10; return; }
    // Exponential decay over ~10 s: rate ≈ evictions in the last window ÷ window.
    this.evictRate = this.evictRate * Math.exp(-dt / 10) + 1 / 10;
    this.lastEvictTime = now;
  }
}
