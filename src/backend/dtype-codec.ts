/**
 * Conversions between f32 and the packed weight formats (f16, bf16, GGUF q8_0 here; GGUF's other
 * block formats and f8_e4m3 in quant-blocks.ts), on the host. Used by loaders, writers and the reference backend.
 */
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from "./half-float.ts";
import { decodeBlocks, encodeBlocks, isBlockQuant, mxfp4FitsF16, QUANT_BLOCKS } from "./quant-blocks.ts";
import type { WeightDType } from "./types.ts";

export { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 };

/** Elements per q8_0 block and bytes per block (f16 scale + 32 int8). */
export const Q8_0_BLOCK = 32;
export const Q8_0_BLOCK_BYTES = 34;

/** Values per block of `dtype` (1 for the unblocked types). */
export function blockValues(dtype: WeightDType | "i32"): number {
  return dtype === "q8_0" ? Q8_0_BLOCK : isBlockQuant(dtype) ? QUANT_BLOCKS[dtype].values : 1;
}

/** Bytes needed to store `count` elements of `dtype` (count must be a whole number of blocks for the block formats). */
export function byteSize(dtype: WeightDType | "i32", count: number): number {
  if (isBlockQuant(dtype)) {
    const { values, bytes } = QUANT_BLOCKS[dtype];
    if (count % values !== 0) throw new RangeError(`A ${dtype} tensor needs a multiple of ${values} elements, got ${count}`);
    return (count / values) * bytes;
  }
  switch (dtype) {
    case "f32":
    case "i32":
      return count * 4;
    case "f16":
    case "bf16":
      return count * 2;
    case "q8_0":
      if (count % Q8_0_BLOCK !== 0) {
        throw new RangeError(`A q8_0 tensor needs a multiple of 32 elements, got ${count}`);
      }
      return (count / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES;
  }
}

/** Decodes `raw` bytes of `dtype` into f32. */
export function decodeToF32(raw: Uint8Array, dtype: WeightDType, count: number): Float32Array {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const need = byteSize(dtype, count);
  if (raw.byteLength < need) {
    throw new RangeError(`Need ${need} bytes for ${count} ${dtype} values, got ${raw.byteLength}`);
  }
  const out = new Float32Array(count);
  if (isBlockQuant(dtype)) {
    decodeBlocks(raw, dtype, count / QUANT_BLOCKS[dtype].values, out);
    return out;
  }
  switch (dtype) {
    case "f32":
      for (let i = 0; i < count; i++) out[i] = view.getFloat32(i * 4, true);
      break;
    case "f16":
      for (let i = 0; i < count; i++) out[i] = f16ToF32(view.getUint16(i * 2, true));
      break;
    case "bf16":
      for (let i = 0; i < count; i++) out[i] = bf16ToF32(view.getUint16(i * 2, true));
      break;
    case "q8_0":
      for (let b = 0; b < count / Q8_0_BLOCK; b++) {
        const base = b * Q8_0_BLOCK_BYTES;
        const d = f16ToF32(view.getUint16(base, true));
        for (let j = 0; j < Q8_0_BLOCK; j++) out[b * Q8_0_BLOCK + j] = d * view.getInt8(base + 2 + j);
      }
      break;
  }
  return out;
}

/** Encodes f32 values into `dtype` bytes (q8_0 as llama.cpp quantizes: d = amax/127, round). */
export function encodeFromF32(values: Float32Array, dtype: WeightDType): Uint8Array {
  const out = new Uint8Array(byteSize(dtype, values.length));
  const view = new DataView(out.buffer);
  if (isBlockQuant(dtype)) {
    encodeBlocks(values, dtype, out);
    return out;
  }
  switch (dtype) {
    case "f32":
      for (let i = 0; i < values.length; i++) view.setFloat32(i * 4, values[i], true);
      break;
    case "f16":
      for (let i = 0; i < values.length; i++) view.setUint16(i * 2, f32ToF16(values[i]), true);
      break;
    case "bf16":
      for (let i = 0; i < values.length; i++) view.setUint16(i * 2, f32ToBf16(values[i]), true);
      break;
    case "q8_0":
      for (let b = 0; b < values.length / Q8_0_BLOCK; b++) {
        let amax = 0;
        for (let j = 0; j < Q8_0_BLOCK; j++) amax = Math.max(amax, Math.abs(values[b * Q8_0_BLOCK + j]));
        const d = amax / 127;
        const id = d ? 1 / d : 0;
        const base = b * Q8_0_BLOCK_BYTES;
        view.setUint16(base, f32ToF16(d), true);
        for (let j = 0; j < Q8_0_BLOCK; j++) view.setInt8(base + 2 + j, Math.round(values[b * Q8_0_BLOCK + j] * id));
      }
      break;
  }
  return out;
}

/**
 * How a backend that keeps the block formats (other than q8_0) dequantized stores a weight
 * (`BackendInfo.denseBlockQuants`): as f16, or as bf16 for an mxfp4 weight whose power-of-two
 * scales leave f16's range (bf16 holds every mxfp4 value) or an f8_e4m3 one with a value past f16's
 * largest. Returns the dense dtype and its bytes; other dtypes come back unchanged. The conformance
 * suite gives the reference the same bytes.
 */
export function denseBlockQuantStorage(
  raw: Uint8Array, dtype: WeightDType, count: number,
): { raw: Uint8Array; dtype: WeightDType } {
  if (!isBlockQuant(dtype)) return { raw, dtype };
  const values = decodeToF32(raw, dtype, count);
  const pastF16 = dtype === "mxfp4"
    ? !mxfp4FitsF16(raw, count / QUANT_BLOCKS.mxfp4.values)
    : dtype === "f8_e4m3" && values.some((v) => Math.abs(v) > 65504);
  const dense = pastF16 ? "bf16" : "f16";
  return { raw: encodeFromF32(values, dense), dtype: dense };
}
