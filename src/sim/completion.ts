/**
 * How requests end in the simulator: finished (decode-generated KV kept for the next turn, the
 * session's next turn scheduled), rejected with a reason, or unfinished at the horizon; and the
 * outcome records the metrics are computed from.
 */
import { buildRequest, releaseHeldSessions, retryWaiting } from "./admission.ts";
import { commitRange } from "./kv-handoff.ts";
import { schedulePrefetch } from "./prefetch.ts";
import type { ReqState } from "./request.ts";
import type { ClusterSim } from "./simulator.ts";
import type { SimWorker } from "./worker.ts";
import { REASONING_ID_BASE } from "./workload-types.ts";

/** A request produced its last token: commits decode-generated KV, releases its blocks, records it and schedules the session's next turn. */
export function finish(sim: ClusterSim, w: SimWorker, req: ReqState, blocks: number[]): void {
  req.finish = sim.now;
  // Time from first to last token, waits for a decode slot included (a client sees that gap).
  req.itlSum = sim.now - req.firstToken;
  const plan = req.plan;
  const tp = plan.turns[req.turn];
  if (sim.spec.decodeCaches && tp.fixedChunks === undefined) {
    // Decode-generated KV: reusable next turn only where the next prompt repeats it (no dropped reasoning).
    const from = Math.floor(req.prompt / sim.bt);
    const to = Math.floor((req.prompt + req.output) / sim.bt);
    const reasoning = req.reasoning > 0;
    commitRange(sim, w, blocks, req, from, to, (c) => (reasoning ? REASONING_ID_BASE + sim.reasoningIds++ : plan.chunkBase + c), reasoning ? "reasoning" : "output");
  }
  sim.sessions.turnEnded(plan.id, sim.now, tp.tool);
  w.pool.release(blocks, { sessionId: plan.id });
  retryWaiting(sim, w);
  record(sim, req);
  sim.streamLen.set(plan.idx, req.prompt + req.output - req.reasoning);
  const next = req.turn + 1;
  if (next < plan.turns.length && sim.now + tp.gapS < sim.workload.durationS) {
    sim.q.push(sim.now + tp.gapS, { t: "arrive", plan, turn: next });
    // The server knows only that a tool was called; when the session returns is the tracker's guess.
    if (tp.tool !== null && sim.spec.prefetchLeadS !== undefined) schedulePrefetch(sim, w, plan, sim.spec.prefetchLeadS);
  } else {
    sim.sessions.forget(plan.id);
    sim.sessHashes.delete(plan.idx);
    sim.streamLen.delete(plan.idx);
    sim.lastWorker.delete(plan.id);
    // While new sessions are held, one enters as one leaves.
    if (sim.holdNewSessions) releaseHeldSessions(sim, 1);
  }
}

/** Rejects a request with `reason` and ends its session. */
export function reject(sim: ClusterSim, req: ReqState, reason: string): void {
  req.rejected = reason;
  record(sim, req);
  sim.sessions.forget(req.plan.id);
  sim.sessHashes.delete(req.plan.idx);
  sim.streamLen.delete(req.plan.idx);
  sim.lastWorker.delete(req.plan.id);
}

/** Appends a request's outcome (and its completion to the planner window). */
export function record(sim: ClusterSim, req: ReqState): void {
  const ok = req.rejected === null;
  const ttft = ok ? req.firstToken - req.arrival : NaN;
  const itl = ok ? (req.output > 1 ? req.itlSum / (req.output - 1) : 0) : NaN;
  sim.outcomes.push({
    session: req.plan.id, turn: req.turn, ttft, itl, e2e: ok ? req.finish - req.arrival : NaN, prompt: req.prompt, output: req.output,
    cached: req.cachedTokens, arrival: req.arrival, rejected: req.rejected, remotePrefill: req.prefillWorker !== null,
  });
  if (ok) sim.win.done.push({ isl: req.prompt, osl: req.output, ttftS: ttft, itlS: itl });
}

/** At the horizon: every request still in a queue, batch or transfer is rejected as unfinished. */
export function rejectLeftovers(sim: ClusterSim): void {
  const seen = new Set<ReqState>();
  for (const w of sim.workers) {
    for (const j of w.queue) seen.add(j.req);
    for (const s of w.decoding) seen.add(s.req);
    for (const p of w.pendingJoin) seen.add(p.req);
    for (const p of w.decodeWait) seen.add(p.req);
    for (const a of w.admitWait) seen.add(a.req);
    for (const k of w.kvWait) seen.add(k.job.req);
  }
  for (;;) {
    const e = sim.q.pop();
    if (e === undefined) break;
    if (e.data.t === "kv") seen.add(e.data.req);
  }
  for (const r of seen) if (r.finish < 0 && r.rejected === null) { r.rejected = "unfinished-at-horizon"; record(sim, r); }
  // Sessions still held at the front door: their first turn never started.
  for (const h of sim.heldSessions.splice(0)) reject(sim, buildRequest(sim, h.plan, 0, h.at), "unfinished-at-horizon");
}
