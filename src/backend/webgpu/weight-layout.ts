/**
 * Device layouts of weights, chosen at upload time.
 *
 * - f32, f16, bf16: the file's little-endian bytes unchanged (f16 is read as array<f16> with
 *   shader-f16, else as u32 words holding two halves; bf16 always as u32 words).
 * - q8_0: GGUF blocks are 34 bytes (f16 scale + 32 int8), not 4-byte aligned, so each block is
 *   repacked into 36 bytes = 9 u32 words: the scale widened to f32, then the 32 int8 unchanged.
 *   Kernels then read whole words and extract bytes with extractBits (sign-extending).
 * - q4_1, q5_1, q2_k, q4_k, q5_k, iq4_xs: llama.cpp's blocks are whole words (20, 24, 84, 144, 176,
 *   136 bytes) and are kept as they are; so is f8_e4m3 (36 bytes: an f32 scale, then 32 E4M3 codes,
 *   the shape of q8_0's device blocks). q4_0 and iq4_nl (18 bytes), q5_0 (22) and mxfp4 (17) are
 *   not: they move their scale (an f16; mxfp4's one E8M0 byte) behind the codes and pad to 20 / 24 / 20 bytes. q3_k (110
 *   bytes: hmask[32], qs[64], scales[12], f16 d) already ends in its scale, so it is only padded to
 *   112 bytes = 28 words: hmask in words 0–7, qs in 8–23, scales in 24–26, d the low half of 27.
 * - q6_k is unpacked into bytes, per 256 values: d as f32, the 16 int8 scales (one per 16 values),
 *   then the 256 codes − 32 as int8 (69 words instead of 52.5: 8.6 bits per value, below q8_0's 9).
 *   Its 6-bit codes split over two bit planes cost more to decode than the bytes saved: on lavapipe
 *   a 1B-shaped q6_k decode step took 4.7 s that way and 1.4 s unpacked (docs/bench-engine.md).
 * - The lattice i-quants iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s (66, 74, 82, 98, 110, 50
 *   bytes, an f16 d ahead of the codes) widen d to a word: 68, 76, 84, 100, 112, 52 bytes; iq1_m
 *   (56 bytes, its d spread over its scales) is kept. Their values are entries of a fixed grid (256,
 *   512 or 1024 entries of 8 magnitude bytes; 256 or 512 of 4; iq1's 2048 of 8 values −1/0/+1 as
 *   2-bit codes: 2, 4, 8, 1, 2, 4 KiB): every chunk starts with its format's grid, and its blocks follow. A table in the shader would be
 *   copied per invocation wherever it is indexed at run time (naga and Tint both spill such arrays to
 *   function memory); a binding of its own would be one more for every weight-reading kernel.
 * - A weight bigger than the largest storage binding is split into row chunks, each packed into
 *   its own buffer from element 0 (after the grid, for the grid formats).
 */
import { blockValues, byteSize, f16ToF32, Q8_0_BLOCK, Q8_0_BLOCK_BYTES } from "../dtype-codec.ts";
import { QUANT_BLOCKS } from "../quant-blocks.ts";
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID } from "../iq-grids.ts";
import { IQ1S_GRID_2BIT } from "../iq1-grid.ts";
import { isIqDType, type IqDType } from "../quant-blocks-iq.ts";
import { BackendShapeError, type WeightDType } from "../types.ts";

/** Device bytes per block of the formats whose blocks are repacked (see above). */
const REPACKED_BLOCK_BYTES: Partial<Record<WeightDType, number>> = {
  q8_0: 36, q4_0: 20, iq4_nl: 20, q5_0: 24, mxfp4: 20, q3_k: 112, q6_k: 276,
  iq2_xxs: 68, iq2_xs: 76, iq2_s: 84, iq3_xxs: 100, iq3_s: 112, iq1_s: 52,
};

/** Each lattice i-quant's grid, as it heads every chunk (see above). */
const IQ_GRIDS: Readonly<Record<IqDType, Uint8Array>> = {
  iq2_xxs: IQ2XXS_GRID, iq2_xs: IQ2XS_GRID, iq2_s: IQ2S_GRID, iq3_xxs: IQ3XXS_GRID, iq3_s: IQ3S_GRID, iq1_s: IQ1S_GRID_2BIT, iq1_m: IQ1S_GRID_2BIT,
};

/** The grid that heads every chunk of a grid format (see above), or none. */
export function gridPrefix(dtype: WeightDType): Uint8Array | undefined {
  return isIqDType(dtype) ? IQ_GRIDS[dtype] : undefined;
}

/** A chunk of a lattice i-quant: its grid, then its blocks, each leading f16 d widened to a word ([d, 0, 0, the rest]) where the device block is larger (all but iq1_m, kept). */
function latticeChunk(raw: Uint8Array, count: number, dtype: IqDType): Uint8Array {
  const prefix = IQ_GRIDS[dtype];
  const { values, bytes } = QUANT_BLOCKS[dtype];
  const blocks = count / values;
  const out = new Uint8Array(prefix.byteLength + deviceBytes(dtype, count));
  out.set(prefix);
  if (deviceBytes(dtype, values) === bytes) {
    out.set(raw.subarray(0, blocks * bytes), prefix.byteLength);
    return out;
  }
  for (let b = 0; b < blocks; b++) {
    const s = b * bytes;
    const d = prefix.byteLength + b * (bytes + 2);
    out.set(raw.subarray(s, s + 2), d);
    out.set(raw.subarray(s + 2, s + bytes), d + 4);
  }
  return out;
}

/** Bytes of `count` elements of `dtype` in the device layout. */
export function deviceBytes(dtype: WeightDType, count: number): number {
  const block = REPACKED_BLOCK_BYTES[dtype];
  return block === undefined ? byteSize(dtype, count) : (count / blockValues(dtype)) * block;
}

/** Unpacks q6_k blocks into [d as f32, 16 int8 scales in value order, 256 int8 codes − 32] (see above). */
function unpackQ6K(raw: Uint8Array, count: number): Uint8Array {
  const blocks = count / 256;
  const out = new Uint8Array(blocks * 276);
  const src = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const dst = new DataView(out.buffer);
  for (let b = 0; b < blocks; b++) {
    const s = b * 210;
    const at = b * 276;
    dst.setFloat32(at, f16ToF32(src.getUint16(s + 208, true)), true);
    for (let g = 0; g < 16; g++) {
      // Values 16g … 16g + 15 lie in one 128-value half n, one quarter of it, one scale.
      const n = g >> 3;
      const quarter = (g >> 1) & 3;
      out[at + 4 + g] = raw[s + 192 + 8 * n + (g & 1) + 2 * quarter];
      for (let j = 0; j < 16; j++) {
        const l = 16 * (g & 1) + j;
        const low = (raw[s + 64 * n + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1))) & 0xf;
        const high = (raw[s + 128 + 32 * n + l] >> (2 * quarter)) & 3;
        dst.setInt8(at + 20 + 16 * g + j, (low | (high << 4)) - 32);
      }
    }
  }
  return out;
}

/**
 * Repacks blocks of q4_0, q5_0, mxfp4 or q3_k into word-aligned device blocks: the scale that heads a
 * block (an f16, or mxfp4's E8M0 byte) moves to its end (q3_k's is there already), and the block is
 * zero-padded to `deviceBlock` bytes.
 */
function repackBlocks(raw: Uint8Array, count: number, dtype: "q4_0" | "iq4_nl" | "q5_0" | "mxfp4" | "q3_k"): Uint8Array {
  const { values, bytes } = QUANT_BLOCKS[dtype];
  const scale = dtype === "mxfp4" ? 1 : dtype === "q3_k" ? 0 : 2;
  const deviceBlock = REPACKED_BLOCK_BYTES[dtype] ?? bytes;
  const blocks = count / values;
  const out = new Uint8Array(blocks * deviceBlock);
  for (let b = 0; b < blocks; b++) {
    const s = b * bytes;
    const d = b * deviceBlock;
    out.set(raw.subarray(s + scale, s + bytes), d);
    out.set(raw.subarray(s, s + scale), d + bytes - scale);
  }
  return out;
}

/** Repacks GGUF q8_0 blocks into the 36-byte device blocks. */
export function repackQ8(raw: Uint8Array, count: number): Uint8Array {
  const blocks = count / Q8_0_BLOCK;
  const out = new Uint8Array(blocks * 36);
  const src = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const dst = new DataView(out.buffer);
  for (let b = 0; b < blocks; b++) {
    const s = b * Q8_0_BLOCK_BYTES;
    dst.setFloat32(b * 36, f16ToF32(src.getUint16(s, true)), true);
    out.set(raw.subarray(s + 2, s + Q8_0_BLOCK_BYTES), b * 36 + 4);
  }
  return out;
}

/** One chunk's device bytes and its row range. */
export interface PackedChunk {
  rowStart: number;
  rows: number;
  bytes: Uint8Array;
}

/**
 * The most elements one chunk holds: kernels index a chunk's elements with u32 (row · cols + col),
 * so a device binding 4 GiB or more of a sub-byte format (q4_0 packs 2³² values into 2.5 GiB) must
 * still split below 2³².
 */
export const MAX_CHUNK_ELEMENTS = 2 ** 32 - 1;

/**
 * Rows per chunk of a [rows, cols] weight whose device rows take `rowBytes` each: as many as fit
 * in `maxBinding` bytes and {@link MAX_CHUNK_ELEMENTS} elements (at least 1, at most `rows`).
 */
export function chunkRows(rows: number, cols: number, rowBytes: number, maxBinding: number): number {
  if (rowBytes > maxBinding) {
    throw new BackendShapeError(`A weight row of ${rowBytes} bytes exceeds the device's binding limit of ${maxBinding} bytes`);
  }
  if (cols > MAX_CHUNK_ELEMENTS) throw new BackendShapeError(`A weight row of ${cols} values exceeds the ${MAX_CHUNK_ELEMENTS} a chunk can index`);
  const byBytes = Math.floor(maxBinding / Math.max(rowBytes, 1));
  const byIndex = Math.floor(MAX_CHUNK_ELEMENTS / Math.max(cols, 1));
  return Math.max(1, Math.min(rows, byBytes, byIndex));
}

/** Splits a [rows, cols] weight into chunks that each fit in `maxBinding` bytes (and {@link chunkRows}' index limit), in device layout. */
export function packWeight(
  raw: Uint8Array,
  rows: number,
  cols: number,
  dtype: WeightDType,
  maxBinding: number,
): PackedChunk[] {
  const need = byteSize(dtype, rows * cols);
  if (raw.byteLength < need) {
    throw new BackendShapeError(`uploadWeight needs ${need} bytes for ${rows}×${cols} ${dtype}, got ${raw.byteLength}`);
  }
  const prefix = gridPrefix(dtype);
  const grid = prefix?.byteLength ?? 0;
  if (grid > 0 && grid + deviceBytes(dtype, cols) > maxBinding) {
    throw new BackendShapeError(
      `A ${dtype} weight row of ${deviceBytes(dtype, cols)} bytes and the format's ${grid}-byte grid exceed the device's binding limit of ${maxBinding} bytes`,
    );
  }
  const perChunk = chunkRows(rows, cols, deviceBytes(dtype, cols), maxBinding - grid);
  const chunks: PackedChunk[] = [];
  for (let r0 = 0; r0 < Math.max(rows, 1); r0 += perChunk) {
    const n = Math.min(perChunk, rows - r0);
    const fileRow = byteSize(dtype, cols);
    const slice = raw.subarray(r0 * fileRow, (r0 + n) * fileRow);
    const bytes = dtype === "q8_0"
      ? repackQ8(slice, n * cols)
      : dtype === "q4_0" || dtype === "iq4_nl" || dtype === "q5_0" || dtype === "mxfp4" || dtype === "q3_k"
      ? repackBlocks(slice, n * cols, dtype)
      : dtype === "q6_k"
      ? unpackQ6K(slice, n * cols)
      : isIqDType(dtype)
      ? latticeChunk(slice, n * cols, dtype)
      : slice;
    chunks.push({ rowStart: r0, rows: n, bytes });
    if (rows === 0) break;
  }
  return chunks;
}
