/**
 * Qwen3-Next (llama.cpp's `qwen3next`, transformers' Qwen3NextForCausalLM: Qwen3-Next-80B-A3B) is
 * Qwen3.5-MoE's text model before it: the same Gated DeltaNet layers (three of four), gated attention
 * with q/k norms and a quarter of each head rotated (plain NeoX RoPE), and sigmoid-gated shared experts
 * beside renormalised routed ones; its value heads stay grouped by key head in both formats. Its
 * checkpoints fuse the DeltaNet input projections per key head: `in_proj_qkvz` holds, for each key
 * head in turn, its q and k rows then the v and z rows of its value heads, and `in_proj_ba` its value
 * heads' beta rows then their alpha rows. llama.cpp's converter writes q, k and v apart from z
 * (`attn_qkv`, `attn_gate`: the layout Qwen3.5's roles read) but keeps `ssm_ba` whole; its first
 * conversions kept the whole `in_proj_qkvz` as `ssm_in`. Each is cut into the plain roles as it is read.
 */
import type { DeltaNetConfig } from "./config.ts";
import { type FusedPart, splittingFused } from "./fused-rows.ts";
import type { TensorNames, TensorSource } from "./weights.ts";

/** The fused tensors of a layer, by file format: the q/k/v/z and the beta/alpha projections. */
export interface Qwen3NextFusedNames {
  qkvz: (layer: number) => string;
  ba: (layer: number) => string;
}

/** GGUF's names: the first conversions' `ssm_in`, and `ssm_ba`. */
export const GGUF_QWEN3NEXT_FUSED: Qwen3NextFusedNames = { qkvz: (i) => `blk.${i}.ssm_in.weight`, ba: (i) => `blk.${i}.ssm_ba.weight` };

/** Hugging Face's names under `prefix` (`model.`). */
export function hfQwen3NextFused(prefix: string): Qwen3NextFusedNames {
  return { qkvz: (i) => `${prefix}layers.${i}.linear_attn.in_proj_qkvz.weight`, ba: (i) => `${prefix}layers.${i}.linear_attn.in_proj_ba.weight` };
}

/** Row ranges `[g·stride + offset, count]` for each key head g. */
function perKeyHead(groups: number, stride: number, offset: number, count: number): [number, number][] {
  return Array.from({ length: groups }, (_, g): [number, number] => [g * stride + offset, count]);
}

/** Row ranges of a fused matrix, `[first row, count]` in order. */
type Ranges = [number, number][];

/**
 * Where the plain roles' rows lie in the fused matrices: in `qkvz` (rows per key head: q, k, then its
 * value heads' v, then their z) those of q/k/v (every q, every k, every v) and of z; in `ba` (per key
 * head: its value heads' beta, then their alpha) those of beta and of alpha.
 */
export function qwen3nextFusedRanges(delta: DeltaNetConfig): { qkv: Ranges; z: Ranges; beta: Ranges; alpha: Ranges } {
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = delta;
  const perK = nv / nk;
  const stride = 2 * dk + 2 * perK * dv;
  return {
    qkv: [...perKeyHead(nk, stride, 0, dk), ...perKeyHead(nk, stride, dk, dk), ...perKeyHead(nk, stride, 2 * dk, perK * dv)],
    z: perKeyHead(nk, stride, 2 * dk + perK * dv, perK * dv),
    beta: perKeyHead(nk, 2 * perK, 0, perK),
    alpha: perKeyHead(nk, 2 * perK, perK, perK),
  };
}

/**
 * `source` serving each DeltaNet layer's `ssmQkv`, `ssmZ`, `ssmBeta` and `ssmAlpha` under `names` from
 * the fused tensors where the plain ones are absent.
 */
export function splittingQwen3NextFused(
  source: TensorSource, delta: DeltaNetConfig, names: TensorNames, fused: Qwen3NextFusedNames, rowsOf: (name: string) => number | undefined, path: string,
): TensorSource {
  const r = qwen3nextFusedRanges(delta);
  const parts = new Map<string, FusedPart>();
  delta.layers.forEach((linear, i) => {
    if (!linear) return;
    const qkvz = fused.qkvz(i);
    if (!source.has(names.layer(i, "ssmQkv")) && source.has(qkvz)) {
      parts.set(names.layer(i, "ssmQkv"), { fused: qkvz, ranges: r.qkv });
      parts.set(names.layer(i, "ssmZ"), { fused: qkvz, ranges: r.z });
    }
    const ba = fused.ba(i);
    if (!source.has(names.layer(i, "ssmBeta")) && source.has(ba)) {
      parts.set(names.layer(i, "ssmBeta"), { fused: ba, ranges: r.beta });
      parts.set(names.layer(i, "ssmAlpha"), { fused: ba, ranges: r.alpha });
    }
  });
  return splittingFused(source, parts, rowsOf, path);
}
