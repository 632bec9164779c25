/**
 * Ministral 3 (llama.cpp's `mistral3`: Ministral-3 3B, 8B and 14B, 2025-12; the text model of
 * Mistral3ForConditionalGeneration): a Llama decoder (q/k rows permuted for llama.cpp's interleaved
 * RoPE in its GGUFs) with YaRN-scaled RoPE and Llama 4's attention temperature tuning
 * (ModelConfig.attnTemperature). YaRN's magnitude as llama.cpp sets it: with
 * `rope.scaling.yarn_log_multiplier` m (transformers' mscale_all_dim), mscale(f, 1) / mscale(f, m) on
 * the rotated q and k — 1 for the released m = 1 — else mscale(f, 1); times `rope.scaling.attn_factor`.
 */
import { type ModelConfig, ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { isJsonObject, type Json, num } from "./hf-json.ts";
import { checkFreqFactors, ggufYarnScaling, yarnFreqFactors, yarnMscale } from "./rope-scaling.ts";

/** The config fields a mistral3 GGUF sets beyond Llama's: YaRN's divisors and magnitude, the attention temperature. */
export function ggufMistral3(meta: GgufMetadata, arch: string, theta: number, rotaryDim: number, headDim: number, path: string): Partial<ModelConfig> {
  const key = (k: string) => `${arch}.rope.scaling.${k}`;
  const yarn = meta.string(key("type"), "none") === "yarn" && meta.number(key("factor"), 1) !== 1;
  const out: Partial<ModelConfig> = {};
  if (yarn) {
    const ext = meta.optionalNumber(key("yarn_ext_factor")) ?? 1;
    if (ext !== 1 && ext !== -1) throw new ModelLoadError(`Model "${path}" uses YaRN with ext factor ${ext}; only 1 is supported`);
    const scaling = ggufYarnScaling(meta, arch);
    const logMul = meta.optionalNumber(key("yarn_log_multiplier")) ?? 0;
    const magnitude = (logMul !== 0 ? yarnMscale(scaling.factor, 1) / yarnMscale(scaling.factor, logMul) : yarnMscale(scaling.factor, 1)) *
      (meta.optionalNumber(key("attn_factor")) ?? 1);
    out.ropeFreqFactors = checkFreqFactors(yarnFreqFactors(theta, rotaryDim, scaling), rotaryDim, path);
    // On both q and k, so the scores by its square (the dims are all turned: llama.cpp asserts it).
    if (magnitude !== 1) out.attentionScale = (magnitude * magnitude) / Math.sqrt(headDim);
  }
  const beta = meta.optionalNumber(`${arch}.attention.temperature_scale`) ?? 0;
  if (beta !== 0) {
    // llama.cpp floors by the YaRN original context, and refuses a file without one.
    const originalContext = meta.optionalNumber(key("original_context_length")) ?? meta.number(`${arch}.context_length`);
    if (!(Number.isInteger(originalContext) && originalContext > 0)) {
      throw new ModelLoadError(`Model "${path}" tunes its attention temperature by an original context of ${originalContext}; expected a positive whole number`);
    }
    if (!Number.isFinite(beta)) throw new ModelLoadError(`GGUF metadata "${arch}.attention.temperature_scale" in "${path}" should be a finite number, got ${beta}`);
    out.attnTemperature = { beta, originalContext };
  }
  return out;
}

/**
 * The same from a Hugging Face config (Ministral3Config: `rope_parameters` with `rope_type` "yarn",
 * `mscale`/`mscale_all_dim` and `llama_4_scaling_beta`; older configs' `rope_scaling`), as
 * transformers computes them: YaRN's attention factor mscale(f, mscale) / mscale(f, mscale_all_dim)
 * on cos and sin, the temperature floored by `original_max_position_embeddings`.
 */
export function hfMistral3(cfg: Json, theta: number, headDim: number, path: string): Partial<ModelConfig> {
  const raw = cfg.rope_parameters ?? cfg.rope_scaling;
  if (raw === undefined || raw === null) return {};
  if (!isJsonObject(raw)) throw new ModelLoadError(`"rope_parameters" in "${path}" should be an object, got ${JSON.stringify(raw)}`);
  const type = raw.rope_type ?? raw.type ?? "default";
  const out: Partial<ModelConfig> = {};
  const original = num(raw, "original_max_position_embeddings", path, num(cfg, "max_position_embeddings", path, 2048));
  if (type === "yarn") {
    const factor = num(raw, "factor", path);
    const m = num(raw, "mscale", path, 0), mAll = num(raw, "mscale_all_dim", path, 0);
    const attentionFactor = num(raw, "attention_factor", path, m !== 0 && mAll !== 0 ? yarnMscale(factor, m) / yarnMscale(factor, mAll) : yarnMscale(factor, 1));
    out.ropeFreqFactors = checkFreqFactors(
      yarnFreqFactors(theta, headDim, { factor, originalContext: original, betaFast: num(raw, "beta_fast", path, 32), betaSlow: num(raw, "beta_slow", path, 1), truncate: raw.truncate !== false }),
      headDim, path,
    );
    if (attentionFactor !== 1) out.attentionScale = (attentionFactor * attentionFactor) / Math.sqrt(headDim);
  } else if (type !== "default") {
    throw new ModelLoadError(`Model "${path}" uses rope type ${JSON.stringify(type)}; Ministral 3 support reads "yarn" or "default"`);
  }
  const beta = num(raw, "llama_4_scaling_beta", path, 0);
  if (beta !== 0) out.attnTemperature = { beta, originalContext: original };
  return out;
}
