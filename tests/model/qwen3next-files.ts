/**
 * Qwen3-Next test GGUFs as llama.cpp's converter writes them (Qwen3NextModel): the Hugging Face
 * checkpoint's `in_proj_qkvz` (per key head: q, k, then its value heads' v and z rows) regrouped into
 * `attn_qkv` (every q, every k, every v) and `attn_gate` (every z), or, as its first conversions did,
 * kept whole as `ssm_in` (`deltaNet.legacySsmIn`); `in_proj_ba` kept whole as `ssm_ba`; value heads
 * left grouped by key head; the other DeltaNet tensors as Qwen3.5's converter writes them untiled.
 */
import type { ModelFileSpec } from "./model-files.ts";
import type { GgufPart } from "./qwen35-files.ts";

/** Rows `[first, first + count)` of each key head's group of `stride` rows, over `groups` groups, of a [rows, cols] matrix. */
function groupRows(values: Float32Array, cols: number, groups: number, stride: number, first: number, count: number): Float32Array {
  const out = new Float32Array(groups * count * cols);
  for (let g = 0; g < groups; g++) out.set(values.subarray((g * stride + first) * cols, (g * stride + first + count) * cols), g * count * cols);
  return out;
}

/**
 * A Qwen3-Next DeltaNet weight as the converter writes it (one HF tensor may give two), or undefined
 * for the rest (Qwen3.5's handling then applies: norms, conv1d, A_log…).
 */
export function qwen3nextGgufParts(spec: ModelFileSpec, hf: string, shape: number[], values: Float32Array): GgufPart[] | undefined {
  const d = spec.deltaNet!;
  const m = /^model\.layers\.(\d+)\.linear_attn\.(in_proj_qkvz|in_proj_ba)\.weight$/.exec(hf);
  if (!m) return undefined;
  const blk = `blk.${m[1]}.`;
  const cols = shape[1];
  if (m[2] === "in_proj_ba") return [{ name: blk + "ssm_ba.weight", shape, values, hf }];
  if (d.legacySsmIn) return [{ name: blk + "ssm_in.weight", shape, values, hf }];
  const perK = (d.vHeads / d.kHeads) * d.dim;
  const stride = 2 * d.dim + 2 * perK;
  const parts = [groupRows(values, cols, d.kHeads, stride, 0, d.dim), groupRows(values, cols, d.kHeads, stride, d.dim, d.dim), groupRows(values, cols, d.kHeads, stride, 2 * d.dim, perK)];
  const qkv = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    qkv.set(p, at);
    at += p.length;
  }
  return [
    { name: blk + "attn_qkv.weight", shape: [qkv.length / cols, cols], values: qkv, hf },
    { name: blk + "attn_gate.weight", shape: [d.kHeads * perK, cols], values: groupRows(values, cols, d.kHeads, stride, 2 * d.dim + perK, perK), hf },
  ];
}
