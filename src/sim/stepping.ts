/**
 * Worker stepping in the simulator: each step mixes chunked prefill (within a token budget) with
 * the decode batch, or (sim.splitSteps) a chunk and the decodes take turns in steps of their own;
 * decode-only stretches run as one macro-step of identical steps, cut short when
 * new work arrives. Step times come from the cost model.
 */
import { prefillOrder } from "../../planner/prefill-order.ts";
import { SPLIT_PROBE_EVERY } from "../../planner/step-pricing.ts";
import { retryWaiting } from "./admission.ts";
import { finish, reject } from "./completion.ts";
import { decodeSteps, firstToken, joinDecode, prefillDone } from "./kv-handoff.ts";
import { MAX_DECODE_BATCH, MAX_MACRO_STEPS } from "./sim-events.ts";
import type { ClusterSim } from "./simulator.ts";
import type { PrefillJob, SimWorker } from "./worker.ts";

/** New work reached `w`: start a step, or cut a long decode macro-step short so the work joins soon. */
export function poke(sim: ClusterSim, w: SimWorker): void {
  if (!w.busy) return kick(sim, w);
  const m = w.macro;
  if (m === null || m.k <= 1) return;
  const done = Math.min(m.k, Math.floor((sim.now - m.start) / m.stepS) + 1);
  if (done >= m.k) return;
  m.k = done;
  w.version++;
  sim.q.push(m.start + done * m.stepS, { t: "step", w, v: w.version });
}

/** Starts `w`'s next (macro-)step: chunked prefill within the token budget plus the decode batch. */
export function kick(sim: ClusterSim, w: SimWorker): void {
  if (w.busy || (w.state !== "serving" && w.state !== "draining")) return;
  const budget = w.role === "prefill" ? sim.spec.stepTokens?.prefill ?? 16384 : sim.spec.stepTokens?.mixed ?? 8192;
  const decodeSeqs = w.batch;
  // Separate steps (sim.splitSteps): a chunk runs as a prefill-only step, then the decodes get a step
  // of their own before the next chunk. Every SPLIT_PROBE_EVERY-th chunk still mixes, so the
  // planner's step model keeps measuring what a mixed step costs.
  const splitting = sim.splitSteps && decodeSeqs > 0 && w.role !== "prefill";
  const decodeTurn = splitting && w.lastStepPrefillOnly;
  const mixing = !splitting || (!decodeTurn && ++w.splitProbe % SPLIT_PROBE_EVERY === 0);
  const carried = w.role === "prefill" || !mixing ? 0 : decodeSeqs;
  let used = carried;
  const jobs: PrefillJob[] = [];
  const toks: number[] = [];
  let pairs = 0;
  let wake = Infinity;
  let readyJob = false;
  // Time out stale jobs first; waiting requests retry for the freed memory once this step is set,
  // so their admission cannot start a second step from inside this one.
  let freed = false;
  for (let i = 0; i < w.queue.length; i++) {
    const j = w.queue[i];
    if (sim.now - j.enqueuedAt <= sim.cfg.maxQueueS) continue;
    w.queue.splice(i--, 1);
    w.queuedTokens -= j.left;
    w.pool.release(j.blocks, { sessionId: j.req.plan.id });
    reject(sim, j.req, "queue-timeout");
    freed = true;
  }
  const order = decodeTurn || sim.spec.prefillOrder === undefined || w.queue.length < 2 ? null : prefillOrder(w.queue, sim.now, sim.spec.prefillOrder);
  for (let o = 0; o < w.queue.length && used < budget; o++) {
    const j = w.queue[order === null ? o : order[o]];
    if (j.readyAt > sim.now) { wake = Math.min(wake, j.readyAt); continue; }
    readyJob = true;
    if (decodeTurn) break;
    const n = Math.min(j.left, budget - used);
    jobs.push(j);
    toks.push(n);
    pairs += sim.cost.prefillPairs(j.pos, n);
    used += n;
  }
  const prefillTokens = used - carried;
  const stepDecodes = prefillTokens > 0 && !mixing ? 0 : decodeSeqs;
  if (prefillTokens === 0 && stepDecodes === 0) {
    if (wake < Infinity) sim.q.push(wake, { t: "wake", w });
    if (freed) retryWaiting(sim, w);
    return;
  }
  w.lastStepPrefillOnly = splitting && stepDecodes === 0;
  let k = 1;
  if (prefillTokens === 0 && !(decodeTurn && readyJob)) {
    k = Math.max(1, Math.min(MAX_MACRO_STEPS, w.stepsToNextFinish()));
    if (wake < Infinity) k = Math.max(1, Math.min(k, Math.floor((wake - sim.now) / 0.02)));
  }
  const dens = sim.cfg.model.attnDensity >= 1 ? 1 : sim.cfg.model.attnDensity;
  const attn = stepDecodes === 0 ? 0 : w.decodeAttended() + decodeSeqs * dens * (k - 1) / 2;
  const stepS = sim.cost.stepTime({ prefillTokens, prefillAttnPairs: pairs, decodeSeqs: stepDecodes, decodeAttnTokens: attn });
  w.busy = true;
  w.macro = { start: sim.now, stepS, k, prefill: jobs, prefillTokens: toks, decode: stepDecodes > 0, pairs, attn };
  w.version++;
  sim.q.push(sim.now + k * stepS, { t: "step", w, v: w.version });
  if (freed) retryWaiting(sim, w);
}

/** A step ended on `w`: advances prefill jobs and decodes, finishes sequences and kicks the next step. */
export function stepDone(sim: ClusterSim, w: SimWorker): void {
  const m = w.macro!;
  w.macro = null;
  // Stay busy while applying the step, so work that becomes ready here joins after it, not mid-way.
  // A prefill-only step of a worker that separates steps leaves its decodes where they were.
  const D = m.decode ? w.batch : 0;
  // Handed-off sequences got their first token from the first step of the macro-step.
  if (m.decode) for (const r of w.awaitingFirst.splice(0)) firstToken(sim, r, m.start + m.stepS);
  if (m.decode || w.batch === 0) w.steps += m.k;
  w.clock += m.k * m.stepS;
  let ptoks = 0;
  for (let i = 0; i < m.prefill.length; i++) {
    const j = m.prefill[i];
    const n = m.prefillTokens[i];
    ptoks += n;
    j.left -= n;
    j.pos += n;
    w.queuedTokens -= n;
  }
  w.window.observe({ prefillTokens: ptoks, prefillAttnPairs: m.pairs, decodeSeqs: D, decodeAttnTokens: m.attn, seconds: m.stepS, count: m.k });
  for (const s of w.popFinished()) finish(sim, w, s.req, s.blocks);
  const doneJobs = m.prefill.filter((j) => j.left <= 0);
  if (doneJobs.length > 0) {
    const gone = new Set(doneJobs);
    const keep = w.queue.filter((j) => !gone.has(j));
    w.queue.length = 0;
    w.queue.push(...keep);
  }
  for (const j of doneJobs) prefillDone(sim, w, j);
  w.busy = false;
  for (const p of w.pendingJoin.splice(0)) joinDecode(sim, w, p.req, p.blocks);
  while (w.decodeWait.length > 0 && w.batch < MAX_DECODE_BATCH) {
    const p = w.decodeWait.shift()!;
    w.addDecode(p.req, p.blocks, decodeSteps(p.req), p.req.prompt);
  }
  if (w.state === "draining" && w.queue.length === 0 && w.batch === 0 && w.inflightKv === 0 && w.pendingJoin.length === 0 && w.decodeWait.length === 0) w.state = "off";
  kick(sim, w);
}
