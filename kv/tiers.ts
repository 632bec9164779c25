/**
 * Lower KV tiers (host memory, remote store) as content-addressed caches of blocks evicted from
 * the device. A tier entry keeps the block's tokens and parent hash, so a walk continuing a device
 * prefix match verifies both before treating a block as present.
 */
import { LruList } from "./lru-list.ts";
import type { BlockHash, BlockMeta, KvEventSink, Tier } from "./types.ts";

/** One block held by a lower tier. */
export interface TierEntry {
  parentHash: BlockHash | null;
  tokens: number[];
  meta: BlockMeta;
}

/** Capacity and link of a tier, as seen from the device. */
export interface TierSpec {
  tier: Exclude<Tier, "device">;
  capacityBlocks: number;
  /** Bytes per second between this tier and the device (e.g. NVLink-C2C, PCIe, RDMA). */
  bandwidthBytesPerS: number;
  /** Fixed latency per transfer (s). */
  latencyS: number;
}

function sameTokens(a: number[], b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** An LRU content-addressed block cache for one lower tier of one worker. */
export class TierCache {
  private readonly entries = LruList.forBlockHashes<TierEntry>();
  private lower: TierCache | undefined;

  /** Creates an empty tier; events (moved / removed) go to `events` tagged with `workerId`. */
  constructor(readonly spec: TierSpec, private readonly workerId: string, private readonly events?: KvEventSink) {}

  /** Blocks held. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Entries this tier drops when full go to `lower` (e.g. host memory spilling into a shared remote
   * store) instead of being lost.
   */
  spillTo(lower: TierCache | undefined): void {
    this.lower = lower;
  }

  /**
   * Stores a block offloaded from the tier above (`from`, the device by default); the least recently
   * used entries past capacity move down to the lower tier, if any, or are dropped.
   */
  offload(hash: BlockHash, entry: TierEntry, now: number, from: Tier = "device"): void {
    if (this.spec.capacityBlocks <= 0) return;
    this.entries.set(hash, entry);
    const dropped: BlockHash[] = [];
    while (this.entries.size > this.spec.capacityBlocks) {
      const old = this.entries.oldest()!;
      const e = this.entries.get(old)!;
      this.entries.shift();
      dropped.push(old);
      this.lower?.offload(old, e, now, this.spec.tier);
    }
    this.events?.({ kind: "moved", workerId: this.workerId, from, to: this.spec.tier, time: now, hashes: [hash] });
    if (dropped.length > 0) this.events?.({ kind: "removed", workerId: this.workerId, tier: this.spec.tier, time: now, hashes: dropped });
  }

  /**
   * Continues a prefix match below the device: starting after `parentHash`, counts how many of the
   * given blocks (hash + tokens) this tier holds contiguously, verifying tokens and parent links.
   * Matched entries become the most recently used unless `touch` is false (a probe that uses nothing).
   */
  matchContinuation(parentHash: BlockHash | null, hashes: readonly BlockHash[], blockTokens: (i: number) => ArrayLike<number>, touch = true): number {
    let parent = parentHash;
    let n = 0;
    for (let i = 0; i < hashes.length; i++) {
      const e = this.entries.get(hashes[i]);
      if (e === undefined || e.parentHash !== parent || !sameTokens(e.tokens, blockTokens(i))) break;
      if (touch) this.entries.set(hashes[i], e); // most recently used
      parent = hashes[i];
      n++;
    }
    return n;
  }

  /** Seconds to move `blocks` blocks of `blockBytes` each between this tier and the device. */
  transferSeconds(blocks: number, blockBytes: number): number {
    return blocks === 0 ? 0 : this.spec.latencyS + (blocks * blockBytes) / this.spec.bandwidthBytesPerS;
  }
}

/**
 * When to start prefetching a waiting session's blocks back to the device so they land before its
 * predicted return: predicted return − transfer time − a safety margin (never before now; now when
 * that is not a number, e.g. an unknown return time, so a caller never schedules at NaN).
 */
export function prefetchStartTime(predictedReturn: number, transferS: number, now: number, marginS = 0.5): number {
  const start = predictedReturn - transferS - marginS;
  return start > now ? start : now;
}
