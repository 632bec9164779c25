/**
 * llama.cpp's lattice i-quants of 1 to 3 bits on the host, decode only: iq2_xxs, iq2_xs, iq2_s,
 * iq3_xxs, iq3_s, iq1_s and iq1_m (GGUF types 16, 17, 22, 18, 21, 19, 29: what IQ1_S … IQ3_M
 * files and llama.cpp's low-bit Q2_K_S mixes hold). Each 256-value super-block stores, per group
 * of 8 (or 4) values, an index into a fixed grid of magnitudes (iq-grids.ts, iq1-grid.ts), sign
 * bits and small scales under one f16. They are weight dtypes (quant-blocks.ts delegates here;
 * WebGPU computes with them in place, the reference and CUDA decode them at upload), with a
 * round-to-nearest encoder here for tests and writers.
 * Decoding follows ggml-quants.c's `dequantize_row_*` operation for operation over
 * ggml-common.h's block layouts; every product there is exact in f32, so the values match bit for bit.
 */
import { f16ToF32 } from "./half-float.ts";
import { IQ1S_GRID } from "./iq1-grid.ts";
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS } from "./iq-grids.ts";

/** The lattice i-quant dtypes of this module (weight dtypes, as quant-blocks.ts's formats). */
export type IqDType = "iq2_xxs" | "iq2_xs" | "iq2_s" | "iq3_xxs" | "iq3_s" | "iq1_s" | "iq1_m";

/** Values and bytes per super-block (ggml-common.h `block_iq*`; sizes as its static_asserts). */
export const IQ_BLOCKS: Readonly<Record<IqDType, { values: number; bytes: number }>> = {
  iq2_xxs: { values: 256, bytes: 66 }, // f16 d, u16 qs[32]
  iq2_xs: { values: 256, bytes: 74 }, // f16 d, u16 qs[32], u8 scales[8]
  iq2_s: { values: 256, bytes: 82 }, // f16 d, u8 qs[64] (32 grid bytes, 32 sign bytes), qh[8], scales[8]
  iq3_xxs: { values: 256, bytes: 98 }, // f16 d, u8 qs[96] (64 grid bytes, 8 u32 scales-and-signs)
  iq3_s: { values: 256, bytes: 110 }, // f16 d, u8 qs[64], qh[8], signs[32], scales[4]
  iq1_s: { values: 256, bytes: 50 }, // f16 d, u8 qs[32], u16 qh[8]
  iq1_m: { values: 256, bytes: 56 }, // u8 qs[32], qh[16], scales[8] (the f16 d spread over their top nibbles)
};

/** The offset llama.cpp adds to every iq1_s / iq1_m grid value, its sign chosen per group (`IQ1S_DELTA`, `IQ1M_DELTA`). */
export const IQ1_DELTA = 0.125;

/** True when `dtype` names one of this module's formats. */
export function isIqDType(dtype: string): dtype is IqDType {
  return Object.hasOwn(IQ_BLOCKS, dtype);
}

const f32 = Math.fround;

/** Writes 8 values `dl * grid[g*8 + j]`, negated where `signs` has bit j, at out[o…o+7]. */
function put8(out: Float32Array, o: number, dl: number, grid: Uint8Array, g: number, signs: number): void {
  for (let j = 0; j < 8; j++) out[o + j] = dl * grid[8 * g + j] * (signs & KMASK_IQ2XS[j] ? -1 : 1);
}

/** Writes two iq3 grid entries (4 magnitudes each) as 8 values, signed by `signs`. */
function put4x2(out: Float32Array, o: number, dl: number, grid: Uint8Array, g1: number, g2: number, signs: number): void {
  for (let j = 0; j < 4; j++) {
    out[o + j] = dl * grid[4 * g1 + j] * (signs & KMASK_IQ2XS[j] ? -1 : 1);
    out[o + j + 4] = dl * grid[4 * g2 + j] * (signs & KMASK_IQ2XS[j + 4] ? -1 : 1);
  }
}

/** Writes 8 iq1 values `dl * (grid + delta)`. */
function put1(out: Float32Array, o: number, dl: number, g: number, delta: number): void {
  for (let j = 0; j < 8; j++) out[o + j] = dl * (IQ1S_GRID[8 * g + j] + delta);
}

/** Decodes `blocks` super-blocks of `dtype` from `raw` into `out` (256 values each), as llama.cpp's `dequantize_row_<dtype>`. */
export function decodeIqBlocks(raw: Uint8Array, dtype: IqDType, blocks: number, out: Float32Array): void {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const size = IQ_BLOCKS[dtype].bytes;
  for (let b = 0; b < blocks; b++) {
    const at = b * size;
    const y = b * 256;
    const d = dtype === "iq1_m" ? 0 : f16ToF32(view.getUint16(at, true));
    for (let ib = 0; ib < 8; ib++) {
      const o = y + 32 * ib;
      switch (dtype) {
        case "iq2_xxs": {
          // Per 32 values two u32: four grid-index bytes, then 4 × 7 sign bits and a 4-bit scale on top.
          const aux1 = view.getUint32(at + 2 + 8 * ib + 4, true);
          const db = f32(d * (0.5 + (aux1 >>> 28)) * 0.25);
          for (let l = 0; l < 4; l++) put8(out, o + 8 * l, db, IQ2XXS_GRID, raw[at + 2 + 8 * ib + l], KSIGNS_IQ2XS[(aux1 >>> (7 * l)) & 127]);
          break;
        }
        case "iq2_xs": {
          // Per 8 values a u16: 9-bit grid index, 7 sign bits; per 16 values a 4-bit scale.
          const s = raw[at + 66 + ib];
          for (let l = 0; l < 4; l++) {
            const q = view.getUint16(at + 2 + 2 * (4 * ib + l), true);
            const db = f32(d * (0.5 + (l < 2 ? s & 0xf : s >> 4)) * 0.25);
            put8(out, o + 8 * l, db, IQ2XS_GRID, q & 511, KSIGNS_IQ2XS[q >> 9]);
          }
          break;
        }
        case "iq2_s": {
          // Grid index: a qs byte plus 2 bits of qh; 8 explicit sign bits per 8 values in qs[32…63].
          const s = raw[at + 74 + ib];
          const qh = raw[at + 66 + ib];
          for (let l = 0; l < 4; l++) {
            const db = f32(d * (0.5 + (l < 2 ? s & 0xf : s >> 4)) * 0.25);
            const g = raw[at + 2 + 4 * ib + l] | ((qh << (8 - 2 * l)) & 0x300);
            put8(out, o + 8 * l, db, IQ2S_GRID, g, raw[at + 34 + 4 * ib + l]);
          }
          break;
        }
        case "iq3_xxs": {
          // 8 grid-index bytes per 32 values, then (after all 64) a u32 of 4 × 7 sign bits and a 4-bit scale.
          const aux = view.getUint32(at + 66 + 4 * ib, true);
          const db = f32(d * (0.5 + (aux >>> 28)) * 0.5);
          const qs = at + 2 + 8 * ib;
          for (let l = 0; l < 4; l++) {
            put4x2(out, o + 8 * l, db, IQ3XXS_GRID, raw[qs + 2 * l], raw[qs + 2 * l + 1], KSIGNS_IQ2XS[(aux >>> (7 * l)) & 127]);
          }
          break;
        }
        case "iq3_s": {
          // 9-bit grid indices (qs byte + 1 qh bit), 8 explicit sign bits per 8 values, 4-bit odd scales.
          const db = f32(d * (1 + 2 * ((raw[at + 106 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf)));
          const qs = at + 2 + 8 * ib;
          const qh = raw[at + 66 + ib];
          for (let l = 0; l < 4; l++) {
            const g1 = raw[qs + 2 * l] | ((qh << (8 - 2 * l)) & 256);
            const g2 = raw[qs + 2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
            put4x2(out, o + 8 * l, db, IQ3S_GRID, g1, g2, raw[at + 74 + 4 * ib + l]);
          }
          break;
        }
        case "iq1_s": {
          // Per 32 values a u16 qh: 4 × 3 high index bits, a 3-bit odd scale, the delta's sign on top.
          const qh = view.getUint16(at + 34 + 2 * ib, true);
          const dl = f32(d * (2 * ((qh >> 12) & 7) + 1));
          const delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
          for (let l = 0; l < 4; l++) put1(out, o + 8 * l, dl, raw[at + 2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8), delta);
          break;
        }
        case "iq1_m": {
          // scales: four u16 holding 3-bit scales per 16 values; their top nibbles together are the f16 d.
          const sc = (i: number) => view.getUint16(at + 48 + 2 * i, true);
          const dm = f16ToF32((sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000));
          const s = sc(ib >> 1) >> (6 * (ib % 2));
          const dl1 = f32(dm * (2 * (s & 7) + 1));
          const dl2 = f32(dm * (2 * ((s >> 3) & 7) + 1));
          for (let l = 0; l < 4; l++) {
            const qh = raw[at + 32 + 2 * ib + (l >> 1)];
            const g = raw[at + 4 * ib + l] | ((qh << (l & 1 ? 4 : 8)) & 0x700);
            const delta = qh & (l & 1 ? 0x80 : 0x08) ? -IQ1_DELTA : IQ1_DELTA;
            put1(out, o + 8 * l, l < 2 ? dl1 : dl2, g, delta);
          }
          break;
        }
      }
    }
  }
}
