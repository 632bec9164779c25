/**
 * Gemma 4 test files (dense, as the 31B) as llama.cpp's converter writes them (gemma4): each layer's
 * attention with heads of the full-attention size (`headDim`, `kvHeads`) or the sliding one
 * (`swaHeadDim`, `swaKvHeads`), q/k norms of the head's width, Gemma's sandwich norms stored as they
 * apply (no 1 added), a GeGLU feed-forward, a `layer_output_scale` per layer; full-attention layers
 * without a value projection where the spec says so; `rope_freqs` for the full layers' proportional
 * RoPE (pairs past the rotated fraction divided by 1e30); the per-layer sliding pattern and KV heads,
 * the sliding layers' key length, rotated dims and RoPE base.
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import type { ModelFileSpec } from "./model-files.ts";
import type { GgufPart } from "./qwen35-files.ts";

/** Gemma 4's layers beyond the common spec. */
export interface Gemma4Spec {
  /** One flag per layer: true where it slides. */
  pattern: boolean[];
  window: number;
  swaHeadDim: number;
  swaKvHeads: number;
  swaTheta: number;
  /** The fraction of the full layers' head that turns (the converter's proportional RoPE). */
  partialFull: number;
  /** Full-attention layers take their keys as values (no v_proj). */
  keyAsValue?: boolean;
  softcap?: number;
  /** E2B/E4B: per-layer inputs of this width, the last `sharedKv` layers reading earlier caches, those layers' feed-forwards double-wide. */
  ple?: number;
  sharedKv?: number;
  doubleWide?: boolean;
}

/** Whether layer i reads another's cache. */
function sharesKv(spec: ModelFileSpec, i: number): boolean {
  const g = spec.gemma4!;
  return i >= spec.layers - (g.sharedKv ?? 0);
}

/** Layer i's feed-forward width. */
export function gemma4Ffn(spec: ModelFileSpec, i: number): number {
  return spec.gemma4!.doubleWide && sharesKv(spec, i) ? 2 * spec.ffn : spec.ffn;
}

/** The model-level per-layer input tensors in HF naming (E2B/E4B). */
export function gemma4PerLayerWeights(spec: ModelFileSpec, put: (name: string, shape: number[], scale: number, offset?: number) => void): void {
  const d = spec.gemma4!.ple;
  if (!d) return;
  put("model.embed_tokens_per_layer.weight", [spec.vocab, spec.layers * d], 1);
  put("model.per_layer_model_projection.weight", [spec.layers * d, spec.hidden], 1 / Math.sqrt(spec.hidden));
  put("model.per_layer_projection_norm.weight", [d], 0.2, 1);
}

/** Layer i's head size and KV heads. */
function geometry(spec: ModelFileSpec, i: number): { hd: number; kv: number } {
  const g = spec.gemma4!;
  return g.pattern[i] ? { hd: g.swaHeadDim, kv: g.swaKvHeads } : { hd: spec.headDim, kv: spec.kvHeads };
}

/** Draws layer i in HF naming with `put` (name, shape, scale, offset). */
export function gemma4HfLayer(spec: ModelFileSpec, i: number, put: (name: string, shape: number[], scale: number, offset?: number) => void): void {
  const g = spec.gemma4!;
  const { hidden, heads, ffn } = spec;
  const { hd, kv } = geometry(spec, i);
  const p = `model.layers.${i}.`;
  put(p + "input_layernorm.weight", [hidden], 0.2, 1);
  put(p + "self_attn.q_proj.weight", [heads * hd, hidden], 1 / Math.sqrt(hidden));
  const shared = sharesKv(spec, i);
  if (!shared) put(p + "self_attn.k_proj.weight", [kv * hd, hidden], 1 / Math.sqrt(hidden));
  if (!shared && (g.pattern[i] || !g.keyAsValue)) put(p + "self_attn.v_proj.weight", [kv * hd, hidden], 1 / Math.sqrt(hidden));
  put(p + "self_attn.o_proj.weight", [hidden, heads * hd], 1 / Math.sqrt(heads * hd));
  put(p + "self_attn.q_norm.weight", [hd], 0.2, 1);
  if (!shared) put(p + "self_attn.k_norm.weight", [hd], 0.2, 1);
  if (g.ple) {
    put(p + "per_layer_input_gate.weight", [g.ple, hidden], 1 / Math.sqrt(hidden));
    put(p + "per_layer_projection.weight", [hidden, g.ple], 1 / Math.sqrt(g.ple));
    put(p + "post_per_layer_input_norm.weight", [hidden], 0.2, 1);
  }
  put(p + "post_attention_layernorm.weight", [hidden], 0.2, 1);
  put(p + "pre_feedforward_layernorm.weight", [hidden], 0.2, 1);
  put(p + "post_feedforward_layernorm.weight", [hidden], 0.2, 1);
  // With experts (the 26B-A4B) the dense feed-forward is three expert widths wide, as the writer's GGUF says.
  const e = spec.experts;
  const dense = e ? 3 * ffn : gemma4Ffn(spec, i);
  put(p + "mlp.gate_proj.weight", [dense, hidden], 1 / Math.sqrt(hidden));
  put(p + "mlp.up_proj.weight", [dense, hidden], 1 / Math.sqrt(hidden));
  put(p + "mlp.down_proj.weight", [hidden, dense], 1 / Math.sqrt(dense));
  if (e) {
    put(p + "post_feedforward_layernorm_1.weight", [hidden], 0.2, 1);
    put(p + "pre_feedforward_layernorm_2.weight", [hidden], 0.2, 1);
    put(p + "post_feedforward_layernorm_2.weight", [hidden], 0.2, 1);
    // A sharper router than the projections, and per-expert scales far from 1.
    put(p + "router.proj.weight", [e.count, hidden], 4 / Math.sqrt(hidden));
    put(p + "router.scale", [hidden], 0.5, 1);
    put(p + "router.per_expert_scale", [e.count], 0.6, 1);
    for (let x = 0; x < e.count; x++) {
      put(`${p}mlp.experts.${x}.gate_proj.weight`, [ffn, hidden], 1 / Math.sqrt(hidden));
      put(`${p}mlp.experts.${x}.up_proj.weight`, [ffn, hidden], 1 / Math.sqrt(hidden));
      put(`${p}mlp.experts.${x}.down_proj.weight`, [hidden, ffn], 1 / Math.sqrt(ffn));
    }
  }
  put(p + "layer_scalar", [1], 0.3, 0.9);
}

const LAYER_NAMES: Record<string, string> = {
  "input_layernorm.weight": "attn_norm.weight",
  "self_attn.q_proj.weight": "attn_q.weight",
  "self_attn.k_proj.weight": "attn_k.weight",
  "self_attn.v_proj.weight": "attn_v.weight",
  "self_attn.o_proj.weight": "attn_output.weight",
  "self_attn.q_norm.weight": "attn_q_norm.weight",
  "self_attn.k_norm.weight": "attn_k_norm.weight",
  "post_attention_layernorm.weight": "post_attention_norm.weight",
  "pre_feedforward_layernorm.weight": "ffn_norm.weight",
  "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
  "mlp.gate_proj.weight": "ffn_gate.weight",
  "mlp.up_proj.weight": "ffn_up.weight",
  "mlp.down_proj.weight": "ffn_down.weight",
  "layer_scalar": "layer_output_scale.weight",
  "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
  "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
  "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
  "router.proj.weight": "ffn_gate_inp.weight",
  "router.scale": "ffn_gate_inp.scale",
  "router.per_expert_scale": "ffn_down_exps.scale",
  "per_layer_input_gate.weight": "inp_gate.weight",
  "per_layer_projection.weight": "proj.weight",
  "post_per_layer_input_norm.weight": "post_norm.weight",
};

const MODEL_NAMES: Record<string, string> = {
  "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
  "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
  "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight",
};

/** One Gemma 4 layer weight as the converter writes it, or undefined for the others. */
export function gemma4GgufPart(hf: string, shape: number[], values: Float32Array): GgufPart | undefined {
  if (MODEL_NAMES[hf]) return { name: MODEL_NAMES[hf], shape, values, hf };
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf);
  // The routed experts are stacked as every model's are (model-files.ts).
  if (!m || m[2].startsWith("mlp.experts.")) return undefined;
  const name = LAYER_NAMES[m[2]];
  if (!name) throw new Error(`No GGUF name for ${hf}`);
  return { name: `blk.${m[1]}.${name}`, shape, values, hf };
}

/** The full layers' `rope_freqs`: 1 for the pairs that turn, 1e30 for the rest (the converter's proportional RoPE). */
export function gemma4RopeFreqs(spec: ModelFileSpec): number[] {
  const pairs = spec.headDim / 2;
  const turning = Math.floor((spec.headDim * spec.gemma4!.partialFull) / 2);
  return Array.from({ length: pairs }, (_, i) => (i < turning ? 1 : 1e30));
}

/** A gemma4 GGUF's own metadata, replacing the common keys it redefines. */
export function gemma4GgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const a = spec.architecture;
  const g = spec.gemma4!;
  return [
    [`${a}.attention.sliding_window_pattern`, gguf.arr(GgufType.BOOL, g.pattern)],
    [`${a}.attention.sliding_window`, gguf.u32(g.window)],
    [`${a}.attention.head_count_kv`, gguf.arr(GgufType.UINT32, g.pattern.map((s) => (s ? g.swaKvHeads : spec.kvHeads)))],
    [`${a}.attention.key_length_swa`, gguf.u32(g.swaHeadDim)],
    [`${a}.attention.value_length_swa`, gguf.u32(g.swaHeadDim)],
    [`${a}.rope.dimension_count`, gguf.u32(spec.headDim)],
    [`${a}.rope.dimension_count_swa`, gguf.u32(g.swaHeadDim)],
    [`${a}.rope.freq_base_swa`, gguf.f32(g.swaTheta)],
    [`${a}.embedding_length_per_layer_input`, gguf.u32(g.ple ?? 0)],
    [`${a}.attention.shared_kv_layers`, gguf.u32(g.sharedKv ?? 0)],
    ...(g.doubleWide ? [[`${a}.feed_forward_length`, gguf.arr(GgufType.UINT32, Array.from({ length: spec.layers }, (_, i) => gemma4Ffn(spec, i)))] as [string, GgufEntry]] : []),
    ...(g.softcap ? [[`${a}.final_logit_softcapping`, gguf.f32(g.softcap)] as [string, GgufEntry]] : []),
  ];
}
