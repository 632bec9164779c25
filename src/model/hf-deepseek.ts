/**
 * config.json of DeepSeek V3 / R1 and Kimi K2 (`DeepseekV3ForCausalLM`, model_type `deepseek_v3` or
 * `kimi_k2`): latent attention sizes, YaRN, and the routed experts, with transformers' defaults.
 */
import { checkMla, expertGroups, type MlaConfig, ModelLoadError, type MoeConfig } from "./config.ts";
import { type Json, num } from "./hf-json.ts";
import { yarnFreqFactors, yarnMscale } from "./rope-scaling.ts";
import type { RopeLayout } from "../backend/types.ts";

/** What a DeepSeek V3 config sets beyond the common fields. */
export interface HfDeepseekAttention {
  mla: MlaConfig;
  ropeLayout: RopeLayout;
  ropeFreqFactors?: number[];
  attentionScale: number;
}

/**
 * The latent attention of a DeepSeek V3 config. transformers turns the RoPE dims in adjacent pairs
 * (`rope_interleave`, default true) and, under YaRN, scales the scores by mscale(mscale_all_dim)²;
 * YaRN that would also scale RoPE's magnitude (mscale ≠ mscale_all_dim) is refused.
 */
export function hfDeepseekAttention(cfg: Json, theta: number, path: string): HfDeepseekAttention {
  const q = cfg.q_lora_rank;
  const mla: MlaConfig = {
    qLoraRank: q === null || q === undefined ? 0 : num(cfg, "q_lora_rank", path),
    kvLoraRank: num(cfg, "kv_lora_rank", path, 512),
    nopeDim: num(cfg, "qk_nope_head_dim", path, 128),
    ropeDim: num(cfg, "qk_rope_head_dim", path, 64),
    vHeadDim: num(cfg, "v_head_dim", path, 128),
  };
  checkMla(mla, path);
  const base = 1 / Math.sqrt(mla.nopeDim + mla.ropeDim);
  const ropeLayout: RopeLayout = cfg.rope_interleave === false ? "neox" : "normal";
  const raw = cfg.rope_scaling ?? cfg.rope_parameters;
  const scaling = raw && typeof raw === "object" && !Array.isArray(raw) ? raw as Json : undefined;
  const type = scaling?.rope_type ?? scaling?.type ?? "default";
  if (!scaling || type === "default") return { mla, ropeLayout, attentionScale: base };
  if (type !== "yarn") throw new ModelLoadError(`Model "${path}" uses rope_scaling type ${JSON.stringify(type)}; DeepSeek models support "yarn"`);
  const factor = num(scaling, "factor", path);
  const m = scaling.mscale;
  const mAll = scaling.mscale_all_dim;
  const magnitude = typeof m === "number" && m !== 0 && typeof mAll === "number" && mAll !== 0
    ? yarnMscale(factor, m) / yarnMscale(factor, mAll)
    : yarnMscale(factor, 1);
  const attentionFactor = scaling.attention_factor ?? scaling.attn_factor ?? magnitude;
  if (Math.abs(magnitude - 1) > 1e-12 || attentionFactor !== magnitude) {
    throw new ModelLoadError(`Model "${path}" uses YaRN that scales RoPE's magnitude (mscale ${JSON.stringify(m)}, mscale_all_dim ${JSON.stringify(mAll)}), which is not supported`);
  }
  const ropeFreqFactors = yarnFreqFactors(theta, mla.ropeDim, {
    factor,
    originalContext: num(scaling, "original_max_position_embeddings", path, num(cfg, "max_position_embeddings", path)),
    betaFast: num(scaling, "beta_fast", path, 32),
    betaSlow: num(scaling, "beta_slow", path, 1),
  });
  const mscale = typeof mAll === "number" && mAll !== 0 ? yarnMscale(factor, mAll) : 1;
  return { mla, ropeLayout, ropeFreqFactors, attentionScale: base * mscale * mscale };
}

/** transformers' defaults for what a config.json leaves out: DeepseekV3Config's, Glm4MoeConfig's. */
export interface MoeDefaults {
  firstKDenseReplace: number;
  routedScalingFactor: number;
  nGroup: number;
  topkGroup: number;
}

const DEEPSEEK_V3_DEFAULTS: MoeDefaults = { firstKDenseReplace: 3, routedScalingFactor: 2.5, nGroup: 8, topkGroup: 4 };
/** GLM-4.5's: one dense layer, scale 1, one group. */
export const GLM4_MOE_DEFAULTS: MoeDefaults = { firstKDenseReplace: 1, routedScalingFactor: 1, nGroup: 1, topkGroup: 1 };

/**
 * DeepSeek V3's experts (GLM-4.5's too): sigmoid scores (`scoring_func`) with a selection bias,
 * renormalised (`norm_topk_prob`) and scaled (`routed_scaling_factor`), shared experts, leading dense
 * layers, chosen within the `topk_group` best of `n_group` groups (DeepSeek V3: 4 of 8; Kimi K2: one).
 */
export function hfDeepseekMoe(cfg: Json, path: string, defaults: MoeDefaults = DEEPSEEK_V3_DEFAULTS): MoeConfig {
  const numExperts = num(cfg, "n_routed_experts", path);
  const numExpertsUsed = num(cfg, "num_experts_per_tok", path);
  if (!Number.isInteger(numExpertsUsed) || numExpertsUsed < 1 || numExpertsUsed > numExperts) {
    throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${numExperts}, got ${numExpertsUsed}`);
  }
  const groups = expertGroups(num(cfg, "n_group", path, defaults.nGroup), num(cfg, "topk_group", path, defaults.topkGroup), numExperts, numExpertsUsed, path);
  const scoring = cfg.scoring_func ?? "sigmoid";
  if (scoring !== "sigmoid" && scoring !== "softmax") {
    throw new ModelLoadError(`"scoring_func" in "${path}" should be "sigmoid" or "softmax", got ${JSON.stringify(scoring)}`);
  }
  const denseLayers = num(cfg, "first_k_dense_replace", path, defaults.firstKDenseReplace);
  return {
    numExperts,
    numExpertsUsed,
    normalizeTopK: cfg.norm_topk_prob !== false,
    gating: scoring,
    selectionBias: true,
    routedScale: num(cfg, "routed_scaling_factor", path, defaults.routedScalingFactor),
    denseLayers,
    denseIntermediateSize: denseLayers > 0 ? num(cfg, "intermediate_size", path) : 0,
    sharedIntermediateSize: num(cfg, "n_shared_experts", path, 1) * num(cfg, "moe_intermediate_size", path),
    sharedGate: false,
    ...(groups ? { groups } : {}),
  };
}
