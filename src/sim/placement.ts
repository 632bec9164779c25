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
}

type Overlaps = ReturnType<ClusterSim["index"]["overlapsBySlot"]> | null;

function candidates(sim: ClusterSim, ov: Overlaps, pick: (w: SimWorker) => boolean): { c: RouteCandidate; w: SimWorker }[] {
  const out: { c: RouteCandidate; w: SimWorker }[] = [];
  for (const w of sim.workers) {
    if (w.state !== "serving" || !pick(w)) continue;
    const slot = sim.indexSlots[w.index];
    out.push({
      w,
      c: {
        id: w.id, role: w.role, overlapDevice: ov === null ? 0 : ov.device[slot], overlapHost: ov === null ? 0 : ov.deviceOrHost[slot],
        queuedPrefillTokens: w.queuedTokens, activeBlocks: w.pool.numUsedBlocks(), decodeBatch: w.batch,
        decodeQueue: w.decodeWait.length + w.kvWait.length + w.admitWait.length,
        prefillRate: w.prefillRate, decodeStepS: w.decodeStepEwma, rack: w.rack,
      },
    });
  }
  return out;
}

/** Chooses prefill and decode workers for `req` under the system's mode; null when none serve. */
export function placeRequest(sim: ClusterSim, req: ReqState): Placement | null {
  const blocks = Math.ceil(req.prompt / sim.bt);
  const mode = sim.spec.mode;
  // Reused arrays: read them before the next overlaps call (candidates() copies them out).
  const ov: Overlaps = req.hashes.length > 0 ? sim.index.overlapsBySlot(req.hashes) : null;
  if (mode === "agg") {
    const all = candidates(sim, ov, () => true);
    const best = routeKvAware(all.map((x) => x.c), blocks, sim.bt, sim.spec.overlapWeight ?? 1);
    return best === undefined ? null : { prefill: null, decode: all.find((x) => x.c === best)!.w, prefixTransferBlocks: 0 };
  }
  if (mode === "disagg") {
    const dec = candidates(sim, ov, (w) => w.role === "decode");
    const d = routeKvAware(dec.map((x) => x.c), blocks, sim.bt, sim.spec.overlapWeight ?? 1);
    if (d === undefined) return null;
    const decode = dec.find((x) => x.c === d)!.w;
    const uncachedLocal = req.prompt - d.overlapDevice * sim.bt;
    const pre = candidates(sim, ov, (w) => w.role === "prefill");
    const queued = pre.reduce((a, x) => a + x.w.queue.length, 0);
    // Conditional disaggregation: short uncached prompts, or a full prefill queue, stay local.
    if (uncachedLocal <= sim.spec.maxLocalPrefill || pre.length === 0 || queued >= sim.spec.maxPrefillQueuePerWorker * pre.length) {
      return { prefill: null, decode, prefixTransferBlocks: 0 };
    }
    const p = routeKvAware(pre.map((x) => x.c), blocks, sim.bt, sim.spec.overlapWeight ?? 1)!;
    return { prefill: pre.find((x) => x.c === p)!.w, decode, prefixTransferBlocks: 0 };
  }
  const dec = candidates(sim, ov, (w) => w.role !== "prefill");
  const pre = candidates(sim, ov, (w) => w.role === "prefill");
  const hw = sim.cfg.hw;
  const g = sim.cfg.gpusPerWorker;
  const route = routeSession(
    { promptTokens: req.prompt, blockTokens: sim.bt, bytesPerBlock: sim.blockBytes, lastWorker: sim.lastWorker.get(req.plan.id) },
    dec.map((x) => x.c), pre.map((x) => x.c),
    {
      bandwidth: (a, b) => (a === b ? hw.intraRackBandwidth : hw.interRackBandwidth) * g,
      latency: (a, b) => (a === b ? hw.intraRackLatencyS : hw.interRackLatencyS), hostBandwidth: hw.hostBandwidth * g,
    },
    { localPrefillThreshold: sim.localThreshold, itlTargetS: 0.05, affinityBonusS: 0.01 },
  );
  if (route === undefined) {
    if (pre.length === 0) return null;
    return { prefill: null, decode: pre[0].w, prefixTransferBlocks: 0 };
  }
  const decode = dec.find((x) => x.c.id === route.decodeWorker)!.w;
  const prefill = route.prefillWorker === null ? null : pre.find((x) => x.c.id === route.prefillWorker)!.w;
  return { prefill, decode, prefixTransferBlocks: route.prefixTransferBlocks };
}
