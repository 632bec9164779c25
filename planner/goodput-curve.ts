/**
 * The fraction of requests within the ITL target as a function of the decode pool's load, fitted
 * online from finished requests (ITL admission's experimental aim, "fitted"). Each finished
 * request is placed at the mean number of sequences the pool held while it decoded (from a running
 * integral of the load, so a request that straddled a change of load sits between the two) and
 * counted in a bin of load (16 per doubling) whose counts decay with a time constant of minutes; a
 * logistic curve P(within | load) is fitted to the bins. The load that maximises the
 * good requests per second, load × P(within | load) ÷ ITL(load), is where the door should keep the
 * pool: how fast the fraction falls with load is measured, not assumed.
 */
import type { CompletedRequest } from "./types.ts";

/** Ticks of load history kept (seconds at a 1 s tick): longer than any request's decode. */
const HISTORY = 4096;

/** Load bins per doubling, and bins in all (loads up to 2^20 sequences). */
const BINS_PER_OCTAVE = 16;
const BINS = 20 * BINS_PER_OCTAVE;

/** A logistic fit: P(within) = 1 / (1 + exp(−(a + b × load / unit))). */
export interface CurveFit {
  a: number;
  b: number;
  unit: number;
}

/** Online fit of P(request within the ITL target | pool load). */
export class GoodputCurve {
  private readonly times = new Float64Array(HISTORY);
  private readonly integral = new Float64Array(HISTORY);
  private ticks = 0;
  private lastLoad = 0;
  private readonly count = new Float64Array(BINS);
  private readonly within = new Float64Array(BINS);
  private weight = 0;

  /** Counts decay by e every `decayS` seconds. */
  constructor(private readonly decayS = 600) {}

  /** Finished requests the fit holds (decayed). */
  get points(): number {
    return this.weight;
  }

  /** The highest load bin's upper edge with at least `min` (decayed) requests in it (where requests were placed; for inspection). */
  maxLoadSeen(min = 8): number {
    for (let b = BINS - 1; b >= 0; b--) if (this.count[b] >= min) return 2 ** ((b + 1) / BINS_PER_OCTAVE) - 1;
    return 0;
  }

  /** Records that the pool held `seqs` decoding sequences at `now` (once per tick). */
  tick(now: number, seqs: number): void {
    const i = this.ticks % HISTORY;
    this.integral[i] = 0;
    if (this.ticks > 0) {
      const p = (this.ticks - 1) % HISTORY;
      const dt = Math.max(0, now - this.times[p]);
      this.integral[i] = this.integral[p] + this.lastLoad * dt;
      const k = Math.exp(-dt / this.decayS);
      for (let b = 0; b < BINS; b++) { this.count[b] *= k; this.within[b] *= k; }
      this.weight *= k;
    }
    this.times[i] = now;
    this.lastLoad = seqs;
    this.ticks++;
  }

  /** The load integral at time `t` (interpolated between ticks; clamped to the history kept). */
  private integralAt(t: number): number {
    const n = Math.min(this.ticks, HISTORY);
    const first = this.ticks - n;
    let lo = first, hi = this.ticks - 1;
    if (t <= this.times[lo % HISTORY]) return this.integral[lo % HISTORY];
    if (t >= this.times[hi % HISTORY]) return this.integral[hi % HISTORY];
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (this.times[mid % HISTORY] <= t) lo = mid;
      else hi = mid;
    }
    const t0 = this.times[lo % HISTORY], t1 = this.times[hi % HISTORY];
    const i0 = this.integral[lo % HISTORY], i1 = this.integral[hi % HISTORY];
    return t1 > t0 ? i0 + ((i1 - i0) * (t - t0)) / (t1 - t0) : i0;
  }

  /** Places requests that finished by the last tick at their mean load and counts whether each met `targetS`. */
  observe(done: readonly CompletedRequest[], targetS: number): void {
    if (this.ticks === 0) return;
    const last = (this.ticks - 1) % HISTORY;
    const end = this.times[last];
    for (const c of done) {
      if (c.osl < 2 || !Number.isFinite(c.itlS)) continue;
      const span = c.itlS * (c.osl - 1);
      const load = span >= 1 ? (this.integral[last] - this.integralAt(end - span)) / span : this.lastLoad;
      const b = Math.min(BINS - 1, Math.max(0, Math.floor(Math.log2(load + 1) * BINS_PER_OCTAVE)));
      this.count[b]++;
      if (c.itlS < targetS) this.within[b]++;
      this.weight++;
    }
  }

  /** Logistic regression over the bins (Newton's method, a little ridge); null with too few requests. */
  fit(minPoints = 256): CurveFit | null {
    if (this.weight < minPoints) return null;
    const center = (b: number) => 2 ** ((b + 0.5) / BINS_PER_OCTAVE) - 1;
    let unit = 0, ok = 0;
    for (let b = 0; b < BINS; b++) { unit += this.count[b] * center(b); ok += this.within[b]; }
    unit = unit / this.weight || 1;
    const p0 = Math.min(1 - 1e-3, Math.max(1e-3, ok / this.weight));
    let a = Math.log(p0 / (1 - p0)), slope = 0;
    const ridge = 1e-3 * this.weight;
    for (let it = 0; it < 20; it++) {
      let ga = 0, gb = 0, haa = ridge, hab = 0, hbb = ridge;
      for (let b = 0; b < BINS; b++) {
        const n = this.count[b];
        if (n <= 0) continue;
        const x = center(b) / unit;
        const p = 1 / (1 + Math.exp(-(a + slope * x)));
        const r = this.within[b] - n * p, w = n * p * (1 - p);
        ga += r; gb += r * x;
        haa += w; hab += w * x; hbb += w * x * x;
      }
      gb -= ridge * slope;
      const det = haa * hbb - hab * hab;
      if (!(det > 0)) break;
      const da = (hbb * ga - hab * gb) / det, db = (haa * gb - hab * ga) / det;
      a += da; slope += db;
      if (Math.abs(da) + Math.abs(db) < 1e-6) break;
    }
    return { a, b: slope, unit };
  }
}

/** P(within) at `load` under `f`. */
export function withinAt(f: CurveFit, load: number): number {
  return 1 / (1 + Math.exp(-(f.a + (f.b * load) / f.unit)));
}
