/**
 * llama.cpp's GGUF tensor names: each layer role's, the per-architecture exceptions (GLM-4.5's and
 * GPT-OSS's pre-feed-forward norm, DeepSeek's q up-projection), experts stacked or split.
 */
import { isMoeLayer, type ModelConfig } from "./config.ts";
import type { LayerRole, NextnPart, TensorNames } from "./weights.ts";
import { EXPERT } from "./expert-stack.ts";

/** Each layer role's tensor name under `blk.N.`. */
export const GGUF_LAYER_NAMES: Readonly<Record<LayerRole, string>> = {
  attnNorm: "attn_norm.weight",
  wq: "attn_q.weight",
  wk: "attn_k.weight",
  wv: "attn_v.weight",
  wo: "attn_output.weight",
  bq: "attn_q.bias",
  bk: "attn_k.bias",
  bv: "attn_v.bias",
  qNorm: "attn_q_norm.weight",
  kNorm: "attn_k_norm.weight",
  attnPostNorm: "post_attention_norm.weight",
  ffnPostNorm: "post_ffw_norm.weight",
  ffnNorm: "ffn_norm.weight",
  wGate: "ffn_gate.weight",
  wUp: "ffn_up.weight",
  wDown: "ffn_down.weight",
  router: "ffn_gate_inp.weight",
  routerBias: "exp_probs_b.bias",
  wGateShared: "ffn_gate_shexp.weight",
  wUpShared: "ffn_up_shexp.weight",
  wDownShared: "ffn_down_shexp.weight",
  sharedGate: "ffn_gate_inp_shexp.weight",
  wqA: "attn_q_a.weight",
  qANorm: "attn_q_a_norm.weight",
  wkvA: "attn_kv_a_mqa.weight",
  kvANorm: "attn_kv_a_norm.weight",
  wkB: "attn_k_b.weight",
  wvB: "attn_v_b.weight",
  bo: "attn_output.bias",
  sinks: "attn_sinks.weight",
  ffnPostNorm1: "post_ffw_norm_1.weight",
  ffnPreNorm2: "pre_ffw_norm_2.weight",
  ffnPostNorm2: "post_ffw_norm_2.weight",
  routerNorm: "ffn_gate_inp.scale",
  expertScale: "ffn_down_exps.scale",
  pleGate: "inp_gate.weight",
  pleProj: "proj.weight",
  plePostNorm: "post_norm.weight",
  routerLogitBias: "ffn_gate_inp.bias",
  bGate: "ffn_gate.bias",
  bUp: "ffn_up.bias",
  bDown: "ffn_down.bias",
  ssmQkv: "attn_qkv.weight",
  ssmZ: "attn_gate.weight",
  ssmBeta: "ssm_beta.weight",
  ssmAlpha: "ssm_alpha.weight",
  ssmConv: "ssm_conv1d.weight",
  ssmDtBias: "ssm_dt.bias",
  ssmDecay: "ssm_a",
  ssmNorm: "ssm_norm.weight",
  ssmOut: "ssm_out.weight",
  ssmIn: "ssm_in.weight",
  ssmConvBias: "ssm_conv1d.bias",
  ssmD: "ssm_d",
  convIn: "shortconv.in_proj.weight",
  convWeight: "shortconv.conv.weight",
  convOut: "shortconv.out_proj.weight",
};

/** The combined kv_b of GGUFs converted before llama.cpp split it into attn_k_b and attn_v_b. */
export const GGUF_KV_B = "attn_kv_b.weight";

/** GLM-4.5 names its pre-feed-forward norm after HF's `post_attention_layernorm`. */
const GLM4MOE_NAMES: Partial<Record<LayerRole, string>> = { ffnNorm: "post_attention_norm.weight" };

/** Each architecture's own names: GLM-4.5's and GPT-OSS's norm; DeepSeek's q up-projection after its low-rank bottleneck. */
function ownNames(config: ModelConfig): Partial<Record<LayerRole, string>> {
  // Qwen3.5 and Qwen3-Next too name their pre-feed-forward norm after HF's `post_attention_layernorm`.
  // Seed-OSS's converter gives it the attention's post-norm name as well (llama.cpp's attn_post_norm).
  if (config.architecture === "glm4moe" || config.architecture === "gpt-oss" || config.architecture === "qwen35" || config.architecture === "qwen35moe" || config.architecture === "qwen3next" || config.architecture === "seed_oss") return GLM4MOE_NAMES;
  // Gemma 4's dense feed-forward beside its experts keeps the plain names.
  if (config.architecture === "gemma4") return { wGateShared: "ffn_gate.weight", wUpShared: "ffn_up.weight", wDownShared: "ffn_down.weight" };
  // llama.cpp's falcon-h1 loader asks for its pre-feed-forward norm without the ".weight" suffix.
  if (config.architecture === "falcon-h1") return { ffnNorm: "ffn_norm" };
  return config.mla && config.mla.qLoraRank > 0 ? { wq: "attn_q_b.weight" } : {};
}

/** An MoE layer's stacked experts (llama.cpp's `ffn_*_exps`). */
const EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  wGate: "ffn_gate_exps.weight",
  wUp: "ffn_up_exps.weight",
  wDown: "ffn_down_exps.weight",
  bGate: "ffn_gate_exps.bias",
  bUp: "ffn_up_exps.bias",
  bDown: "ffn_down_exps.bias",
};

/** The first Mixtral GGUFs' experts, one tensor each (`blk.N.ffn_gate.E.weight`). */
const SPLIT_EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  wGate: `ffn_gate.${EXPERT}.weight`,
  wUp: `ffn_up.${EXPERT}.weight`,
  wDown: `ffn_down.${EXPERT}.weight`,
};

/** llama.cpp's GGUF tensor names. */
export const GGUF_TENSOR_NAMES: TensorNames = {
  tokenEmbedding: "token_embd.weight",
  outputNorm: "output_norm.weight",
  output: "output.weight",
  perLayer: { embedding: "per_layer_token_embd.weight", modelProj: "per_layer_model_proj.weight", projNorm: "per_layer_proj_norm.weight" },
  layer: (i, role) => `blk.${i}.${GGUF_LAYER_NAMES[role]}`,
  nextn: (i, part) => `blk.${i}.nextn.${GGUF_NEXTN_NAMES[part]}`,
};

/** llama.cpp's names of a multi-token-prediction block's own tensors (`blk.N.nextn.*`). */
const GGUF_NEXTN_NAMES: Record<NextnPart, string> = {
  ehProj: "eh_proj.weight",
  enorm: "enorm.weight",
  hnorm: "hnorm.weight",
  headNorm: "shared_head_norm.weight",
  head: "shared_head_head.weight",
  embedding: "embed_tokens.weight",
};

/**
 * llama.cpp's names for a model with experts, stacked or (older Mixtral files) split; a leading
 * dense layer's feed-forward keeps the plain names.
 */
export function ggufMoeTensorNames(config: ModelConfig, split: boolean): TensorNames {
  const experts = split ? SPLIT_EXPERT_NAMES : EXPERT_NAMES;
  const own = ownNames(config);
  return {
    ...GGUF_TENSOR_NAMES,
    // LFM2's final norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2).
    ...(config.architecture === "lfm2" || config.architecture === "lfm2moe" ? { outputNorm: "token_embd_norm.weight" } : {}),
    layer: (i, role) => `blk.${i}.${own[role] ?? (isMoeLayer(config, i) ? experts[role] : undefined) ?? GGUF_LAYER_NAMES[role]}`,
  };
}

/** llama.cpp's tensor of per-pair RoPE frequency divisors (Llama 3.1+ converters write it). */
export const GGUF_ROPE_FREQS = "rope_freqs.weight";
