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
import type { ModelFileSpec } from "./model-files.ts";
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
