/**
 * Device layouts of weights, chosen at upload time.
 *
 * - f32, f16, bf16: the file's little-endian bytes unchanged (f16 is read as array<f16> with
 *   shader-f16, else as u32 words holding two halves; bf16 always as u32 words).
 * - q8_0: GGUF blocks are 34 bytes (f16 scale + 32 int8), not 4-byte aligned, so each block is
 *   repacked into 36 bytes = 9 u32 words: the scale widened to f32, then the 32 int8 unchanged.
 *   Kernels then read whole words and extract bytes with extractBits (sign-extending).
 * - A weight bigger than the largest storage binding is split into row chunks, each packed into
 *   its own buffer from element 0.
 */
import { byteSize, f16ToF32, Q8_0_BLOCK, Q8_0_BLOCK_BYTES } from "../dtype-codec.ts";
import { BackendShapeError, type WeightDType } from "../types.ts";

/** Bytes of `count` elements of `dtype` in the device layout. */
export function deviceBytes(dtype: WeightDType, count: number): number {
  return dtype === "q8_0" ? (count / Q8_0_BLOCK) * 36 : byteSize(dtype, count);
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
    const bytes = dtype === "q8_0" ? repackQ8(slice, n * cols) : slice;
    chunks.push({ rowStart: r0, rows: n, bytes });
    if (rows === 0) break;
  }
  return chunks;
}
