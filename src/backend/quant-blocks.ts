/**
 * GGUF's block-quantized weight formats beyond q8_0, as llama.cpp lays them out (ggml-common.h), on
 * the host: the legacy 32-value blocks (q4_0, q4_1, q5_0, q5_1), the 256-value k-quants (q2_k,
 * q3_k, q4_k, q5_k, q6_k) — what Q2_K, Q3_K_S/M/L, Q4_K_M, Q5_K_M and Q6_K files hold — the
 * non-linear 4-bit formats iq4_nl and iq4_xs (IQ4_NL and IQ4_XS files: 4-bit codes into llama.cpp's
 * 16-value codebook `kvalues_iq4nl`, under one f16 scale per 32 values, or, for iq4_xs, a 6-bit scale
 * per 32 under an f16 per 256) and mxfp4 (OCP microscaling FP4: 32 E2M1 values under one E8M0
 * power-of-two scale; gpt-oss's expert matrices); and, not a GGUF type, f8_e4m3 (FP8 checkpoints' codes
 * with an f32 scale per 32, quant-blocks-fp8.ts). Decoding follows
 * llama.cpp's `dequantize_row_*` operation for operation (scale products rounded to f32 first), so
 * the reference backend reads a file's weights as llama.cpp does. Encoding is a plain
 * round-to-nearest quantizer (no error-minimising search, unlike llama.cpp's): it writes valid
 * blocks for tests and writers. mxfp4's is llama.cpp's own (`quantize_row_mxfp4_ref`, which
 * `llama-quantize` also uses), bit for bit.
 */
import { f16ToF32, f32ToF16 } from "./half-float.ts";
import { decodeIqBlocks, IQ_BLOCKS, isIqDType, type IqDType } from "./quant-blocks-iq.ts";
import { encodeIqLattice } from "./quant-blocks-iq-encode.ts";
import { decodeFp8Blocks, encodeFp8Blocks, F8_E4M3_BLOCK } from "./quant-blocks-fp8.ts";

/** The block-quantized dtypes of this module. */
export type BlockQuantDType = "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q2_k" | "q3_k" | "q4_k" | "q5_k" | "q6_k" | "iq4_nl" | "iq4_xs" | "mxfp4" | "f8_e4m3" | IqDType;

/** Elements and bytes per block of each format. */
export const QUANT_BLOCKS: Readonly<Record<BlockQuantDType, { values: number; bytes: number }>> = {
  q4_0: { values: 32, bytes: 18 },
  q4_1: { values: 32, bytes: 20 },
  q5_0: { values: 32, bytes: 22 },
  q5_1: { values: 32, bytes: 24 },
  q2_k: { values: 256, bytes: 84 },
  q3_k: { values: 256, bytes: 110 },
  q4_k: { values: 256, bytes: 144 },
  q5_k: { values: 256, bytes: 176 },
  q6_k: { values: 256, bytes: 210 },
  iq4_nl: { values: 32, bytes: 18 },
  iq4_xs: { values: 256, bytes: 136 },
  mxfp4: { values: 32, bytes: 17 },
  f8_e4m3: F8_E4M3_BLOCK, // FP8 checkpoints' codes with an f32 scale per 32 (quant-blocks-fp8.ts)
  ...IQ_BLOCKS, // the lattice i-quants (quant-blocks-iq.ts)
};

/** True when `dtype` is one of this module's formats. */
export function isBlockQuant(dtype: string): dtype is BlockQuantDType {
  return Object.hasOwn(QUANT_BLOCKS, dtype);
}

const f32 = Math.fround;

/**
 * mxfp4's 16 codes as llama.cpp's `kvalues_mxfp4`: the E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * their negatives; code 8 is −0) doubled to integers, which is why a block's scale is applied halved.
 */
export const KVALUES_MXFP4: readonly number[] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/** iq4_nl's and iq4_xs's 16 codes, llama.cpp's `kvalues_iq4nl`: denser near zero, where most weights lie. */
export const KVALUES_IQ4NL: readonly number[] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/** An iq4_xs block's 6-bit scale of sub-block `ib` (0–7), still offset by 32: low 4 bits from scales_l, high 2 from scales_h. */
export function scaleIq4Xs(raw: Uint8Array, at: number, ib: number): number {
  const high = raw[at + 2] | (raw[at + 3] << 8);
  return ((raw[at + 4 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf) | (((high >> (2 * ib)) & 3) << 4);
}

/**
 * Half of an E8M0 scale byte's value, 2^(e − 128), as llama.cpp's `GGML_E8M0_TO_FP32_HALF` (an f32:
 * e = 0 and 1 give its subnormals 2^−128 and 2^−127; e = 255, E8M0's NaN, reads as 2^127 there too).
 */
export function e8m0ToF32Half(e: number): number {
  return 2 ** (e - 128);
}

/** A k-quant block's 6-bit scale and min of sub-block `j` (llama.cpp `get_scale_min_k4`). */
export function scaleMinK4(bytes: Uint8Array, at: number, j: number): [number, number] {
  const q = (i: number) => bytes[at + i];
  if (j < 4) return [q(j) & 63, q(j + 4) & 63];
  return [(q(j + 4) & 0xf) | ((q(j - 4) >> 6) << 4), (q(j + 4) >> 4) | ((q(j) >> 6) << 4)];
}

/**
 * A q3_k block's 16 six-bit scales, unpacked from its 12 scale bytes at `at` as llama.cpp's
 * `dequantize_row_q3_K` does with kmask1 / kmask2: scale k's low 4 bits are the low (k < 8) or high
 * nibble of byte k mod 8, its high 2 bits are bits 2·⌊k/4⌋ of byte 8 + k mod 4. Still offset by 32.
 */
export function scalesQ3K(bytes: Uint8Array, at: number): Uint8Array {
  const kmask1 = 0x03030303;
  const kmask2 = 0x0f0f0f0f;
  const word = (i: number) => (bytes[at + 4 * i] | (bytes[at + 4 * i + 1] << 8) | (bytes[at + 4 * i + 2] << 16) | (bytes[at + 4 * i + 3] << 24)) >>> 0;
  const aux = new Uint32Array([word(0), word(1), word(2), 0]);
  const tmp = aux[2];
  aux[2] = ((aux[0] >>> 4) & kmask2) | (((tmp >>> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >>> 4) & kmask2) | (((tmp >>> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >>> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >>> 2) & kmask1) << 4);
  // Little-endian bytes of the four words, as llama.cpp reads them through an int8_t pointer.
  return Uint8Array.from({ length: 16 }, (_, k) => (aux[k >> 2] >>> (8 * (k & 3))) & 0xff);
}

/**
 * True when f16 holds every value of `blocks` mxfp4 blocks exactly. A value is a code of at most
 * two significant bits (up to 12) times 2^(e − 128): always an f16 for e in 104…140 (2^−24, f16's
 * smallest subnormal, up to 12 · 2^12 ≤ 65504); outside that, each nonzero value is checked.
 */
export function mxfp4FitsF16(raw: Uint8Array, blocks: number): boolean {
  const { bytes } = QUANT_BLOCKS.mxfp4;
  const isF16 = (v: number) => Math.abs(v) <= 65504 && Number.isInteger(v * 2 ** 24);
  for (let b = 0; b < blocks; b++) {
    const e = raw[b * bytes];
    if (e >= 104 && e <= 140) continue;
    const d = e8m0ToF32Half(e);
    for (let j = 1; j < bytes; j++) {
      const q = raw[b * bytes + j];
      if (!isF16(f32(KVALUES_MXFP4[q & 0xf] * d)) || !isF16(f32(KVALUES_MXFP4[q >> 4] * d))) return false;
    }
  }
  return true;
}

/** Decodes `blocks` blocks of `dtype` from `raw` into `out`. */
export function decodeBlocks(raw: Uint8Array, dtype: BlockQuantDType, blocks: number, out: Float32Array): void {
  if (isIqDType(dtype)) return decodeIqBlocks(raw, dtype, blocks, out);
  if (dtype === "f8_e4m3") return decodeFp8Blocks(raw, blocks, out);
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const { bytes: bb, values: bv } = QUANT_BLOCKS[dtype];
  const half = (at: number) => f16ToF32(view.getUint16(at, true));
  for (let b = 0; b < blocks; b++) {
    const s = b * bb;
    const o = b * bv;
    switch (dtype) {
      case "q4_0":
      case "q4_1":
      case "q5_0":
      case "q5_1": {
        const d = half(s);
        const withMin = dtype === "q4_1" || dtype === "q5_1";
        const m = withMin ? half(s + 2) : 0;
        const five = dtype === "q5_0" || dtype === "q5_1";
        const qh = five ? view.getUint32(s + (withMin ? 4 : 2), true) : 0;
        const qs = s + (withMin ? 4 : 2) + (five ? 4 : 0);
        const offset = withMin ? 0 : five ? 16 : 8;
        for (let j = 0; j < 16; j++) {
          const hi0 = five ? ((qh >>> j) & 1) << 4 : 0;
          const hi1 = five ? ((qh >>> (j + 16)) & 1) << 4 : 0;
          const x0 = ((raw[qs + j] & 0xf) | hi0) - offset;
          const x1 = ((raw[qs + j] >> 4) | hi1) - offset;
          out[o + j] = withMin ? f32(x0 * d + m) : f32(x0 * d);
          out[o + j + 16] = withMin ? f32(x1 * d + m) : f32(x1 * d);
        }
        break;
      }
      case "q4_k":
      case "q5_k": {
        const d = half(s);
        const dmin = half(s + 2);
        const five = dtype === "q5_k";
        const qh = s + 16;
        const qs = s + (five ? 48 : 16);
        for (let c = 0; c < 4; c++) {
          for (let h = 0; h < 2; h++) {
            const [sc, mn] = scaleMinK4(raw, s + 4, 2 * c + h);
            const d1 = f32(d * sc);
            const m1 = f32(dmin * mn);
            for (let l = 0; l < 32; l++) {
              const lo = h === 0 ? raw[qs + 32 * c + l] & 0xf : raw[qs + 32 * c + l] >> 4;
              const hi = five ? ((raw[qh + l] >> (2 * c + h)) & 1) << 4 : 0;
              out[o + 64 * c + 32 * h + l] = f32(d1 * (lo | hi) - m1);
            }
          }
        }
        break;
      }
      case "q2_k": {
        // scales[16] (low nibble scale, high nibble min, per 16 values), qs[64] (four 2-bit codes a
        // byte: 32 bytes per 128 values, bit pair j for values 32·j … 32·j + 31), f16 d, f16 dmin.
        const d = half(s + 80);
        const min = half(s + 82);
        for (let n = 0; n < 2; n++) {
          const q = s + 16 + 32 * n;
          for (let j = 0; j < 4; j++) {
            for (let h = 0; h < 2; h++) {
              const sc = raw[s + 8 * n + 2 * j + h];
              const dl = f32(d * (sc & 0xf));
              const ml = f32(min * (sc >> 4));
              for (let l = 0; l < 16; l++) {
                out[o + 128 * n + 32 * j + 16 * h + l] = f32(dl * ((raw[q + 16 * h + l] >> (2 * j)) & 3) - ml);
              }
            }
          }
        }
        break;
      }
      case "q3_k": {
        // hmask[32] (bit 4·n + j of byte l: the high bit of value 128·n + 32·j + l, set meaning
        // "no −4"), qs[64] laid out as q2_k's, scales[12] (16 six-bit scales − 32), f16 d.
        const dAll = half(s + 108);
        const scales = scalesQ3K(raw, s + 96);
        for (let n = 0; n < 2; n++) {
          const q = s + 32 + 32 * n;
          for (let j = 0; j < 4; j++) {
            const m = 1 << (4 * n + j);
            for (let h = 0; h < 2; h++) {
              const dl = f32(dAll * (((scales[8 * n + 2 * j + h] << 24) >> 24) - 32));
              for (let l = 0; l < 16; l++) {
                const code = ((raw[q + 16 * h + l] >> (2 * j)) & 3) - ((raw[s + 16 * h + l] & m) ? 0 : 4);
                out[o + 128 * n + 32 * j + 16 * h + l] = f32(dl * code);
              }
            }
          }
        }
        break;
      }
      case "iq4_nl":
      case "iq4_xs": {
        // iq4_nl: f16 d, then byte j holds code j (low nibble) and code j + 16 (high nibble).
        // iq4_xs: f16 d, u16 scales_h, 4 bytes scales_l, then 8 sub-blocks of 16 bytes laid out as iq4_nl's.
        const xs = dtype === "iq4_xs";
        const d = half(s);
        for (let ib = 0; ib < bv / 32; ib++) {
          const dl = xs ? f32(d * (scaleIq4Xs(raw, s, ib) - 32)) : d;
          const qs = s + (xs ? 8 : 2) + 16 * ib;
          for (let j = 0; j < 16; j++) {
            out[o + 32 * ib + j] = f32(dl * KVALUES_IQ4NL[raw[qs + j] & 0xf]);
            out[o + 32 * ib + j + 16] = f32(dl * KVALUES_IQ4NL[raw[qs + j] >> 4]);
          }
        }
        break;
      }
      case "mxfp4": {
        // One E8M0 byte, then byte j holds value j (low nibble) and value j + 16 (high nibble).
        const d = e8m0ToF32Half(raw[s]);
        for (let j = 0; j < 16; j++) {
          out[o + j] = f32(KVALUES_MXFP4[raw[s + 1 + j] & 0xf] * d);
          out[o + j + 16] = f32(KVALUES_MXFP4[raw[s + 1 + j] >> 4] * d);
        }
        break;
      }
      case "q6_k": {
        const d = half(s + 208);
        for (let n = 0; n < 2; n++) {
          const ql = s + 64 * n;
          const qh = s + 128 + 32 * n;
          const sc = s + 192 + 8 * n;
          for (let l = 0; l < 32; l++) {
            for (let quarter = 0; quarter < 4; quarter++) {
              const low = raw[ql + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1)) & 0xf;
              const q = (low | (((raw[qh + l] >> (2 * quarter)) & 3) << 4)) - 32;
              const scale = view.getInt8(sc + (l >> 4) + 2 * quarter);
              out[o + 128 * n + 32 * quarter + l] = f32(f32(d * scale) * q);
            }
          }
        }
        break;
      }
    }
  }
}

/** Encodes `values` (a whole number of blocks) into `dtype` blocks written to `out`. */
export function encodeBlocks(values: Float32Array, dtype: BlockQuantDType, out: Uint8Array): void {
  if (isIqDType(dtype)) return encodeIqLattice(values, dtype, out);
  if (dtype === "f8_e4m3") return encodeFp8Blocks(values, out);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const { bytes: bb, values: bv } = QUANT_BLOCKS[dtype];
  for (let b = 0; b < values.length / bv; b++) {
    const x = values.subarray(b * bv, (b + 1) * bv);
    const s = b * bb;
    switch (dtype) {
      case "q4_0":
      case "q5_0":
      case "q4_1":
      case "q5_1":
        encodeLegacy(x, dtype, view, out, s);
        break;
      case "q4_k":
      case "q5_k":
        encodeK45(x, dtype === "q5_k", view, out, s);
        break;
      case "q2_k":
        encodeK2(x, view, out, s);
        break;
      case "q3_k":
        encodeK3(x, view, out, s);
        break;
      case "q6_k":
        encodeK6(x, view, out, s);
        break;
      case "iq4_nl":
      case "iq4_xs":
        encodeIq4(x, dtype === "iq4_xs", view, out, s);
        break;
      case "mxfp4":
        encodeMxfp4(x, out, s);
        break;
    }
  }
}

/**
 * One iq4_nl block, or one iq4_xs super-block: per 32 values a signed scale putting the value of
 * largest magnitude at the codebook's −127 end (iq4_xs: those scales quantized to 6 signed bits
 * under an f16 d, the largest magnitude at −32), then each value to its nearest codebook entry.
 * Round to nearest, without llama.cpp's search over scales.
 */
function encodeIq4(x: Float32Array, xs: boolean, view: DataView, out: Uint8Array, s: number): void {
  const subs = x.length / 32;
  const scales: number[] = [];
  for (let ib = 0; ib < subs; ib++) {
    let max = 0;
    for (const v of x.subarray(32 * ib, 32 * ib + 32)) if (Math.abs(v) > Math.abs(max)) max = v;
    scales.push(max / KVALUES_IQ4NL[0]);
  }
  let d = scales[0];
  if (xs) {
    let maxScale = 0;
    for (const v of scales) if (Math.abs(v) > Math.abs(maxScale)) maxScale = v;
    d = maxScale / -32;
  }
  const dh = f32ToF16(d);
  const dq = f16ToF32(dh);
  view.setUint16(s, dh, true);
  for (let ib = 0; ib < subs; ib++) {
    let dl = dq;
    if (xs) {
      const ls = (dq ? Math.max(-32, Math.min(31, Math.round(scales[ib] / dq))) : 0) + 32;
      out[s + 4 + (ib >> 1)] |= (ls & 0xf) << (4 * (ib & 1));
      view.setUint16(s + 2, view.getUint16(s + 2, true) | ((ls >> 4) << (2 * ib)), true);
      dl = f32(dq * (ls - 32));
    }
    const qs = s + (xs ? 8 : 2) + 16 * ib;
    for (let j = 0; j < 16; j++) {
      out[qs + j] = nearestIq4(x[32 * ib + j], dl) | (nearestIq4(x[32 * ib + j + 16], dl) << 4);
    }
  }
}

/** The codebook index whose value times `dl` lies nearest `v`. */
function nearestIq4(v: number, dl: number): number {
  if (!dl) return 8; // codebook value 1 times a zero scale: 0
  const t = v / dl;
  let best = 0;
  for (let k = 1; k < 16; k++) if (Math.abs(KVALUES_IQ4NL[k] - t) < Math.abs(KVALUES_IQ4NL[best] - t)) best = k;
  return best;
}

/** One 32-value legacy block (llama.cpp's reference quantizers: signed max / -2^(bits-1), or min/max). */
function encodeLegacy(x: Float32Array, dtype: "q4_0" | "q4_1" | "q5_0" | "q5_1", view: DataView, out: Uint8Array, s: number): void {
  const five = dtype === "q5_0" || dtype === "q5_1";
  const withMin = dtype === "q4_1" || dtype === "q5_1";
  const top = five ? 31 : 15;
  let d: number;
  let m = 0;
  let offset: number;
  if (withMin) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const v of x) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    d = (hi - lo) / top;
    m = lo;
    offset = 0;
  } else {
    let max = 0;
    for (const v of x) if (Math.abs(v) > Math.abs(max)) max = v;
    d = five ? max / -16 : max / -8;
    offset = five ? 16 : 8;
  }
  const dh = f32ToF16(d);
  const dq = f16ToF32(dh);
  const id = dq ? 1 / dq : 0;
  view.setUint16(s, dh, true);
  if (withMin) view.setUint16(s + 2, f32ToF16(m), true);
  const mq = withMin ? f16ToF32(f32ToF16(m)) : 0;
  const q = (v: number) => Math.max(0, Math.min(top, Math.round((v - mq) * id) + offset));
  let qh = 0;
  const qs = s + (withMin ? 4 : 2) + (five ? 4 : 0);
  for (let j = 0; j < 16; j++) {
    const a = q(x[j]);
    const c = q(x[j + 16]);
    out[qs + j] = (a & 0xf) | ((c & 0xf) << 4);
    qh |= ((a >> 4) << j) | ((c >> 4) << (j + 16));
  }
  if (five) view.setUint32(s + (withMin ? 4 : 2), qh >>> 0, true);
}

/** One q4_k / q5_k super-block: 8 sub-blocks of 32 with 6-bit scales and mins. */
function encodeK45(x: Float32Array, five: boolean, view: DataView, out: Uint8Array, s: number): void {
  const top = five ? 31 : 15;
  const scales = [0, 0, 0, 0, 0, 0, 0, 0];
  const mins = [0, 0, 0, 0, 0, 0, 0, 0];
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let lo = 0;
    let hi = -Infinity;
    for (let l = 32 * j; l < 32 * j + 32; l++) {
      const v = x[l];
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    scales[j] = (hi - lo) / top;
    mins[j] = -lo;
    if (scales[j] > maxScale) maxScale = scales[j];
    if (mins[j] > maxMin) maxMin = mins[j];
  }
  const d = f16ToF32(f32ToF16(maxScale / 63));
  const dmin = f16ToF32(f32ToF16(maxMin / 63));
  view.setUint16(s, f32ToF16(d), true);
  view.setUint16(s + 2, f32ToF16(dmin), true);
  const ls = scales.map((v) => (d ? Math.min(63, Math.round(v / d)) : 0));
  const lm = mins.map((v) => (dmin ? Math.min(63, Math.round(v / dmin)) : 0));
  const sc = s + 4;
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      out[sc + j] = ls[j];
      out[sc + j + 4] = lm[j];
    } else {
      out[sc + j + 4] = (ls[j] & 0xf) | ((lm[j] & 0xf) << 4);
      out[sc + j - 4] |= (ls[j] >> 4) << 6;
      out[sc + j] |= (lm[j] >> 4) << 6;
    }
  }
  const qh = s + 16;
  const qs = s + (five ? 48 : 16);
  for (let j = 0; j < 8; j++) {
    const [scale, min] = scaleMinK4(out, sc, j);
    const d1 = f32(d * scale);
    const m1 = f32(dmin * min);
    const inv = d1 ? 1 / d1 : 0;
    const at = qs + 32 * (j >> 1);
    const shift = 4 * (j & 1);
    for (let l = 0; l < 32; l++) {
      let q = Math.round((x[32 * j + l] + m1) * inv);
      q = q < 0 ? 0 : q > top ? top : q;
      out[at + l] |= (q & 0xf) << shift;
      if (five) out[qh + l] |= (q >> 4) << j;
    }
  }
}

/**
 * One q2_k super-block: per 16 values a range [min(lo, 0), hi] in 3 steps, the step and −min
 * quantized to 4 bits under f16 super-scales d and dmin (each the largest / 15), then each value to
 * the nearest of its 4 levels under the quantized scale and min.
 */
function encodeK2(x: Float32Array, view: DataView, out: Uint8Array, s: number): void {
  const scales: number[] = [];
  const mins: number[] = [];
  for (let k = 0; k < 16; k++) {
    let lo = 0;
    let hi = -Infinity;
    for (const v of x.subarray(16 * k, 16 * k + 16)) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    scales.push((hi - lo) / 3);
    mins.push(-lo);
  }
  const d = f16ToF32(f32ToF16(Math.max(...scales) / 15));
  const dmin = f16ToF32(f32ToF16(Math.max(...mins) / 15));
  view.setUint16(s + 80, f32ToF16(d), true);
  view.setUint16(s + 82, f32ToF16(dmin), true);
  // Sub-block k = 8·n + 2·j + h holds values 128·n + 32·j + 16·h + l (see decodeBlocks).
  for (let k = 0; k < 16; k++) {
    const ls = d ? Math.min(15, Math.round(scales[k] / d)) : 0;
    const lm = dmin ? Math.min(15, Math.round(mins[k] / dmin)) : 0;
    out[s + k] = ls | (lm << 4);
  }
  for (let e = 0; e < 256; e++) {
    const n = e >> 7;
    const j = (e & 127) >> 5;
    const l = e & 31;
    const sc = out[s + 8 * n + 2 * j + (l >> 4)];
    const dl = f32(d * (sc & 0xf));
    const ml = f32(dmin * (sc >> 4));
    const q = dl ? Math.max(0, Math.min(3, Math.round((x[e] + ml) / dl))) : 0;
    out[s + 16 + 32 * n + l] |= q << (2 * j);
  }
}

/**
 * One q3_k super-block: per 16 values a signed scale putting the value of largest magnitude at
 * code −4 (codes −4 … 3), the scales quantized to 6 signed bits under an f16 d (the largest
 * magnitude at −32, as llama.cpp's quantizer does), then each value to the nearest code.
 */
function encodeK3(x: Float32Array, view: DataView, out: Uint8Array, s: number): void {
  const scales: number[] = [];
  for (let k = 0; k < 16; k++) {
    let max = 0;
    for (const v of x.subarray(16 * k, 16 * k + 16)) if (Math.abs(v) > Math.abs(max)) max = v;
    scales.push(max / -4);
  }
  let maxScale = 0;
  for (const v of scales) if (Math.abs(v) > Math.abs(maxScale)) maxScale = v;
  const d = f16ToF32(f32ToF16(maxScale / -32));
  view.setUint16(s + 108, f32ToF16(d), true);
  for (let k = 0; k < 16; k++) {
    const ls = (d ? Math.max(-32, Math.min(31, Math.round(scales[k] / d))) : 0) + 32;
    out[s + 96 + (k & 7)] |= (ls & 0xf) << (4 * (k >> 3));
    out[s + 104 + (k & 3)] |= (ls >> 4) << (2 * (k >> 2));
  }
  const sc = scalesQ3K(out, s + 96);
  for (let e = 0; e < 256; e++) {
    const n = e >> 7;
    const j = (e & 127) >> 5;
    const l = e & 31;
    const dl = f32(d * (sc[8 * n + 2 * j + (l >> 4)] - 32));
    // Stored as code + 4: its low 2 bits in qs, its bit 2 in hmask (set for codes ≥ 0).
    const q = (dl ? Math.max(-4, Math.min(3, Math.round(x[e] / dl))) : 0) + 4;
    out[s + 32 + 32 * n + l] |= (q & 3) << (2 * j);
    out[s + l] |= (q >> 2) << (4 * n + j);
  }
}

/** One q6_k super-block: 16 sub-blocks of 16 with int8 scales, 6-bit values stored as low 4 + high 2 bits. */
function encodeK6(x: Float32Array, view: DataView, out: Uint8Array, s: number): void {
  const scales: number[] = [];
  for (let j = 0; j < 16; j++) {
    let amax = 0;
    for (const v of x.subarray(16 * j, 16 * j + 16)) amax = Math.max(amax, Math.abs(v));
    scales.push(amax / 31);
  }
  const d = f16ToF32(f32ToF16(Math.max(...scales) / 127));
  view.setUint16(s + 208, f32ToF16(d), true);
  for (let j = 0; j < 16; j++) view.setInt8(s + 192 + j, d ? Math.min(127, Math.round(scales[j] / d)) : 0);
  for (let e = 0; e < 256; e++) {
    const n = e >> 7;
    const quarter = (e & 127) >> 5;
    const l = e & 31;
    const scale = f32(d * view.getInt8(s + 192 + 8 * n + (l >> 4) + 2 * quarter));
    const q = scale ? Math.max(-32, Math.min(31, Math.round(x[e] / scale))) + 32 : 32;
    out[s + 64 * n + l + 32 * (quarter & 1)] |= (q & 0xf) << (4 * (quarter >> 1));
    out[s + 128 + 32 * n + l] |= (q >> 4) << (2 * quarter);
  }
}

/**
 * One mxfp4 block as llama.cpp's `quantize_row_mxfp4_ref`, bit for bit: the scale byte is
 * floor(log2f(amax)) − 2 + 127, which puts amax in [8 · d, 16 · d) for the halved scale d (values
 * above the largest code, 12 · d, clip to it); then each value takes the code whose f32 product
 * with d is nearest, the first code on a tie.
 */
function encodeMxfp4(x: Float32Array, out: Uint8Array, s: number): void {
  let amax = 0;
  for (const v of x) if (amax < Math.abs(v)) amax = Math.abs(v);
  // log2f's result is an f32: round before floor, or an amax just under a power of two whose log2
  // rounds up to the integer in f32 would get a scale one step lower than llama.cpp's. Below
  // 2^−125 the exponent goes negative and C's float → uint8_t conversion wraps it on x86 (cvttss2si
  // keeps the low byte); `& 0xff` does the same.
  const e = amax > 0 ? (Math.floor(f32(Math.log2(amax))) - 2 + 127) & 0xff : 0;
  const d = e8m0ToF32Half(e);
  out[s] = e;
  // llama.cpp's best_index_mxfp4: |f32(code · d) − v| in f32 (code · d is exact: d is a power of two).
  const best = (v: number): number => {
    let index = 0;
    let bestErr = Math.abs(f32(f32(KVALUES_MXFP4[0] * d) - v));
    for (let i = 1; i < 16; i++) {
      const err = Math.abs(f32(f32(KVALUES_MXFP4[i] * d) - v));
      if (err < bestErr) {
        index = i;
        bestErr = err;
      }
    }
    return index;
  };
  for (let j = 0; j < 16; j++) out[s + 1 + j] = best(x[j]) | (best(x[j + 16]) << 4);
}
