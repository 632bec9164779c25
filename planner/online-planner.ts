/**
 * Ours: every tick (~1 s) estimate rates online (no offline profile), predict P95 TTFT and ITL for
 * every prefill/decode split of the fixed worker set, and flip roles toward the best split.
 * Anti-flapping: a move must beat the current split by a margin (after charging its switch cost),
 * must be wanted on consecutive ticks unless the SLO is already badly missed, is rate-limited per
 * tick, and a flipped worker cools down before it can flip again.
 */
import type { MetricsSnapshot, Planner, PlannerAction, Role, WorkerSnapshot } from "./types.ts";

/** Knobs of {@link OnlinePlanner}. */
export interface OnlinePlannerOptions {
  intervalS?: number;
  ttftTargetS?: number;
  itlTargetS?: number;
  /** Relative improvement a new split must bring (hysteresis). */
  margin?: number;
  /** Consecutive ticks a move must be wanted before it happens (unless urgent). */
  confirmTicks?: number;
  /** Seconds a worker must stay in a role after flipping. */
  cooldownS?: number;
  /** Most workers flipped in one tick, as a fraction of the fleet. */
  maxFlipFraction?: number;
  /** Cost charged per flipped worker (in SLO-pressure units): the drain and the transient it causes. */
  flipCost?: number;
  /** Bounds of the adaptive local-prefill threshold (uncached tokens). */
  minLocalPrefill?: number;
  maxLocalPrefill?: number;
  initialLocalPrefill?: number;
  /** Most sequences a worker decodes at once (engine setting): splits that need more are infeasible. */
  maxDecodeBatch?: number;
}

/** Online, measurement-driven role planner. */
export class OnlinePlanner implements Planner {
  readonly name = "online";
  readonly intervalS: number;
  private readonly o: Required<OnlinePlannerOptions>;
  private prefillRate = 0; // tokens/s per worker while prefilling
  private stepA = 0.01; // decode step ≈ stepA + stepB·batch, refit every tick
  private stepB = 0.0001;
  // Exponentially weighted sums for the least-squares fit of step time on batch.
  private fit = { n: 0, x: 0, y: 0, xx: 0, xy: 0 };
  private demand = 0; // uncached prefill tokens/s arriving
  private decodeDemand = 0; // output tokens/s arriving
  private pending: { target: number; ticks: number } | null = null;
  private readonly lastFlip = new Map<string, number>();
  private threshold: number;

  /** Creates the planner with the given knobs. */
  constructor(opts: OnlinePlannerOptions = {}) {
    this.o = {
      intervalS: 1, ttftTargetS: 0.5, itlTargetS: 0.05, margin: 0.15, confirmTicks: 2, cooldownS: 15,
      maxFlipFraction: 0.0625, flipCost: 0.03, minLocalPrefill: 256, maxLocalPrefill: 2048,
      initialLocalPrefill: 512, maxDecodeBatch: 512, ...opts,
    };
    this.intervalS = this.o.intervalS;
    this.threshold = this.o.initialLocalPrefill;
  }

  /** Online estimates, for logs and tests. */
  estimates(): { prefillRate: number; demand: number; decodeDemand: number; stepA: number; stepB: number } {
    return { prefillRate: this.prefillRate, demand: this.demand, decodeDemand: this.decodeDemand, stepA: this.stepA, stepB: this.stepB };
  }

  /** Current local-prefill threshold (uncached tokens a decode worker prefills itself). */
  localPrefillThreshold(): number {
    return this.threshold;
  }

  /**
   * Predicted [P95 TTFT, ITL] with `p` prefill workers out of `n`, from the online estimates.
   * Prefill: queue drain + an M/M/1-like P95 wait; past saturation the queue grows for the next
   * HORIZON seconds. Decode: by Little's law the batch a worker needs for the output-token demand is
   * b = λ·a / (d − λ·B) for step = a + B·b; past the batch limit ITL stretches by demand ÷ capacity.
   */
  predict(p: number, n: number, backlog: number, decodeSeqs: number, meanUncached: number): [number, number] {
    const HORIZON = 10;
    const rate = Math.max(1, this.prefillRate);
    const cap = Math.max(1e-9, p * rate);
    const rho = this.demand / cap;
    const service = meanUncached / rate;
    const r = Math.min(rho, 0.95);
    let ttft = backlog / cap + service + (3 * service * r) / (1 - r);
    if (rho > 0.95) ttft += HORIZON * (rho - 0.95);
    const d = n - p;
    if (d <= 0) return [ttft, 1e3];
    const a = this.stepA, B = this.stepB, max = this.o.maxDecodeBatch;
    const lambda = Math.max(this.decodeDemand, 0) / d; // tokens/s per decode worker
    const held = decodeSeqs / d;
    let b = lambda * B < 1 ? (lambda * a) / (1 - lambda * B) : Infinity;
    b = Math.max(b, Math.min(held, max)); // sequences already decoding stay until they finish
    let itl = a + B * Math.min(b, max);
    if (b > max || held > max) {
      const capTok = max / (a + B * max);
      itl *= Math.max(lambda / capTok, held / max, 1);
    }
    return [ttft, itl];
  }

  /** One planning step. */
  tick(s: MetricsSnapshot): PlannerAction[] {
    const live = s.workers.filter((w) => w.state === "serving");
    this.learn(s, live);
    const n = live.length;
    if (n < 2) return [];
    const pre = live.filter((w) => w.role === "prefill");
    const p0 = pre.length;
    const backlog = live.reduce((a, w) => a + w.waitingPrefillTokens, 0);
    const seqs = live.reduce((a, w) => a + w.decodeBatch + w.waitingDecodes, 0);
    const meanUncached = s.arrivals > 0 ? s.arrivedUncachedTokens / s.arrivals : 1000;
    const pressure = (p: number) => {
      const [t, i] = this.predict(p, n, backlog, seqs, meanUncached);
      return Math.max(t / this.o.ttftTargetS, i / this.o.itlTargetS);
    };
    let best = p0;
    let bestCost = pressure(p0);
    const current = bestCost;
    for (let p = 1; p < n; p++) {
      const flips = Math.abs(p - p0);
      const c = pressure(p) + flips * this.o.flipCost;
      if (c < bestCost - 1e-12) { best = p; bestCost = c; }
    }
    const actions: PlannerAction[] = this.adaptThreshold(s.now, p0, n, backlog, seqs, meanUncached);
    const worthIt = best !== p0 && bestCost < current * (1 - this.o.margin);
    if (!worthIt) { this.pending = null; return actions; }
    const urgent = current > 2;
    const dir = Math.sign(best - p0);
    if (this.pending === null || Math.sign(this.pending.target - p0) !== dir) this.pending = { target: best, ticks: 0 };
    this.pending.ticks++;
    this.pending.target = best;
    if (!urgent && this.pending.ticks < this.o.confirmTicks) return actions;
    const maxFlips = Math.max(1, Math.ceil(n * this.o.maxFlipFraction));
    const want = Math.min(maxFlips, Math.abs(best - p0));
    actions.push(...this.chooseFlips(live, dir > 0 ? "prefill" : "decode", want, s.now));
    this.pending = null;
    return actions;
  }

  private chooseFlips(live: WorkerSnapshot[], to: Role, count: number, now: number): PlannerAction[] {
    const from: Role = to === "prefill" ? "decode" : "prefill";
    const eligible = live
      .filter((w) => w.role === from && now - (this.lastFlip.get(w.id) ?? -Infinity) >= this.o.cooldownS)
      // Cheapest to flip first: fewest decodes to drain, or least prefill queued.
      .sort((a, b) => (to === "prefill" ? a.decodeBatch - b.decodeBatch : a.waitingPrefillTokens - b.waitingPrefillTokens) || (a.id < b.id ? -1 : 1));
    const out: PlannerAction[] = [];
    for (const w of eligible.slice(0, count)) {
      this.lastFlip.set(w.id, now);
      out.push({ kind: "flip", workerId: w.id, to });
    }
    return out;
  }

  private adaptThreshold(_now: number, p: number, n: number, backlog: number, seqs: number, mu: number): PlannerAction[] {
    const [ttft, itl] = this.predict(p, n, backlog, seqs, mu);
    let t = this.threshold;
    // Decode has headroom and prefill is the pressure: let decode workers absorb more prefill locally.
    if (itl < 0.6 * this.o.itlTargetS && ttft > 0.5 * this.o.ttftTargetS) t *= 1.25;
    else if (itl > 0.9 * this.o.itlTargetS) t *= 0.8;
    t = Math.round(Math.min(this.o.maxLocalPrefill, Math.max(this.o.minLocalPrefill, t)));
    if (t === this.threshold) return [];
    this.threshold = t;
    return [{ kind: "local-prefill-threshold", tokens: t }];
  }

  private learn(s: MetricsSnapshot, live: WorkerSnapshot[]): void {
    let tok = 0;
    let busy = 0;
    // Only prefill-role workers measure prefill speed: mixed steps on decode workers are decode-bound.
    for (const w of live) if (w.role === "prefill") { tok += w.prefillTokens; busy += w.prefillBusyS; }
    if (busy > 1e-6) {
      const r = tok / busy;
      this.prefillRate = this.prefillRate === 0 ? r : 0.8 * this.prefillRate + 0.2 * r;
    }
    const d = s.arrivedUncachedTokens / Math.max(1e-9, s.windowS);
    // React fast to bursts, decay slower: bursts matter most for P95 TTFT.
    this.demand = d > this.demand ? 0.6 * d + 0.4 * this.demand : 0.8 * this.demand + 0.2 * d;
    const o = s.arrivedOutputTokens / Math.max(1e-9, s.windowS);
    this.decodeDemand = o > this.decodeDemand ? 0.6 * o + 0.4 * this.decodeDemand : 0.8 * this.decodeDemand + 0.2 * o;
    // Online least-squares fit of step time on batch (forgetting factor 0.95 per tick).
    const f = this.fit;
    f.n *= 0.95; f.x *= 0.95; f.y *= 0.95; f.xx *= 0.95; f.xy *= 0.95;
    for (const w of live) {
      if (w.decodeBusyS <= 0 || w.meanDecodeBatch <= 0) continue;
      const x = w.meanDecodeBatch, y = w.decodeStepS;
      f.n += 1; f.x += x; f.y += y; f.xx += x * x; f.xy += x * y;
    }
    const det = f.n * f.xx - f.x * f.x;
    if (f.n > 2 && det > 1e-9 * f.n * f.n) {
      const b = (f.n * f.xy - f.x * f.y) / det;
      this.stepB = Math.max(0, b);
      this.stepA = Math.max(1e-4, (f.y - this.stepB * f.x) / f.n);
    } else if (f.n > 0) {
      this.stepA = Math.max(1e-4, f.y / f.n - this.stepB * (f.x / f.n));
    }
  }
}
