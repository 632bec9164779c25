/**
 * Granite 4.0-H test files as llama.cpp's converter writes them (granitehybrid): Mamba-2 layers
 * with `ssm_in` [2·inner + 2·state + heads, hidden], `ssm_conv1d` [channels, K] and its bias,
 * `ssm_dt.bias`, `ssm_a` (−exp(A_log)) and `ssm_d` as [heads, 1], `ssm_norm` [1, inner] and
 * `ssm_out`; attention layers as Llama's; a SwiGLU feed-forward after each; a per-layer
 * `attention.head_count_kv` (0 for Mamba-2 layers), the `ssm.*` keys, `rope.scaling.finetuned` false
 * (Granite 4.0-H's attention turns nothing) and Granite's multipliers. One group, inner size twice the
 * hidden size (what llama.cpp runs).
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import { GgufType } from "../../src/model/gguf-types.ts";
import type { HfWeights, ModelFileSpec } from "./model-files.ts";
import type { GgufPart } from "./qwen35-files.ts";

/** Whether layer i of `spec` is a Mamba-2 layer. */
export function isMambaLayer(spec: ModelFileSpec, i: number): boolean {
  return !spec.mamba2!.attention.includes(i);
}

/** Draws a Mamba-2 layer's mixer in HF naming (`mamba.*`) with `put` (name, shape, scale, offset). */
export function mamba2HfLayer(spec: ModelFileSpec, i: number, put: (name: string, shape: number[], scale: number, offset?: number) => void): void {
  const { hidden } = spec;
  const { heads, stateSize, conv } = spec.mamba2!;
  const inner = 2 * hidden;
  const channels = inner + 2 * stateSize;
  const p = `model.layers.${i}.mamba.`;
  put(p + "in_proj.weight", [inner + channels + heads, hidden], 1.5 / Math.sqrt(hidden));
  put(p + "conv1d.weight", [channels, 1, conv], 0.6);
  put(p + "conv1d.bias", [channels], 0.3);
  put(p + "dt_bias", [heads], 1, -1);
  put(p + "A_log", [heads], 1, 0);
  put(p + "D", [heads], 0.5, 1);
  put(p + "norm.weight", [inner], 0.2, 1);
  put(p + "out_proj.weight", [hidden, inner], 1 / Math.sqrt(inner));
}

/** One Mamba-2 weight as the converter writes it, or undefined for the other names. */
export function mamba2GgufPart(hf: string, shape: number[], values: Float32Array): GgufPart | undefined {
  const m = /^model\.layers\.(\d+)\.mamba\.(.+)$/.exec(hf);
  if (!m) return undefined;
  const at = `blk.${m[1]}.`;
  switch (m[2]) {
    case "in_proj.weight": return { name: at + "ssm_in.weight", shape, values, hf };
    case "conv1d.weight": return { name: at + "ssm_conv1d.weight", shape: [shape[0], shape[2]], values, hf };
    case "conv1d.bias": return { name: at + "ssm_conv1d.bias", shape, values, hf };
    case "dt_bias": return { name: at + "ssm_dt.bias", shape, values, hf };
    case "A_log": return { name: at + "ssm_a", shape: [shape[0], 1], values: values.map((v) => -Math.exp(v)), hf };
    case "D": return { name: at + "ssm_d", shape: [shape[0], 1], values, hf };
    case "norm.weight": return { name: at + "ssm_norm.weight", shape: [1, shape[0]], values, hf };
    case "out_proj.weight": return { name: at + "ssm_out.weight", shape, values, hf };
    default: throw new Error(`No GGUF name for ${hf}`);
  }
}

/** A granitehybrid GGUF's own metadata: per-layer KV heads (0 for Mamba-2 layers), the SSM's geometry, RoPE off. */
export function mamba2GgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const a = spec.architecture;
  const m = spec.mamba2!;
  return [
    [`${a}.attention.head_count_kv`, gguf.arr(GgufType.UINT32, Array.from({ length: spec.layers }, (_, i) => (isMambaLayer(spec, i) ? 0 : spec.kvHeads)))],
    [`${a}.ssm.conv_kernel`, gguf.u32(m.conv)],
    [`${a}.ssm.inner_size`, gguf.u32(2 * spec.hidden)],
    [`${a}.ssm.state_size`, gguf.u32(m.stateSize)],
    [`${a}.ssm.time_step_rank`, gguf.u32(m.heads)],
    [`${a}.ssm.group_count`, gguf.u32(1)],
    [`${a}.rope.scaling.finetuned`, gguf.bool(m.rope === true)],
  ];
}

/**
 * GraniteMoeHybridConfig's own fields: layer types, the Mamba-2 geometry (expansion 2), the experts
 * (`num_local_experts` 0 for a dense model, whose `shared_mlp` is its feed-forward) and RoPE only where
 * the spec keeps it.
 */
export function graniteHybridHfConfig(spec: ModelFileSpec): Record<string, unknown> {
  const m = spec.mamba2!;
  const e = spec.experts;
  return {
    layer_types: Array.from({ length: spec.layers }, (_, i) => (isMambaLayer(spec, i) ? "mamba" : "attention")),
    mamba_n_heads: m.heads, mamba_d_head: (2 * spec.hidden) / m.heads, mamba_d_state: m.stateSize, mamba_d_conv: m.conv, mamba_expand: 2, mamba_n_groups: 1,
    mamba_conv_bias: true, mamba_proj_bias: false,
    num_local_experts: e?.count ?? 0, num_experts_per_tok: e?.used ?? 2, intermediate_size: spec.ffn, shared_intermediate_size: e ? e.sharedFfn ?? 0 : spec.ffn,
    position_embedding_type: m.rope ? "rope" : "nope",
  };
}

/**
 * `weights` (Llama-style feed-forward names) as a GraniteMoeHybridForCausalLM checkpoint names them:
 * gate and up fused per layer into `shared_mlp.input_linear` [2·ff, H] (gate rows first) with
 * `shared_mlp.output_linear`; experts stacked into `block_sparse_moe.input_linear` [E, 2·ff, H] and
 * `output_linear` [E, H, ff], the router as `block_sparse_moe.router.layer`; the shared expert as the
 * `shared_mlp`.
 */
export function graniteHybridHfWeights(spec: ModelFileSpec, weights: HfWeights): HfWeights {
  const out: HfWeights = new Map();
  const cat = (...parts: Float32Array[]) => {
    const v = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
    let at = 0;
    for (const p of parts) {
      v.set(p, at);
      at += p.length;
    }
    return v;
  };
  for (const [name, t] of weights) {
    const m = /^model\.layers\.(\d+)\.mlp\.(.+)$/.exec(name);
    if (!m) {
      out.set(name, t);
      continue;
    }
    const p = `model.layers.${m[1]}.`;
    const get = (n: string) => weights.get(`${p}mlp.${n}`)!;
    const mlp = m[2];
    // The dense feed-forward, or the shared expert beside the experts: one shared_mlp.
    const dense = /^(gate|up|down)_proj\.weight$/.exec(mlp) ? "" : /^shared_experts\.(gate|up|down)_proj\.weight$/.exec(mlp) ? "shared_experts." : undefined;
    if (dense !== undefined) {
      if (mlp.endsWith("gate_proj.weight")) {
        const gate = get(`${dense}gate_proj.weight`), up = get(`${dense}up_proj.weight`);
        out.set(`${p}shared_mlp.input_linear.weight`, { shape: [2 * gate.shape[0], gate.shape[1]], values: cat(gate.values, up.values) });
      } else if (mlp.endsWith("down_proj.weight")) out.set(`${p}shared_mlp.output_linear.weight`, t);
      continue;
    }
    if (mlp === "gate.weight") {
      out.set(`${p}block_sparse_moe.router.layer.weight`, t);
      const count = spec.experts!.count;
      const gates = Array.from({ length: count }, (_, e) => get(`experts.${e}.gate_proj.weight`));
      const ups = Array.from({ length: count }, (_, e) => get(`experts.${e}.up_proj.weight`));
      const downs = Array.from({ length: count }, (_, e) => get(`experts.${e}.down_proj.weight`));
      const [ff, hidden] = gates[0].shape;
      out.set(`${p}block_sparse_moe.input_linear.weight`, { shape: [count, 2 * ff, hidden], values: cat(...gates.flatMap((g, e) => [g.values, ups[e].values])) });
      out.set(`${p}block_sparse_moe.output_linear.weight`, { shape: [count, hidden, ff], values: cat(...downs.map((d) => d.values)) });
    }
  }
  return out;
}
