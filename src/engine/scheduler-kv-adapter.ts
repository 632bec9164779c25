/**
 * Adapts the pure `kv/` BlockPool to the scheduler's KvBlockManager seam (the pool speaks in
 * single-block commits with explicit parents; the scheduler commits runs of a block table).
 * Block metas carry the sequence's session and mark blocks holding generated tokens as "output", or
 * as "reasoning" when one of those tokens is reasoning (what session inference looks for,
 * engine-sessions.ts `inferSessionId`; what agent-aware retention evicts first, kv/agent-retention.ts).
 */
import type { BlockMeta, BlockPool, KvEvent, KvEventSink } from "../../kv/index.ts";
import type { HandoffTails } from "./handoff-tails.ts";
import type { KvBlockManager } from "./scheduler-kv.ts";
import type { SequenceHints } from "./sequence.ts";

/** The type of a block holding generated tokens. */
type GeneratedType = "output" | "reasoning";

const SESSIONLESS: Readonly<Record<GeneratedType, BlockMeta>> = { output: Object.freeze({ type: "output" }), reasoning: Object.freeze({ type: "reasoning" }) };

/** The meta of a committed block: its session, and its type when it holds a generated token. */
function blockMeta(h: SequenceHints, type: GeneratedType | undefined): BlockMeta | undefined {
  if (h.sessionId === undefined) return type && SESSIONLESS[type];
  return type ? { sessionId: h.sessionId, type } : { sessionId: h.sessionId };
}

/**
 * A KvBlockManager backed by a kv/ BlockPool (prefix caching and retention included). `cacheVersion`,
 * when given, must change with every change to the pool's prefix index (see {@link countKvEvents}).
 * With `tails`, prefills keep the block their prompt ended in and handed-off prompts find theirs there.
 */
export function poolBlockManager(pool: BlockPool, cacheVersion?: () => number, tails?: HandoffTails): KvBlockManager {
  const bs = pool.blockSize;
  // A held hand-off block changes what a waiting prompt leaves to compute, as a cache change does.
  const version = cacheVersion && tails ? () => cacheVersion() + tails.version : cacheVersion;
  return {
    ...(version ? { cacheVersion: version } : {}),
    ...(tails
      ? {
        keepHandoffTail: (prompt: readonly number[], id: number, root?: number) => tails.keep(prompt, id, root),
        takeHandoffTail: (prompt: readonly number[], root?: number) => tails.take(prompt, root),
        hasHandoffTail: (prompt: readonly number[], root?: number) => tails.has(prompt, root),
        releaseHandoffTails: () => {
          const held = tails.size > 0;
          tails.clear();
          return held;
        },
        pruneHandoffTails: () => tails.prune(),
      }
      : {}),
    blockSize: bs,
    totalBlocks: pool.numBlocks,
    // A hand-off block held past its TTL goes back before blocks are handed out (and at every step the
    // scheduler plans: pruneHandoffTails): a busy engine never sleeps (where an idle one lets such
    // blocks go), and would otherwise hold it (and preempt for want of it) for as long as it stays busy.
    // numUsed only reads: a metrics scrape must not change the pool.
    numAvailable: () => {
      tails?.prune();
      return pool.numFreeBlocks();
    },
    numUsed: () => pool.numUsedBlocks(),
    acquirePrefix: (tokens, hints) => pool.matchPrefix(tokens, Infinity, hints.cacheRoot ?? null).blockIds,
    cachedPrefixTokens: (tokens, root) => pool.cachedPrefixTokens(tokens, Infinity, root ?? null),
    allocate: (n) => {
      tails?.prune();
      return pool.tryAllocate(n);
    },
    commit(tokens, blockIds, from, to, hints, promptLength, reasoning) {
      for (let b = from; b < to; b++) {
        // Block b holds positions b·bs … (b+1)·bs − 1: an output block when the last is generated, a
        // reasoning block when any generated one is reasoning (its hash then covers reasoning text,
        // which the next turn's prompt leaves out).
        const output = (b + 1) * bs > promptLength;
        const meta = blockMeta(hints, !output ? undefined : reasoning?.overlaps(b * bs, (b + 1) * bs) ? "reasoning" : "output");
        pool.commitBlock(blockIds[b], b > 0 ? blockIds[b - 1] : null, tokens.slice(b * bs, (b + 1) * bs), meta, hints.cacheRoot ?? null);
      }
    },
    // The last sequence to let go of a shared block owns it from then on (as in the simulator), so a
    // prefix many sessions use is priced by its latest user, not by whoever computed it first.
    release: (ids, hints) => pool.release(ids, hints?.sessionId === undefined ? undefined : { sessionId: hints.sessionId }),
  };
}

/**
 * A pool's KV event sink that counts the events before passing them on: a version of its prefix
 * index for `poolBlockManager`. Every change to the index publishes one (a commit "stored", an
 * eviction "removed"; the router's view of the worker depends on that too), and events that change
 * nothing here (the host tier's) only make the count move more often than needed.
 */
export function countKvEvents(next?: KvEventSink): { sink: KvEventSink; count: () => number } {
  let n = 0;
  return {
    sink: (e: KvEvent) => {
      n++;
      next?.(e);
    },
    count: () => n,
  };
}

/**
 * `manager` without prefix hits: nothing cached is offered to a new sequence, so every prompt computes
 * from position 0 (a Gated DeltaNet model's state after a prefix is not kept with its blocks).
 * Blocks are still committed, so sessions and metrics see them as before.
 */
export function withoutPrefixHits(manager: KvBlockManager): KvBlockManager {
  return { ...manager, acquirePrefix: () => [], cachedPrefixTokens: () => 0 };
}

/** `manager` holding no hand-off tails (a prompt's last block kept for a decode worker's admission). */
export function withoutHandoffTails(manager: KvBlockManager): KvBlockManager {
  const { keepHandoffTail: _keep, takeHandoffTail: _take, hasHandoffTail: _has, releaseHandoffTails: _release, pruneHandoffTails: _prune, ...rest } = manager;
  return rest;
}
