/**
 * Admission of new agent sessions by ITL (ours). A decode pool past its ITL target slows every
 * sequence in it: when more sessions arrive than it can decode within the target, letting them all in
 * makes most requests miss the SLO (math agents at 5× load: 2 in 3 of the tuned baseline's requests),
 * while turning a few new sessions away at the door keeps the agents already mid-task within it.
 * Each tick the planner asks how many more decoding sequences the pool takes before its predicted ITL
 * reaches an aim below the target; that many new sessions may enter before the next tick (each adds
 * about one decoding sequence), the rest wait at the door until then and are turned away if there is
 * still no room. Sessions already in are never refused a turn. An idle pool takes one new session
 * a tick whatever the budget says (OnlinePlanner: it slows nobody, and only decoding measures again).
 *
 * Two corrections come from measurement, not from a profile: the step model's ITL is scaled by the
 * measured one (it leaves out stalls, uneven batches and sequences waiting for a batch slot), and the
 * aim is the ratio of recent requests' mean ITL to their 90th percentile (how far below the target the
 * mean must stay for nine requests in ten to be within it).
 *
 * The pool is priced as its sessions will be (option `agedPricing`, on; OnlinePlanner does the
 * pricing): every turn of an agent attends to all its session has said, so a session's prefill chunks
 * and decodes grow dearer as it ages, and on computer-use, where the chunk steps beside the decodes set
 * the ITL, a door pricing today's young sessions let in a wave that later kept the pool past its target
 * for ten minutes. Steps are priced at the highest prefill and decode contexts of the last 10 minutes
 * and each extra session brings the prefill tokens/s a held one brings (computer-use load 3: +27%
 * goodput; docs/results/variants/itl-admission.txt M). While contexts rise they are priced where their
 * trend of the last 10 s takes them a minute ahead (option `lookaheadS`): a run's first wave is let in
 * before any session has aged, so no peak has been seen yet, and on computer-use a session lives for
 * minutes. The lookahead counts only once the measured ITL has reached half the aim (`lookaheadFrom`):
 * on a lightly loaded pool a forecast alone shut the door where measurement said it was far from full
 * (computer-use 3: +45% goodput, 2: +19%; docs/results/variants/itl-admission.txt N).
 *
 * An experimental aim, "fitted" (off by default; measured in docs/results/variants/itl-admission.txt
 * I and J), makes that measured aim the fallback: once a few hundred requests have finished, the door keeps
 * the pool at the load that maximises good requests per second on a curve P(request within the ITL
 * target | decode load) fitted from them (goodput-curve.ts), so it shuts only where letting more in
 * loses more good requests than it adds; where the curve says most requests miss even at today's load
 * the measured aim decides, as it does until the curve has measured a decline. It gains at the
 * highest loads and loses a fifth of computer-use load 2's goodput, so it is not the default.
 */
import type { CompletedRequest } from "./types.ts";
import { type CurveFit, GoodputCurve, withinAt } from "./goodput-curve.ts";

/** Knobs of {@link ItlAdmission}. */
export interface ItlAdmissionOptions {
  /**
   * "measured" (default): the fraction of the target from recent requests' spread (see the module);
   * a fixed fraction of the ITL target for the pool's mean ITL; or "fitted" (experiment): keep the
   * pool at the load that maximises good requests per second on a curve fitted from finished requests
   * (the measured aim until it has 256 of them, and where it predicts fewer than `fitFloor` within the
   * target now).
   */
  aim?: number | "measured" | "fitted";
  /** Percentile of recent requests' ITL that the measured aim keeps at the target. Default 0.9. */
  percentile?: number;
  /** Bounds of the measured aim. Defaults 0.5 and 1. */
  minAim?: number;
  maxAim?: number;
  /** Finished requests the measured aim reads (the last ones). Default 1024. */
  keep?: number;
  /** Longest a new session waits at the door before it is turned away (0: until the next tick). Default 0. */
  maxWaitS?: number;
  /**
   * Price the pool's ITL at the decode demand of recent arrivals as well as at the sequences it holds
   * (true, default), or at the sequences held plus the extra ones only (false; an experiment: a burst
   * of arrivals then does not close the door before its sequences decode).
   */
  demand?: boolean;
  /**
   * Price the pool as its sessions will be (true, default) rather than as they are (false): at the
   * highest prefill and decode contexts of the last minutes, each extra sequence bringing the prefill
   * tokens/s a held one brings now (see OnlinePlanner's admission).
   */
  agedPricing?: boolean;
  /**
   * With agedPricing, seconds ahead rising contexts are carried along their trend (0: the held peaks
   * only). Default 60.
   */
  lookaheadS?: number;
  /**
   * The lookahead counts once the pool's measured ITL has reached this fraction of the aim (a pool far
   * below it is left to today's peaks: a forecast alone does not shut a door that measurement says is
   * far from full). Default 0.5.
   */
  lookaheadFrom?: number;
  /** With aim "fitted": where the curve predicts fewer requests within the target now, the measured aim decides. Default 0.5. */
  fitFloor?: number;
}

/**
 * Decode tokens per serving worker in a window for its measurement to count fully (EWMA weight 0.2);
 * lighter windows count in proportion.
 */
const MIN_TOKENS_PER_WORKER = 256;

/** Sequences one search tries at most, per serving worker (far past any batch limit). */
const SEARCH_CAP_PER_WORKER = 4096;

/** Decides, tick by tick, how many new sessions the decode pool can take within its ITL target. */
export class ItlAdmission {
  private readonly o: Required<ItlAdmissionOptions>;
  private readonly itls: Float64Array;
  private seen = 0;
  /** EWMAs of the measured and the modelled ITL, each weighted by the window's decode tokens. */
  private measuredSum = 0;
  private modelledSum = 0;
  /** The fitted aim's curve (null for the other aims). */
  private readonly curve: GoodputCurve | null;

  /** Creates the controller; validates the knobs. */
  constructor(opts: ItlAdmissionOptions = {}) {
    this.o = { aim: "measured", percentile: 0.9, minAim: 0.5, maxAim: 1, keep: 1024, maxWaitS: 0, demand: true, fitFloor: 0.5, agedPricing: true, lookaheadS: 60, lookaheadFrom: 0.5, ...opts };
    const { aim, percentile, minAim, maxAim, keep, maxWaitS } = this.o;
    if (aim !== "measured" && aim !== "fitted" && !(aim > 0)) throw new RangeError(`ITL admission aim must be positive, "measured" or "fitted"; got ${aim}`);
    if (!(this.o.fitFloor >= 0 && this.o.fitFloor <= 1)) throw new RangeError(`ITL admission fitFloor must be in [0, 1]; got ${this.o.fitFloor}`);
    if (!(percentile > 0 && percentile <= 1)) throw new RangeError(`ITL admission percentile must be in (0, 1]; got ${percentile}`);
    if (!(minAim > 0 && minAim <= maxAim)) throw new RangeError(`ITL admission needs 0 < minAim <= maxAim; got ${minAim} and ${maxAim}`);
    if (!(Number.isInteger(keep) && keep >= 16)) throw new RangeError(`ITL admission keep must be an integer of at least 16; got ${keep}`);
    if (!(maxWaitS >= 0)) throw new RangeError(`ITL admission maxWaitS must be at least 0; got ${maxWaitS}`);
    if (!(this.o.lookaheadS >= 0 && Number.isFinite(this.o.lookaheadS))) throw new RangeError(`ITL admission lookaheadS must be a finite number of at least 0; got ${this.o.lookaheadS}`);
    if (!(this.o.lookaheadFrom >= 0)) throw new RangeError(`ITL admission lookaheadFrom must be at least 0; got ${this.o.lookaheadFrom}`);
    this.itls = new Float64Array(keep);
    this.curve = aim === "fitted" ? new GoodputCurve() : null;
  }

  /** Longest a new session waits at the door. */
  get maxWaitS(): number {
    return this.o.maxWaitS;
  }

  /** Whether the planner prices the pool at recent arrivals' decode demand (option `demand`). */
  get pricesDemand(): boolean {
    return this.o.demand;
  }

  /** Whether the pool is priced as its sessions will be (option `agedPricing`). */
  get pricesAged(): boolean {
    return this.o.agedPricing;
  }

  /** Seconds ahead rising contexts are priced along their trend (option `lookaheadS`). */
  get lookaheadS(): number {
    return this.o.lookaheadS;
  }

  /** The pool's measured ITL (a token-weighted EWMA over ticks; 0 until measured). */
  get measuredItlS(): number {
    return this.measuredSum;
  }

  /** With the lookahead: the fraction of the aim the measured ITL must reach for it to count (option `lookaheadFrom`). */
  get lookaheadFrom(): number {
    return this.o.lookaheadFrom;
  }

  /** Measured ÷ modelled ITL (a ratio of token-weighted EWMAs over ticks; 1 until measured). */
  get itlScale(): number {
    return this.modelledSum > 0 ? this.measuredSum / this.modelledSum : 1;
  }

  /** Reads the ITLs of requests that finished (single-token outputs have none). */
  observe(done: readonly CompletedRequest[]): void {
    for (const c of done) {
      if (c.osl < 2 || !Number.isFinite(c.itlS)) continue;
      this.itls[this.seen++ % this.o.keep] = c.itlS;
    }
  }

  /** The fraction of the ITL target the pool's mean ITL may reach now (the measured one for "fitted" too: its fallback). */
  aim(): number {
    return typeof this.o.aim === "number" ? this.o.aim : this.measuredAim();
  }

  /** For the fitted aim: the pool held `seqs` decoding sequences at tick `now`, and `done` finished by then. */
  observeLoad(now: number, seqs: number, done: readonly CompletedRequest[], itlTargetS: number): void {
    if (this.curve === null) return;
    this.curve.tick(now, seqs);
    this.curve.observe(done, itlTargetS);
  }

  private measuredAim(): number {
    const n = Math.min(this.seen, this.o.keep);
    // Until a quarter of the window has finished, the spread is unknown: aim at the target itself.
    if (n < this.o.keep / 4) return this.o.maxAim;
    const v = this.itls.slice(0, n).sort();
    let sum = 0;
    for (const x of v) sum += x;
    const tail = v[Math.min(n - 1, Math.ceil(this.o.percentile * n) - 1)];
    return tail > 0 ? Math.min(this.o.maxAim, Math.max(this.o.minAim, sum / n / tail)) : this.o.maxAim;
  }

  /**
   * New sessions that may enter before the next tick. `itlWith(extra)` is the model's ITL with `extra`
   * more decoding sequences; `measured` the ITL the pool's sequences saw over the last window and the
   * decode tokens it is measured on (null when none decoded); `seqs` the sequences held now. With a
   * fitted curve that has measured a decline, the extra sequences that maximise good requests per
   * second on it; otherwise the most extra sequences whose scaled ITL stays
   * below `aim() × itlTargetS` (doubling, then bisection). 0 when the pool is there already.
   */
  budget(itlWith: (extra: number) => number, measured: { itlS: number; tokens: number } | null, itlTargetS: number, workers: number, seqs = 0, modelNow?: number): number {
    const atZero = itlWith(0);
    const now = modelNow ?? atZero;
    // A window's measurement counts as much as its tokens, and the scale is the ratio of the two
    // sums: on a light load one window catches three sequences at the tick that decoded 11 tokens
    // (75× the model on the Azure trace) and the next none after 60; an EWMA of per-window ratios
    // that skipped the empty ones shut the door for good.
    if (measured !== null && measured.itlS >= 0 && measured.tokens > 0 && now > 0 && Number.isFinite(measured.itlS)) {
      const w = 0.2 * Math.min(1, measured.tokens / (MIN_TOKENS_PER_WORKER * Math.max(1, workers)));
      this.measuredSum = (1 - w) * this.measuredSum + w * measured.itlS;
      this.modelledSum = (1 - w) * this.modelledSum + w * now;
    }
    const scale = this.itlScale;
    const fit = this.curve?.fit() ?? null;
    // A curve that says most requests miss at today's load describes no regime where more load helps
    // (computer-use at 3x: ITL there is set by the prefill beside the decodes, which it cannot see).
    // Trusted only where it has measured a decline: a flat or rising fit has seen no load that hurts.
    if (fit !== null && fit.b < 0 && withinAt(fit, seqs) >= this.o.fitFloor) {
      return fittedBudget(fit, (extra) => scale * itlWith(extra), seqs, SEARCH_CAP_PER_WORKER * Math.max(1, workers));
    }
    const limit = this.aim() * itlTargetS;
    const under = (extra: number) => scale * itlWith(extra) < limit;
    if (!(scale * atZero < limit)) return 0;
    let lo = 0, hi = 1;
    const cap = SEARCH_CAP_PER_WORKER * Math.max(1, workers);
    while (hi < cap && under(hi)) { lo = hi; hi *= 2; }
    if (hi >= cap) {
      if (under(cap)) return Infinity;
      hi = cap;
    }
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (under(mid)) lo = mid;
      else hi = mid;
    }
    return lo;
  }
}

/** The extra sequences that maximise load × P(within | load) ÷ ITL(load) (coarse grid, then finer ones). */
function fittedBudget(fit: CurveFit, itlAt: (extra: number) => number, seqs: number, cap: number): number {
  const value = (extra: number) => {
    const itl = itlAt(extra);
    const load = seqs + extra;
    return itl > 0 ? (load * withinAt(fit, load)) / itl : 0;
  };
  // Past the load where almost no request would be within the target, more sequences add nothing.
  let hi = 1;
  while (hi < cap && withinAt(fit, seqs + hi) > 1e-3) hi *= 2;
  hi = Math.min(hi, cap);
  if (hi >= cap && withinAt(fit, seqs + cap) > 1e-3 && value(cap) >= value(0)) return Infinity;
  let lo = 0, best = 0, bestValue = value(0);
  for (;;) {
    const step = Math.max(1, Math.floor((hi - lo) / 32));
    for (let extra = lo; extra <= hi; extra += step) {
      const v = value(extra);
      if (v > bestValue) { best = extra; bestValue = v; }
    }
    if (step === 1) break;
    lo = Math.max(0, best - step);
    hi = Math.min(cap, best + step);
  }
  return best;
}
