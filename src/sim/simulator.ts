/**
 * Deterministic discrete-event cluster simulator. It owns time and the workers' queues; every
 * decision (routing, planning, retention) is made by the pure planner/ and kv/ code it calls.
 */
import { BlockPool } from "../../kv/block-pool.ts";
import { GlobalBlockIndex } from "../../kv/global-index.ts";
import { hashBlock } from "../../kv/hash.ts";
import { SessionTracker } from "../../kv/session-tracker.ts";
import { TierCache } from "../../kv/tiers.ts";
import type { BlockMeta, KvEvent } from "../../kv/types.ts";
import type { CompletedRequest, MetricsSnapshot } from "../../planner/types.ts";
import { applyAction } from "./actions.ts";
import { CostModel } from "./cost-model.ts";
import { EventQueue } from "./event-queue.ts";
import type { HardwareProfile, ModelProfile } from "./profiles.ts";
import type { ReqState, RequestOutcome } from "./request.ts";
import { type Placement, placeRequest } from "./placement.ts";
import type { SystemSpec } from "./systems.ts";
import { type PrefillJob, SimWorker } from "./worker.ts";
import { REASONING_ID_BASE, type SessionPlan, type Workload } from "./workload-types.ts";

/** Simulator settings. */
export interface SimConfig {
  model: ModelProfile;
  hw: HardwareProfile;
  gpus: number;
  gpusPerWorker: number;
  /** Extra simulated time after the workload ends for in-flight work to finish. */
  drainS: number;
  /** A request waiting longer than this for prefill is rejected ("queue-timeout"). */
  maxQueueS: number;
  sampleS: number;
  slo: { ttftS: number; itlS: number };
}

/** One time-series sample. */
export interface SimSample {
  t: number;
  prefillWorkers: number;
  decodeWorkers: number;
  mixedWorkers: number;
  kvHitRate: number;
  ttftP50: number;
}

/** Everything a run produces. */
export interface SimRun {
  outcomes: RequestOutcome[];
  samples: SimSample[];
  events: number;
  gpuSeconds: number;
  simulatedS: number;
}

type Ev =
  | { t: "arrive"; plan: SessionPlan; turn: number }
  | { t: "step"; w: SimWorker; v: number }
  | { t: "wake"; w: SimWorker }
  | { t: "kv"; w: SimWorker; req: ReqState; blocks: number[]; cached: number; from: SimWorker; fromBlocks: number[] }
  | { t: "tick" }
  | { t: "ready"; w: SimWorker }
  | { t: "sample" };

const MAX_MACRO_STEPS = 64;
/** Most sequences one worker decodes at once (8 GPUs with DP attention: 64 per GPU). */
const MAX_DECODE_BATCH = 512;

/** Runs one system on one workload. */
export class ClusterSim {
  readonly workers: SimWorker[] = [];
  readonly index = new GlobalBlockIndex();
  readonly sessions = new SessionTracker();
  readonly cost: CostModel;
  readonly blockBytes: number;
  /** Tokens per KV block in this workload. */
  readonly bt: number;
  localThreshold: number;
  private readonly q = new EventQueue<Ev>();
  private readonly outcomes: RequestOutcome[] = [];
  private readonly samples: SimSample[] = [];
  private readonly streamLen = new Map<number, number>();
  private readonly sessHashes = new Map<number, number[]>();
  readonly lastWorker = new Map<string, string>();
  /** Scratch one-token block handed to commitBlock (copied there). */
  private readonly tok = [0];
  private nextReq = 0;
  private reasoningIds = 0;
  private now = 0;
  private horizon: number;
  private gpuSeconds = 0;
  private win = { arrivals: 0, prompt: 0, uncached: 0, output: 0, done: [] as CompletedRequest[] };
  private sampleWin = { prompt: 0, cached: 0, ttfts: [] as number[] };

  /** Builds the cluster for `spec`. */
  constructor(readonly workload: Workload, readonly spec: SystemSpec, readonly cfg: SimConfig) {
    this.cost = new CostModel(cfg.model, cfg.hw, cfg.gpusPerWorker);
    this.bt = workload.blockTokens;
    this.blockBytes = cfg.model.kvBytesPerToken * this.bt;
    this.localThreshold = spec.maxLocalPrefill;
    this.horizon = workload.durationS + cfg.drainS;
    const n = Math.floor(cfg.gpus / cfg.gpusPerWorker);
    const weights = cfg.model.totalParams * cfg.model.weightBytesPerParam;
    const kvBytes = cfg.gpusPerWorker * cfg.hw.hbmBytes * 0.9 - weights;
    const deviceBlocks = Math.max(64, Math.floor(kvBytes / this.blockBytes));
    const hostBlocks = Math.floor((cfg.gpusPerWorker * cfg.hw.hostBytes) / this.blockBytes);
    const workersPerRack = Math.max(1, Math.floor(cfg.hw.gpusPerRack / cfg.gpusPerWorker));
    const sink = (e: KvEvent) => this.index.apply(e);
    for (let i = 0; i < n; i++) {
      const id = `w${i}`;
      const host = spec.hostTier
        ? new TierCache({ tier: "host", capacityBlocks: hostBlocks, bandwidthBytesPerS: cfg.hw.hostBandwidth * cfg.gpusPerWorker, latencyS: 1e-5 }, id, sink)
        : undefined;
      const pool = new BlockPool({
        numBlocks: deviceBlocks, blockSize: 1, clock: () => this.now, policy: spec.makePolicy(this.sessions),
        events: sink, workerId: id,
        onEvict: host ? (b) => host.offload(b.hash, { parentHash: b.parentHash, tokens: b.tokens, meta: b.meta }, this.now) : undefined,
      });
      const role = i < spec.initialPrefill ? "prefill" : spec.mode === "agg" ? "mixed" : "decode";
      const on = i < spec.initialPrefill + spec.initialDecode;
      this.workers.push(new SimWorker(id, i, Math.floor(i / workersPerRack), role, on ? "serving" : "off", pool, host, this.cost));
    }
  }

  /** Runs to the horizon and returns the outcomes. */
  run(): SimRun {
    for (const p of this.workload.sessions) this.q.push(p.start, { t: "arrive", plan: p, turn: 0 });
    if (this.spec.planner) this.q.push(this.spec.planner.intervalS, { t: "tick" });
    this.q.push(this.cfg.sampleS, { t: "sample" });
    let lastT = 0;
    while (this.q.size > 0) {
      const e = this.q.pop()!;
      if (e.time > this.horizon) break;
      this.accountGpu(lastT, e.time);
      lastT = e.time;
      this.now = e.time;
      this.handle(e.data);
    }
    this.now = Math.max(this.now, Math.min(this.horizon, lastT));
    this.rejectLeftovers();
    return { outcomes: this.outcomes, samples: this.samples, events: this.q.processed, gpuSeconds: this.gpuSeconds, simulatedS: this.now };
  }

  private accountGpu(from: number, to: number): void {
    if (to <= from) return;
    let on = 0;
    for (const w of this.workers) if (w.state !== "off") on++;
    this.gpuSeconds += on * this.cfg.gpusPerWorker * (to - from);
  }

  private handle(e: Ev): void {
    switch (e.t) {
      case "arrive": return this.arrive(e.plan, e.turn);
      case "step": if (e.v === e.w.version) this.stepDone(e.w); return;
      case "wake": if (!e.w.busy) this.kick(e.w); return;
      case "kv": return this.kvArrived(e);
      case "tick": return this.tick();
      case "ready":
        if (e.w.state === "starting" && this.now >= e.w.readyAt) { e.w.state = "serving"; this.kick(e.w); }
        return;
      case "sample": return this.sample();
    }
  }

  // ---- requests -------------------------------------------------------------------------------

  private arrive(plan: SessionPlan, turn: number): void {
    const tp = plan.turns[turn];
    let prompt: number;
    let chunks: number[];
    if (tp.fixedChunks !== undefined) {
      prompt = tp.fixedPromptTokens ?? tp.newTokens;
      chunks = tp.fixedChunks;
    } else {
      prompt = (this.streamLen.get(plan.idx) ?? plan.sharedTokens) + tp.newTokens;
      const full = Math.floor(prompt / this.bt);
      chunks = new Array<number>(full);
      for (let c = 0; c < full; c++) chunks[c] = c < plan.sharedChunks.length ? plan.sharedChunks[c] : plan.chunkBase + c;
    }
    let hs = this.sessHashes.get(plan.idx);
    if (hs === undefined || tp.fixedChunks !== undefined) hs = [];
    for (let c = hs.length; c < chunks.length; c++) hs.push(hashBlock(c === 0 ? null : hs[c - 1], [chunks[c]]));
    if (tp.fixedChunks === undefined) this.sessHashes.set(plan.idx, hs);
    const req: ReqState = {
      id: this.nextReq++, plan, turn, arrival: this.now, prompt, output: tp.outputTokens, reasoning: tp.reasoningTokens,
      chunks, hashes: hs.slice(0, chunks.length), cachedTokens: 0, firstToken: -1, finish: -1, itlSum: 0, rejected: null,
      prefillWorker: null, decodeWorker: null,
    };
    this.sessions.turnStarted(plan.id, this.now);
    if (prompt + tp.outputTokens > this.cfg.model.maxContext) return this.reject(req, "prompt-too-long");
    const placement = placeRequest(this, req);
    if (placement === null) return this.reject(req, "no-serving-worker");
    this.win.arrivals++;
    this.win.prompt += prompt;
    this.win.output += tp.outputTokens;
    this.startPlacement(req, placement);
  }

  private startPlacement(req: ReqState, p: Placement): void {
    const w = p.decode;
    req.decodeWorker = w.id;
    this.lastWorker.set(req.plan.id, w.id);
    if (p.prefill === null) {
      this.enqueuePrefill(req, w, true, 0);
    } else {
      req.prefillWorker = p.prefill.id;
      const delay = p.prefixTransferBlocks > 0 ? this.linkSeconds(w, p.prefill, p.prefixTransferBlocks) : 0;
      this.enqueuePrefill(req, p.prefill, false, delay, p.prefixTransferBlocks);
    }
  }

  /** Matches the prefix on `w` (device, then host), reserves blocks and queues the prefill. */
  private enqueuePrefill(req: ReqState, w: SimWorker, local: boolean, delayS: number, extraCached = 0): void {
    // FIFO admission: while earlier requests wait for KV memory here, later ones queue behind them.
    if (w.admitWait.length > 0 || !this.tryEnqueuePrefill(req, w, local, delayS, extraCached)) {
      w.admitWait.push({ req, local, delayS, extraCached, since: this.now });
    }
  }

  /** Admits requests waiting for KV memory on `w`, oldest first; rejects those past the queue limit. */
  private retryWaiting(w: SimWorker): void {
    while (w.kvWait.length > 0) {
      const k = w.kvWait[0];
      if (!this.trySendKv(k.from, k.job, w)) break;
      w.kvWait.shift();
    }
    while (w.admitWait.length > 0) {
      const a = w.admitWait[0];
      if (this.now - a.since > this.cfg.maxQueueS) { w.admitWait.shift(); this.reject(a.req, "queue-timeout"); continue; }
      if (!this.tryEnqueuePrefill(a.req, w, a.local, a.delayS, a.extraCached)) break;
      w.admitWait.shift();
    }
  }

  private tryEnqueuePrefill(req: ReqState, w: SimWorker, local: boolean, delayS: number, extraCached: number): boolean {
    const m = w.pool.matchPrefixHashed(req.chunks, req.hashes);
    const k = m.blockIds.length;
    let h = 0;
    if (w.host !== undefined && k < req.chunks.length) {
      h = w.host.matchContinuation(k === 0 ? null : req.hashes[k - 1], req.hashes.slice(k), (i) => [req.chunks[k + i]]);
    }
    const fetched = Math.min(req.chunks.length - k, h + extraCached);
    const fetchS = h > 0 && w.host ? w.host.transferSeconds(h, this.blockBytes) : 0;
    const total = Math.ceil((req.prompt + (local ? req.output : 0)) / this.bt);
    const fresh = w.pool.tryAllocate(Math.max(0, total - k));
    if (fresh === null) {
      w.pool.release(m.blockIds);
      if (total - k > w.pool.numBlocks) this.reject(req, "kv-capacity");
      return total - k > w.pool.numBlocks;
    }
    const blocks = [...m.blockIds, ...fresh];
    if (fetched > 0) {
      // One meta object per type, shared by the blocks (pools and tiers never mutate metas).
      const sys: BlockMeta = { sessionId: req.plan.id, type: "system" };
      const tool: BlockMeta = { sessionId: req.plan.id, type: "tool-output" };
      const tok = this.tok;
      for (let i = k; i < k + fetched; i++) {
        tok[0] = req.chunks[i];
        w.pool.commitBlock(blocks[i], i === 0 ? null : blocks[i - 1], tok, i < req.plan.sharedChunks.length ? sys : tool);
      }
    }
    const cached = (k + fetched) * this.bt;
    req.cachedTokens = Math.min(req.prompt, cached);
    const left = Math.max(1, req.prompt - cached);
    this.win.uncached += left;
    this.sampleWin.prompt += req.prompt;
    this.sampleWin.cached += req.cachedTokens;
    const job: PrefillJob = {
      req, left, pos: req.prompt - left, blocks, cachedBlocks: k + fetched, local,
      readyAt: this.now + Math.max(delayS, fetchS), enqueuedAt: this.now,
    };
    w.queue.push(job);
    w.queuedTokens += left;
    this.poke(w);
    return true;
  }

  private prefillDone(w: SimWorker, job: PrefillJob): void {
    const req = job.req;
    const full = Math.min(req.chunks.length, Math.floor(req.prompt / this.bt));
    const caches = this.spec.decodeCaches || w.role !== "decode" || !job.local;
    if (caches) this.commitRange(w, job.blocks, req, job.cachedBlocks, full, (c) => req.chunks[c], "tool-output");
    if (job.local) return this.beginDecode(w, req, job.blocks);
    const d = this.workers.find((x) => x.id === req.decodeWorker)!;
    d.inflightKv++;
    // The prefill worker keeps the KV until the decode worker has room for it.
    if (d.kvWait.length > 0 || !this.trySendKv(w, job, d)) d.kvWait.push({ from: w, job });
  }

  /** Sends a finished prefill's KV to decode worker `d`: it reuses what it holds, the rest crosses the link. */
  private trySendKv(w: SimWorker, job: PrefillJob, d: SimWorker): boolean {
    const req = job.req;
    const m = d.pool.matchPrefixHashed(req.chunks, req.hashes);
    const need = Math.ceil((req.prompt + req.output) / this.bt) - m.blockIds.length;
    const fresh = d.pool.tryAllocate(need);
    if (fresh === null) {
      d.pool.release(m.blockIds);
      return false;
    }
    const sendBlocks = Math.max(0, Math.ceil(req.prompt / this.bt) - m.blockIds.length);
    this.q.push(this.now + this.linkSeconds(w, d, sendBlocks), {
      t: "kv", w: d, req, blocks: [...m.blockIds, ...fresh], cached: m.blockIds.length, from: w, fromBlocks: job.blocks,
    });
    return true;
  }

  private kvArrived(e: Extract<Ev, { t: "kv" }>): void {
    e.w.inflightKv--;
    if (e.w.state === "off") e.w.state = "draining";
    e.from.pool.release(e.fromBlocks, { sessionId: e.req.plan.id });
    this.retryWaiting(e.from);
    if (this.spec.decodeCaches) {
      const full = Math.min(e.req.chunks.length, Math.floor(e.req.prompt / this.bt));
      this.commitRange(e.w, e.blocks, e.req, e.cached, full, (c) => e.req.chunks[c], "tool-output");
    }
    this.beginDecode(e.w, e.req, e.blocks);
  }

  private beginDecode(w: SimWorker, req: ReqState, blocks: number[]): void {
    req.firstToken = this.now;
    this.sampleWin.ttfts.push(this.now - req.arrival);
    if (req.output <= 1) return this.finish(w, req, blocks);
    if (w.busy) w.pendingJoin.push({ req, blocks });
    else this.joinDecode(w, req, blocks);
    this.poke(w);
  }

  /** Adds a sequence to the decode batch, or parks it until a slot frees (max batch reached). */
  private joinDecode(w: SimWorker, req: ReqState, blocks: number[]): void {
    if (w.batch >= MAX_DECODE_BATCH) w.decodeWait.push({ req, blocks });
    else w.addDecode(req, blocks, req.output - 1, req.prompt);
  }

  private finish(w: SimWorker, req: ReqState, blocks: number[]): void {
    req.finish = this.now;
    // Time from first to last token, waits for a decode slot included (a client sees that gap).
    req.itlSum = this.now - req.firstToken;
    const plan = req.plan;
    const tp = plan.turns[req.turn];
    if (this.spec.decodeCaches && tp.fixedChunks === undefined) {
      // Decode-generated KV: reusable next turn only where the next prompt repeats it (no dropped reasoning).
      const from = Math.floor(req.prompt / this.bt);
      const to = Math.floor((req.prompt + req.output) / this.bt);
      const reasoning = req.reasoning > 0;
      this.commitRange(w, blocks, req, from, to, (c) => (reasoning ? REASONING_ID_BASE + this.reasoningIds++ : plan.chunkBase + c), reasoning ? "reasoning" : "output");
    }
    this.sessions.turnEnded(plan.id, this.now, tp.tool);
    w.pool.release(blocks, { sessionId: plan.id });
    this.retryWaiting(w);
    this.record(req);
    this.streamLen.set(plan.idx, req.prompt + req.output - req.reasoning);
    const next = req.turn + 1;
    if (next < plan.turns.length && this.now + tp.gapS < this.workload.durationS) {
      this.q.push(this.now + tp.gapS, { t: "arrive", plan, turn: next });
    } else {
      this.sessions.forget(plan.id);
      this.sessHashes.delete(plan.idx);
      this.streamLen.delete(plan.idx);
      this.lastWorker.delete(plan.id);
    }
  }

  private commitRange(w: SimWorker, blocks: number[], req: ReqState, from: number, to: number, id: (c: number) => number, type: "tool-output" | "output" | "reasoning"): void {
    if (from >= to || from >= blocks.length) return;
    const sys: BlockMeta = { sessionId: req.plan.id, type: "system" };
    const other: BlockMeta = { sessionId: req.plan.id, type };
    const tok = this.tok; // the pool copies a committed block's tokens
    for (let c = from; c < to && c < blocks.length; c++) {
      tok[0] = id(c);
      if (w.pool.commitBlock(blocks[c], c === 0 ? null : blocks[c - 1], tok, c < req.plan.sharedChunks.length ? sys : other) === null) break;
    }
  }

  private reject(req: ReqState, reason: string): void {
    req.rejected = reason;
    this.record(req);
    this.sessions.forget(req.plan.id);
    this.sessHashes.delete(req.plan.idx);
    this.streamLen.delete(req.plan.idx);
  }

  private record(req: ReqState): void {
    const ok = req.rejected === null;
    const ttft = ok ? req.firstToken - req.arrival : NaN;
    const itl = ok ? (req.output > 1 ? req.itlSum / (req.output - 1) : 0) : NaN;
    this.outcomes.push({
      ttft, itl, e2e: ok ? req.finish - req.arrival : NaN, prompt: req.prompt, output: req.output,
      cached: req.cachedTokens, arrival: req.arrival, rejected: req.rejected,
    });
    if (ok) this.win.done.push({ isl: req.prompt, osl: req.output, ttftS: ttft, itlS: itl });
  }

  private rejectLeftovers(): void {
    const seen = new Set<ReqState>();
    for (const w of this.workers) {
      for (const j of w.queue) seen.add(j.req);
      for (const s of w.decoding) seen.add(s.req);
      for (const p of w.pendingJoin) seen.add(p.req);
      for (const p of w.decodeWait) seen.add(p.req);
      for (const a of w.admitWait) seen.add(a.req);
      for (const k of w.kvWait) seen.add(k.job.req);
    }
    for (;;) {
      const e = this.q.pop();
      if (e === undefined) break;
      if (e.data.t === "kv") seen.add(e.data.req);
    }
    for (const r of seen) if (r.finish < 0 && r.rejected === null) { r.rejected = "unfinished-at-horizon"; this.record(r); }
  }

  // ---- worker stepping -------------------------------------------------------------------------

  /** New work reached `w`: start a step, or cut a long decode macro-step short so the work joins soon. */
  private poke(w: SimWorker): void {
    if (!w.busy) return this.kick(w);
    const m = w.macro;
    if (m === null || m.k <= 1) return;
    const done = Math.min(m.k, Math.floor((this.now - m.start) / m.stepS) + 1);
    if (done >= m.k) return;
    m.k = done;
    w.version++;
    this.q.push(m.start + done * m.stepS, { t: "step", w, v: w.version });
  }

  private kick(w: SimWorker): void {
    if (w.busy || (w.state !== "serving" && w.state !== "draining")) return;
    const budget = w.role === "prefill" ? 16384 : 8192;
    const decodeSeqs = w.batch;
    let used = w.role === "prefill" ? 0 : decodeSeqs;
    const jobs: PrefillJob[] = [];
    const toks: number[] = [];
    let pairs = 0;
    let wake = Infinity;
    for (let i = 0; i < w.queue.length && used < budget; i++) {
      const j = w.queue[i];
      if (this.now - j.enqueuedAt > this.cfg.maxQueueS) {
        w.queue.splice(i--, 1);
        w.queuedTokens -= j.left;
        w.pool.release(j.blocks, { sessionId: j.req.plan.id });
        this.reject(j.req, "queue-timeout");
        this.retryWaiting(w);
        continue;
      }
      if (j.readyAt > this.now) { wake = Math.min(wake, j.readyAt); continue; }
      const n = Math.min(j.left, budget - used);
      jobs.push(j);
      toks.push(n);
      pairs += this.cost.prefillPairs(j.pos, n);
      used += n;
    }
    const prefillTokens = used - (w.role === "prefill" ? 0 : decodeSeqs);
    if (prefillTokens === 0 && decodeSeqs === 0) {
      if (wake < Infinity) this.q.push(wake, { t: "wake", w });
      return;
    }
    let k = 1;
    if (prefillTokens === 0) {
      k = Math.max(1, Math.min(MAX_MACRO_STEPS, w.stepsToNextFinish()));
      if (wake < Infinity) k = Math.max(1, Math.min(k, Math.floor((wake - this.now) / 0.02)));
    }
    const dens = this.cfg.model.attnDensity >= 1 ? 1 : this.cfg.model.attnDensity;
    const stepS = this.cost.stepTime({
      prefillTokens, prefillAttnPairs: pairs, decodeSeqs, decodeAttnTokens: w.decodeAttended() + decodeSeqs * dens * (k - 1) / 2,
    });
    w.busy = true;
    w.macro = { start: this.now, stepS, k, prefill: jobs, prefillTokens: toks, decode: decodeSeqs > 0 };
    w.version++;
    this.q.push(this.now + k * stepS, { t: "step", w, v: w.version });
  }

  private stepDone(w: SimWorker): void {
    const m = w.macro!;
    w.macro = null;
    // Stay busy while applying the step, so work that becomes ready here joins after it, not mid-way.
    const D = w.batch;
    w.steps += m.k;
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
    if (ptoks > 0) {
      w.wPrefillTokens += ptoks;
      w.wPrefillBusy += m.stepS;
      w.prefillRate = 0.8 * w.prefillRate + 0.2 * (ptoks / m.stepS);
    }
    if (D > 0) {
      w.wDecodeTokens += D * m.k;
      w.wDecodeBusy += m.k * m.stepS;
      w.wDecodeSteps += m.k;
      w.wBatchSum += D * m.k;
      if (ptoks === 0) { w.wPureSteps += m.k; w.wPureBusy += m.k * m.stepS; w.wPureBatch += D * m.k; }
      w.decodeStepEwma = 0.8 * w.decodeStepEwma + 0.2 * m.stepS;
    }
    for (const s of w.popFinished()) this.finish(w, s.req, s.blocks);
    const doneJobs = m.prefill.filter((j) => j.left <= 0);
    if (doneJobs.length > 0) {
      const gone = new Set(doneJobs);
      const keep = w.queue.filter((j) => !gone.has(j));
      w.queue.length = 0;
      w.queue.push(...keep);
    }
    for (const j of doneJobs) this.prefillDone(w, j);
    w.busy = false;
    for (const p of w.pendingJoin.splice(0)) this.joinDecode(w, p.req, p.blocks);
    while (w.decodeWait.length > 0 && w.batch < MAX_DECODE_BATCH) {
      const p = w.decodeWait.shift()!;
      w.addDecode(p.req, p.blocks, p.req.output - 1, p.req.prompt);
    }
    if (w.state === "draining" && w.queue.length === 0 && w.batch === 0 && w.inflightKv === 0 && w.pendingJoin.length === 0 && w.decodeWait.length === 0) w.state = "off";
    this.kick(w);
  }

  // ---- planner, links, samples -------------------------------------------------------------------

  private tick(): void {
    const p = this.spec.planner!;
    const snap: MetricsSnapshot = {
      now: this.now, windowS: p.intervalS, workers: this.workers.map((w) => w.snapshot(this.now)),
      arrivals: this.win.arrivals, arrivedPromptTokens: this.win.prompt, arrivedUncachedTokens: this.win.uncached,
      arrivedOutputTokens: this.win.output, completions: this.win.done,
    };
    this.win = { arrivals: 0, prompt: 0, uncached: 0, output: 0, done: [] };
    for (const a of p.tick(snap)) applyAction(this, a);
    this.q.push(this.now + p.intervalS, { t: "tick" });
  }

  /** Starts a worker that serves after the system's start-up time. */
  startWorker(w: SimWorker, role: "prefill" | "decode"): void {
    w.role = role;
    if (w.state === "draining") { w.state = "serving"; return; }
    w.state = "starting";
    w.readyAt = this.now + this.spec.startupS;
    this.q.push(this.now + this.spec.startupS, { t: "ready", w });
  }

  /** Re-kicks a worker after a role change. */
  wake(w: SimWorker): void {
    this.poke(w);
  }

  /** Seconds to move `blocks` KV blocks between two workers. */
  linkSeconds(a: SimWorker, b: SimWorker, blocks: number): number {
    if (blocks <= 0 || a === b) return 0;
    const same = a.rack === b.rack;
    const bw = (same ? this.cfg.hw.intraRackBandwidth : this.cfg.hw.interRackBandwidth) * this.cfg.gpusPerWorker;
    return (same ? this.cfg.hw.intraRackLatencyS : this.cfg.hw.interRackLatencyS) + (blocks * this.blockBytes) / bw;
  }

  /** Current simulated time. */
  time(): number {
    return this.now;
  }

  private sample(): void {
    const ttfts = this.sampleWin.ttfts.sort((a, b) => a - b);
    let pre = 0, dec = 0, mix = 0;
    for (const w of this.workers) {
      if (w.state !== "serving") continue;
      if (w.role === "prefill") pre++;
      else if (w.role === "decode") dec++;
      else mix++;
    }
    this.samples.push({
      t: this.now, prefillWorkers: pre, decodeWorkers: dec, mixedWorkers: mix,
      kvHitRate: this.sampleWin.prompt > 0 ? this.sampleWin.cached / this.sampleWin.prompt : NaN,
      ttftP50: ttfts.length > 0 ? ttfts[Math.floor(ttfts.length / 2)] : NaN,
    });
    this.sampleWin = { prompt: 0, cached: 0, ttfts: [] };
    if (this.now + this.cfg.sampleS <= this.horizon) this.q.push(this.now + this.cfg.sampleS, { t: "sample" });
  }
}
