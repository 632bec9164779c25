/**
 * What GPT-OSS (llama.cpp's `gpt-oss` architecture: gpt-oss-20b, gpt-oss-120b) adds to a GGUF's
 * config: sliding-window attention on every other layer, and experts routed by a biased router,
 * with biases of their own and a clamped SwiGLU; and the YaRN that scales RoPE's magnitude, read
 * the way llama.cpp runs it.
 */
import { GPT_OSS_ACTIVATION, ModelLoadError, type MoeConfig, plainMoe, type SlidingWindow, slidingLayers } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { checkFreqFactors, ggufYarnScaling, yarnFreqFactors, yarnMscale } from "./rope-scaling.ts";

/**
 * The sliding window of a file that declares one (`{arch}.attention.sliding_window`): its size and
 * which layers slide, from `sliding_window_pattern` (a period, llama.cpp's default for GPT-OSS 2 and
 * for Gemma 3 6, or one flag per layer). The sliding layers' own RoPE base (`rope.freq_base_swa`) is
 * refused unless `swaTheta` gives the architecture's default (Gemma 3: 10 000), which it overrides.
 */
export function ggufSlidingWindow(
  meta: GgufMetadata,
  arch: string,
  numLayers: number,
  ropeTheta: number,
  path: string,
  defaults: { pattern: number; swaTheta?: number } = { pattern: 2 },
): SlidingWindow | undefined {
  const size = meta.optionalNumber(`${arch}.attention.sliding_window`);
  if (size === undefined || size === 0) return undefined;
  if (!Number.isInteger(size) || size < 1) {
    throw new ModelLoadError(`Model "${path}" has a sliding window of ${size} positions; expected a positive integer`);
  }
  const swaTheta = meta.optionalNumber(`${arch}.rope.freq_base_swa`) ?? defaults.swaTheta;
  if (swaTheta !== undefined && swaTheta !== ropeTheta && defaults.swaTheta === undefined) {
    throw new ModelLoadError(`Model "${path}" gives its sliding layers their own RoPE base ${swaTheta} (the others ${ropeTheta}), which is not supported`);
  }
  const ownTheta = swaTheta !== undefined && swaTheta !== ropeTheta ? { ropeTheta: swaTheta } : {};
  const key = `${arch}.attention.sliding_window_pattern`;
  const flags = meta.entries.get(key)?.value;
  if (Array.isArray(flags)) {
    if (flags.length < numLayers) throw new ModelLoadError(`Model "${path}" lists ${flags.length} "${key}" flags for ${numLayers} layers`);
    return { size, layers: flags.slice(0, numLayers).map(Boolean), ...ownTheta };
  }
  const pattern = meta.optionalNumber(key) ?? defaults.pattern;
  if (!Number.isInteger(pattern) || pattern < 0) throw new ModelLoadError(`Model "${path}" has "${key}" ${pattern}; expected a whole number`);
  return { size, layers: slidingLayers(numLayers, pattern), ...ownTheta };
}

/**
 * GPT-OSS's experts as llama.cpp routes them: top-k of the biased router logits, weighted by a
 * softmax over the chosen ones (its SOFTMAX_WEIGHT gating, which is a softmax over all experts
 * renormalised over the chosen: the same weights), biases on every expert projection, clamped SwiGLU.
 */
export function gptOssMoe(numExperts: number, numExpertsUsed: number): MoeConfig {
  return { ...plainMoe(numExperts, numExpertsUsed, true), routerLogitBias: true, expertBiases: true, activation: GPT_OSS_ACTIVATION };
}

/**
 * YaRN as llama.cpp runs it for a model without `yarn_log_multiplier` (GPT-OSS): frequencies
 * blended per pair, and RoPE's sines and cosines scaled by mscale = (0.1 · ln(factor) + 1) ·
 * `attn_factor`, which multiplies every score by mscale² — folded into the score scale here.
 */
export function ggufMagnitudeYarn(meta: GgufMetadata, arch: string, theta: number, rotaryDim: number, headDim: number, path: string): { freqFactors: number[]; attentionScale: number } {
  const key = (k: string) => `${arch}.rope.scaling.${k}`;
  const extFactor = meta.optionalNumber(key("yarn_ext_factor")) ?? 1;
  if (extFactor !== 1 && extFactor !== -1) {
    throw new ModelLoadError(`Model "${path}" uses YaRN with ext factor ${extFactor}; only 1 is supported`);
  }
  const scaling = ggufYarnScaling(meta, arch);
  const mscale = yarnMscale(scaling.factor, 1) * (meta.optionalNumber(key("attn_factor")) ?? 1);
  return {
    freqFactors: checkFreqFactors(yarnFreqFactors(theta, rotaryDim, scaling), rotaryDim, path),
    attentionScale: (mscale * mscale) / Math.sqrt(headDim),
  };
}

/**
 * The end-of-generation ids of a vocabulary with OpenAI's harmony tokens (o200k_harmony):
 * `<|return|>` ends an answer and `<|call|>` a tool call, while `<|end|>` only ends a message (the
 * analysis message before the answer), so it is dropped — llama.cpp's rule for this vocabulary.
 * Other vocabularies' ids come back unchanged. `tokens` is a GGUF's vocabulary as stored (searched,
 * not copied: it holds ~200k strings) or a tokenizer's lookup of one token's id.
 */
export function withHarmonyStops(eosIds: readonly number[], tokens: readonly unknown[] | ((token: string) => number | undefined) | undefined): number[] {
  if (!tokens) return [...eosIds];
  const id = typeof tokens === "function" ? (t: string) => tokens(t) ?? -1 : (t: string) => tokens.indexOf(t);
  const ret = id("<|return|>");
  const call = id("<|call|>");
  if (ret < 0 || call < 0) return [...eosIds];
  const end = id("<|end|>");
  return [...new Set([...eosIds, ret, call])].filter((i) => i !== end);
}
