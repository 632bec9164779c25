/**
 * The baseline: Dynamo's SLA planner in throughput mode, as its documentation describes it.
 * Every `intervalS` (180 s) it predicts the next interval's request count, ISL and OSL from the
 * completions it observed, corrects the offline profile by observed/expected TTFT and ITL, and sets
 *   prefill replicas = ceil(req·isl/interval · min(1, ttftCorrection) / profiled prefill tok/s at isl)
 *   decode replicas  = ceil(req·osl/interval / profiled decode tok/s meeting itlTarget/itlCorrection at isl+osl/2)
 * clamped to [min, budget]. New workers serve after the simulator's start-up time (model load).
 */
import {
  decodeThroughput, expectedItl, expectedTtft, type OfflineProfile, prefillThroughput,
} from "./profile.ts";
import { type MetricsSnapshot, type Planner, type PlannerAction, PlannerConfigError, type WorkerSnapshot } from "./types.ts";
import { cleanSnapshot } from "./snapshot-guard.ts";

/** Intervals of history the predictors read (the moving average reads the last 3). */
const HISTORY = 3;

/** Every knob of the baseline planner; the defaults are Dynamo's documented ones. */
export interface SlaPlannerOptions {
  profile: OfflineProfile;
  /** Adjustment interval (s). Dynamo default 180. */
  intervalS?: number;
  /** SLA targets. Dynamo defaults: TTFT 500 ms, ITL 50 ms. */
  ttftTargetS?: number;
  itlTargetS?: number;
  /** No decisions before this much time has passed (planner start-up delay; Dynamo: 30 s). */
  startupDelayS?: number;
  /**
   * Worker budget (GPU budget ÷ GPUs per worker), or "present": every worker the snapshot lists but
   * draining ones (a cluster whose workers join and leave by themselves, `serve --nats`). And the
   * per-pool minimums.
   */
  maxWorkers: number | "present";
  minPrefill?: number;
  minDecode?: number;
  /** Load predictor: "constant" (last interval) or "moving-average" over the last 3 intervals. */
  predictor?: "constant" | "moving-average";
}

interface IntervalObs {
  requests: number;
  isl: number;
  osl: number;
}

/** Dynamo-like SLA planner (throughput mode). */
export class SlaProfilePlanner implements Planner {
  readonly name = "sla-profile";
  readonly intervalS: number;
  private readonly o: Required<SlaPlannerOptions>;
  private readonly history: IntervalObs[] = [];
  private startedAt: number | null = null;
  private lastNow = 0;
  /** The pools the last decision wanted before its budget cut them (null: no decision yet). */
  private wanted: { prefill: number; decode: number } | null = null;
  /** Last correction factors, exposed for reports. */
  ttftCorrection = 1;
  itlCorrection = 1;

  /** Creates the planner; throws {@link PlannerConfigError} on an impossible budget. */
  constructor(opts: SlaPlannerOptions) {
    if (opts.maxWorkers !== "present" && !(opts.maxWorkers >= 2)) throw new PlannerConfigError(`Worker budget must be at least 2, got ${opts.maxWorkers}`);
    this.o = {
      intervalS: 180, ttftTargetS: 0.5, itlTargetS: 0.05, startupDelayS: 30, minPrefill: 1, minDecode: 1,
      predictor: "constant", ...opts,
    };
    this.intervalS = this.o.intervalS;
  }

  /** Options in effect (for reports: every baseline parameter is stated). */
  options(): Readonly<Required<SlaPlannerOptions>> {
    return this.o;
  }

  /** Replica counts for the next interval (an empty list before the start-up delay or without data). */
  tick(snapshot: MetricsSnapshot): PlannerAction[] {
    // Measured inputs: a NaN TTFT would make the correction, and so the replica counts, NaN.
    const s = cleanSnapshot(snapshot, this.intervalS, this.lastNow);
    this.lastNow = s.now;
    if (this.startedAt === null) this.startedAt = s.now;
    const done = s.completions;
    if (done.length === 0) return [];
    const isl = done.reduce((a, c) => a + c.isl, 0) / done.length;
    const osl = done.reduce((a, c) => a + c.osl, 0) / done.length;
    // Demand is measured as completions, as Dynamo's frontend metrics report it (all of them, where the
    // snapshot's list is the latest only: a 180 s window at over 364 requests/s).
    const finished = Math.max(done.length, s.completedRequests ?? 0);
    this.history.push({ requests: finished * (this.o.intervalS / Math.max(1e-9, s.windowS)), isl, osl });
    if (this.history.length > HISTORY) this.history.shift();
    if (s.now - this.startedAt < this.o.startupDelayS) return [];
    const budget = workerBudget(this.o.maxWorkers, s.workers);
    // Fewer workers than a prefill and a decode pool need: nothing to plan until more join.
    if (budget < this.o.minPrefill + this.o.minDecode) return [];
    const ttft = done.reduce((a, c) => a + c.ttftS, 0) / done.length;
    const itl = done.reduce((a, c) => a + c.itlS, 0) / done.length;
    this.ttftCorrection = ttft / Math.max(1e-9, expectedTtft(this.o.profile, isl));
    this.itlCorrection = itl / Math.max(1e-9, expectedItl(this.o.profile, isl + osl / 2, this.o.itlTargetS));
    const next = this.predict();
    const interval = this.o.intervalS;
    const prefillDemand = (next.requests * next.isl / interval) * Math.min(1, this.ttftCorrection);
    const prefill = Math.ceil(prefillDemand / prefillThroughput(this.o.profile, next.isl));
    const correctedItl = this.o.itlTargetS / Math.max(1e-9, this.itlCorrection);
    const perWorkerDecode = decodeThroughput(this.o.profile, next.isl + next.osl / 2, correctedItl);
    const decode = Math.ceil((next.requests * next.osl / interval) / perWorkerDecode);
    this.wanted = { prefill: Math.max(this.o.minPrefill, prefill), decode: Math.max(this.o.minDecode, decode) };
    return [this.withinBudget(budget)];
  }

  /**
   * With a budget of the workers present (`maxWorkers: "present"`), the last decision's pools cut to
   * the workers there are now: a worker that joins is placed at once, as Dynamo starts each worker in
   * its pool, instead of serving outside the pools until the next interval (up to 180 s later); a pool
   * a leaver left short is refilled from the spare ones. Nothing before the first decision, with a
   * fixed budget (it did not change), or with too few workers for both pools.
   */
  rebudget(workers: readonly WorkerSnapshot[]): PlannerAction[] {
    if (this.wanted === null || this.o.maxWorkers !== "present") return [];
    const budget = workerBudget(this.o.maxWorkers, workers);
    if (budget < this.o.minPrefill + this.o.minDecode) return [];
    return [this.withinBudget(budget)];
  }

  /** The wanted pools, scaled down together when they exceed `budget`, as Dynamo does. */
  private withinBudget(budget: number): PlannerAction {
    let { prefill, decode } = this.wanted!;
    if (prefill + decode > budget) {
      const f = budget / (prefill + decode);
      prefill = Math.max(this.o.minPrefill, Math.floor(prefill * f));
      decode = Math.max(this.o.minDecode, budget - prefill);
    }
    return { kind: "replicas", prefill, decode };
  }

  private predict(): IntervalObs {
    const h = this.history;
    if (this.o.predictor === "constant" || h.length < 2) return h[h.length - 1];
    const last = h.slice(-HISTORY);
    const avg = (f: (x: IntervalObs) => number) => last.reduce((a, x) => a + f(x), 0) / last.length;
    return { requests: avg((x) => x.requests), isl: avg((x) => x.isl), osl: avg((x) => x.osl) };
  }
}

/** The workers a decision may place: the fixed budget, or those present and not leaving. */
export function workerBudget(maxWorkers: number | "present", workers: readonly WorkerSnapshot[]): number {
  return maxWorkers === "present" ? workers.filter((w) => w.state !== "draining").length : maxWorkers;
}
