/**
 * mxfp4 (GGUF type 39, gpt-oss's expert matrices) on the host: blocks decoded and encoded by hand
 * against llama.cpp's layout (ggml-common.h block_mxfp4: one E8M0 byte, then byte j holding value
 * j in its low nibble and value j + 16 in its high one), its `dequantize_row_mxfp4` and the
 * rounding of its `quantize_row_mxfp4_ref` (scale from floorf(log2f(amax)), first code on a tie).
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { byteSize, decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { decodeBlocks, e8m0ToF32Half, encodeBlocks, KVALUES_MXFP4, mxfp4FitsF16 } from "../../src/backend/quant-blocks.ts";
import { Rng } from "./conformance-support.ts";

/** One 17-byte block: scale byte `e`, then `codes` (32 nibbles, value order) packed as llama.cpp packs them. */
function block(e: number, codes: readonly number[]): Uint8Array {
  const out = new Uint8Array(17);
  out[0] = e;
  for (let j = 0; j < 16; j++) out[1 + j] = codes[j] | (codes[j + 16] << 4);
  return out;
}

/** The 32 codes of an encoded block, in value order. */
function codesOf(raw: Uint8Array): number[] {
  return [...raw.subarray(1, 17)].map((b) => b & 0xf).concat([...raw.subarray(1, 17)].map((b) => b >> 4));
}

const ALL_CODES = [...Array(16).keys(), ...Array.from({ length: 16 }, (_, j) => 15 - j)];

test("mxfp4 blocks are 32 values in 17 bytes, as ggml's block_mxfp4", () => {
  assert.equal(byteSize("mxfp4", 64), 34);
  assert.throws(() => byteSize("mxfp4", 48), /A mxfp4 tensor needs a multiple of 32 elements, got 48/);
});

test("decodeToF32() mxfp4: value j is the low nibble of byte j + 1, value j + 16 its high nibble, times 2^(e − 128)", () => {
  // e = 128: the halved scale is 1, so each value is its doubled E2M1 code itself.
  const raw = block(128, ALL_CODES);
  assert.deepEqual(raw.subarray(1), Uint8Array.from([0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f]));
  assert.deepEqual(
    Array.from(decodeToF32(raw, "mxfp4", 32)),
    [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, -12, -8, -6, -4, -3, -2, -1, 0, 12, 8, 6, 4, 3, 2, 1, 0],
  );
  assert.deepEqual(KVALUES_MXFP4, [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]);
  // Other scales, each block's codes 1 (1 · d), 5 (6 · d) and 15 (−12 · d) first.
  const scales: [number, number][] = [[127, 0.5], [130, 4], [2, 2 ** -126], [1, 2 ** -127], [0, 2 ** -128], [250, 2 ** 122]];
  for (const [e, d] of scales) {
    const got = decodeToF32(block(e, [1, 5, 15, ...Array(29).fill(0)]), "mxfp4", 32);
    assert.deepEqual(Array.from(got.subarray(0, 4)), [d, 6 * d, -12 * d, 0], `e = ${e}`);
    assert.equal(e8m0ToF32Half(e), d);
  }
  // E8M0's 255 is NaN in the OCP spec; ggml reads it as 2^127, so 12 · 2^127 overflows f32.
  assert.deepEqual(Array.from(decodeToF32(block(255, [1, 7, ...Array(30).fill(0)]), "mxfp4", 32).subarray(0, 2)), [2 ** 127, Infinity]);
});

test("encodeFromF32() mxfp4 rounds as llama.cpp's quantize_row_mxfp4_ref: scale from amax, nearest code, first on a tie", () => {
  const x = new Float32Array(32);
  // amax 6: floor(log2 6) − 2 + 127 = 127, so d = 0.5 and codes 0…7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6 (8…15 negated).
  const cases: [number, number, number][] = [
    // [index, value, code]
    [0, 6, 7],
    [1, 5, 6], // 4 and 6 tie: the lower code wins
    [2, 5.0001, 7],
    [3, -5, 14], // −4 (14) before −6 (15)
    [4, 0.25, 0], // 0 and 0.5 tie
    [5, -0.25, 0], // 0 and −0.5 tie: code 0, never −0 (8)
    [6, -0.3, 9],
    [7, 0.75, 1],
    [8, 1.25, 2],
    [9, 2.5, 4],
    [10, 3.5, 5],
    [11, -1, 10],
    [16, -6, 15],
    [17, 3, 5],
    [31, -0.3, 9],
  ];
  for (const [i, v] of cases) x[i] = v;
  const raw = encodeFromF32(x, "mxfp4");
  assert.equal(raw.byteLength, 17);
  assert.equal(raw[0], 127);
  const want = new Array(32).fill(0);
  for (const [i, , code] of cases) want[i] = code;
  assert.deepEqual(codesOf(raw), want);
  assert.equal(raw[1], 7 | (15 << 4));
  const back = decodeToF32(raw, "mxfp4", 32);
  assert.deepEqual([back[0], back[1], back[3], back[6], back[16], back[17]], [6, 4, -4, -0.5, -6, 3]);
});

test("encodeFromF32() mxfp4 takes the scale from log2f's f32 result, clips above 12·d and writes 0 for a zero block", () => {
  const one = (amax: number) => {
    const x = new Float32Array(32);
    x[0] = amax;
    x[20] = -amax / 3;
    return encodeFromF32(x, "mxfp4");
  };
  // amax 8 → e 128 (d = 1): 8 is code 6 (8 · d); amax 7.99 → e 127 (d = 0.5): clipped to 12 · d = 6 (code 7).
  assert.deepEqual([one(8)[0], codesOf(one(8))[0]], [128, 6]);
  assert.deepEqual([one(7.99)[0], codesOf(one(7.99))[0]], [127, 7]);
  // The largest f32 below 2^-4: log2 is −4 − 8.6e-8, which f32 rounds to −4, so e is 121 (d = 2^-7,
  // the value becomes 8 · d = 2^-4); in f64 it would floor to −5 (e 120).
  const below = Math.fround(2 ** -4 * (1 - 2 ** -24));
  assert.ok(below < 2 ** -4);
  const raw = one(below);
  assert.deepEqual([raw[0], codesOf(raw)[0]], [121, 6]);
  assert.equal(decodeToF32(raw, "mxfp4", 32)[0], 2 ** -4);
  // All zeros: e 0 and code 0 everywhere.
  assert.deepEqual(encodeFromF32(new Float32Array(32), "mxfp4"), new Uint8Array(17));
  // amax 2^-130: the exponent −5 wraps to 251 in llama.cpp's float → uint8_t cast on x86-64 (the
  // oracle's build), and every value rounds to code 0 under that huge scale.
  const tiny = one(2 ** -130);
  assert.deepEqual([tiny[0], ...codesOf(tiny)], [251, ...new Array(32).fill(0)]);
});

test("encodeBlocks() mxfp4 gives back the bytes of decoded blocks, and stays within its steps of random values", () => {
  const rng = new Rng(39);
  // Random blocks (never code 8, −0, which the quantizer does not write) decode and re-encode to themselves.
  const blocks = 64;
  const raw = new Uint8Array(blocks * 17);
  for (let b = 0; b < blocks; b++) {
    raw[b * 17] = 100 + rng.int(50);
    for (let j = 1; j < 17; j++) {
      const lo = rng.int(15);
      const hi = rng.int(15);
      raw[b * 17 + j] = (lo >= 8 ? lo + 1 : lo) | ((hi >= 8 ? hi + 1 : hi) << 4);
    }
    // Make amax 12 · d (code 7): amax in [8 · d, 16 · d) is what keeps the scale byte.
    raw[b * 17 + 1] = (raw[b * 17 + 1] & 0xf0) | 7;
  }
  const values = new Float32Array(blocks * 32);
  decodeBlocks(raw, "mxfp4", blocks, values);
  const again = new Uint8Array(raw.length);
  encodeBlocks(values, "mxfp4", again);
  assert.deepEqual(again, raw);
  // Random values of every magnitude: within half the widest step of the block's grid (2 · d,
  // between 8 · d and 12 · d) or the clip down to 12 · d; the scale puts amax in [8 · d, 16 · d).
  const x = Float32Array.from({ length: 32 * 32 }, (_, i) => rng.uniform(-1, 1) * 2 ** (Math.floor(i / 32) - 16));
  const enc = encodeFromF32(x, "mxfp4");
  const back = decodeToF32(enc, "mxfp4", x.length);
  for (let b = 0; b < 32; b++) {
    const amax = Math.max(...x.subarray(32 * b, 32 * b + 32).map(Math.abs));
    const d = e8m0ToF32Half(enc[17 * b]);
    assert.ok(amax >= 8 * d && amax < 16 * d, `block ${b}: amax ${amax}, d ${d}`);
    for (let j = 32 * b; j < 32 * b + 32; j++) {
      assert.ok(Math.abs(back[j] - x[j]) <= Math.max(2 * d, Math.abs(x[j]) - 12 * d), `${j}: ${back[j]} vs ${x[j]}`);
    }
  }
});

test("mxfp4FitsF16() is true exactly when every nonzero value of the blocks is an f16", () => {
  const fits = (e: number, codes: number[]) => mxfp4FitsF16(block(e, [...codes, ...Array(32 - codes.length).fill(0)]), 1);
  // 2^-24 (f16's smallest subnormal) and 12 · 2^12 = 49152 are f16s; 2^-25 and 12 · 2^13 are not,
  // but 2 · 2^-25 and 6 · 2^13 are (8 · 2^13 = 65536 is not).
  assert.equal(fits(104, [1]), true);
  assert.equal(fits(103, [1]), false);
  assert.equal(fits(103, [2, 10, 0, 8]), true);
  assert.equal(fits(140, [7, 15]), true);
  assert.equal(fits(141, [1, 13]), true);
  assert.equal(fits(141, [1, 14]), false);
  assert.equal(fits(141, [1, 15]), false);
  // Zeros (code 0 and −0) fit under any scale.
  assert.equal(fits(0, [0, 8, 8, 0]), true);
  assert.equal(fits(255, [8]), true);
  // One bad block among good ones is enough.
  const two = new Uint8Array(34);
  two.set(block(120, ALL_CODES), 0);
  two.set(block(150, [0, 0, 3]), 17);
  assert.equal(mxfp4FitsF16(two, 1), true);
  assert.equal(mxfp4FitsF16(two, 2), false);
  for (let e = 0; e < 256; e++) {
    const values = decodeToF32(block(e, ALL_CODES), "mxfp4", 32);
    const exact = values.every((v) => Math.fround(v) === v && Math.abs(v) <= 65504 && Number.isInteger(v * 2 ** 24));
    assert.equal(mxfp4FitsF16(block(e, ALL_CODES), 1), exact, `e = ${e}`);
  }
});
