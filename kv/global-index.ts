/**
 * Cluster-wide view of which worker holds which block on which tier, built only from KV events
 * (the way Dynamo's router builds its radix tree). Used by routers for overlap scores.
 */
import type { BlockHash, KvEvent, Tier } from "./types.ts";

const TIER_BIT: Record<Tier, number> = { device: 1, host: 2, remote: 4 };

/** Per-worker contiguous prefix overlap, in blocks. */
export interface WorkerOverlap {
  device: number;
  /** Blocks available on device or host (device prefix then host continuation). */
  deviceOrHost: number;
}

/** hash → (worker → tier bitmask), fed by {@link KvEvent}s. */
export class GlobalBlockIndex {
  private readonly holders = new Map<BlockHash, Map<string, number>>();

  /** Number of distinct hashes known. */
  get size(): number {
    return this.holders.size;
  }

  /** Applies one KV event. */
  apply(e: KvEvent): void {
    if (e.kind === "stored") for (const h of e.hashes) this.set(h, e.workerId, TIER_BIT[e.tier], true);
    else if (e.kind === "removed") for (const h of e.hashes) this.set(h, e.workerId, TIER_BIT[e.tier], false);
    else for (const h of e.hashes) this.set(h, e.workerId, TIER_BIT[e.to], true);
  }

  /** Tiers (bitmask: device 1, host 2, remote 4) on which `workerId` holds `hash`. */
  tiersOf(hash: BlockHash, workerId: string): number {
    return this.holders.get(hash)?.get(workerId) ?? 0;
  }

  /**
   * Leading blocks of `hashes` each worker holds contiguously. Workers absent from the result hold
   * none. Cost is O(blocks × holders) with early exit once no worker still matches.
   */
  overlaps(hashes: readonly BlockHash[]): Map<string, WorkerOverlap> {
    const out = new Map<string, WorkerOverlap>();
    const first = this.holders.get(hashes[0]);
    if (hashes.length === 0 || first === undefined) return out;
    const alive = new Map<string, boolean>(); // worker → still matching on device
    for (const [w, bits] of first) {
      out.set(w, { device: bits & 1 ? 1 : 0, deviceOrHost: 1 });
      alive.set(w, (bits & 1) !== 0);
    }
    for (let i = 1; i < hashes.length && alive.size > 0; i++) {
      const m = this.holders.get(hashes[i]);
      for (const [w, onDevice] of alive) {
        const bits = m?.get(w) ?? 0;
        if ((bits & 3) === 0) { alive.delete(w); continue; }
        const o = out.get(w)!;
        o.deviceOrHost = i + 1;
        if (onDevice && (bits & 1)) o.device = i + 1;
        else alive.set(w, false);
      }
    }
    return out;
  }

  private set(h: BlockHash, worker: string, bit: number, on: boolean): void {
    let m = this.holders.get(h);
    if (m === undefined) {
      if (!on) return;
      m = new Map();
      this.holders.set(h, m);
    }
    const bits = on ? (m.get(worker) ?? 0) | bit : (m.get(worker) ?? 0) & ~bit;
    if (bits === 0) {
      m.delete(worker);
      if (m.size === 0) this.holders.delete(h);
    } else m.set(worker, bits);
  }
}
