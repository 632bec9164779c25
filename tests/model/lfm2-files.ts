/**
 * LFM2 test files as its checkpoints and llama.cpp's converter have them. Hugging Face
 * (Lfm2ForCausalLM): each layer's `operator_norm` and `ffn_norm`, a convolution layer's
 * `conv.in_proj` [3·hidden, hidden] (B, C, x), `conv.conv` [hidden, 1, K] and `conv.out_proj`, an
 * attention layer's `self_attn.q/k/v_proj`, `out_proj`, `q_layernorm`, `k_layernorm`, the SwiGLU
 * `feed_forward.w1` (gate), `w3` (up), `w2` (down), and the final `model.embedding_norm`. GGUF
 * (LFM2Model): `shortconv.*` with the convolution squeezed to [hidden, K], the final norm
 * `token_embd_norm`, a per-layer `attention.head_count_kv` (0 for convolution layers) and
 * `shortconv.l_cache`.
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import type { ModelFileSpec } from "./model-files.ts";
import type { GgufPart } from "./qwen35-files.ts";

/** Whether layer i of `spec` is a convolution layer. */
export function isConvLayer(spec: ModelFileSpec, i: number): boolean {
  return !spec.shortConv!.attention.includes(i);
}

/** Draws an LFM2's layer `i` in HF naming with `put` (name, shape, scale, offset). */
export function lfm2HfLayer(spec: ModelFileSpec, i: number, put: (name: string, shape: number[], scale: number, offset?: number) => void): void {
  const { hidden, heads, kvHeads, headDim: hd, ffn } = spec;
  const p = `model.layers.${i}.`;
  put(p + "operator_norm.weight", [hidden], 0.2, 1);
  put(p + "ffn_norm.weight", [hidden], 0.2, 1);
  if (isConvLayer(spec, i)) {
    put(p + "conv.in_proj.weight", [3 * hidden, hidden], 1.5 / Math.sqrt(hidden));
    put(p + "conv.conv.weight", [hidden, 1, spec.shortConv!.kernel], 0.8);
    put(p + "conv.out_proj.weight", [hidden, hidden], 1 / Math.sqrt(hidden));
  } else {
    put(p + "self_attn.q_proj.weight", [heads * hd, hidden], 1 / Math.sqrt(hidden));
    put(p + "self_attn.k_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
    put(p + "self_attn.v_proj.weight", [kvHeads * hd, hidden], 1 / Math.sqrt(hidden));
    put(p + "self_attn.out_proj.weight", [hidden, heads * hd], 1 / Math.sqrt(heads * hd));
    put(p + "self_attn.q_layernorm.weight", [hd], 0.2, 1);
    put(p + "self_attn.k_layernorm.weight", [hd], 0.2, 1);
  }
  const e = spec.experts;
  if (e && i >= (e.denseLayers ?? 0)) {
    // LFM2-MoE: a sharper router than the projections, a selection bias that changes which experts win, each expert's SwiGLU.
    put(p + "feed_forward.gate.weight", [e.count, hidden], 4 / Math.sqrt(hidden));
    put(p + "feed_forward.expert_bias", [e.count], 0.5);
    for (let x = 0; x < e.count; x++) {
      put(`${p}feed_forward.experts.${x}.w1.weight`, [ffn, hidden], 1 / Math.sqrt(hidden));
      put(`${p}feed_forward.experts.${x}.w3.weight`, [ffn, hidden], 1 / Math.sqrt(hidden));
      put(`${p}feed_forward.experts.${x}.w2.weight`, [hidden, ffn], 1 / Math.sqrt(ffn));
    }
    return;
  }
  // LFM2-MoE's leading dense layers are three experts wide, as other MoE test models' are.
  const width = e ? 3 * ffn : ffn;
  put(p + "feed_forward.w1.weight", [width, hidden], 1 / Math.sqrt(hidden));
  put(p + "feed_forward.w3.weight", [width, hidden], 1 / Math.sqrt(hidden));
  put(p + "feed_forward.w2.weight", [hidden, width], 1 / Math.sqrt(width));
}

const GGUF_LFM2: Record<string, string> = {
  "operator_norm.weight": "attn_norm.weight",
  "ffn_norm.weight": "ffn_norm.weight",
  "conv.in_proj.weight": "shortconv.in_proj.weight",
  "conv.conv.weight": "shortconv.conv.weight",
  "conv.out_proj.weight": "shortconv.out_proj.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.out_proj.weight": "attn_output.weight",
  "self_attn.q_layernorm.weight": "attn_q_norm.weight",
  "self_attn.k_layernorm.weight": "attn_k_norm.weight",
  "feed_forward.w1.weight": "ffn_gate.weight",
  "feed_forward.w3.weight": "ffn_up.weight",
  "feed_forward.w2.weight": "ffn_down.weight",
  "feed_forward.gate.weight": "ffn_gate_inp.weight",
  "feed_forward.expert_bias": "exp_probs_b.bias",
};

/** One LFM2 weight as the converter writes it, or undefined for the generic names (embeddings, output). */
export function lfm2GgufPart(hf: string, shape: number[], values: Float32Array): GgufPart | undefined {
  if (hf === "model.embedding_norm.weight") return { name: "token_embd_norm.weight", shape, values, hf };
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf);
  if (!m) return undefined;
  // LFM2-MoE's experts are stacked as every model's are (model-files.ts).
  if (m[2].startsWith("feed_forward.experts.")) return undefined;
  const name = GGUF_LFM2[m[2]];
  if (!name) throw new Error(`No GGUF name for ${hf}`);
  return { name: `blk.${m[1]}.${name}`, shape: m[2] === "conv.conv.weight" ? [shape[0], shape[2]] : shape, values, hf };
}

/** An lfm2 GGUF's own metadata: the per-layer KV heads (0 for convolution layers) and the convolution's width. */
export function lfm2GgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const a = spec.architecture;
  return [
    [`${a}.attention.head_count_kv`, gguf.arr(GgufType.UINT32, Array.from({ length: spec.layers }, (_, i) => (isConvLayer(spec, i) ? 0 : spec.kvHeads)))],
    [`${a}.shortconv.l_cache`, gguf.u32(spec.shortConv!.kernel)],
    // As the converter writes LFM2-MoE: leading dense layers of the dense width, sigmoid gating (2).
    ...(spec.experts
      ? [[`${a}.leading_dense_block_count`, gguf.u32(spec.experts.denseLayers ?? 0)], [`${a}.expert_gating_func`, gguf.u32(2)], [`${a}.feed_forward_length`, gguf.u32(3 * spec.ffn)]] as [string, GgufEntry][]
      : []),
  ];
}

/** Lfm2Config's own fields: layer types, the convolution's width, the feed-forward as given, norm_eps and tie_embedding. */
export function lfm2HfConfig(spec: ModelFileSpec): Record<string, unknown> {
  return {
    layer_types: Array.from({ length: spec.layers }, (_, i) => (isConvLayer(spec, i) ? "conv" : "full_attention")),
    conv_L_cache: spec.shortConv!.kernel,
    conv_bias: false,
    block_ff_dim: spec.experts ? 3 * spec.ffn : spec.ffn,
    // Lfm2MoeConfig's experts.
    ...(spec.experts ? { num_experts: spec.experts.count, num_experts_per_tok: spec.experts.used, moe_intermediate_size: spec.ffn, num_dense_layers: spec.experts.denseLayers ?? 0, norm_topk_prob: true, use_expert_bias: true, routed_scaling_factor: 1 } : {}),
    block_auto_adjust_ff_dim: false,
    norm_eps: 1e-5,
    tie_embedding: spec.tied,
  };
}
