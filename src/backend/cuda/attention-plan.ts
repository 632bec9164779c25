/**
 * Splits a ragged attention batch between the two CUDA attention kernels: runs of ≥ 4
 * consecutive rows of one sequence (prefill chunks) go to the flash kernel in tiles of ≤ 32 rows;
 * all other rows (decode) go to the split-KV kernel. Needs the host copies of tokenSeq/tokenPos;
 * without them every row takes the split-KV kernel, which is correct for any batch.
 */

/** Rows per flash tile (kernels-cuda/attention_prefill.cu PF_ROWS). */
export const FLASH_TILE_ROWS = 32;
/** Shortest same-sequence run worth a flash tile. */
export const FLASH_MIN_RUN = 4;

/** The host-side plan: decode row indices and flash tiles as (first row, row count) pairs. */
export interface AttentionPlan {
  decodeRows: Int32Array;
  tiles: Int32Array;
}

/** Plans rows by sequence runs (see the file comment). */
export function planAttention(seq: Int32Array): AttentionPlan {
  const decode: number[] = [];
  const tiles: number[] = [];
  let start = 0;
  while (start < seq.length) {
    let end = start + 1;
    while (end < seq.length && seq[end] === seq[start]) end++;
    if (end - start >= FLASH_MIN_RUN) {
      for (let r = start; r < end; r += FLASH_TILE_ROWS) tiles.push(r, Math.min(FLASH_TILE_ROWS, end - r));
    } else {
      for (let r = start; r < end; r++) decode.push(r);
    }
    start = end;
  }
  return { decodeRows: Int32Array.from(decode), tiles: Int32Array.from(tiles) };
}
