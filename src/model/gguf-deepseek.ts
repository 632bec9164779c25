/**
 * What DeepSeek (llama.cpp's deepseek2: V2, V3/R1, Kimi K2) adds to a GGUF's config: latent
 * attention sizes and YaRN as llama.cpp runs it (mscale² on the scores).
 */
import { checkMla, type MlaConfig, ModelLoadError } from "./config.ts";
import type { GgufMetadata } from "./gguf-metadata.ts";
import { checkFreqFactors, ggufYarnScaling, yarnFreqFactors, yarnMscale } from "./rope-scaling.ts";

/**
 * DeepSeek's latent attention sizes. Current files (llama.cpp's converter since it split kv_b) give
 * `key_length` as the cached latent + RoPE width and the per-head q/k and v widths under `*_mla`;
 * older ones give the per-head widths as `key_length` / `value_length`.
 */
export function ggufMla(meta: GgufMetadata, arch: string, keyLength: number, ropeDim: number, qLora: boolean, path: string): MlaConfig {
  const qk = meta.optionalNumber(`${arch}.attention.key_length_mla`) ?? keyLength;
  const mla: MlaConfig = {
    qLoraRank: qLora ? meta.number(`${arch}.attention.q_lora_rank`) : 0,
    kvLoraRank: meta.number(`${arch}.attention.kv_lora_rank`),
    nopeDim: qk - ropeDim,
    ropeDim,
    vHeadDim: meta.optionalNumber(`${arch}.attention.value_length_mla`) ?? meta.number(`${arch}.attention.value_length`),
  };
  return checkMla(mla, path);
}

/**
 * DeepSeek V3's / Kimi K2's YaRN as llama.cpp runs deepseek2: frequencies blended per pair, RoPE's
 * magnitude left at 1, and the scores scaled by mscale² with mscale from `yarn_log_multiplier`
 * (0.1 · mscale_all_dim). Files whose YaRN would scale RoPE's magnitude are refused.
 */
export function ggufYarn(meta: GgufMetadata, arch: string, theta: number, mla: MlaConfig, path: string): { freqFactors: number[]; attentionScale: number } {
  const key = (k: string) => `${arch}.rope.scaling.${k}`;
  const logMul = meta.optionalNumber(key("yarn_log_multiplier"));
  const attnFactor = meta.optionalNumber(key("attn_factor")) ?? 1;
  const extFactor = meta.optionalNumber(key("yarn_ext_factor")) ?? 1;
  if (logMul === undefined || attnFactor !== 1 || (extFactor !== 1 && extFactor !== -1)) {
    throw new ModelLoadError(`Model "${path}" uses YaRN that scales RoPE's magnitude (no "${key("yarn_log_multiplier")}", or an attn/ext factor other than 1), which is not supported`);
  }
  const scaling = ggufYarnScaling(meta, arch);
  const mscale = yarnMscale(scaling.factor, logMul / 0.1);
  return {
    freqFactors: checkFreqFactors(yarnFreqFactors(theta, mla.ropeDim, scaling), mla.ropeDim, path),
    attentionScale: (mscale * mscale) / Math.sqrt(mla.nopeDim + mla.ropeDim),
  };
}
