/**
 * Hugging Face transformers' tensor names: each layer role's, each MoE family's experts (stacked on
 * load by expert-stack.ts), Gemma 3's feed-forward norm, DeepSeek's q up-projection and combined kv_b.
 */
import { MINIMAX_M2_EXPERT_NAMES } from "./minimax-m2.ts";
import { falconH1HfName } from "./falcon-h1.ts";
import { isMoeLayer, type ModelConfig } from "./config.ts";
import { GPT_OSS_NAMES } from "./hf-gpt-oss.ts";
import { lfm2HfName } from "./lfm2.ts";
import { graniteHybridHfName } from "./granite-hybrid.ts";
import { nemotronHHfNames } from "./nemotron-h.ts";
import type { LayerRole, NextnPart, TensorNames } from "./weights.ts";
import { EXPERT } from "./expert-stack.ts";

/** Each layer role's tensor name under `model.layers.N.`. */
const LAYER_NAMES: Record<LayerRole, string> = {
  attnNorm: "input_layernorm.weight",
  wq: "self_attn.q_proj.weight",
  wk: "self_attn.k_proj.weight",
  wv: "self_attn.v_proj.weight",
  wo: "self_attn.o_proj.weight",
  bq: "self_attn.q_proj.bias",
  bk: "self_attn.k_proj.bias",
  bv: "self_attn.v_proj.bias",
  qNorm: "self_attn.q_norm.weight",
  kNorm: "self_attn.k_norm.weight",
  // Gemma's sandwich norms; its pre-feed-forward norm is then "pre_feedforward_layernorm".
  attnPostNorm: "post_attention_layernorm.weight",
  ffnPostNorm: "post_feedforward_layernorm.weight",
  ffnNorm: "post_attention_layernorm.weight",
  wGate: "mlp.gate_proj.weight",
  wUp: "mlp.up_proj.weight",
  wDown: "mlp.down_proj.weight",
  router: "mlp.gate.weight",
  routerBias: "mlp.gate.e_score_correction_bias",
  wGateShared: "mlp.shared_experts.gate_proj.weight",
  wUpShared: "mlp.shared_experts.up_proj.weight",
  wDownShared: "mlp.shared_experts.down_proj.weight",
  sharedGate: "mlp.shared_expert_gate.weight",
  wqA: "self_attn.q_a_proj.weight",
  qANorm: "self_attn.q_a_layernorm.weight",
  wkvA: "self_attn.kv_a_proj_with_mqa.weight",
  kvANorm: "self_attn.kv_a_layernorm.weight",
  // Cut from kv_b_proj on load (mla-weights.ts).
  wkB: "self_attn.k_b_proj.weight",
  wvB: "self_attn.v_b_proj.weight",
  // GPT-OSS's roles; its experts' are read from fused tensors (hf-gpt-oss.ts GPT_OSS_NAMES).
  bo: "self_attn.o_proj.bias",
  sinks: "self_attn.sinks",
  ffnPostNorm1: "post_feedforward_layernorm_1.weight",
  ffnPreNorm2: "pre_feedforward_layernorm_2.weight",
  ffnPostNorm2: "post_feedforward_layernorm_2.weight",
  routerNorm: "router.scale",
  expertScale: "router.per_expert_scale",
  pleGate: "per_layer_input_gate.weight",
  pleProj: "per_layer_projection.weight",
  plePostNorm: "post_per_layer_input_norm.weight",
  routerLogitBias: "mlp.router.bias",
  bGate: "mlp.experts.gate_proj_bias",
  bUp: "mlp.experts.up_proj_bias",
  bDown: "mlp.experts.down_proj_bias",
  ssmQkv: "linear_attn.in_proj_qkv.weight",
  ssmZ: "linear_attn.in_proj_z.weight",
  ssmBeta: "linear_attn.in_proj_b.weight",
  ssmAlpha: "linear_attn.in_proj_a.weight",
  // [channels, 1, K] in the checkpoint, read as [channels, K].
  ssmConv: "linear_attn.conv1d.weight",
  ssmDtBias: "linear_attn.dt_bias",
  // A_log in the checkpoint, read as −exp(A_log).
  ssmDecay: "linear_attn.A_log",
  ssmNorm: "linear_attn.norm.weight",
  ssmOut: "linear_attn.out_proj.weight",
  convIn: "conv.in_proj.weight",
  convWeight: "conv.conv.weight",
  convOut: "conv.out_proj.weight",
  ssmIn: "mamba.in_proj.weight",
  ssmConvBias: "mamba.conv1d.bias",
  ssmD: "mamba.D",
};

/** DeepSeek's combined latent up-projection, split into W_kb and W_vb on load. */
export const HF_KV_B = "self_attn.kv_b_proj.weight";

/** Qwen's per-expert names, which Qwen2-MoE and GLM-4.5 share. */
const QWEN_EXPERTS: Partial<Record<LayerRole, string>> = {
  wGate: `mlp.experts.${EXPERT}.gate_proj.weight`,
  wUp: `mlp.experts.${EXPERT}.up_proj.weight`,
  wDown: `mlp.experts.${EXPERT}.down_proj.weight`,
};

/** Per-expert names of an MoE layer, stacked on load (expert-stack.ts), and each family's other MoE names. */
const EXPERT_NAMES: Record<"qwen2moe" | "qwen3moe" | "glm4moe" | "deepseek2" | "mixtral" | "qwen35moe" | "qwen3next", Partial<Record<LayerRole, string>>> = {
  qwen2moe: {
    ...QWEN_EXPERTS,
    wGateShared: "mlp.shared_expert.gate_proj.weight",
    wUpShared: "mlp.shared_expert.up_proj.weight",
    wDownShared: "mlp.shared_expert.down_proj.weight",
  },
  qwen3moe: QWEN_EXPERTS,
  qwen35moe: {
    ...QWEN_EXPERTS,
    wGateShared: "mlp.shared_expert.gate_proj.weight",
    wUpShared: "mlp.shared_expert.up_proj.weight",
    wDownShared: "mlp.shared_expert.down_proj.weight",
  },
  qwen3next: {
    ...QWEN_EXPERTS,
    wGateShared: "mlp.shared_expert.gate_proj.weight",
    wUpShared: "mlp.shared_expert.up_proj.weight",
    wDownShared: "mlp.shared_expert.down_proj.weight",
  },
  glm4moe: QWEN_EXPERTS,
  deepseek2: QWEN_EXPERTS,
  mixtral: {
    router: "block_sparse_moe.gate.weight",
    wGate: `block_sparse_moe.experts.${EXPERT}.w1.weight`,
    wUp: `block_sparse_moe.experts.${EXPERT}.w3.weight`,
    wDown: `block_sparse_moe.experts.${EXPERT}.w2.weight`,
  },
};

/** Hugging Face transformers' tensor names for Llama/Qwen2/Qwen3. */
export const HF_TENSOR_NAMES: TensorNames = {
  tokenEmbedding: "model.embed_tokens.weight",
  outputNorm: "model.norm.weight",
  output: "lm_head.weight",
  layer: (i, role) => `model.layers.${i}.${LAYER_NAMES[role]}`,
};

/** Gemma 3's: its post_attention_layernorm norms the attention's output; the feed-forward's input has its own. */
const GEMMA3_TENSOR_NAMES: TensorNames = {
  ...HF_TENSOR_NAMES,
  layer: (i, role) => `model.layers.${i}.${role === "ffnNorm" ? "pre_feedforward_layernorm.weight" : LAYER_NAMES[role]}`,
};

/** transformers' names for a model with experts (a leading dense layer keeps the plain names). */
function moeTensorNames(config: ModelConfig): TensorNames {
  const a = config.architecture;
  if (a === "gpt-oss") return { ...HF_TENSOR_NAMES, layer: (i, role) => `model.layers.${i}.${GPT_OSS_NAMES[role] ?? LAYER_NAMES[role]}` };
  if (a === "minimax-m2") return { ...HF_TENSOR_NAMES, layer: (i, role) => `model.layers.${i}.${MINIMAX_M2_EXPERT_NAMES[role] ?? LAYER_NAMES[role]}` };
  const experts = EXPERT_NAMES[a === "qwen2moe" || a === "qwen3moe" || a === "glm4moe" || a === "deepseek2" || a === "qwen35moe" || a === "qwen3next" ? a : "mixtral"];
  // DeepSeek's q up-projection follows its low-rank bottleneck.
  const own: Partial<Record<LayerRole, string>> = config.mla && config.mla.qLoraRank > 0 ? { wq: "self_attn.q_b_proj.weight" } : {};
  return {
    ...HF_TENSOR_NAMES,
    layer: (i, role) => `model.layers.${i}.${own[role] ?? (isMoeLayer(config, i) ? experts[role] : undefined) ?? LAYER_NAMES[role]}`,
    ...(a === "glm4moe" || a === "deepseek2" ? { nextn: (i: number, part: NextnPart) => `model.layers.${i}.${NEXTN_NAMES[part]}` } : {}),
  };
}

/** DeepSeek V3's and GLM-4.5's names of a multi-token-prediction layer's own tensors (beside its layer's, in `model.layers.N`). */
const NEXTN_NAMES: Record<NextnPart, string> = {
  ehProj: "eh_proj.weight",
  enorm: "enorm.weight",
  hnorm: "hnorm.weight",
  headNorm: "shared_head.norm.weight",
  head: "shared_head.head.weight",
  embedding: "embed_tokens.weight",
};

/** Qwen3.5's names of its multi-token-prediction block's own tensors (`mtp.`; it has no embedding or head of its own). */
const QWEN35_NEXTN_NAMES: Record<NextnPart, string> = {
  ehProj: "mtp.fc.weight",
  enorm: "mtp.pre_fc_norm_embedding.weight",
  hnorm: "mtp.pre_fc_norm_hidden.weight",
  headNorm: "mtp.norm.weight",
  head: "mtp.lm_head.weight",
  embedding: "mtp.embed_tokens.weight",
};

/** `names` with Qwen3.5's multi-token-prediction block: its layer (the one after the last) under `mtp.layers.0.`. */
function withQwen35Mtp(names: TensorNames, config: ModelConfig): TensorNames {
  const at = config.numLayers;
  return {
    ...names,
    layer: (i, role) => (i === at ? names.layer(i, role).replace(/^model\.layers\.\d+\./, "mtp.layers.0.") : names.layer(i, role)),
    nextn: (_i, part) => QWEN35_NEXTN_NAMES[part],
  };
}

/** The names a checkpoint's weights are read under: Gemma 3's, a model with experts', or the plain ones. */
export function hfTensorNames(config: ModelConfig): TensorNames {
  const names = hfArchitectureNames(config);
  // Qwen3-Next's block is named as Qwen3.5's (which took it from Qwen3-Next).
  return config.architecture === "qwen35" || config.architecture === "qwen35moe" || config.architecture === "qwen3next" ? withQwen35Mtp(names, config) : names;
}

function hfArchitectureNames(config: ModelConfig): TensorNames {
  if (config.architecture === "lfm2" || config.architecture === "lfm2moe") return lfm2TensorNames(config);
  if (config.architecture === "nemotron_h" || config.architecture === "nemotron_h_moe") return nemotronHHfNames(config);
  if (config.architecture === "falcon-h1") {
    return { ...HF_TENSOR_NAMES, outputNorm: "model.final_layernorm.weight", layer: (i, role) => `model.layers.${i}.${falconH1HfName(role) ?? graniteHybridHfName(role, false) ?? LAYER_NAMES[role]}` };
  }
  if (config.architecture === "granitehybrid") {
    return { ...HF_TENSOR_NAMES, layer: (i, role) => `model.layers.${i}.${graniteHybridHfName(role, isMoeLayer(config, i)) ?? LAYER_NAMES[role]}` };
  }
  return config.architecture === "gemma3" || config.architecture === "gemma2" ? GEMMA3_TENSOR_NAMES : !config.moe ? HF_TENSOR_NAMES : moeTensorNames(config);
}

/** LFM2's: its norms, output projection, q/k norms and feed-forward (LFM2-MoE's experts) named its own way, the final norm `embedding_norm`. */
function lfm2TensorNames(config: ModelConfig): TensorNames {
  return { ...HF_TENSOR_NAMES, outputNorm: "model.embedding_norm.weight", layer: (i, role) => `model.layers.${i}.${lfm2HfName(config, i, role) ?? LAYER_NAMES[role]}` };
}

/** `names` with the leading `model.` of each replaced by `prefix` (a text model inside a vision-language checkpoint: `model.language_model.`). */
export function prefixed(names: TensorNames, prefix: string): TensorNames {
  if (prefix === "model.") return names;
  const re = (n: string) => (n.startsWith("model.") ? prefix + n.slice("model.".length) : n);
  const nextn = names.nextn;
  return {
    tokenEmbedding: re(names.tokenEmbedding), outputNorm: re(names.outputNorm), output: re(names.output), layer: (i, role) => re(names.layer(i, role)),
    ...(nextn ? { nextn: (i: number, part: NextnPart) => re(nextn(i, part)) } : {}),
  };
}
