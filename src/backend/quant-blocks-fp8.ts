/**
 * `f8_e4m3`: FP8 E4M3 weights as the backends hold them — blocks of 32 values, each an f32 scale
 * (4 bytes, little-endian) followed by the 32 E4M3 codes, 36 bytes, 9 bits a weight. FP8 checkpoints
 * (DeepSeek-V3, Qwen3-*-FP8, compressed-tensors float-quantized models) scale their codes per
 * 128×128 block, per row or per tensor; every such scale covers whole runs of 32 columns, so their
 * codes and scales move into these blocks unchanged (`fp8Blocks`), and a block decodes to exactly the
 * values the checkpoint stands for: code × scale, rounded once to f32. The blocks are word-aligned,
 * as q8_0's device blocks are, so the WebGPU backend reads them as loaded. Not a GGUF type.
 *
 * The encoder (`--quantize f8_e4m3`, an f8_e4m3 KV cache, tests) scales each block by the smallest
 * power of two that brings its largest magnitude within 448 and rounds to the nearest code, ties to
 * even; it never writes the NaN codes 0x7f and 0xff. A KV cache of this dtype holds each cache row
 * (a token's kvHeads × headDim values) as such blocks, 9 bits a value against f16's 16.
 */

/** Values and bytes per `f8_e4m3` block. */
export const F8_E4M3_BLOCK = { values: 32, bytes: 36 } as const;

/** An E4M3 ("fn": no infinities) byte's value: 4 exponent bits (bias 7), 3 mantissa bits; 0x7f and 0xff are NaN. */
export function e4m3ToF32(byte: number): number {
  const sign = byte & 0x80 ? -1 : 1;
  const exp = (byte >> 3) & 0xf;
  const man = byte & 7;
  if (exp === 0xf && man === 7) return NaN;
  return sign * (exp === 0 ? man * 2 ** -9 : (1 + man / 8) * 2 ** (exp - 7));
}

/** All 256 E4M3 values, by byte. */
export const E4M3_VALUES: Float32Array = Float32Array.from({ length: 256 }, (_, b) => e4m3ToF32(b));

/** True when `byte` is one of E4M3's two NaN codes. */
export function isE4m3NaN(byte: number): boolean {
  return (byte & 0x7f) === 0x7f;
}

/** Decodes `blocks` f8_e4m3 blocks of `raw` into `out`: each code's value times its block's scale, rounded to f32. */
export function decodeFp8Blocks(raw: Uint8Array, blocks: number, out: Float32Array): void {
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const { values, bytes } = F8_E4M3_BLOCK;
  for (let b = 0; b < blocks; b++) {
    const s = view.getFloat32(b * bytes, true);
    const at = b * bytes + 4;
    for (let j = 0; j < values; j++) out[b * values + j] = E4M3_VALUES[raw[at + j]] * s;
  }
}

/** The code nearest `x` (|x| ≤ 448 after scaling), ties to the even code, as an OCP E4M3 conversion rounds. */
function nearestCode(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.min(Math.abs(x), 448);
  // Codes 0 … 126 are the non-negative finite values in increasing order: binary search the first ≥ a.
  let lo = 0;
  let hi = 126;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (E4M3_VALUES[mid] < a) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0) {
    const below = a - E4M3_VALUES[lo - 1];
    const above = E4M3_VALUES[lo] - a;
    if (below < above || (below === above && ((lo - 1) & 1) === 0)) lo -= 1;
  }
  return sign | lo;
}

/**
 * The scale of a block whose largest magnitude is `amax`: the smallest power of two 2^k with
 * 448 · 2^k ≥ amax, so the block's values fit the codes (448 is the largest), or 0 for a block below
 * 2^-100 (zeros, or values too small to matter; no subnormal scale). A power of two keeps the encoding
 * idempotent: decoded values, encoded again, decode to themselves (every value is a code times 2^k,
 * and the new scale is never larger), which moving KV out of a cache and back in relies on. Taken
 * from amax's f32 bits (exact; kernels-wgsl/kv_write.wgsl computes the same): amax = 1.m · 2^(e − 127)
 * needs k = e − 135 when 1.m ≤ 1.75 (that is, 448 = 1.75 · 2^8 covers it), else e − 134.
 */
export function fp8Scale(amax: number): number {
  return scaleOfBits(new Uint32Array(new Float32Array([amax]).buffer)[0]);
}

/** {@link fp8Scale} of an f32's bits. */
function scaleOfBits(bits: number): number {
  const e = (bits >>> 23) & 0xff;
  if (e < 27) return 0; // amax < 2^-100
  const k = e - ((bits & 0x7fffff) <= 0x600000 ? 135 : 134);
  return 2 ** k;
}

/** Encodes `values` (whole blocks) into f8_e4m3 blocks in `out`: a power-of-two scale (`fp8Scale`), codes rounded to nearest, ties to even. */
export function encodeFp8Blocks(values: Float32Array, out: Uint8Array): void {
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const { values: bv, bytes } = F8_E4M3_BLOCK;
  // One f32 and its bits for every block's scale (a load may quantize billions of weights).
  const amaxF32 = new Float32Array(1);
  const amaxBits = new Uint32Array(amaxF32.buffer);
  for (let b = 0; b < values.length / bv; b++) {
    let amax = 0;
    for (let j = 0; j < bv; j++) amax = Math.max(amax, Math.abs(values[b * bv + j]));
    amaxF32[0] = amax;
    const scale = scaleOfBits(amaxBits[0]);
    view.setFloat32(b * bytes, scale, true);
    for (let j = 0; j < bv; j++) out[b * bytes + 4 + j] = scale === 0 ? 0 : nearestCode(values[b * bv + j] / scale);
  }
}

/**
 * Rounds each 32-value block of `x` (from `start`, `count` values, a whole number of blocks) to what
 * f8_e4m3 holds of it, in place: a KV cache of that dtype on a backend that keeps f32 (the reference).
 */
export function roundToFp8Blocks(x: Float32Array, start: number, count: number): void {
  const raw = new Uint8Array((count / F8_E4M3_BLOCK.values) * F8_E4M3_BLOCK.bytes);
  encodeFp8Blocks(x.subarray(start, start + count), raw);
  decodeFp8Blocks(raw, count / F8_E4M3_BLOCK.values, x.subarray(start, start + count));
}

/**
 * True when a KV cache of `kvHeads` heads of `headDim` values can be f8_e4m3: a cache row (one
 * token's heads) is whole 32-value blocks, and each head starts on a word (4 codes), where the
 * attention kernels read it four values at a time. A block may hold several narrow heads under one scale.
 */
export function fp8KvFits(kvHeads: number, headDim: number): boolean {
  return (kvHeads * headDim) % F8_E4M3_BLOCK.values === 0 && headDim % 4 === 0;
}

/**
 * True when a checkpoint's [rows, cols] FP8 matrix fits f8_e4m3 blocks without re-rounding: its rows
 * are whole 32-value blocks, and (block-scaled) each scale spans whole blocks of columns.
 */
export function fitsFp8Blocks(cols: number, block?: readonly [number, number]): boolean {
  const n = F8_E4M3_BLOCK.values;
  return cols % n === 0 && (block === undefined || block[1] % n === 0);
}

/**
 * A checkpoint's FP8 matrix as f8_e4m3 blocks: `codes` [rows, cols] E4M3 bytes under `scales`
 * ([⌈rows/br⌉, ⌈cols/bc⌉] for `block` [br, bc], else one scale or one per row), codes unchanged and
 * each block headed by the f32 scale its columns share. `fitsFp8Blocks` must hold; a NaN code is
 * reported through `onNaN` with its row and column (and the block is still written).
 */
export function fp8Blocks(
  codes: Uint8Array, rows: number, cols: number, scales: Float32Array, block: readonly [number, number] | undefined,
  onNaN: (row: number, col: number) => void,
): Uint8Array {
  const { values: bv, bytes } = F8_E4M3_BLOCK;
  if (!fitsFp8Blocks(cols, block)) throw new RangeError(`An FP8 matrix of ${cols} columns${block ? ` under [${block}] scale blocks` : ""} does not fit f8_e4m3 blocks`);
  const perRow = cols / bv;
  const out = new Uint8Array(rows * perRow * bytes);
  const view = new DataView(out.buffer);
  const scaleCols = block ? Math.ceil(cols / block[1]) : 0;
  const perRowScale = block === undefined && scales.length === rows;
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < perRow; j++) {
      const at = (r * perRow + j) * bytes;
      const s = block ? scales[Math.floor(r / block[0]) * scaleCols + Math.floor((j * bv) / block[1])] : perRowScale ? scales[r] : scales[0];
      view.setFloat32(at, s, true);
      const from = r * cols + j * bv;
      out.set(codes.subarray(from, from + bv), at + 4);
    }
  }
  // One pass over the codes for NaNs (a corrupt checkpoint): the device decoders do not produce them.
  for (let i = 0; i < rows * cols; i++) if (isE4m3NaN(codes[i])) onNaN(Math.floor(i / cols), i % cols);
  return out;
}
