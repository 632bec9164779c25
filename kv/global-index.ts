/**
 * Cluster-wide view of which worker holds which block on which tier, built only from KV events
 * (the way Dynamo's router builds its radix tree). Used by routers for overlap scores.
 * Worker ids are interned to small integers; each hash keeps a short list of (worker, tier bits).
 */
import { BlockHashTable } from "./hash-table.ts";
import type { BlockHash, KvEvent, Tier } from "./types.ts";

const TIER_BIT: Record<Tier, number> = { device: 1, host: 2, remote: 4 };

/** Per-worker contiguous prefix overlap, in blocks. */
export interface WorkerOverlap {
  device: number;
  /** Blocks available on device or host (device prefix then host continuation). */
  deviceOrHost: number;
}

/** hash → [(worker index << 3) | tier bits, ...], fed by {@link KvEvent}s. */
export class GlobalBlockIndex {
  private readonly holders = new BlockHashTable<number[]>();
  private readonly ids: string[] = [];
  private readonly idx = new Map<string, number>();
  // Scratch for overlaps(), reused across calls (sized to the interned worker count).
  private onDev = new Uint8Array(0);
  private dev = new Int32Array(0);
  private any = new Int32Array(0);
  private seen = new Int32Array(0);

  /** Number of distinct hashes known. */
  get size(): number {
    return this.holders.size;
  }

  /** Applies one KV event. */
  apply(e: KvEvent): void {
    const w = this.intern(e.workerId);
    if (e.kind === "stored") for (const h of e.hashes) this.set(h, w, TIER_BIT[e.tier], true);
    else if (e.kind === "removed") for (const h of e.hashes) this.set(h, w, TIER_BIT[e.tier], false);
    else for (const h of e.hashes) this.set(h, w, TIER_BIT[e.to], true);
  }

  /** Tiers (bitmask: device 1, host 2, remote 4) on which `workerId` holds `hash`. */
  tiersOf(hash: BlockHash, workerId: string): number {
    const w = this.idx.get(workerId);
    const list = this.holders.get(hash);
    if (w === undefined || list === undefined) return 0;
    for (const v of list) if (v >> 3 === w) return v & 7;
    return 0;
  }

  /**
   * Leading blocks of `hashes` each worker holds contiguously. Workers absent from the result hold
   * none. Cost is O(blocks × holders) with early exit once no worker still matches.
   */
  overlaps(hashes: readonly BlockHash[]): Map<string, WorkerOverlap> {
    const out = new Map<string, WorkerOverlap>();
    const first = hashes.length === 0 ? undefined : this.holders.get(hashes[0]);
    if (first === undefined) return out;
    // Per worker (by interned index): still on a device run, last block on device, last on device-or-host.
    const n = this.ids.length;
    if (this.seen.length < n) this.scratch(n);
    const { onDev, dev, any, seen } = this;
    seen.fill(0, 0, n); // the other arrays are written for every worker in `ws` before being read
    const ws: number[] = [];
    for (const v of first) { const w = v >> 3; ws.push(w); onDev[w] = v & 1; dev[w] = v & 1; any[w] = 1; seen[w] = 1; }
    let alive = ws.length;
    for (let b = 1; b < hashes.length && alive > 0; b++) {
      const list = this.holders.get(hashes[b]);
      if (list === undefined) break;
      // A worker extends its run only if it matched block b-1 (seen[w] === b) and holds block b.
      alive = 0;
      for (let i = 0; i < list.length; i++) {
        const v = list[i];
        const w = v >> 3;
        if (seen[w] !== b || (v & 3) === 0) continue;
        seen[w] = b + 1;
        alive++;
        any[w] = b + 1;
        if (onDev[w] && (v & 1)) dev[w] = b + 1;
        else onDev[w] = 0;
      }
    }
    for (const w of ws) out.set(this.ids[w], { device: dev[w], deviceOrHost: any[w] });
    return out;
  }

  private scratch(n: number): void {
    this.onDev = new Uint8Array(n);
    this.dev = new Int32Array(n);
    this.any = new Int32Array(n);
    this.seen = new Int32Array(n);
  }

  private intern(id: string): number {
    let w = this.idx.get(id);
    if (w === undefined) {
      w = this.ids.length;
      this.ids.push(id);
      this.idx.set(id, w);
    }
    return w;
  }

  private set(h: BlockHash, w: number, bit: number, on: boolean): void {
    let list = this.holders.get(h);
    if (list === undefined) {
      if (!on) return;
      list = [];
      this.holders.set(h, list);
    }
    for (let i = 0; i < list.length; i++) {
      if (list[i] >> 3 !== w) continue;
      const bits = on ? (list[i] & 7) | bit : (list[i] & 7) & ~bit;
      if (bits !== 0) list[i] = (w << 3) | bits;
      else {
        list[i] = list[list.length - 1];
        list.pop();
        if (list.length === 0) this.holders.delete(h);
      }
      return;
    }
    if (on) list.push((w << 3) | bit);
  }
}
