/**
 * Deterministic discrete-event cluster simulator. It owns time and the workers' queues; every
 * decision (routing, planning, retention) is made by the pure planner/ and kv/ code it calls.
 * This file builds the cluster and runs the event loop, planner ticks and samples; the request path
 * lives in admission.ts, stepping.ts, kv-handoff.ts and completion.ts.
 */
import { BlockPool } from "../../kv/block-pool.ts";
import { GlobalBlockIndex } from "../../kv/global-index.ts";
import { SessionTracker } from "../../kv/session-tracker.ts";
import { SessionHomes } from "./session-homes.ts";
import { TierCache } from "../../kv/tiers.ts";
import type { KvEvent } from "../../kv/types.ts";
import type { LinkModel } from "../../planner/routers.ts";
import type { CompletedRequest, MetricsSnapshot, PlannerAction, Role } from "../../planner/types.ts";
import { applyAction } from "./actions.ts";
import { arrive, rejectHeldSessions, releaseHeldSessions } from "./admission.ts";
import { rejectLeftovers } from "./completion.ts";
import { CostModel } from "./cost-model.ts";
import { EventQueue } from "./event-queue.ts";
import { kvArrived } from "./kv-handoff.ts";
import type { HardwareProfile, ModelProfile } from "./profiles.ts";
import type { RequestOutcome } from "./request.ts";
import { newPrefetchStats, type PrefetchLanding, prefetchDue } from "./prefetch.ts";
import type { SimEv } from "./sim-events.ts";
import { kick, poke, stepDone } from "./stepping.ts";
import type { SystemSpec } from "./systems.ts";
import { SimWorker } from "./worker.ts";
import type { SessionPlan, Workload } from "./workload-types.ts";

/** Simulator settings. */
export interface SimConfig {
  /** GPUs of a worker that each hold and read the whole KV (default 1; see CostModel). */
  kvReplication?: number;
  /** Bytes of a cluster-wide remote KV store (0 or absent: none) that workers' host tiers spill into. */
  remoteStoreBytes?: number;
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

/** A role flip or step-mixing switch the simulated cluster applied, at simulated time `t` seconds. */
export interface SimChange {
  t: number;
  action: PlannerAction;
  from?: Role;
}

/** Runs one system on one workload. */
export class ClusterSim {
  readonly workers: SimWorker[] = [];
  readonly index = new GlobalBlockIndex();
  readonly sessions = new SessionTracker();
  readonly cost: CostModel;
  /** Shared remote KV store below every host tier (RDMA-class link), when configured. */
  readonly remote: TierCache | undefined;
  readonly blockBytes: number;
  /**
   * Bytes a worker moves per block over a link or from host: the block once, or once per GPU when
   * tensor-parallel attention replicates the KV on each of the worker's GPUs.
   */
  readonly movedBytesPerBlock: number;
  /**
   * Role flips and switches between mixed and split steps applied (planner actions that changed
   * something), in order, with the simulated time of each (a flip's worker role before it in `from`).
   */
  readonly changes: SimChange[] = [];
  /** Role flips applied. */
  get roleFlips(): number {
    return this.changes.filter((c) => c.action.kind === "flip").length;
  }
  /** Switches between mixed and split steps applied. */
  get mixingChanges(): number {
    return this.changes.filter((c) => c.action.kind === "step-mixing").length;
  }
  /** Turns whose prefix a peer sent to their decode worker (peer transfer). */
  peerTransfers = 0;
  /** Remote prefills whose decode worker first sent its cached prefix to the prefill worker. */
  prefixesToPrefill = 0;
  /** Blocks those transfers read from the holder's host memory (router option peerHostBlocks). */
  peerHostBlocks = 0;
  /** Blocks prefetched from host memory ahead of a session's predicted return (ours, spec.prefetchLeadS). */
  prefetchedBlocks = 0;
  /**
   * Admitted prefills that waited for KV from host memory (a fetch on arrival, or the rest of a
   * prefetch still copying), and the seconds of those waits: what prefetch takes off first tokens.
   */
  hostWaits = 0;
  hostWaitS = 0;
  /** What the prefetch looks came to. */
  readonly prefetchStats = newPrefetchStats();
  /** Per session id: where and when its prefetched blocks land (prefetch.ts). */
  readonly prefetchLanding = new Map<string, PrefetchLanding>();
  /** New sessions are held at the front door (planner action "admission"). */
  holdNewSessions = false;
  /** Sessions held there, oldest first, with the time their first turn arrived. */
  readonly heldSessions: { plan: SessionPlan; at: number }[] = [];
  /** Longest a session is held there before it enters anyway. */
  maxHoldS = Infinity;
  /** New sessions that may still enter before the next tick (planner action "admission"). */
  newSessionBudget = Infinity;
  /** A session held `maxHoldS` is turned away instead of entering. */
  rejectAfterHold = false;
  /** Sessions that were held, for reports. */
  sessionsHeld = 0;
  /** Tokens per KV block in this workload. */
  readonly bt: number;
  localThreshold: number;
  /** Workers run prefill chunks and decodes as separate steps (planner action "step-mixing"). */
  splitSteps: boolean;
  // State below is shared with the parts of the simulator in admission.ts, kv-handoff.ts,
  // stepping.ts and completion.ts (functions over this object); nothing outside src/sim touches it.
  /** Pending events. */
  readonly q = new EventQueue<SimEv>();
  /** Outcomes of finished and rejected requests, in order. */
  readonly outcomes: RequestOutcome[] = [];
  private readonly samples: SimSample[] = [];
  /** Per session (plan index): tokens of its stream so far, and the chained hashes of its blocks. */
  readonly streamLen = new Map<number, number>();
  readonly sessHashes = new Map<number, number[]>();
  /** Links as the session router sees them (built once; the router only reads them). */
  readonly links: LinkModel;
  /** Per worker (by index): its slot in the global index's per-worker overlap arrays. */
  readonly indexSlots: number[] = [];
  /** Per live session id: the worker that decoded its last turn (and live sessions per worker). */
  readonly lastWorker = new SessionHomes();
  /** Scratch one-token block handed to commitBlock (copied there). */
  readonly tok = [0];
  /** Next request id and next content id for reasoning blocks (never reused). */
  nextReq = 0;
  reasoningIds = 0;
  /** Current simulated time (read it through {@link ClusterSim.time} outside src/sim). */
  now = 0;
  private horizon: number;
  private gpuSeconds = 0;
  /** Planner window counters (reset each tick) and sample window counters (reset each sample). */
  win = { arrivals: 0, prompt: 0, uncached: 0, output: 0, done: [] as CompletedRequest[] };
  sampleWin = { prompt: 0, cached: 0, ttfts: [] as number[] };

  /** Builds the cluster for `spec`. */
  constructor(readonly workload: Workload, readonly spec: SystemSpec, readonly cfg: SimConfig) {
    this.cost = new CostModel(cfg.model, cfg.hw, cfg.gpusPerWorker, cfg.kvReplication ?? 1);
    this.bt = workload.blockTokens;
    this.blockBytes = cfg.model.kvBytesPerToken * this.bt;
    this.movedBytesPerBlock = this.blockBytes * (cfg.kvReplication ?? 1);
    this.localThreshold = spec.maxLocalPrefill;
    this.splitSteps = spec.stepMixing === "split";
    this.horizon = workload.durationS + cfg.drainS;
    const hw = cfg.hw;
    const g = cfg.gpusPerWorker;
    this.links = {
      bandwidth: (a, b) => (a === b ? hw.intraRackBandwidth : hw.interRackBandwidth) * g,
      latency: (a, b) => (a === b ? hw.intraRackLatencyS : hw.interRackLatencyS), hostBandwidth: hw.hostBandwidth * g,
    };
    const n = Math.floor(cfg.gpus / cfg.gpusPerWorker);
    const weights = cfg.model.totalParams * cfg.model.weightBytesPerParam;
    // With replicated KV every GPU stores every token, so the worker holds what one GPU's share holds.
    const kvBytes = (cfg.gpusPerWorker * cfg.hw.hbmBytes * 0.9 - weights) / (cfg.kvReplication ?? 1);
    const deviceBlocks = Math.max(64, Math.floor(kvBytes / this.blockBytes));
    const hostBlocks = Math.floor((cfg.gpusPerWorker * cfg.hw.hostBytes) / this.blockBytes);
    const workersPerRack = Math.max(1, Math.floor(cfg.hw.gpusPerRack / cfg.gpusPerWorker));
    const sink = (e: KvEvent) => this.index.apply(e);
    const remoteBlocks = Math.floor((cfg.remoteStoreBytes ?? 0) / this.blockBytes);
    // Routers price only device and host overlaps, so the store publishes no events of its own.
    this.remote = remoteBlocks > 0
      ? new TierCache({ tier: "remote", capacityBlocks: remoteBlocks, bandwidthBytesPerS: cfg.hw.interRackBandwidth * cfg.gpusPerWorker, latencyS: cfg.hw.interRackLatencyS }, "remote-store")
      : undefined;
    for (let i = 0; i < n; i++) {
      const id = `w${i}`;
      const host = spec.hostTier
        ? new TierCache({ tier: "host", capacityBlocks: hostBlocks, bandwidthBytesPerS: cfg.hw.hostBandwidth * cfg.gpusPerWorker, latencyS: 1e-5 }, id, sink)
        : undefined;
      host?.spillTo(this.remote);
      const policy = spec.makePolicy(this.sessions);
      const pool = new BlockPool({
        numBlocks: deviceBlocks, blockSize: 1, clock: () => this.now, policy,
        events: sink, workerId: id,
        onEvict: host ? (b) => host.offload(b.hash, { parentHash: b.parentHash, tokens: b.tokens, meta: b.meta }, this.now) : undefined,
      });
      const role = i < spec.initialPrefill ? "prefill" : spec.initialRole;
      const on = i < spec.initialPrefill + spec.initialDecode;
      this.indexSlots.push(this.index.workerSlot(id));
      this.workers.push(new SimWorker(id, i, Math.floor(i / workersPerRack), role, on ? "serving" : "off", pool, host, this.cost, policy));
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
    rejectLeftovers(this);
    return { outcomes: this.outcomes, samples: this.samples, events: this.q.processed, gpuSeconds: this.gpuSeconds, simulatedS: this.now };
  }

  private accountGpu(from: number, to: number): void {
    if (to <= from) return;
    let on = 0;
    for (const w of this.workers) if (w.state !== "off") on++;
    this.gpuSeconds += on * this.cfg.gpusPerWorker * (to - from);
  }

  private handle(e: SimEv): void {
    switch (e.t) {
      case "arrive": return arrive(this, e.plan, e.turn);
      case "step": if (e.v === e.w.version) stepDone(this, e.w); return;
      case "wake": if (!e.w.busy) kick(this, e.w); return;
      case "kv": return kvArrived(this, e);
      case "tick": return this.tick();
      case "ready":
        if (e.w.state === "starting" && this.now >= e.w.readyAt) { e.w.state = "serving"; kick(this, e.w); }
        return;
      case "sample": return this.sample();
      case "prefetch": return prefetchDue(this, e, this.spec.prefetchLeadS ?? 0);
    }
  }

  private tick(): void {
    const p = this.spec.planner!;
    const snap: MetricsSnapshot = {
      now: this.now, windowS: p.intervalS, workers: this.workers.map((w) => w.snapshot(this.now)),
      arrivals: this.win.arrivals, arrivedPromptTokens: this.win.prompt, arrivedUncachedTokens: this.win.uncached,
      arrivedOutputTokens: this.win.output, completions: this.win.done,
    };
    this.win = { arrivals: 0, prompt: 0, uncached: 0, output: 0, done: [] };
    for (const a of p.tick(snap)) applyAction(this, a);
    // Held sessions enter once they have waited the longest the front door holds them.
    let due = 0;
    while (due < this.heldSessions.length && this.now - this.heldSessions[due].at >= this.maxHoldS) due++;
    if (due > 0 && this.rejectAfterHold) rejectHeldSessions(this, due);
    else if (due > 0) releaseHeldSessions(this, due);
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
    poke(this, w);
  }

  /** Seconds to move `blocks` KV blocks between two workers. */
  linkSeconds(a: SimWorker, b: SimWorker, blocks: number): number {
    if (blocks <= 0 || a === b) return 0;
    const same = a.rack === b.rack;
    const bw = (same ? this.cfg.hw.intraRackBandwidth : this.cfg.hw.interRackBandwidth) * this.cfg.gpusPerWorker;
    return (same ? this.cfg.hw.intraRackLatencyS : this.cfg.hw.interRackLatencyS) + (blocks * this.movedBytesPerBlock) / bw;
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
