/**
 * Device layouts of weights, chosen at upload time.
 *
 * - f32, f16, bf16: the file's little-endian bytes unchanged (f16 is read as array<f16> with
 *   shader-f16, else as u32 words holding two halves; bf16 always as u32 words).
 * - q8_0: GGUF blocks are 34 bytes (f16 scale + 32 int8), not 4-byte aligned, so each block is
 *   repacked into 36 bytes = 9 u32 words: the scale widened to f32, then the 32 int8 unchanged.
 *   Kernels then read whole words and extract bytes with extractBits (sign-extending).
 * - q4_1, q5_1, q4_k, q5_k: llama.cpp's blocks are whole words (20, 24, 144, 176 bytes) and are
 *   kept as they are. q4_0 (18 bytes), q5_0 (22) and q6_k (210) are not: q4_0 and q5_0 move their
 *   f16 scale behind the codes and pad to 20 / 24 bytes, q6_k pads its trailing scale to 212.
 * - A weight bigger than the largest storage binding is split into row chunks, each packed into
 *   its own buffer from element 0.
 */
import { blockValues, byteSize, f16ToF32, Q8_0_BLOCK, Q8_0_BLOCK_BYTES } from "../dtype-codec.ts";
import { QUANT_BLOCKS } from "../quant-blocks.ts";
import { BackendShapeError, type WeightDType } from "../types.ts";

/** Device bytes per block of the formats whose blocks are repacked (see above). */
const REPACKED_BLOCK_BYTES: Partial<Record<WeightDType, number>> = { q8_0: 36, q4_0: 20, q5_0: 24, q6_k: 212 };

/** Bytes of `count` elements of `dtype` in the device layout. */
export function deviceBytes(dtype: WeightDType, count: number): number {
  const block = REPACKED_BLOCK_BYTES[dtype];
  return block === undefined ? byteSize(dtype, count) : (count / blockValues(dtype)) * block;
}

/**
 * Repacks blocks of q4_0, q5_0 or q6_k into word-aligned device blocks: the f16 scale that heads a
 * q4_0 / q5_0 block moves to its end; every block is zero-padded to `deviceBlock` bytes.
 */
function repackBlocks(raw: Uint8Array, count: number, dtype: "q4_0" | "q5_0" | "q6_k"): Uint8Array {
  const { values, bytes } = QUANT_BLOCKS[dtype];
  const deviceBlock = REPACKED_BLOCK_BYTES[dtype] ?? bytes;
  const blocks = count / values;
  const out = new Uint8Array(blocks * deviceBlock);
  for (let b = 0; b < blocks; b++) {
    const s = b * bytes;
    const d = b * deviceBlock;
    if (dtype === "q6_k") {
      out.set(raw.subarray(s, s + bytes), d);
    } else {
      out.set(raw.subarray(s + 2, s + bytes), d);
      out.set(raw.subarray(s, s + 2), d + bytes - 2);
    }
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

/** Splits a [rows, cols] weight into chunks that each fit in `maxBinding` bytes, in device layout. */
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
  const rowDev = deviceBytes(dtype, cols);
  if (rowDev > maxBinding) {
    throw new BackendShapeError(`A weight row of ${rowDev} bytes exceeds the device's binding limit of ${maxBinding} bytes`);
  }
  const perChunk = Math.max(1, Math.min(rows, Math.floor(maxBinding / Math.max(rowDev, 1))));
  const chunks: PackedChunk[] = [];
  for (let r0 = 0; r0 < Math.max(rows, 1); r0 += perChunk) {
    const n = Math.min(perChunk, rows - r0);
    const fileRow = byteSize(dtype, cols);
    const slice = raw.subarray(r0 * fileRow, (r0 + n) * fileRow);
    const bytes = dtype === "q8_0"
      ? repackQ8(slice, n * cols)
      : dtype === "q4_0" || dtype === "q5_0" || dtype === "q6_k"
      ? repackBlocks(slice, n * cols, dtype)
      : slice;
    chunks.push({ rowStart: r0, rows: n, bytes });
    if (rows === 0) break;
  }
  return chunks;
}
