/**
 * Where a request goes: the simulator builds the router's view of every worker (overlaps from the
 * global block index, queues, rates) and asks the system's router (pure planner/ code) to choose.
 */
import { type RouteCandidate, routeKvAware, routeSession } from "../../planner/routers.ts";
import type { ReqState } from "./request.ts";
import type { ClusterSim } from "./simulator.ts";
import type { SimWorker } from "./worker.ts";

/** A routing outcome: prefill worker (null = local on the decode worker) and decode worker. */
export interface Placement {
  prefill: SimWorker | null;
  decode: SimWorker;
  prefixTransferBlocks: number;
  /** With a local prefill: the peer that sends the decode worker `prefixTransferBlocks` of the prefix. */
  prefixSource?: SimWorker;
  /** Of those blocks, the ones the source reads from its host memory first. */
  prefixSourceHostBlocks?: number;
}

type Overlaps = ReturnType<ClusterSim["index"]["overlapsBySlot"]> | null;

/** Serving workers that pass `pick`, in worker order, with their router views refreshed. */
interface Candidates {
  views: RouteCandidate[];
  workers: SimWorker[];
}

function candidates(sim: ClusterSim, ov: Overlaps, pick: (w: SimWorker) => boolean): Candidates {
  const views: RouteCandidate[] = [];
  const workers: SimWorker[] = [];
  for (const w of sim.workers) {
    if (w.state !== "serving" || !pick(w)) continue;
    const slot = sim.indexSlots[w.index];
    // Each worker's view object is reused across requests: routers read candidates, never keep them.
    const c = w.routeView;
    c.role = w.role;
    c.overlapDevice = ov === null ? 0 : ov.device[slot];
    c.overlapHost = ov === null ? 0 : ov.deviceOrHost[slot];
    c.queuedPrefillTokens = w.queuedTokens;
    c.activeBlocks = w.pool.numUsedBlocks();
    c.memoryQueue = w.admitWait.length + w.kvWait.length;
    c.freeBlocks = w.pool.numBlocks - c.activeBlocks;
    c.decodeBatch = w.batch;
    c.decodeQueue = w.decodeWait.length + w.kvWait.length + w.admitWait.length;
    c.prefillRate = w.prefillRate;
    c.decodeStepS = w.decodeStepEwma;
    c.liveSessions = sim.lastWorker.count(w.id);
    views.push(c);
    workers.push(w);
  }
  return { views, workers };
}

/** The worker behind router view `c` of `cs`. */
function workerOf(cs: Candidates, c: RouteCandidate): SimWorker {
  return cs.workers[cs.views.indexOf(c)];
}

/** The worker with id `id` among `cs`. */
function workerById(cs: Candidates, id: string): SimWorker {
  return cs.workers.find((w) => w.id === id)!;
}

/** Chooses prefill and decode workers for `req` under the system's mode; null when none serve. */
export function placeRequest(sim: ClusterSim, req: ReqState): Placement | null {
  const blocks = Math.ceil(req.prompt / sim.bt);
  const mode = sim.spec.mode;
  // Reused arrays: read them before the next overlaps call (candidates() copies them out).
  const ov: Overlaps = req.hashes.length > 0 ? sim.index.overlapsBySlot(req.hashes) : null;
  if (mode === "agg") {
    const all = candidates(sim, ov, () => true);
    const best = routeKvAware(all.views, blocks, sim.bt, sim.spec.overlapWeight ?? 1);
    return best === undefined ? null : { prefill: null, decode: workerOf(all, best), prefixTransferBlocks: 0 };
  }
  if (mode === "disagg") {
    const dec = candidates(sim, ov, (w) => w.role === "decode");
    const d = routeKvAware(dec.views, blocks, sim.bt, sim.spec.overlapWeight ?? 1);
    if (d === undefined) return null;
    const decode = workerOf(dec, d);
    const uncachedLocal = req.prompt - d.overlapDevice * sim.bt;
    const pre = candidates(sim, ov, (w) => w.role === "prefill");
    let queued = 0;
    for (const w of pre.workers) queued += w.queue.length;
    const n = pre.workers.length;
    // Conditional disaggregation: short uncached prompts, or a full prefill queue, stay local.
    if (uncachedLocal <= sim.spec.maxLocalPrefill || n === 0 || queued >= sim.spec.maxPrefillQueuePerWorker * n) {
      return { prefill: null, decode, prefixTransferBlocks: 0 };
    }
    const p = routeKvAware(pre.views, blocks, sim.bt, sim.spec.overlapWeight ?? 1)!;
    return { prefill: workerOf(pre, p), decode, prefixTransferBlocks: 0 };
  }
  const dec = candidates(sim, ov, (w) => w.role !== "prefill");
  const pre = candidates(sim, ov, (w) => w.role === "prefill");
  const last = sim.lastWorker.get(req.plan.id);
  const route = routeSession(
    { promptTokens: req.prompt, blockTokens: sim.bt, bytesPerBlock: sim.movedBytesPerBlock, lastWorker: last, newSession: last === undefined },
    dec.views, pre.views, sim.links,
    { localPrefillThreshold: sim.localThreshold, itlTargetS: 0.05, affinityBonusS: 0.01, interferenceWeight: sim.spec.stallWeight, memoryWaitS: sim.spec.memoryWaitS,
      peerTransfer: sim.spec.peerTransfer, memoryFullS: sim.spec.memoryFullS, peerMoveS: sim.spec.peerMoveS, peerHostBlocks: sim.spec.peerHostBlocks,
      sessionSpreadS: sim.spec.sessionSpreadS, waiveOpeningPulls: sim.spec.waiveOpeningPulls },
  );
  if (route === undefined) {
    if (pre.workers.length === 0) return null;
    return { prefill: null, decode: pre.workers[0], prefixTransferBlocks: 0 };
  }
  const decode = workerById(dec, route.decodeWorker);
  const prefill = route.prefillWorker === null ? null : workerById(pre, route.prefillWorker);
  const placement: Placement = { prefill, decode, prefixTransferBlocks: route.prefixTransferBlocks };
  if (route.prefixSource !== undefined) {
    // The holder may be a prefill-role worker: its role says what it computes, not what it can send.
    placement.prefixSource = dec.workers.find((w) => w.id === route.prefixSource) ?? workerById(pre, route.prefixSource);
    if (route.prefixSourceHostBlocks !== undefined) placement.prefixSourceHostBlocks = route.prefixSourceHostBlocks;
  }
  return placement;
}
