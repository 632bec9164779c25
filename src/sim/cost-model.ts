/**
 * Step-time roofline: time = max(FLOPs ÷ achieved FLOP/s, bytes ÷ achieved bandwidth) + overhead,
 * for one worker (a group of GPUs acting as one engine). MoE weight traffic grows with the number of
 * distinct experts a batch touches. Calibratable: fit efficiencies and overhead to measured steps.
 */
import type { StepShape } from "../../planner/types.ts";
import type { HardwareProfile, ModelProfile } from "./profiles.ts";

/** What one engine step computes (the shape shared with the engine's step log and the planner). */
export type { StepShape };

/** FLOPs and bytes of a step, before turning them into time. */
export interface StepWork {
  flops: number;
  bytes: number;
}

/** Roofline step-time model for one worker. */
export class CostModel {
  flopEfficiency: number;
  bandwidthEfficiency: number;
  stepOverheadS: number;
  /** Extra seconds for steps that carry both prefill and decode (see HardwareProfile). */
  mixedStepOverheadS: number;
  private readonly expertBytes: number;
  private readonly denseBytes: number;
  private readonly missProb: number;

  /**
   * Builds the model for `gpus` GPUs of `hw` serving `model`. `kvReplication` is how many GPUs of the
   * worker each hold and read the whole KV (1: KV split across them, e.g. data-parallel attention;
   * `gpus`: tensor-parallel attention over MLA's single latent head, which every GPU needs entire).
   */
  constructor(readonly model: ModelProfile, readonly hw: HardwareProfile, readonly gpus: number, readonly kvReplication = 1) {
    this.flopEfficiency = hw.flopEfficiency;
    this.bandwidthEfficiency = hw.bandwidthEfficiency;
    this.stepOverheadS = hw.stepOverheadS;
    this.mixedStepOverheadS = hw.mixedStepOverheadS ?? 0;
    this.denseBytes = model.denseParams * model.weightBytesPerParam;
    this.expertBytes = (model.totalParams - model.denseParams) * model.weightBytesPerParam;
    this.missProb = 1 - model.expertsPerToken / model.experts;
  }

  /** Context a token attends to at position `ctx` (sparse attention caps long contexts). */
  attended(ctx: number): number {
    const d = this.model.attnDensity;
    return d >= 1 || ctx <= 2048 ? ctx : 2048 + d * (ctx - 2048);
  }

  /** Attention token pairs of a prefill chunk of `n` tokens starting at position `start`. */
  prefillPairs(start: number, n: number): number {
    return n * this.attended(start + n / 2);
  }

  /** FLOPs and bytes of one step. */
  work(s: StepShape): StepWork {
    const m = this.model;
    const tokens = s.prefillTokens + s.decodeSeqs;
    const flops = 2 * m.activeParams * tokens + m.attnFlopsPerTokenPair * (s.prefillAttnPairs + s.decodeAttnTokens);
    // Expected fraction of experts touched by `tokens` tokens, each picking k of E.
    const touched = 1 - Math.pow(this.missProb, tokens);
    const bytes = this.denseBytes + this.expertBytes * touched + m.kvBytesPerToken * this.kvReplication * (s.decodeAttnTokens + s.prefillTokens);
    return { flops, bytes };
  }

  /** Seconds for one step. */
  stepTime(s: StepShape): number {
    const w = this.work(s);
    return this.timeOf(w) + (s.prefillTokens > 0 && s.decodeSeqs > 0 ? this.mixedStepOverheadS : 0);
  }

  /** Seconds for given work under the current efficiencies. */
  timeOf(w: StepWork): number {
    const c = w.flops / (this.gpus * this.hw.peakFlops * this.flopEfficiency);
    const b = w.bytes / (this.gpus * this.hw.hbmBandwidth * this.bandwidthEfficiency);
    return Math.max(c, b) + this.stepOverheadS;
  }

  /**
   * Fits efficiencies and overhead to measured steps (e.g. from the real engine's step log):
   * alternates between assigning each sample to its binding roofline and a least-squares fit of
   * that roofline's slope, with the overhead as the mean residual. Returns the RMS error (s).
   */
  calibrate(samples: readonly { work: StepWork; measuredS: number }[], iterations = 20): number {
    if (samples.length === 0) return 0;
    const peakC = this.gpus * this.hw.peakFlops;
    const peakB = this.gpus * this.hw.hbmBandwidth;
    for (let it = 0; it < iterations; it++) {
      let cxx = 0, cxy = 0, bxx = 0, bxy = 0, resid = 0;
      for (const s of samples) {
        const c = s.work.flops / (peakC * this.flopEfficiency);
        const b = s.work.bytes / (peakB * this.bandwidthEfficiency);
        const y = s.measuredS - this.stepOverheadS;
        if (c >= b) { const x = s.work.flops / peakC; cxx += x * x; cxy += x * y; }
        else { const x = s.work.bytes / peakB; bxx += x * x; bxy += x * y; }
      }
      // y = x / eff  →  1/eff = Σxy / Σxx.
      if (cxx > 0 && cxy > 0) this.flopEfficiency = Math.min(1, cxx / cxy);
      if (bxx > 0 && bxy > 0) this.bandwidthEfficiency = Math.min(1, bxx / bxy);
      for (const s of samples) resid += s.measuredS - (this.timeOf(s.work) - this.stepOverheadS);
      this.stepOverheadS = Math.max(0, resid / samples.length);
    }
    let se = 0;
    for (const s of samples) se += (this.timeOf(s.work) - s.measuredS) ** 2;
    return Math.sqrt(se / samples.length);
  }
}
