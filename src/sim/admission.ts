/**
 * Request admission in the simulator: a turn arrives, is routed (placement.ts), and waits FIFO per
 * worker until KV memory for its prompt is reserved (matched device prefix, host fetch, fresh blocks);
 * then its prefill is queued on the worker.
 */
import { hashBlock } from "../../kv/hash.ts";
import type { TierCache } from "../../kv/tiers.ts";
import type { BlockMeta } from "../../kv/types.ts";
import { reject } from "./completion.ts";
import { type Placement, placeRequest } from "./placement.ts";
import type { ReqState } from "./request.ts";
import type { ClusterSim } from "./simulator.ts";
import { trySendKv } from "./kv-handoff.ts";
import { prefetchLandsAt } from "./prefetch.ts";
import { poke } from "./stepping.ts";
import type { PrefillJob, SimWorker } from "./worker.ts";
import type { SessionPlan } from "./workload-types.ts";

/**
 * A session turn arrives: builds its request (chunks, chained hashes), routes it and starts it, or
 * rejects it. A new session's first turn waits at the front door while new sessions are held (or
 * others are still held before it); `heldSince` is when such a turn first arrived.
 */
export function arrive(sim: ClusterSim, plan: SessionPlan, turn: number, heldSince?: number): void {
  if (turn === 0 && heldSince === undefined) {
    if (sim.holdNewSessions || sim.heldSessions.length > 0 || sim.newSessionBudget < 1) {
      sim.heldSessions.push({ plan, at: sim.now });
      sim.sessionsHeld++;
      return;
    }
    sim.newSessionBudget--;
  }
  const req = buildRequest(sim, plan, turn, heldSince ?? sim.now);
  const tp = plan.turns[turn];
  sim.sessions.turnStarted(plan.id, sim.now);
  if (req.prompt + tp.outputTokens > sim.cfg.model.maxContext) return reject(sim, req, "prompt-too-long");
  if (sim.spec.busyThresholds !== undefined && allWorkersBusy(sim, sim.spec.busyThresholds)) return reject(sim, req, "all-workers-busy");
  const placement = placeRequest(sim, req);
  if (placement === null) return reject(sim, req, "no-serving-worker");
  sim.win.arrivals++;
  sim.win.prompt += req.prompt;
  sim.win.output += tp.outputTokens;
  startPlacement(sim, req, placement);
}

/** Whether every serving worker is over a busy threshold (Dynamo's request rejection). */
function allWorkersBusy(sim: ClusterSim, t: { activeBlocks?: number; prefillTokens?: number }): boolean {
  let serving = 0;
  for (const w of sim.workers) {
    if (w.state !== "serving") continue;
    serving++;
    const blocksBusy = t.activeBlocks !== undefined && w.pool.numUsedBlocks() > t.activeBlocks * w.pool.numBlocks;
    const prefillBusy = t.prefillTokens !== undefined && w.queuedTokens > t.prefillTokens;
    if (!blocksBusy && !prefillBusy) return false;
  }
  return serving > 0;
}

/** The request for turn `turn` of `plan` (its chunks and chained block hashes), arrived at `arrival`. */
export function buildRequest(sim: ClusterSim, plan: SessionPlan, turn: number, arrival: number): ReqState {
  const tp = plan.turns[turn];
  let prompt: number;
  let chunks: number[];
  if (tp.fixedChunks !== undefined) {
    prompt = tp.fixedPromptTokens ?? tp.newTokens;
    chunks = tp.fixedChunks;
  } else {
    prompt = (sim.streamLen.get(plan.idx) ?? plan.sharedTokens) + tp.newTokens;
    const full = Math.floor(prompt / sim.bt);
    chunks = new Array<number>(full);
    for (let c = 0; c < full; c++) chunks[c] = c < plan.sharedChunks.length ? plan.sharedChunks[c] : plan.chunkBase + c;
  }
  let hs = sim.sessHashes.get(plan.idx);
  if (hs === undefined || tp.fixedChunks !== undefined) hs = [];
  for (let c = hs.length; c < chunks.length; c++) hs.push(hashBlock(c === 0 ? null : hs[c - 1], [chunks[c]]));
  if (tp.fixedChunks === undefined) sim.sessHashes.set(plan.idx, hs);
  const req: ReqState = {
    id: sim.nextReq++, plan, turn, arrival, prompt, output: tp.outputTokens, reasoning: tp.reasoningTokens,
    chunks, hashes: hs.slice(0, chunks.length), cachedTokens: 0, firstToken: -1, finish: -1, itlSum: 0, rejected: null,
    prefillWorker: null, decodeWorker: null,
  };
  return req;
}

/**
 * Lets up to `n` held sessions in, oldest first (each one's first turn arrives now, its TTFT counted
 * from when it first arrived); those held past the queue limit are rejected. Returns how many entered.
 */
export function releaseHeldSessions(sim: ClusterSim, n: number): number {
  let admitted = 0;
  while (admitted < n && sim.heldSessions.length > 0) {
    const h = sim.heldSessions.shift()!;
    if (sim.now - h.at > sim.cfg.maxQueueS) { reject(sim, buildRequest(sim, h.plan, 0, h.at), "admission-timeout"); continue; }
    arrive(sim, h.plan, 0, h.at);
    admitted++;
  }
  return admitted;
}

/** Turns away the `n` oldest held sessions (the front door is full: "overloaded"). */
export function rejectHeldSessions(sim: ClusterSim, n: number): void {
  for (const h of sim.heldSessions.splice(0, n)) reject(sim, buildRequest(sim, h.plan, 0, h.at), "overloaded");
}

/** Starts a routed request: prefill on the decode worker (local) or on a prefill worker. */
export function startPlacement(sim: ClusterSim, req: ReqState, p: Placement): void {
  const w = p.decode;
  req.decodeWorker = w.id;
  sim.lastWorker.set(req.plan.id, w.id);
  if (p.prefill === null) {
    // A peer's copy of the prefix arrives over the link instead of being recomputed here.
    const src = p.prefixSource;
    // Blocks the holder keeps in host memory are read from there before they go on the link.
    const readS = src?.host !== undefined && (p.prefixSourceHostBlocks ?? 0) > 0 ? src.host.transferSeconds(p.prefixSourceHostBlocks!, sim.movedBytesPerBlock) : 0;
    const delay = src !== undefined && p.prefixTransferBlocks > 0 ? readS + sim.linkSeconds(src, w, p.prefixTransferBlocks) : 0;
    if (delay > 0) {
      sim.peerTransfers++;
      if (readS > 0) sim.peerHostBlocks += p.prefixSourceHostBlocks!;
      // The holder's copy is now stale: the session continues here.
      if (sim.spec.demoteMovedSessions) src!.retention?.sessionMoved?.(req.plan.id, sim.now);
    }
    enqueuePrefill(sim, req, w, true, delay, delay > 0 ? p.prefixTransferBlocks : 0);
  } else {
    req.prefillWorker = p.prefill.id;
    const delay = p.prefixTransferBlocks > 0 ? sim.linkSeconds(w, p.prefill, p.prefixTransferBlocks) : 0;
    if (p.prefixTransferBlocks > 0) sim.prefixesToPrefill++;
    enqueuePrefill(sim, req, p.prefill, false, delay, p.prefixTransferBlocks);
  }
}

/** Matches the prefix on `w` (device, then host), reserves blocks and queues the prefill. */
export function enqueuePrefill(sim: ClusterSim, req: ReqState, w: SimWorker, local: boolean, delayS: number, extraCached = 0): void {
  // FIFO admission: while earlier requests wait for KV memory here, later ones queue behind them.
  if (w.admitWait.length > 0 || !tryEnqueuePrefill(sim, req, w, local, delayS, extraCached)) {
    w.admitWait.push({ req, local, delayS, extraCached, since: sim.now });
  }
}

/** Admits requests waiting for KV memory on `w`, oldest first; rejects those past the queue limit. */
export function retryWaiting(sim: ClusterSim, w: SimWorker): void {
  while (w.kvWait.length > 0) {
    const k = w.kvWait[0];
    if (!trySendKv(sim, k.from, k.job, w)) break;
    w.kvWait.shift();
  }
  while (w.admitWait.length > 0) {
    const a = w.admitWait[0];
    if (sim.now - a.since > sim.cfg.maxQueueS) { w.admitWait.shift(); reject(sim, a.req, "queue-timeout"); continue; }
    if (!tryEnqueuePrefill(sim, a.req, w, a.local, a.delayS, a.extraCached)) break;
    w.admitWait.shift();
  }
}

/** One admission attempt: reserves blocks for the prompt (matched prefix, host fetch, fresh) and queues the prefill; false when KV memory is short. */
export function tryEnqueuePrefill(sim: ClusterSim, req: ReqState, w: SimWorker, local: boolean, delayS: number, extraCached: number): boolean {
  const m = w.pool.matchPrefixHashed(req.chunks, req.hashes);
  const k = m.blockIds.length;
  let h = 0;
  if (w.host !== undefined && k < req.chunks.length) {
    h = w.host.matchContinuation(k === 0 ? null : req.hashes[k - 1], req.hashes.slice(k), (i) => [req.chunks[k + i]]);
  }
  // Below the host tier, the shared remote store may continue the prefix; the two alternate, since a
  // session's older blocks spill to the store first while newer ones are still on host.
  let r = 0;
  for (let at = k + h; sim.remote !== undefined && at < req.chunks.length;) {
    const inStore = matchAt(sim.remote, req, at);
    at += inStore;
    r += inStore;
    const onHost = w.host !== undefined && at < req.chunks.length ? matchAt(w.host, req, at) : 0;
    at += onHost;
    h += onHost;
    if (inStore + onHost === 0) break;
  }
  const fetched = Math.min(req.chunks.length - k, h + r + extraCached);
  const hostFetchS = h > 0 && w.host ? w.host.transferSeconds(h, sim.movedBytesPerBlock) : 0;
  const fetchS = hostFetchS + (r > 0 ? sim.remote!.transferSeconds(r, sim.movedBytesPerBlock) : 0);
  const total = Math.ceil((req.prompt + (local ? req.output : 0)) / sim.bt);
  const fresh = w.pool.tryAllocate(Math.max(0, total - k));
  if (fresh === null) {
    w.pool.release(m.blockIds);
    if (total - k > w.pool.numBlocks) reject(sim, req, "kv-capacity");
    return total - k > w.pool.numBlocks;
  }
  const blocks = m.blockIds.concat(fresh);
  if (fetched > 0) {
    // One meta object per type, shared by the blocks (pools and tiers never mutate metas).
    const sys: BlockMeta = { sessionId: req.plan.id, type: "system" };
    const tool: BlockMeta = { sessionId: req.plan.id, type: "tool-output" };
    const tok = sim.tok;
    for (let i = k; i < k + fetched; i++) {
      tok[0] = req.chunks[i];
      w.pool.commitBlock(blocks[i], i === 0 ? null : blocks[i - 1], tok, i < req.plan.sharedChunks.length ? sys : tool);
    }
  }
  const cached = (k + fetched) * sim.bt;
  req.cachedTokens = Math.min(req.prompt, cached);
  const left = Math.max(1, req.prompt - cached);
  sim.win.uncached += left;
  sim.sampleWin.prompt += req.prompt;
  sim.sampleWin.cached += req.cachedTokens;
  // Blocks a prefetch is still copying from host memory: the prefill waits for the rest of that copy.
  let landsAt = 0;
  if (sim.prefetchLanding.size > 0) {
    landsAt = prefetchLandsAt(sim, w, req.plan.id, k);
    sim.prefetchLanding.delete(req.plan.id);
  }
  const hostS = Math.max(hostFetchS, landsAt - sim.now);
  if (hostS > 0) { sim.hostWaits++; sim.hostWaitS += hostS; }
  const job: PrefillJob = {
    req, left, pos: req.prompt - left, blocks, cachedBlocks: k + fetched, local,
    readyAt: Math.max(sim.now + Math.max(delayS, fetchS), landsAt), enqueuedAt: sim.now,
  };
  w.queue.push(job);
  w.queuedTokens += left;
  poke(sim, w);
  return true;
}

/** Blocks of `req` that tier `t` holds contiguously from block `at`. */
function matchAt(t: TierCache, req: ReqState, at: number): number {
  return t.matchContinuation(at === 0 ? null : req.hashes[at - 1], req.hashes.slice(at), (i) => [req.chunks[at + i]]);
}
