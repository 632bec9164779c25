/**
 * Adapts the pure `kv/` BlockPool to the scheduler's KvBlockManager seam (the pool speaks in
 * single-block commits with explicit parents; the scheduler commits runs of a block table).
 */
import type { BlockPool } from "../../kv/index.ts";
import type { KvBlockManager } from "./scheduler-kv.ts";
import type { SequenceHints } from "./sequence.ts";

/** A KvBlockManager backed by a kv/ BlockPool (prefix caching and retention included). */
export function poolBlockManager(pool: BlockPool): KvBlockManager {
  const bs = pool.blockSize;
  const meta = (h: SequenceHints) => (h.sessionId === undefined ? undefined : { sessionId: h.sessionId });
  return {
    blockSize: bs,
    totalBlocks: pool.numBlocks,
    numAvailable: () => pool.numFreeBlocks(),
    numUsed: () => pool.numUsedBlocks(),
    acquirePrefix: (tokens) => pool.matchPrefix(tokens).blockIds,
    cachedPrefixTokens: (tokens) => pool.cachedPrefixTokens(tokens),
    allocate: (n) => pool.tryAllocate(n),
    commit(tokens, blockIds, from, to, hints) {
      for (let b = from; b < to; b++) {
        pool.commitBlock(blockIds[b], b > 0 ? blockIds[b - 1] : null, tokens.slice(b * bs, (b + 1) * bs), meta(hints));
      }
    },
    release: (ids) => pool.release(ids),
  };
}
