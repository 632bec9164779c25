/**
 * Moving a cached prefix between workers: the KV of the full blocks one worker holds for some tokens
 * is read to the host, then written into another worker's pool and registered in its prefix cache,
 * so the next request there with those tokens starts from a prefix hit instead of recomputing them.
 * A prefill worker hands its prompt to a decode worker this way, and a busy holder of a session's KV
 * hands it to a peer (planner/routers.ts decides when).
 */
import type { BlockMeta, BlockPool } from "../../kv/index.ts";
import type { StepRunner } from "./engine-runner.ts";
import { type HandoffTails, tailBlockIndex } from "./handoff-tails.ts";
import { concatKv, headOfKv, type HostKv } from "./kv-copy.ts";
import type { HostState } from "./state-copy.ts";

/** A cached prefix's KV on the host, on its way to another worker (or back from host memory). */
export interface PrefixKv {
  /** The tokens of the prefix: whole blocks only, unless `tail`. */
  tokens: number[];
  blockSize: number;
  /** KV of blocks `firstBlock` onwards (the receiver must already hold the blocks before); whole blocks. */
  kv: HostKv;
  /** First block `kv` covers (default 0: all of them). */
  firstBlock?: number;
  /**
   * `tokens` is a whole prompt handed off after its prefill, and `kv`'s last block is the block it
   * ended in (full or not; slots past the prompt's end are unused): the receiver holds that block for
   * the request with exactly this prompt (handoff-tails.ts) instead of caching it.
   */
  tail?: boolean;
  /** The cache namespace its blocks chain from (SequenceHints.cacheRoot); absent: none. */
  root?: number;
  /**
   * A model with recurrent state: the state after the first `tokens` tokens (whole blocks), from the
   * sender's longest state checkpoint within the prefix (state-checkpoints.ts); without it the
   * receiver's hit on these blocks reaches only as far as a checkpoint of its own.
   */
  state?: { tokens: number; values: HostState };
}

/** Thrown when a prefix cannot move: a runner without block copies, or mismatched block sizes. */
export class PrefixTransferError extends Error {
  override name = "PrefixTransferError";
}

/** A host-memory tier that can continue a device prefix (kv-offload.ts `HostKvOffload`). */
export interface HostContinuation {
  continuation(tokens: readonly number[], fromBlock: number, root?: number): { kv: HostKv | null };
}

/**
 * Reads the KV of the longest cached run of full blocks that prefixes `tokens` (at most `maxBlocks`):
 * the device blocks, then what `host` holds after them (a holder sends what it offloaded too); null
 * when neither holds any. The device blocks are only held while their copy is enqueued.
 */
export async function exportPrefix(
  pool: BlockPool, runner: StepRunner, tokens: readonly number[], maxBlocks = Infinity, host?: HostContinuation, root?: number,
): Promise<PrefixKv | null> {
  if (!runner.readBlocks) throw new PrefixTransferError("This worker cannot read KV blocks out of its cache");
  const bs = pool.blockSize;
  const m = pool.matchPrefix(tokens, maxBlocks, root ?? null);
  let read: Promise<HostKv> | undefined;
  try {
    if (m.blockIds.length > 0) read = runner.readBlocks(m.blockIds);
  } finally {
    pool.release(m.blockIds);
  }
  const onDevice = m.blockIds.length;
  let more = onDevice < maxBlocks && host !== undefined ? host.continuation(tokens, onDevice, root).kv : null;
  if (more !== null && more.numTokens > (maxBlocks - onDevice) * bs) more = headOfKv(more, (maxBlocks - onDevice) * bs);
  const parts = [...(read === undefined ? [] : [await read]), ...(more === null ? [] : [more])];
  if (parts.length === 0) return null;
  const kv = parts.length === 1 ? parts[0] : concatKv(parts);
  return { tokens: tokens.slice(0, kv.numTokens), blockSize: bs, kv, ...(root === undefined ? {} : { root }) };
}

/**
 * The KV of a prompt this worker just prefilled, for the worker that decodes it: the cached full
 * blocks before the block the prompt ended in, then that block, held for it since the prefill ended
 * (`tail`). Without that block, or with the run before it no longer all cached, what exportPrefix
 * gives (the receiver then computes the rest again).
 */
export async function exportHandoff(
  pool: BlockPool, runner: StepRunner, prompt: readonly number[], tails: HandoffTails, host?: HostContinuation, root?: number,
): Promise<PrefixKv | null> {
  if (!runner.readBlocks) throw new PrefixTransferError("This worker cannot read KV blocks out of its cache");
  const bs = pool.blockSize;
  const before = tailBlockIndex(prompt.length, bs);
  const tail = tails.take(prompt, root);
  if (tail === null) return exportPrefix(pool, runner, prompt, Infinity, host, root);
  let read: Promise<HostKv> | undefined;
  try {
    const m = pool.matchPrefix(prompt, before, root ?? null);
    try {
      if (m.blockIds.length === before) read = runner.readBlocks([...m.blockIds, tail]);
    } finally {
      pool.release(m.blockIds);
    }
  } finally {
    pool.release([tail]);
  }
  if (read === undefined) return exportPrefix(pool, runner, prompt, Infinity, host, root);
  return { tokens: [...prompt], blockSize: bs, kv: await read, tail: true, ...(root === undefined ? {} : { root }) };
}

/**
 * Writes `prefix` into `pool` as cached, evictable blocks (ranked as `meta`'s session), keeping the
 * leading blocks it already holds. Stops early after `maxBlocks`, where the pool has no free or
 * evictable block left, or where a block cannot be indexed. A hand-off's last block (`prefix.tail`)
 * goes to `tails` when every block before it is cached here (else it is dropped: the decode computes
 * it again). Returns how many blocks it wrote.
 */
export function importPrefix(
  pool: BlockPool, runner: StepRunner, prefix: PrefixKv, meta?: BlockMeta, maxBlocks = Infinity, tails?: HandoffTails,
): number {
  const bs = pool.blockSize;
  if (prefix.blockSize !== bs) throw new PrefixTransferError(`The prefix has blocks of ${prefix.blockSize} tokens; this worker's hold ${bs}`);
  if (prefix.tail) return importHandoff(pool, runner, prefix, meta, maxBlocks, tails);
  if (prefix.tokens.length % bs !== 0) throw new PrefixTransferError(`The prefix covers ${prefix.tokens.length} tokens, not whole blocks of ${bs}`);
  if (!runner.writeBlocks) throw new PrefixTransferError("This worker cannot write KV blocks into its cache");
  const first = prefix.firstBlock ?? 0;
  // Checked before a block is taken: a short copy (a peer's bad message) would fail mid-write.
  const blocks = prefix.tokens.length / bs;
  if (!Number.isInteger(first) || first < 0 || prefix.kv.numTokens < (blocks - first) * bs) {
    throw new PrefixTransferError(`A prefix of ${prefix.tokens.length} tokens from block ${first} needs KV of at least ${(blocks - first) * bs} tokens, got ${prefix.kv.numTokens}`);
  }
  const root = prefix.root ?? null;
  const have = pool.matchPrefix(prefix.tokens, Infinity, root);
  const held = have.blockIds.length;
  // Blocks before `first` must be here already: the moved KV continues them.
  const count = held < first ? 0 : Math.min(blocks - held, pool.numFreeBlocks(), maxBlocks);
  const fresh = count > 0 ? pool.tryAllocate(count) ?? [] : [];
  let written = 0;
  try {
    if (fresh.length > 0) {
      runner.writeBlocks(fresh, prefix.kv, held - first);
      let parent = held > 0 ? have.blockIds[held - 1] : null;
      for (const id of fresh) {
        const b = held + written;
        if (pool.commitBlock(id, parent, prefix.tokens.slice(b * bs, (b + 1) * bs), meta, root) === null) break;
        parent = id;
        written++;
      }
    }
  } finally {
    // Also when the write fails: the blocks taken for it, and the references on the held prefix, go back.
    pool.release([...have.blockIds, ...fresh], meta?.sessionId === undefined ? undefined : { sessionId: meta.sessionId });
  }
  return written;
}

/** `importPrefix` of a hand-off: the full blocks before the prompt's last block, then that block. */
function importHandoff(pool: BlockPool, runner: StepRunner, prefix: PrefixKv, meta: BlockMeta | undefined, maxBlocks: number, tails?: HandoffTails): number {
  const bs = pool.blockSize;
  const before = tailBlockIndex(prefix.tokens.length, bs);
  const first = prefix.firstBlock ?? 0;
  if (!runner.writeBlocks) throw new PrefixTransferError("This worker cannot write KV blocks into its cache");
  if (prefix.tokens.length === 0 || prefix.kv.numTokens !== (before + 1 - first) * bs) {
    throw new PrefixTransferError(`A hand-off of ${prefix.tokens.length} tokens from block ${first} needs KV of ${(before + 1 - first) * bs} tokens, got ${prefix.kv.numTokens}`);
  }
  const head = before > first ? importPrefix(pool, runner, { ...prefix, tokens: prefix.tokens.slice(0, before * bs), tail: false }, meta, maxBlocks) : 0;
  if (tails === undefined || head >= maxBlocks || pool.cachedPrefixTokens(prefix.tokens.slice(0, before * bs), Infinity, prefix.root ?? null) < before * bs) return head;
  const got = pool.tryAllocate(1);
  if (got === null) return head;
  try {
    runner.writeBlocks!(got, prefix.kv, before - first);
  } catch (e) {
    pool.release(got);
    throw e;
  }
  tails.keep(prefix.tokens, got[0], prefix.root);
  return head + 1;
}
