/**
 * IEEE half and bfloat16 to and from f32, on the host (dtype-codec.ts and quant-blocks.ts build on them).
 */

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
  const e = exp - 127 + 15;
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

/**
 * f32 values to IEEE half bits, round to nearest even, in bulk (host KV copies of an f16 cache hold
 * its values this way, half the bytes of f32). The same results as {@link f32ToF16}; the common case
 * (a half-normal value) is branch-free, about 2 ns a value on V8.
 */
export function f32ArrayToF16Bits(src: Float32Array, out = new Uint16Array(src.length)): Uint16Array {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const n = bits.length;
  for (let i = 0; i < n; i++) {
    const x = bits[i];
    const e = ((x >>> 23) & 0xff) - 112; // rebias 127 → 15
    if (e > 0 && e < 31) {
      const half = (e << 10) | ((x >>> 13) & 0x3ff);
      // Round to nearest even: up when the 13 dropped bits exceed half an ulp, or equal it on an odd
      // half; a carry into the exponent is right (up to infinity).
      out[i] = ((x >>> 16) & 0x8000) | (half + (((x & 0x1fff) + (half & 1) + 0xfff) >>> 13));
    } else out[i] = f32ToF16(src[i]);
  }
  return out;
}

/** IEEE half bits to f32 values in bulk (exact: every half is an f32). */
export function f16BitsToF32Array(src: Uint16Array, out = new Float32Array(src.length)): Float32Array {
  const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
  const n = src.length;
  for (let i = 0; i < n; i++) {
    const h = src[i];
    const exp = h & 0x7c00;
    // Normal: the exponent rebiased by 112 (15 → 127) in place, the mantissa widened.
    if (exp !== 0 && exp !== 0x7c00) bits[i] = ((h & 0x8000) << 16) | (((h & 0x7fff) + 0x1c000) << 13);
    else out[i] = f16ToF32(h);
  }
  return out;
}
