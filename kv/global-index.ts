/**
 * Cluster-wide view of which worker holds which block on which tier, built only from KV events
 * (the way Dynamo's router builds its radix tree). Used by routers for overlap scores.
 * Worker ids are interned to small integers; each hash keeps its (worker, tier bits) holders, packed
 * as one number when a single worker holds it (most blocks: no array to allocate or chase), else a
 * short list in insertion order.
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

/** One holder `(worker index << 3) | tier bits`, or several in insertion order. */
type Holders = number | number[];

/** hash → holders, fed by {@link KvEvent}s. */
export class GlobalBlockIndex {
  private readonly holders = new BlockHashTable<Holders>();
  private readonly ids: string[] = [];
  private readonly idx = new Map<string, number>();
  // Scratch for overlaps(), reused across calls (sized to the interned worker count).
  private onDev = new Uint8Array(0);
  private dev = new Int32Array(0);
  private any = new Int32Array(0);
  private seen = new Int32Array(0);
  private readonly ws: number[] = [];
  private readonly found: Holders[] = [];
  private outDev = new Int32Array(0);
  private outAny = new Int32Array(0);

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

  /**
   * Forgets every block `workerId` holds (it left the cluster; a worker that comes back under the
   * same name starts empty). O(known hashes).
   */
  removeWorker(workerId: string): void {
    const w = this.idx.get(workerId);
    if (w === undefined) return;
    for (const h of this.holders.keyList()) this.set(h, w, 7, false);
  }

  /** Tiers (bitmask: device 1, host 2, remote 4) on which `workerId` holds `hash`. */
  tiersOf(hash: BlockHash, workerId: string): number {
    const w = this.idx.get(workerId);
    const list = this.holders.get(hash);
    if (w === undefined || list === undefined) return 0;
    if (typeof list === "number") return list >> 3 === w ? list & 7 : 0;
    for (const v of list) if (v >> 3 === w) return v & 7;
    return 0;
  }

  /**
   * Leading blocks of `hashes` each worker holds contiguously. Workers absent from the result hold
   * none. Cost is O(blocks × holders) with early exit once no worker still matches.
   */
  overlaps(hashes: readonly BlockHash[]): Map<string, WorkerOverlap> {
    const out = new Map<string, WorkerOverlap>();
    const ws = this.scan(hashes);
    for (const w of ws) out.set(this.ids[w], { device: this.dev[w], deviceOrHost: this.any[w] });
    return out;
  }

  /** Dense index of a worker in {@link overlapsBySlot} results (assigned on first use, stable). */
  workerSlot(workerId: string): number {
    return this.intern(workerId);
  }

  /**
   * {@link overlaps} without a Map: per worker slot ({@link workerSlot}) the device and
   * device-or-host overlap, 0 for workers holding none (covers slots assigned before the call). The
   * arrays are reused: valid until the next call.
   */
  overlapsBySlot(hashes: readonly BlockHash[]): { device: Int32Array; deviceOrHost: Int32Array } {
    const n = this.ids.length;
    if (this.outDev.length < n) { this.outDev = new Int32Array(n); this.outAny = new Int32Array(n); }
    const { outDev, outAny } = this;
    outDev.fill(0);
    outAny.fill(0);
    for (const w of this.scan(hashes)) { outDev[w] = this.dev[w]; outAny[w] = this.any[w]; }
    return { device: outDev, deviceOrHost: outAny };
  }

  /** Runs the overlap walk into the scratch arrays; returns the workers holding the first block. */
  private scan(hashes: readonly BlockHash[]): number[] {
    const ws = this.ws;
    ws.length = 0;
    // Every block's holders are looked up before the runs are extended: the lookups do not depend on
    // each other, so the CPU overlaps their cache misses (the table is far larger than the cache)
    // instead of waiting for one after another. The walk ends at the first block nobody holds.
    const found = this.found;
    found.length = 0;
    for (let b = 0; b < hashes.length; b++) {
      const list = this.holders.get(hashes[b]);
      if (list === undefined) break;
      found.push(list);
    }
    if (found.length === 0) return ws;
    const first = found[0];
    // Per worker (by interned index): still on a device run, last block on device, last on device-or-host.
    const n = this.ids.length;
    if (this.seen.length < n) this.scratch(n);
    const { onDev, dev, any, seen } = this;
    seen.fill(0, 0, n); // the other arrays are written for every worker in `ws` before being read
    if (typeof first === "number") {
      const w = first >> 3; ws.push(w); onDev[w] = first & 1; dev[w] = first & 1; any[w] = 1; seen[w] = 1;
    } else {
      for (const v of first) { const w = v >> 3; ws.push(w); onDev[w] = v & 1; dev[w] = v & 1; any[w] = 1; seen[w] = 1; }
    }
    let alive = ws.length;
    for (let b = 1; b < found.length && alive > 0; b++) {
      const list = found[b];
      // A worker extends its run only if it matched block b-1 (seen[w] === b) and holds block b.
      if (typeof list === "number") {
        alive = extend(list, b, onDev, dev, any, seen);
        continue;
      }
      alive = 0;
      for (let i = 0; i < list.length; i++) alive += extend(list[i], b, onDev, dev, any, seen);
    }
    return ws;
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
    const cur = this.holders.get(h);
    if (cur === undefined) {
      if (on) this.holders.set(h, (w << 3) | bit);
      return;
    }
    if (typeof cur === "number") {
      if (cur >> 3 !== w) {
        if (on) this.holders.set(h, [cur, (w << 3) | bit]);
        return;
      }
      const bits = on ? (cur & 7) | bit : (cur & 7) & ~bit;
      if (bits === 0) this.holders.delete(h);
      else if (bits !== (cur & 7)) this.holders.set(h, (w << 3) | bits);
      return;
    }
    const list = cur;
    for (let i = 0; i < list.length; i++) {
      if (list[i] >> 3 !== w) continue;
      const bits = on ? (list[i] & 7) | bit : (list[i] & 7) & ~bit;
      if (bits !== 0) list[i] = (w << 3) | bits;
      else {
        // Swap-remove keeps the order the list had before; one holder left goes back to a number.
        list[i] = list[list.length - 1];
        list.pop();
        if (list.length === 1) this.holders.set(h, list[0]);
      }
      return;
    }
    if (on) list.push((w << 3) | bit);
  }
}

/** Extends worker `v >> 3`'s run to block `b` if it matched block b-1 and holds b; 1 when it did. */
function extend(v: number, b: number, onDev: Uint8Array, dev: Int32Array, any: Int32Array, seen: Int32Array): number {
  const w = v >> 3;
  if (seen[w] !== b || (v & 3) === 0) return 0;
  seen[w] = b + 1;
  any[w] = b + 1;
  if (onDev[w] && (v & 1)) dev[w] = b + 1;
  else onDev[w] = 0;
  return 1;
}
