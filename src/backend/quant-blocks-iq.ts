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
import { f16ToF32, f32ToF16 } from "./half-float.ts";
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


/** What the encoder needs of a format: its grid, how a scale code becomes a multiplier of d, and where things go. */
interface LatticeFormat {
  grid: Uint8Array;
  /** Magnitudes per grid entry: 8 (iq2) or 4 (iq3: two entries per 8 values). */
  width: number;
  /** Values per scale code: 32, or 16 (iq2_xs and iq2_s, two 4-bit codes per byte). */
  scaleSpan: number;
  /** The multiplier of d for scale code s (0…15). */
  scale: (s: number) => number;
  /** Sign bits: 7 stored with the 8th their parity (xxs, iq2_xs), or all 8 stored (iq2_s, iq3_s). */
  paritySigns: boolean;
  /** Writes one group of 8 values: its grid indices, its sign byte, at block `at`, sub-block ib, group l. */
  put: (raw: Uint8Array, view: DataView, at: number, ib: number, l: number, g: number[], signs: number) => void;
  /** Writes the scale code(s) of sub-block ib (`codes`: one per scale span). */
  putScales: (raw: Uint8Array, view: DataView, at: number, ib: number, codes: number[]) => void;
}

const LATTICE: Record<Exclude<IqDType, "iq1_s" | "iq1_m">, LatticeFormat> = {
  iq2_xxs: {
    grid: IQ2XXS_GRID, width: 8, scaleSpan: 32, scale: (s) => (0.5 + s) * 0.25, paritySigns: true,
    put: (raw, view, at, ib, l, g, signs) => {
      raw[at + 2 + 8 * ib + l] = g[0];
      const w = at + 2 + 8 * ib + 4;
      view.setUint32(w, (view.getUint32(w, true) | ((signs & 127) << (7 * l))) >>> 0, true);
    },
    putScales: (_raw, view, at, ib, [s]) => {
      const w = at + 2 + 8 * ib + 4;
      view.setUint32(w, (view.getUint32(w, true) | (s << 28)) >>> 0, true);
    },
  },
  iq2_xs: {
    grid: IQ2XS_GRID, width: 8, scaleSpan: 16, scale: (s) => (0.5 + s) * 0.25, paritySigns: true,
    put: (_raw, view, at, ib, l, g, signs) => view.setUint16(at + 2 + 2 * (4 * ib + l), g[0] | ((signs & 127) << 9), true),
    putScales: (raw, _view, at, ib, [lo, hi]) => { raw[at + 66 + ib] = lo | (hi << 4); },
  },
  iq2_s: {
    grid: IQ2S_GRID, width: 8, scaleSpan: 16, scale: (s) => (0.5 + s) * 0.25, paritySigns: false,
    put: (raw, _view, at, ib, l, g, signs) => {
      raw[at + 2 + 4 * ib + l] = g[0] & 255;
      raw[at + 66 + ib] |= (g[0] >> 8) << (2 * l);
      raw[at + 34 + 4 * ib + l] = signs;
    },
    putScales: (raw, _view, at, ib, [lo, hi]) => { raw[at + 74 + ib] = lo | (hi << 4); },
  },
  iq3_xxs: {
    grid: IQ3XXS_GRID, width: 4, scaleSpan: 32, scale: (s) => (0.5 + s) * 0.5, paritySigns: true,
    put: (raw, view, at, ib, l, g, signs) => {
      raw[at + 2 + 8 * ib + 2 * l] = g[0];
      raw[at + 2 + 8 * ib + 2 * l + 1] = g[1];
      const w = at + 66 + 4 * ib;
      view.setUint32(w, (view.getUint32(w, true) | ((signs & 127) << (7 * l))) >>> 0, true);
    },
    putScales: (_raw, view, at, ib, [s]) => {
      const w = at + 66 + 4 * ib;
      view.setUint32(w, (view.getUint32(w, true) | (s << 28)) >>> 0, true);
    },
  },
  iq3_s: {
    grid: IQ3S_GRID, width: 4, scaleSpan: 32, scale: (s) => 1 + 2 * s, paritySigns: false,
    put: (raw, _view, at, ib, l, g, signs) => {
      raw[at + 2 + 8 * ib + 2 * l] = g[0] & 255;
      raw[at + 2 + 8 * ib + 2 * l + 1] = g[1] & 255;
      raw[at + 66 + ib] |= ((g[0] >> 8) << (2 * l)) | ((g[1] >> 8) << (2 * l + 1));
      raw[at + 74 + 4 * ib + l] = signs;
    },
    putScales: (raw, _view, at, ib, [s]) => { raw[at + 106 + (ib >> 1)] |= s << (4 * (ib & 1)); },
  },
};

/** The grid entry of `grid` (entries of `width` magnitudes) nearest to mags[from…from+width) in squared error. */
function nearestEntry(grid: Uint8Array, width: number, mags: ArrayLike<number>, from: number): number {
  let best = 0;
  let bestErr = Infinity;
  for (let g = 0; g < grid.length / width; g++) {
    let err = 0;
    for (let j = 0; j < width; j++) err += (grid[g * width + j] - mags[from + j]) ** 2;
    if (err < bestErr) { bestErr = err; best = g; }
  }
  return best;
}

/**
 * Encodes `values` (a multiple of 256) as super-blocks of a lattice format: per 16 or 32 values a
 * 4-bit scale code putting the largest magnitude near the grid's top under one f16 d, per 8 values
 * the sign bits (where only 7 are stored, the smallest magnitude's sign flipped if the minus signs
 * are odd, as those formats keep their count even) and the nearest grid entries. Round to nearest,
 * without llama.cpp's importance-weighted search: valid blocks for tests and writers, not a
 * quantizer for models.
 */
export function encodeIqLattice(values: Float32Array, dtype: IqDType, out: Uint8Array): void {
  if (dtype === "iq1_s" || dtype === "iq1_m") return encodeIq1(values, dtype, out);
  const f = LATTICE[dtype];
  const { bytes } = IQ_BLOCKS[dtype];
  const top = Math.max(...f.grid);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const mags = new Float64Array(8);
  out.fill(0, 0, (values.length / 256) * bytes);
  for (let b = 0; b < values.length / 256; b++) {
    const at = b * bytes;
    const x = values.subarray(256 * b, 256 * b + 256);
    let amax = 0;
    for (const v of x) amax = Math.max(amax, Math.abs(v));
    const d = f16ToF32(f32ToF16(amax / (f.scale(15) * top)));
    view.setUint16(at, f32ToF16(d), true);
    for (let ib = 0; ib < 8; ib++) {
      const codes: number[] = [];
      for (let span = 0; span < 32; span += f.scaleSpan) {
        let smax = 0;
        for (const v of x.subarray(32 * ib + span, 32 * ib + span + f.scaleSpan)) smax = Math.max(smax, Math.abs(v));
        let best = 0;
        for (let s = 1; s < 16; s++) if (Math.abs(d * f.scale(s) * top - smax) < Math.abs(d * f.scale(best) * top - smax)) best = s;
        codes.push(best);
      }
      f.putScales(out, view, at, ib, codes);
      for (let l = 0; l < 4; l++) {
        const db = f32(d * f.scale(codes[Math.floor((8 * l) / f.scaleSpan)]));
        const group = x.subarray(32 * ib + 8 * l, 32 * ib + 8 * l + 8);
        let signs = 0;
        let smallest = 0;
        for (let j = 0; j < 8; j++) {
          if (group[j] < 0) signs |= 1 << j;
          if (Math.abs(group[j]) < Math.abs(group[smallest])) smallest = j;
          mags[j] = db === 0 ? 0 : Math.abs(group[j]) / db;
        }
        if (f.paritySigns && popcount8(signs) % 2 === 1) signs ^= 1 << smallest;
        const g = f.width === 8 ? [nearestEntry(f.grid, 8, mags, 0)] : [nearestEntry(f.grid, 4, mags, 0), nearestEntry(f.grid, 4, mags, 4)];
        f.put(out, view, at, ib, l, g, signs);
      }
    }
  }
}

function popcount8(v: number): number {
  let n = 0;
  for (let j = 0; j < 8; j++) n += (v >> j) & 1;
  return n;
}

/** The iq1 grid entry nearest to t[0…8) in squared error (grid values −1, 0, +1). */
function nearestIq1(t: ArrayLike<number>): number {
  let best = 0;
  let bestErr = Infinity;
  for (let g = 0; g < IQ1S_GRID.length / 8; g++) {
    let err = 0;
    for (let j = 0; j < 8; j++) err += (IQ1S_GRID[8 * g + j] - t[j]) ** 2;
    if (err < bestErr) { bestErr = err; best = g; }
  }
  return best;
}

/**
 * Encodes iq1_s / iq1_m super-blocks, round to nearest: value = dl · (grid + delta) with dl = d · (2s + 1),
 * s a 3-bit code per 32 values (iq1_m: per 16), delta ±{@link IQ1_DELTA} with the sign of the values'
 * sum per 32 (iq1_m: per 8), and the nearest of the 2048 grid entries per 8 values.
 */
function encodeIq1(values: Float32Array, dtype: "iq1_s" | "iq1_m", out: Uint8Array): void {
  const m = dtype === "iq1_m";
  const bytes = IQ_BLOCKS[dtype].bytes;
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const t = new Float64Array(8);
  out.fill(0, 0, (values.length / 256) * bytes);
  const code = (d: number, amax: number) => (d === 0 ? 0 : Math.max(0, Math.min(7, Math.round((amax / (d * (1 + IQ1_DELTA)) - 1) / 2))));
  const sumOf = (x: Float32Array) => x.reduce((a, v) => a + v, 0);
  const amaxOf = (x: Float32Array) => x.reduce((a, v) => Math.max(a, Math.abs(v)), 0);
  for (let b = 0; b < values.length / 256; b++) {
    const at = b * bytes;
    const x = values.subarray(256 * b, 256 * b + 256);
    const h = f32ToF16(amaxOf(x) / (15 * (1 + IQ1_DELTA)));
    const d = f16ToF32(h);
    if (!m) view.setUint16(at, h, true);
    const scales = [0, 0, 0, 0];
    for (let ib = 0; ib < 8; ib++) {
      const sub = x.subarray(32 * ib, 32 * ib + 32);
      const s1 = code(d, amaxOf(m ? sub.subarray(0, 16) : sub));
      const s2 = m ? code(d, amaxOf(sub.subarray(16))) : s1;
      let qh = 0;
      const delta32 = sumOf(sub) < 0 ? -IQ1_DELTA : IQ1_DELTA;
      for (let l = 0; l < 4; l++) {
        const group = sub.subarray(8 * l, 8 * l + 8);
        const dl = f32(d * (2 * (l < 2 ? s1 : s2) + 1));
        const delta = m ? (sumOf(group) < 0 ? -IQ1_DELTA : IQ1_DELTA) : delta32;
        for (let j = 0; j < 8; j++) t[j] = group[j] / dl - delta;
        const g = nearestIq1(t);
        if (m) {
          out[at + 4 * ib + l] = g & 255;
          out[at + 32 + 2 * ib + (l >> 1)] |= ((g >> 8) | (delta < 0 ? 8 : 0)) << (l & 1 ? 4 : 0);
        } else {
          out[at + 2 + 4 * ib + l] = g & 255;
          qh |= (g >> 8) << (3 * l);
        }
      }
      if (m) scales[ib >> 1] |= (s1 | (s2 << 3)) << (6 * (ib & 1));
      else view.setUint16(at + 34 + 2 * ib, qh | (s1 << 12) | (delta32 < 0 ? 0x8000 : 0), true);
    }
    if (m) for (let i = 0; i < 4; i++) view.setUint16(at + 48 + 2 * i, scales[i] | (((h >> (4 * i)) & 0xf) << 12), true);
  }
}
