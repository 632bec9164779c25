/**
 * What the online planner measures each tick without a step model: per-role prefill rates, the pool's
 * chunk-step length, a decode step ≈ a + B·batch fitted by least squares, the share of prefill decode
 * workers compute themselves, and the arriving prefill and output demand. All EWMAs over the workers'
 * window counters; no offline profile. Split out of online-planner.ts (fifth session), unchanged.
 */
import type { MetricsSnapshot, WorkerSnapshot } from "./types.ts";

/** Online rate estimates for {@link OnlinePlanner}. */
export class RateEstimates {
  /** Tokens/s of a prefill worker while prefilling. */
  prefillRate = 0;
  /** Tokens/s of a pool worker over its steps that carry a prefill chunk. */
  mixedRate = 0;
  /** Mean length of a pool worker's chunk-carrying step. */
  chunkStepS = 0;
  /** Decode step ≈ stepA + stepB·batch, refit every tick. */
  stepA = 0.01;
  stepB = 0.0001;
  /** Uncached prefill tokens/s arriving. */
  demand = 0;
  /** Output tokens/s arriving. */
  decodeDemand = 0;
  /** Fraction of prefill tokens decode workers compute themselves while prefill workers exist. */
  localShare = 0;
  /** Mean output tokens per arriving request. */
  meanOutput = 0;
  // Exponentially weighted sums for the least-squares fit of step time on batch.
  private readonly fit = { n: 0, x: 0, y: 0, xx: 0, xy: 0 };

  /** `mixedChunkTokens`: a pool worker's chunk budget (windows of chunk steps under half of it measure overhead). */
  constructor(private readonly mixedChunkTokens: number) {}

  /** Learns from one tick's snapshot and its live workers. */
  learn(s: MetricsSnapshot, live: readonly WorkerSnapshot[]): void {
    let tok = 0, busy = 0, tokM = 0, busyM = 0, stepsM = 0, local = 0;
    for (const w of live) {
      if (w.role === "prefill") { tok += w.prefillTokens; busy += w.prefillBusyS; continue; }
      tokM += w.prefillTokens; busyM += w.prefillBusyS; stepsM += w.prefillSteps ?? 0;
      if (w.role === "decode") local += w.prefillTokens;
    }
    if (busy > 1e-6) {
      const r = tok / busy;
      this.prefillRate = this.prefillRate === 0 ? r : 0.8 * this.prefillRate + 0.2 * r;
      this.localShare = 0.8 * this.localShare + 0.2 * (local / Math.max(1e-9, local + tok));
    }
    // Chunk steps carrying only a short prompt measure step overhead, not capacity: learn the pool's
    // prefill rate from windows whose chunk steps were at least half full (or whose step count is unknown).
    if (busyM > 1e-6) {
      const full = stepsM === 0 || tokM / stepsM >= this.mixedChunkTokens / 2;
      if (full) {
        const r = tokM / busyM;
        this.mixedRate = this.mixedRate === 0 ? r : 0.8 * this.mixedRate + 0.2 * r;
      } else if (this.mixedRate === 0) {
        this.mixedRate = tokM / busyM; // a lower bound until a full window arrives
      }
      if (stepsM > 0) {
        const t = busyM / stepsM;
        this.chunkStepS = this.chunkStepS === 0 ? t : 0.8 * this.chunkStepS + 0.2 * t;
      }
    }
    const d = s.arrivedUncachedTokens / Math.max(1e-9, s.windowS);
    // React fast to bursts, decay slower: bursts matter most for P95 TTFT.
    this.demand = d > this.demand ? 0.6 * d + 0.4 * this.demand : 0.8 * this.demand + 0.2 * d;
    const o = s.arrivedOutputTokens / Math.max(1e-9, s.windowS);
    this.decodeDemand = o > this.decodeDemand ? 0.6 * o + 0.4 * this.decodeDemand : 0.8 * this.decodeDemand + 0.2 * o;
    if (s.arrivals > 0) {
      const m = s.arrivedOutputTokens / s.arrivals;
      this.meanOutput = this.meanOutput === 0 ? m : 0.9 * this.meanOutput + 0.1 * m;
    }
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
