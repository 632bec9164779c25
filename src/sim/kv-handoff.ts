/**
 * KV hand-off in the simulator: a finished prefill caches its blocks and either decodes in place or
 * sends its KV to the decode worker (which reuses what it already holds); decode admission into the
 * batch; registering a request's blocks in a worker's prefix cache.
 */
import { retryWaiting } from "./admission.ts";
import { finish } from "./completion.ts";
import type { BlockMeta } from "../../kv/types.ts";
import type { ReqState } from "./request.ts";
import { type KvArrival, MAX_DECODE_BATCH } from "./sim-events.ts";
import type { ClusterSim } from "./simulator.ts";
import { poke } from "./stepping.ts";
import type { PrefillJob, SimWorker } from "./worker.ts";

/** Full blocks of `req`'s prompt: those a finished prefill commits to the prefix cache. */
function promptBlocks(sim: ClusterSim, req: ReqState): number {
  return Math.min(req.chunks.length, Math.floor(req.prompt / sim.bt));
}

/** A prefill finished on `w`: caches its blocks, then decodes locally or hands the KV to the decode worker. */
export function prefillDone(sim: ClusterSim, w: SimWorker, job: PrefillJob): void {
  const req = job.req;
  const full = promptBlocks(sim, req);
  const caches = sim.spec.decodeCaches || w.role !== "decode" || !job.local;
  if (caches) commitRange(sim, w, job.blocks, req, job.cachedBlocks, full, (c) => req.chunks[c], "tool-output");
  if (job.local) return beginDecode(sim, w, req, job.blocks);
  const d = sim.workers.find((x) => x.id === req.decodeWorker)!;
  d.inflightKv++;
  // The prefill worker keeps the KV until the decode worker has room for it.
  if (d.kvWait.length > 0 || !trySendKv(sim, w, job, d)) d.kvWait.push({ from: w, job });
}

/** Sends a finished prefill's KV to decode worker `d`: it reuses what it holds, the rest crosses the link. */
export function trySendKv(sim: ClusterSim, w: SimWorker, job: PrefillJob, d: SimWorker): boolean {
  const req = job.req;
  const m = d.pool.matchPrefixHashed(req.chunks, req.hashes);
  const need = Math.ceil((req.prompt + req.output) / sim.bt) - m.blockIds.length;
  const fresh = d.pool.tryAllocate(need);
  if (fresh === null) {
    d.pool.release(m.blockIds);
    return false;
  }
  const sendBlocks = Math.max(0, Math.ceil(req.prompt / sim.bt) - m.blockIds.length);
  sim.q.push(sim.now + sim.linkSeconds(w, d, sendBlocks), {
    t: "kv", w: d, req, blocks: m.blockIds.concat(fresh), cached: m.blockIds.length, from: w, fromBlocks: job.blocks,
  });
  return true;
}

/** A KV transfer landed on its decode worker: the prefill worker frees its copy and decoding starts. */
export function kvArrived(sim: ClusterSim, e: KvArrival): void {
  e.w.inflightKv--;
  if (e.w.state === "off") e.w.state = "draining";
  e.from.pool.release(e.fromBlocks, { sessionId: e.req.plan.id });
  retryWaiting(sim, e.from);
  if (sim.spec.decodeCaches) {
    const full = promptBlocks(sim, e.req);
    commitRange(sim, e.w, e.blocks, e.req, e.cached, full, (c) => e.req.chunks[c], "tool-output");
  }
  // The decode worker samples the first token in its first step with the request, as vLLM's
  // disaggregated decode does (and this project's cluster, which moves the prompt's last block too and
  // computes its last token again as a decode: tests/cluster/cluster.test.ts), after the step it is
  // running ends; the prefill worker's token is not streamed.
  beginDecode(sim, e.w, e.req, e.blocks, false);
}

/**
 * The request joins the decode batch (or finishes when it wanted one token). `firstTokenOut`: the
 * prefill that just ended here sampled the first token; else the first decode step samples it.
 */
export function beginDecode(sim: ClusterSim, w: SimWorker, req: ReqState, blocks: number[], firstTokenOut = true): void {
  if (firstTokenOut) {
    firstToken(sim, req, sim.now);
    if (req.output <= 1) return finish(sim, w, req, blocks);
  }
  if (w.busy) w.pendingJoin.push({ req, blocks });
  else joinDecode(sim, w, req, blocks);
  poke(sim, w);
}

/** Records a request's first token at `t`. */
export function firstToken(sim: ClusterSim, req: ReqState, t: number): void {
  req.firstToken = t;
  sim.sampleWin.ttfts.push(t - req.arrival);
}

/** Adds a sequence to the decode batch, or parks it until a slot frees (max batch reached). */
export function joinDecode(_sim: ClusterSim, w: SimWorker, req: ReqState, blocks: number[]): void {
  if (w.batch >= MAX_DECODE_BATCH) w.decodeWait.push({ req, blocks });
  else w.addDecode(req, blocks, decodeSteps(req), req.prompt);
}

/** Decode steps a sequence joining the batch still needs: one per token after the first, plus the first's own when still due. */
export function decodeSteps(req: ReqState): number {
  return req.firstToken < 0 ? req.output : req.output - 1;
}

/** Registers blocks [from, to) of a request in `w`'s prefix cache, stopping at the first that cannot be indexed. */
export function commitRange(sim: ClusterSim, w: SimWorker, blocks: number[], req: ReqState, from: number, to: number, id: (c: number) => number, type: "tool-output" | "output" | "reasoning"): void {
  if (from >= to || from >= blocks.length) return;
  const sys: BlockMeta = { sessionId: req.plan.id, type: "system" };
  const other: BlockMeta = { sessionId: req.plan.id, type };
  const tok = sim.tok; // the pool copies a committed block's tokens
  for (let c = from; c < to && c < blocks.length; c++) {
    tok[0] = id(c);
    if (w.pool.commitBlock(blocks[c], c === 0 ? null : blocks[c - 1], tok, c < req.plan.sharedChunks.length ? sys : other) === null) break;
  }
}
