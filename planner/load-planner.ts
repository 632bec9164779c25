/**
 * The baseline's "load mode" (Dynamo's load-based planner): a short loop (5 s) that adds one
 * replica to a pool when its workers' predicted latency exceeds the target, and removes one only
 * when every worker is under target·(N−1)/N·80%. Latency is predicted from queued work and the
 * offline profile, so it sees queues but still reasons with profiled (not measured) rates.
 */
import { decodeThroughput, expectedItl, type OfflineProfile, prefillThroughput } from "./profile.ts";
import type { MetricsSnapshot, Planner, PlannerAction, WorkerSnapshot } from "./types.ts";
import { cleanSnapshot } from "./snapshot-guard.ts";
import { workerBudget } from "./sla-profile-planner.ts";

/** Knobs of {@link LoadPlanner}; defaults follow Dynamo's documentation. */
export interface LoadPlannerOptions {
  profile: OfflineProfile;
  /** Worker budget, or "present": the snapshot's workers but draining ones (see SlaPlannerOptions). */
  maxWorkers: number | "present";
  intervalS?: number;
  ttftTargetS?: number;
  itlTargetS?: number;
  /** Scale-down guard factor (Dynamo: 0.8). */
  scaleDownFactor?: number;
  /** Typical ISL used to read the profile (Dynamo profile default 3000). */
  isl?: number;
}

/** Dynamo-like load-mode planner: ±1 replica per pool per interval. */
export class LoadPlanner implements Planner {
  readonly name = "sla-load";
  readonly intervalS: number;
  private readonly o: Required<LoadPlannerOptions>;
  private islEwma: number;
  private lastNow = 0;
  /** The pool sizes the last tick settled on (changed or kept); null before the first. */
  private pools: { prefill: number; decode: number } | null = null;

  /** Creates the planner. */
  constructor(opts: LoadPlannerOptions) {
    this.o = { intervalS: 5, ttftTargetS: 0.5, itlTargetS: 0.05, scaleDownFactor: 0.8, isl: 3000, ...opts };
    this.intervalS = this.o.intervalS;
    this.islEwma = this.o.isl;
  }

  /** Options in effect. */
  options(): Readonly<Required<LoadPlannerOptions>> {
    return this.o;
  }

  /** One ±1 decision per pool. */
  tick(snapshot: MetricsSnapshot): PlannerAction[] {
    // Measured inputs: one NaN prompt count would otherwise stick in the ISL average for good.
    const s = cleanSnapshot(snapshot, this.intervalS, this.lastNow);
    this.lastNow = s.now;
    if (s.arrivals > 0) this.islEwma = 0.7 * this.islEwma + 0.3 * (s.arrivedPromptTokens / s.arrivals);
    const serving = s.workers.filter((w) => w.state === "serving" || w.state === "starting");
    const pre = serving.filter((w) => w.role === "prefill");
    const dec = serving.filter((w) => w.role === "decode");
    const pRate = prefillThroughput(this.o.profile, this.islEwma);
    const ttfts = pre.filter((w) => w.state === "serving").map((w) => w.waitingPrefillTokens / pRate + this.islEwma / pRate);
    const ctx = this.islEwma * 1.05;
    const dRate = decodeThroughput(this.o.profile, ctx, this.o.itlTargetS);
    const baseItl = expectedItl(this.o.profile, ctx, this.o.itlTargetS);
    // Predicted ITL grows with batch beyond what the profile's best batch sustains.
    const itls = dec.filter((w) => w.state === "serving").map((w) => itlFor(w, baseItl, dRate, this.o.itlTargetS));
    const prefill = this.step(pre.length, ttfts, this.o.ttftTargetS);
    const decode = this.step(dec.length, itls, this.o.itlTargetS);
    let p = prefill;
    let d = decode;
    const budget = workerBudget(this.o.maxWorkers, s.workers);
    if (p + d > budget) {
      if (p > pre.length) p = pre.length;
      if (p + d > budget) d = budget - p;
    }
    this.pools = { prefill: p, decode: d };
    if (p === pre.length && d === dec.length) return [];
    return [{ kind: "replicas", prefill: p, decode: d }];
  }

  /**
   * With a budget of the workers present, the pool sizes the last tick settled on, held as Dynamo's
   * replica counts are held (a worker that leaves is replaced): a worker that joins is spare (parked)
   * until a tick wants one more, rather than serving outside both pools, and a pool a leaver left
   * short is refilled from the spare ones. Nothing before the first tick or with a fixed budget.
   */
  rebudget(_workers: readonly WorkerSnapshot[]): PlannerAction[] {
    if (this.pools === null || this.o.maxWorkers !== "present") return [];
    return [{ kind: "replicas", ...this.pools }];
  }

  private step(n: number, predicted: number[], target: number): number {
    if (n === 0) return 1;
    if (predicted.length === 0) return n;
    const mean = predicted.reduce((a, b) => a + b, 0) / predicted.length;
    if (mean > target) return n + 1;
    const guard = (target * (n - 1) / n) * this.o.scaleDownFactor;
    if (n > 1 && predicted.every((x) => x < guard)) return n - 1;
    return n;
  }
}

/**
 * Predicted ITL of a decode worker: its measured step time when it decoded in the window (else the
 * profile scaled by batch), pushed over the target when sequences queue for a slot or for KV.
 */
function itlFor(w: WorkerSnapshot, baseItl: number, profiledTokS: number, target: number): number {
  const profiledBatch = profiledTokS * baseItl;
  const est = w.decodeStepS > 0 ? w.decodeStepS : baseItl * Math.max(1, w.decodeBatch / Math.max(1, profiledBatch));
  return w.waitingDecodes > 0 ? Math.max(est, target * 1.01) : est;
}
