/**
 * Conversions between f32 and the packed weight formats (f16, bf16, GGUF q8_0), on the host.
 * Used by loaders, writers and the reference backend.
 */
import type { WeightDType } from "./types.ts";

/** Elements per q8_0 block and bytes per block (f16 scale + 32 int8). */
export const Q8_0_BLOCK = 32;
export const Q8_0_BLOCK_BYTES = 34;

/** Bytes needed to store `count` elements of `dtype` (count must be a multiple of 32 for q8_0). */
export function byteSize(dtype: WeightDType | "i32", count: number): number {
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

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** IEEE half (as a 16-bit integer) to f32. */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** f32 to IEEE half bits, round to nearest even. */
export function f32ToF16(value: number): number {
  f32Scratch[0] = value;
  const x = u32Scratch[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1))) half++;
  return sign | half;
}

/** bf16 bits to f32. */
export function bf16ToF32(b: number): number {
  u32Scratch[0] = (b & 0xffff) << 16;
  return f32Scratch[0];
}

/** f32 to bf16 bits, round to nearest even (NaN stays NaN). */
export function f32ToBf16(value: number): number {
  f32Scratch[0] = value;
  const x = u32Scratch[0];
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff)) return ((x >>> 16) | 0x40) & 0xffff;
  const rounding = 0x7fff + ((x >>> 16) & 1);
  return ((x + rounding) >>> 16) & 0xffff;
}

/** Decodes `raw` bytes of `dtype` into f32. */
export function decodeToF32(raw: Uint8Array, dtype: WeightDType, count: number): Float32Array {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const need = byteSize(dtype, count);
  if (raw.byteLength < need) {
    throw new RangeError(`Need ${need} bytes for ${count} ${dtype} values, got ${raw.byteLength}`);
  }
  const out = new Float32Array(count);
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
