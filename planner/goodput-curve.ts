/**
 * The fraction of requests within the ITL target as a function of the pool's load, fitted online
 * from finished requests (experiment for ITL admission, `aim: "fitted"`). The load has two parts: the
 * decoding sequences held, and the prompt tokens per second being prefilled beside them (a chunk in a
 * mixed step slows every decode in it). Each finished request is placed at the mean of both while it
 * decoded (running integrals, so a request that straddled a change sits between), requests are kept
 * thinned to span about ten minutes, and a logistic P(within | loads) is fitted to them.
 */
import type { CompletedRequest } from "./types.ts";

/** Ticks of load history kept (seconds at a 1 s tick): longer than any request's decode. */
const HISTORY = 4096;
/** Requests kept for the fit, and the span they should cover (thinned to fit). */
const KEEP = 8192;
const SPAN_S = 600;
/** Ticks between refits. */
const REFIT_TICKS = 10;

/** A logistic fit: P(within) = 1 / (1 + exp(−(a + b × seqs / unitS + c × prefill / unitP))). */
export interface CurveFit {
  a: number;
  b: number;
  c: number;
  unitS: number;
  unitP: number;
}

/** Online fit of P(request within the ITL target | decode sequences, prefill tokens/s). */
export class GoodputCurve {
  private readonly times = new Float64Array(HISTORY);
  private readonly seqInt = new Float64Array(HISTORY);
  private readonly preInt = new Float64Array(HISTORY);
  private ticks = 0;
  private lastSeqs = 0;
  private lastPrefill = 0;
  private readonly seqs = new Float64Array(KEEP);
  private readonly prefill = new Float64Array(KEEP);
  private readonly good = new Uint8Array(KEEP);
  private stored = 0;
  private offered = 0;
  private rate = 0;
  private cached: CurveFit | null = null;
  private fittedAt = -Infinity;

  /** Requests the fit holds. */
  get points(): number {
    return Math.min(this.stored, KEEP);
  }

  /** The prompt tokens per second prefilled over the last window. */
  get prefillRate(): number {
    return this.lastPrefill;
  }

  /** The highest decode load among the requests kept. */
  maxSeqsSeen(): number {
    let m = 0;
    for (let i = 0; i < this.points; i++) m = Math.max(m, this.seqs[i]);
    return m;
  }

  /** Records the pool's load over the window ending at `now`: `seqs` held, `prefillTokens` arrived uncached. */
  tick(now: number, seqs: number, prefillTokens: number, windowS: number): void {
    const i = this.ticks % HISTORY;
    if (this.ticks === 0) {
      this.times[i] = now;
      this.seqInt[i] = 0;
      this.preInt[i] = 0;
    } else {
      const p = (this.ticks - 1) % HISTORY;
      const dt = Math.max(0, now - this.times[p]);
      this.times[i] = now;
      this.seqInt[i] = this.seqInt[p] + this.lastSeqs * dt;
      this.preInt[i] = this.preInt[p] + prefillTokens;
    }
    this.lastSeqs = seqs;
    this.lastPrefill = windowS > 0 ? prefillTokens / windowS : 0;
    this.ticks++;
  }

  /** The two integrals at time `t` (interpolated; clamped to the history kept). */
  private at(t: number): [number, number] {
    const n = Math.min(this.ticks, HISTORY);
    let lo = this.ticks - n, hi = this.ticks - 1;
    const T = (k: number) => this.times[k % HISTORY];
    if (t <= T(lo)) return [this.seqInt[lo % HISTORY], this.preInt[lo % HISTORY]];
    if (t >= T(hi)) return [this.seqInt[hi % HISTORY], this.preInt[hi % HISTORY]];
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (T(mid) <= t) lo = mid;
      else hi = mid;
    }
    const f = T(hi) > T(lo) ? (t - T(lo)) / (T(hi) - T(lo)) : 0;
    const a = lo % HISTORY, b = hi % HISTORY;
    return [this.seqInt[a] + f * (this.seqInt[b] - this.seqInt[a]), this.preInt[a] + f * (this.preInt[b] - this.preInt[a])];
  }

  /** Places requests that finished in the last window at their mean loads and records whether each met `targetS`. */
  observe(done: readonly CompletedRequest[], targetS: number, windowS: number): void {
    if (this.ticks === 0) return;
    this.rate = 0.9 * this.rate + 0.1 * (done.length / Math.max(1e-9, windowS));
    // Keep one in `every` so that the requests kept span about SPAN_S.
    const every = Math.max(1, Math.ceil((this.rate * SPAN_S) / KEEP));
    const last = (this.ticks - 1) % HISTORY;
    const end = this.times[last];
    for (const c of done) {
      if (c.osl < 2 || !Number.isFinite(c.itlS)) continue;
      if (this.offered++ % every !== 0) continue;
      const span = c.itlS * (c.osl - 1);
      let s = this.lastSeqs, p = this.lastPrefill;
      if (span >= 1) {
        const [s0, p0] = this.at(end - span);
        s = (this.seqInt[last] - s0) / span;
        p = (this.preInt[last] - p0) / span;
      }
      const i = this.stored++ % KEEP;
      this.seqs[i] = s;
      this.prefill[i] = p;
      this.good[i] = c.itlS < targetS ? 1 : 0;
    }
  }

  /** Logistic regression of the requests kept (Newton's method, a little ridge), refitted every few ticks; null with too few. */
  fit(minPoints = 256): CurveFit | null {
    const n = this.points;
    if (n < minPoints) return null;
    if (this.cached !== null && this.ticks - this.fittedAt < REFIT_TICKS) return this.cached;
    let unitS = 0, unitP = 0, ok = 0;
    for (let i = 0; i < n; i++) { unitS += this.seqs[i]; unitP += this.prefill[i]; ok += this.good[i]; }
    unitS = unitS / n || 1;
    unitP = unitP / n || 1;
    const p0 = Math.min(1 - 1e-3, Math.max(1e-3, ok / n));
    const w = [Math.log(p0 / (1 - p0)), 0, 0];
    const ridge = 1e-3 * n;
    for (let it = 0; it < 15; it++) {
      const g = [0, 0, 0];
      const h = [[ridge, 0, 0], [0, ridge, 0], [0, 0, ridge]];
      for (let i = 0; i < n; i++) {
        const x = [1, this.seqs[i] / unitS, this.prefill[i] / unitP];
        const p = 1 / (1 + Math.exp(-(w[0] + w[1] * x[1] + w[2] * x[2])));
        const r = this.good[i] - p, q = p * (1 - p);
        for (let j = 0; j < 3; j++) {
          g[j] += r * x[j];
          for (let k = 0; k < 3; k++) h[j][k] += q * x[j] * x[k];
        }
      }
      g[1] -= ridge * w[1];
      g[2] -= ridge * w[2];
      const d = solve3(h, g);
      if (d === null) break;
      for (let j = 0; j < 3; j++) w[j] += d[j];
      if (Math.abs(d[0]) + Math.abs(d[1]) + Math.abs(d[2]) < 1e-6) break;
    }
    this.cached = { a: w[0], b: w[1], c: w[2], unitS, unitP };
    this.fittedAt = this.ticks;
    return this.cached;
  }
}

/** Solves the 3×3 system h·x = g (Cramer's rule); null when singular. */
function solve3(h: number[][], g: number[]): number[] | null {
  const det = (m: number[][]) =>
    m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  const D = det(h);
  if (!(Math.abs(D) > 0)) return null;
  return [0, 1, 2].map((c) => det(h.map((row, r) => row.map((v, k) => (k === c ? g[r] : v)))) / D);
}

/** P(within) at `seqs` decoding sequences and `prefill` tokens/s under `f`. */
export function withinAt(f: CurveFit, seqs: number, prefill: number): number {
  return 1 / (1 + Math.exp(-(f.a + (f.b * seqs) / f.unitS + (f.c * prefill) / f.unitP)));
}
