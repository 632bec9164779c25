/**
 * Multi-head latent attention's per-head up-projections as the forward takes them: W_kb
 * [heads, kvLoraRank, nopeDim] and W_vb [heads, vHeadDim, kvLoraRank] (llama.cpp's `attn_k_b` and
 * `attn_v_b`). Hugging Face checkpoints and GGUFs converted before llama.cpp split them hold one
 * `kv_b` [heads·(nope + v), kvLoraRank]; it is cut as llama.cpp's converter cuts it.
 */
import { blockValues, decodeToF32, encodeFromF32 } from "../backend/dtype-codec.ts";
import { type HostTensor, type MlaConfig, type ModelConfig, ModelLoadError } from "./config.ts";
import type { TensorNames, TensorSource } from "./weights.ts";

/** Splits kv_b: per head, its first nopeDim rows (transposed) are W_kb's, the next vHeadDim W_vb's. */
export function splitKvB(t: HostTensor, mla: MlaConfig, heads: number, path: string): { kB: HostTensor; vB: HostTensor } {
  const { nopeDim: nope, vHeadDim: v, kvLoraRank: r } = mla;
  if (t.shape.length !== 2 || t.shape[0] !== heads * (nope + v) || t.shape[1] !== r) {
    throw new ModelLoadError(`Tensor "${t.name}" in "${path}" has shape [${t.shape}], expected [${heads * (nope + v)}, ${r}]`);
  }
  // An FP8 checkpoint's kv_b (f8_e4m3): W_vb's rows are kv_b's, so its blocks are copied; W_kb's are
  // columns, which would need new scales, so it is held as bf16.
  const fp8 = t.dtype === "f8_e4m3";
  if (blockValues(t.dtype) > 1 && !fp8) {
    throw new ModelLoadError(
      `Tensor "${t.name}" in "${path}" is ${t.dtype}; a combined kv_b must be f32, f16 or bf16 to be split (convert the model with a current llama.cpp, which writes attn_k_b and attn_v_b)`,
    );
  }
  const x = decodeToF32(t.data, t.dtype, heads * (nope + v) * r);
  const kB = new Float32Array(heads * r * nope);
  const vB = new Float32Array(heads * v * r);
  for (let h = 0; h < heads; h++) {
    const base = h * (nope + v) * r;
    for (let i = 0; i < nope; i++) for (let j = 0; j < r; j++) kB[(h * r + j) * nope + i] = x[base + i * r + j];
    vB.set(x.subarray(base + nope * r, base + (nope + v) * r), h * v * r);
  }
  // f16 and bf16 values survive the f32 round trip exactly.
  const dtype = fp8 ? "bf16" : t.dtype;
  const stored = (name: string, shape: number[], values: Float32Array): HostTensor => ({ name, shape, dtype, data: encodeFromF32(values, dtype) });
  const vbName = `${t.name}#v_b`;
  return { kB: stored(`${t.name}#k_b`, [heads, r, nope], kB), vB: fp8 ? { name: vbName, shape: [heads, v, r], dtype: t.dtype, data: vbBlocks(t, heads, nope, v) } : stored(vbName, [heads, v, r], vB) };
}

/** Each head's W_vb rows of a block-format kv_b, their bytes as stored. */
function vbBlocks(t: HostTensor, heads: number, nope: number, v: number): Uint8Array {
  const rowBytes = t.data.byteLength / t.shape[0];
  const out = new Uint8Array(heads * v * rowBytes);
  for (let h = 0; h < heads; h++) {
    const from = (h * (nope + v) + nope) * rowBytes;
    out.set(t.data.subarray(from, from + v * rowBytes), h * v * rowBytes);
  }
  return out;
}

/**
 * Wraps a tensor source so that the W_kb and W_vb names (`names`) a file lacks are cut from the
 * layer's combined kv_b (`kvBName(layer)`, {@link splitKvB}); names the file has pass through.
 */
export function splittingKvB(source: TensorSource, config: ModelConfig, names: TensorNames, kvBName: (layer: number) => string, path: string): TensorSource {
  const mla = config.mla!;
  const heads = config.numHeads;
  const part = new Map<string, { kvB: string; which: "kB" | "vB" }>();
  for (let i = 0; i < config.numLayers; i++) {
    for (const [role, which] of [["wkB", "kB"], ["wvB", "vB"]] as const) {
      const name = names.layer(i, role);
      if (!source.has(name)) part.set(name, { kvB: kvBName(i), which });
    }
  }
  const half = (name: string) => Math.ceil(source.byteLength(part.get(name)!.kvB) / 2);
  return {
    has: (name) => (part.has(name) ? source.has(part.get(name)!.kvB) : source.has(name)),
    byteLength: (name) => (part.has(name) ? half(name) : source.byteLength(name)),
    async read(name): Promise<HostTensor> {
      const p = part.get(name);
      if (!p) return source.read(name);
      const split = splitKvB(await source.read(p.kvB), mla, heads, path);
      return { ...split[p.which], name };
    },
  };
}
