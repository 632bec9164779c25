/**
 * Round-to-nearest encoders for the lattice i-quants (quant-blocks-iq.ts): valid blocks for tests
 * and writers, not quantizers for models (llama.cpp quantizes these with an importance matrix and
 * a search this does not do; `--quantize` does not offer them).
 */
import { f16ToF32, f32ToF16 } from "./half-float.ts";
import { IQ1S_GRID } from "./iq1-grid.ts";
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID } from "./iq-grids.ts";
import { IQ1_DELTA, IQ_BLOCKS, type IqDType } from "./quant-blocks-iq.ts";

const f32 = Math.fround;

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
