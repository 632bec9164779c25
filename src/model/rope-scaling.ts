/**
 * RoPE frequency scaling as per-pair frequency divisors (llama.cpp's `rope_freqs.weight`): pair i
 * of a head turns at pos · theta^(-2i/d) / factors[i]. Llama 3.1/3.2 checkpoints ship their
 * "llama3" scaling as HF `rope_scaling` parameters; llama.cpp's converter bakes the same numbers
 * into the GGUF tensor. Both loaders end up with one `ModelConfig.ropeFreqFactors`.
 */
import { ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";

/** The parameters of HF transformers' "llama3" rope_scaling. */
export interface Llama3RopeScaling {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

/**
 * Divisors of the base frequencies theta^(-2i/dim), i < dim/2, that reproduce HF transformers'
 * `_compute_llama3_parameters`: long wavelengths (beyond original context / lowFreqFactor) are
 * slowed by `factor`, short ones (below original context / highFreqFactor) are kept, and the band
 * between interpolates smoothly. Computed in f64 (transformers uses f32 tensors).
 */
export function llama3FreqFactors(theta: number, dim: number, s: Llama3RopeScaling): number[] {
  const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  const factors: number[] = [];
  for (let i = 0; i < dim / 2; i++) {
    const invFreq = Math.pow(theta, (-2 * i) / dim);
    const wavelen = (2 * Math.PI) / invFreq;
    if (wavelen < highFreqWavelen) factors.push(1);
    else if (wavelen > lowFreqWavelen) factors.push(s.factor);
    else {
      const smooth = (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      // transformers: inv_freq' = (1 - smooth) · inv_freq / factor + smooth · inv_freq.
      factors.push(1 / ((1 - smooth) / s.factor + smooth));
    }
  }
  return factors;
}

type Json = Record<string, unknown>;

function scalingNumber(scaling: Json, key: string, path: string): number {
  const v = scaling[key];
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new ModelLoadError(`"rope_scaling.${key}" in "${path}" should be a number, got ${JSON.stringify(v)}`);
  }
  return v;
}

/**
 * Frequency divisors from an HF config's `rope_scaling` (or transformers 5's `rope_parameters`):
 * undefined for none or "default", the llama3 divisors for "llama3"; every other type (linear,
 * dynamic, yarn, longrope, ...) is refused rather than silently run unscaled.
 */
export function hfRopeFreqFactors(cfg: Json, theta: number, headDim: number, path: string): number[] | undefined {
  const raw = cfg.rope_scaling ?? cfg.rope_parameters;
  if (raw === undefined || raw === null) return undefined;
  if (typeof raw !== "object" || Array.isArray(raw)) {
    throw new ModelLoadError(`"rope_scaling" in "${path}" should be an object, got ${JSON.stringify(raw)}`);
  }
  const scaling = raw as Json;
  const type = scaling.rope_type ?? scaling.type ?? "default";
  // A factor with no type names no scaling method: running unscaled would quietly be wrong past the original context.
  if (scaling.rope_type === undefined && scaling.type === undefined && scaling.factor !== undefined && scaling.factor !== 1) {
    throw new ModelLoadError(`"rope_scaling" in "${path}" gives factor ${JSON.stringify(scaling.factor)} but no rope_type; name the scaling method (e.g. "llama3")`);
  }
  if (type === "default") return undefined;
  if (type !== "llama3") {
    throw new ModelLoadError(`Model "${path}" uses rope_scaling type ${JSON.stringify(type)}; only "llama3" is supported`);
  }
  const s: Llama3RopeScaling = {
    factor: scalingNumber(scaling, "factor", path),
    lowFreqFactor: scalingNumber(scaling, "low_freq_factor", path),
    highFreqFactor: scalingNumber(scaling, "high_freq_factor", path),
    originalMaxPositionEmbeddings: scalingNumber(scaling, "original_max_position_embeddings", path),
  };
  if (!(s.factor > 0) || !(s.lowFreqFactor > 0) || !(s.highFreqFactor > s.lowFreqFactor) || !(s.originalMaxPositionEmbeddings > 0)) {
    throw new ModelLoadError(
      `"rope_scaling" in "${path}" needs factor > 0 and high_freq_factor > low_freq_factor > 0, got ${JSON.stringify(scaling)}`,
    );
  }
  return checkFreqFactors(llama3FreqFactors(theta, headDim, s), headDim, path);
}

/** Checks divisors read from a file: headDim/2 finite positive values. */
export function checkFreqFactors(factors: readonly number[], headDim: number, path: string): number[] {
  if (factors.length !== headDim / 2) {
    throw new ModelLoadError(`Model "${path}" has ${factors.length} RoPE frequency factors; head dim ${headDim} needs ${headDim / 2}`);
  }
  const bad = factors.findIndex((f) => !Number.isFinite(f) || f <= 0);
  if (bad >= 0) throw new ModelLoadError(`RoPE frequency factor ${factors[bad]} at index ${bad} in "${path}" is not a positive number`);
  return [...factors];
}

/** The parameters of YaRN RoPE scaling (DeepSeek V3's and Kimi K2's `rope_scaling` type "yarn"). */
export interface YarnRopeScaling {
  factor: number;
  originalContext: number;
  /** Rotations per original context above which a pair keeps its frequency, and below which it is slowed by `factor`. */
  betaFast: number;
  betaSlow: number;
  /**
   * Round the ramp's ends to whole dims (floor / ceil), as ggml always does and transformers does
   * unless `rope_scaling.truncate` is false (GPT-OSS's config.json); absent: true.
   */
  truncate?: boolean;
}

/** A GGUF's YaRN parameters (`{arch}.rope.scaling.*`, llama.cpp's defaults where absent). */
export function ggufYarnScaling(meta: GgufMetadata, arch: string): YarnRopeScaling {
  const key = (k: string) => `${arch}.rope.scaling.${k}`;
  return {
    factor: meta.number(key("factor")),
    originalContext: meta.optionalNumber(key("original_context_length")) ?? meta.number(`${arch}.context_length`),
    betaFast: meta.optionalNumber(key("yarn_beta_fast")) ?? 32,
    betaSlow: meta.optionalNumber(key("yarn_beta_slow")) ?? 1,
  };
}

/**
 * Divisors of the base frequencies that reproduce YaRN's blend (ggml's `rope_yarn` with ext_factor 1,
 * transformers' `_compute_yarn_parameters`): pairs below dim `low` keep their frequency, pairs past
 * `high` are slowed by `factor`, with a linear ramp between, where low/high are the dims that turn
 * betaFast/betaSlow times over the original context (floored / ceiled unless `truncate` is false).
 */
export function yarnFreqFactors(theta: number, dim: number, s: YarnRopeScaling): number[] {
  const corrDim = (rotations: number) => (dim * Math.log(s.originalContext / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
  const round = s.truncate === false ? { down: (x: number) => x, up: (x: number) => x } : { down: Math.floor, up: Math.ceil };
  const low = Math.max(0, round.down(corrDim(s.betaFast)));
  const high = Math.min(dim - 1, round.up(corrDim(s.betaSlow)));
  const factors: number[] = [];
  for (let i = 0; i < dim / 2; i++) {
    const keep = 1 - Math.min(1, Math.max(0, (i - low) / Math.max(0.001, high - low)));
    // θ' = θ · (keep + (1 − keep) / factor)
    factors.push(1 / (keep + (1 - keep) / s.factor));
  }
  return factors;
}

/** YaRN's magnitude correction 0.1 · m · ln(factor) + 1 (transformers' `get_mscale`); 1 for factor ≤ 1. */
export function yarnMscale(factor: number, m: number): number {
  return factor <= 1 ? 1 : 0.1 * m * Math.log(factor) + 1;
}
