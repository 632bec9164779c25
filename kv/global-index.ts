/**
 * Cluster-wide view of which worker holds which block on which tier, built only from KV events
 * (the way Dynamo's router builds its radix tree). Used by routers for overlap scores.
 * Worker ids are interned to small integers; each hash keeps its holders `(worker index << 3) | tier
 * bits` in insertion order, one or two of them (most blocks) beside the hash itself (kv/holder-table.ts).
 */
import { HolderTable, NO_SLOT } from "./holder-table.ts";
import type { BlockHash, KvEvent, Tier } from "./types.ts";

const TIER_BIT: Record<Tier, number> = { device: 1, host: 2, remote: 4 };

/** Per-worker contiguous prefix overlap, in blocks. */
export interface WorkerOverlap {
  device: number;
  /** Blocks available on device or host (device prefix then host continuation). */
  deviceOrHost: number;
}

/** hash → holders, fed by {@link KvEvent}s. */
export class GlobalBlockIndex {
  private readonly holders = new HolderTable();
  private readonly ids: string[] = [];
  private readonly idx = new Map<string, number>();
  // Slots of workers that left, given to the next new worker: a long-lived cluster whose workers
  // come and go under fresh names (pods, hosts) would otherwise grow ids and every scan's scratch.
  private readonly freeSlots: number[] = [];
  // Scratch for overlaps(), reused across calls (sized to the interned worker count).
  private onDev = new Uint8Array(0);
  private dev = new Int32Array(0);
  private any = new Int32Array(0);
  private seen = new Int32Array(0);
  private readonly ws: number[] = [];
  private found = new Int32Array(64); // scan()'s holder-table slots, block by block
  private outDev = new Int32Array(0);
  private outAny = new Int32Array(0);
  // hash → slots of the workers keeping the recurrent state after its chain (KvStateEvent): few, as a
  // worker keeps a handful of state checkpoints, so a plain map beside the holder table.
  private readonly states = new Map<BlockHash, number[]>();
  private inRun = new Uint8Array(0); // cutToStates()'s scratch: workers of the scan, their deepest states
  private stateDev = new Int32Array(0);
  private stateAny = new Int32Array(0);

  /** Number of distinct hashes known. */
  get size(): number {
    return this.holders.size;
  }

  /**
   * Applies one KV event. Removing a block the worker never stored (or removed already) changes
   * nothing; hashes that are not block hashes (negative, NaN: a corrupt event off the wire) are
   * skipped, as no prefix lookup could ever match them and the table cannot hold them.
   */
  apply(e: KvEvent): void {
    const w = this.intern(e.workerId);
    if (e.kind === "state") return void (e.hash >= 0 && this.setState(e.hash, w, e.kept));
    const bit = TIER_BIT[e.kind === "moved" ? e.to : e.tier];
    const on = e.kind !== "removed";
    for (const h of e.hashes) if (h >= 0) this.set(h, w, bit, on);
  }

  /**
   * Forgets every block `workerId` holds and its name (it left the cluster; a worker that comes back
   * under the same name starts empty). Its slot ({@link workerSlot}) goes to the next new worker.
   * O(known hashes).
   */
  removeWorker(workerId: string): void {
    const w = this.idx.get(workerId);
    if (w === undefined) return;
    for (const h of this.holders.keyList()) this.set(h, w, 7, false);
    for (const h of [...this.states.keys()]) this.setState(h, w, false);
    this.idx.delete(workerId);
    this.ids[w] = "";
    this.freeSlots.push(w);
  }

  /** Number of workers the index knows by name (those that left are forgotten). */
  get workerCount(): number {
    return this.idx.size;
  }

  /** Tiers (bitmask: device 1, host 2, remote 4) on which `workerId` holds `hash`. */
  tiersOf(hash: BlockHash, workerId: string): number {
    const w = this.idx.get(workerId);
    const slot = this.holders.find(hash);
    if (w === undefined || slot === NO_SLOT) return 0;
    for (let i = 0; i < this.holders.length(slot); i++) {
      const v = this.holders.get(slot, i);
      if (v >> 3 === w) return v & 7;
    }
    return 0;
  }

  /**
   * Leading blocks of `hashes` each worker holds contiguously. Workers absent from the result hold
   * none. Cost is O(blocks × holders) with early exit once no worker still matches. `stateful` (a
   * model with recurrent state): each run is cut back to the deepest block after which the worker
   * keeps the state, as that worker can resume no further.
   */
  overlaps(hashes: readonly BlockHash[], stateful = false): Map<string, WorkerOverlap> {
    const out = new Map<string, WorkerOverlap>();
    const ws = this.scan(hashes, stateful);
    for (const w of ws) if (this.any[w] > 0) out.set(this.ids[w], { device: this.dev[w], deviceOrHost: this.any[w] });
    return out;
  }

  /**
   * Dense index of a worker in {@link overlapsBySlot} results (assigned on first use, stable until
   * the worker is removed; then the next new worker may get it).
   */
  workerSlot(workerId: string): number {
    return this.intern(workerId);
  }

  /**
   * {@link overlaps} without a Map: per worker slot ({@link workerSlot}) the device and
   * device-or-host overlap, 0 for workers holding none (covers slots assigned before the call). The
   * arrays are reused: valid until the next call.
   */
  overlapsBySlot(hashes: readonly BlockHash[], stateful = false): { device: Int32Array; deviceOrHost: Int32Array } {
    const n = this.ids.length;
    if (this.outDev.length < n) { this.outDev = new Int32Array(n); this.outAny = new Int32Array(n); }
    const { outDev, outAny } = this;
    outDev.fill(0);
    outAny.fill(0);
    for (const w of this.scan(hashes, stateful)) { outDev[w] = this.dev[w]; outAny[w] = this.any[w]; }
    return { device: outDev, deviceOrHost: outAny };
  }

  /** Runs the overlap walk into the scratch arrays; returns the workers holding the first block. */
  private scan(hashes: readonly BlockHash[], stateful = false): number[] {
    const ws = this.ws;
    ws.length = 0;
    // Every block's holders are looked up before the runs are extended: the lookups do not depend on
    // each other, so the CPU overlaps their cache misses (the table is far larger than the cache)
    // instead of waiting for one after another. The walk ends at the first block nobody holds.
    const t = this.holders;
    if (this.found.length < hashes.length) this.found = new Int32Array(Math.max(hashes.length, 2 * this.found.length));
    const found = this.found;
    let blocks = 0;
    while (blocks < hashes.length && (found[blocks] = t.find(hashes[blocks])) !== NO_SLOT) blocks++;
    if (blocks === 0) return ws;
    // Per worker (by interned index): still on a device run, last block on device, last on device-or-host.
    const n = this.ids.length;
    if (this.seen.length < n) this.scratch(n);
    const { onDev, dev, any, seen } = this;
    seen.fill(0, 0, n); // the other arrays are written for every worker in `ws` before being read
    for (let i = 0; i < t.length(found[0]); i++) {
      const v = t.get(found[0], i);
      const w = v >> 3; ws.push(w); onDev[w] = v & 1; dev[w] = v & 1; any[w] = 1; seen[w] = 1;
    }
    let alive = ws.length;
    for (let b = 1; b < blocks && alive > 0; b++) {
      const slot = found[b];
      // A worker extends its run only if it matched block b-1 (seen[w] === b) and holds block b.
      alive = 0;
      for (let i = 0; i < t.length(slot); i++) alive += extend(t.get(slot, i), b, onDev, dev, any, seen);
    }
    if (stateful) this.cutToStates(hashes, blocks, ws);
    return ws;
  }

  /** Cuts each worker's runs in `ws` back to the deepest block within them after which it keeps the state. */
  private cutToStates(hashes: readonly BlockHash[], blocks: number, ws: readonly number[]): void {
    const n = this.ids.length;
    if (this.inRun.length < n) { this.inRun = new Uint8Array(n); this.stateDev = new Int32Array(n); this.stateAny = new Int32Array(n); }
    const { dev, any, inRun, stateDev, stateAny } = this;
    for (const w of ws) { inRun[w] = 1; stateDev[w] = 0; stateAny[w] = 0; }
    for (let b = 0; b < blocks && this.states.size > 0; b++) {
      const holders = this.states.get(hashes[b]);
      if (holders === undefined) continue;
      for (const w of holders) {
        if (inRun[w] !== 1) continue; // holds no run of these blocks
        if (b < dev[w]) stateDev[w] = b + 1;
        if (b < any[w]) stateAny[w] = b + 1;
      }
    }
    for (const w of ws) { dev[w] = stateDev[w]; any[w] = stateAny[w]; inRun[w] = 0; }
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
      w = this.freeSlots.pop();
      if (w === undefined) { w = this.ids.length; this.ids.push(id); } else this.ids[w] = id;
      this.idx.set(id, w);
    }
    return w;
  }

  private setState(h: BlockHash, w: number, kept: boolean): void {
    const ws = this.states.get(h);
    const at = ws?.indexOf(w) ?? -1;
    if (kept && at < 0) {
      if (ws) ws.push(w);
      else this.states.set(h, [w]);
    } else if (!kept && at >= 0) {
      ws!.splice(at, 1);
      if (ws!.length === 0) this.states.delete(h);
    }
  }

  private set(h: BlockHash, w: number, bit: number, on: boolean): void {
    const t = this.holders;
    const slot = t.find(h);
    const n = slot === NO_SLOT ? 0 : t.length(slot);
    for (let i = 0; i < n; i++) {
      const v = t.get(slot, i);
      if (v >> 3 !== w) continue;
      const bits = on ? (v & 7) | bit : (v & 7) & ~bit;
      // A worker without tiers left stops holding the block (the last holder takes its place).
      if (bits !== 0) t.setAt(slot, i, (w << 3) | bits);
      else t.removeAt(slot, i);
      return;
    }
    if (on) t.push(h, (w << 3) | bit);
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
