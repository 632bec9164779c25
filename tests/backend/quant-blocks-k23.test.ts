/**
 * q2_k and q3_k (GGUF types 10 and 11: what llama.cpp's Q2_K and Q3_K_S/M/L files hold) on the host:
 * hand-built blocks decoded against llama.cpp's layout (ggml-common.h block_q2_K: scales[16],
 * qs[64], f16 d, f16 dmin; block_q3_K: hmask[32], qs[64], scales[12], f16 d) and its
 * `dequantize_row_q2_K` / `dequantize_row_q3_K`, and the round-to-nearest encoders' error bounds.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { byteSize, decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { scalesQ3K } from "../../src/backend/quant-blocks.ts";
import { f32ToF16 } from "../../src/backend/half-float.ts";
import { Rng } from "./conformance-support.ts";

/** A q2_k block: `scales` bytes (low nibble scale, high nibble min), `codes` (256, value order, 0…3), d, dmin. */
function q2Block(scales: readonly number[], codes: readonly number[], d: number, dmin: number): Uint8Array {
  const out = new Uint8Array(84);
  out.set(scales, 0);
  // Value 128·n + 32·j + l sits in bits 2·j of qs byte 32·n + l.
  for (let e = 0; e < 256; e++) out[16 + 32 * (e >> 7) + (e & 31)] |= codes[e] << (2 * ((e & 127) >> 5));
  new DataView(out.buffer).setUint16(80, f32ToF16(d), true);
  new DataView(out.buffer).setUint16(82, f32ToF16(dmin), true);
  return out;
}

/** A q3_k block: 16 six-bit `scales` (stored + 32), `codes` (256, value order, −4…3), d. */
function q3Block(scales: readonly number[], codes: readonly number[], d: number): Uint8Array {
  const out = new Uint8Array(110);
  for (let e = 0; e < 256; e++) {
    const n = e >> 7;
    const j = (e & 127) >> 5;
    const l = e & 31;
    const q = codes[e] + 4;
    out[32 + 32 * n + l] |= (q & 3) << (2 * j);
    // hmask bit 4·n + j of byte l: set means the code is the low bits as they are, clear means − 4.
    out[l] |= (q >> 2) << (4 * n + j);
  }
  for (let k = 0; k < 16; k++) {
    out[96 + (k & 7)] |= (scales[k] & 0xf) << (4 * (k >> 3));
    out[104 + (k & 3)] |= (scales[k] >> 4) << (2 * (k >> 2));
  }
  new DataView(out.buffer).setUint16(108, f32ToF16(d), true);
  return out;
}

/** The sub-block (16 values, one scale) of value e in both formats. */
const subOf = (e: number) => 8 * (e >> 7) + 2 * ((e & 127) >> 5) + ((e & 31) >> 4);

test("q2_k and q3_k blocks are 256 values in 84 and 110 bytes, as ggml's block_q2_K and block_q3_K", () => {
  assert.equal(byteSize("q2_k", 512), 168);
  assert.equal(byteSize("q3_k", 512), 220);
  assert.throws(() => byteSize("q3_k", 128), /q3_k tensor needs a multiple of 256 elements, got 128/);
});

test("decodeToF32() q2_k: value 128·n + 32·j + l is bits 2·j of qs byte 32·n + l", () => {
  const codes = new Array(256).fill(0);
  const raw = q2Block(new Array(16).fill(1), codes, 1, 0);
  raw[16 + 32 + 5] = 0b11000000; // n = 1, l = 5, j = 3: value 128 + 96 + 5
  const out = decodeToF32(raw, "q2_k", 256);
  assert.deepEqual([...out.keys()].filter((e) => out[e] !== 0), [229]);
  assert.equal(out[229], 3);
});

test("decodeToF32() q2_k: value = d · (scale & 15) · code − dmin · (scale >> 4), one scale byte per 16 values", () => {
  const scales = Array.from({ length: 16 }, (_, k) => (1 + (k % 15)) | ((15 - k) << 4));
  const codes = Array.from({ length: 256 }, (_, e) => (e * 7 + (e >> 5)) & 3);
  const [d, dmin] = [0.25, 0.125];
  const out = decodeToF32(q2Block(scales, codes, d, dmin), "q2_k", 256);
  for (let e = 0; e < 256; e++) {
    const sc = scales[subOf(e)];
    assert.equal(out[e], d * (sc & 15) * codes[e] - dmin * (sc >> 4), `value ${e}`);
  }
  // Sub-block 13 (values 208…223): scale byte 0xee, d · 14 · code − dmin · 2.
  assert.equal(out[210], 0.25 * 14 * codes[210] - 0.25);
});

test("decodeToF32() q3_k: a clear hmask bit 4·n + j of byte l subtracts 4 from value 128·n + 32·j + l", () => {
  const raw = q3Block(new Array(16).fill(33), new Array(256).fill(0), 1);
  assert.ok(decodeToF32(raw, "q3_k", 256).every((v) => v === 0));
  raw[20] &= ~(1 << 5); // n = 1, j = 1, l = 20: value 128 + 32 + 20
  const out = decodeToF32(raw, "q3_k", 256);
  assert.deepEqual([...out.keys()].filter((e) => out[e] !== 0), [180]);
  assert.equal(out[180], -4);
});

test("decodeToF32() q3_k: 6-bit scales unpacked as llama.cpp's kmask1/kmask2 (low nibbles in bytes 0–7, high bit pairs in 8–11)", () => {
  // Scale 13 = 63: its low nibble is the high nibble of byte 5, its high bits bits 6–7 of byte 9;
  // every other scale 0, i.e. −32. Every code is 1.
  const raw = q3Block(new Array(16).fill(0), new Array(256).fill(1), 0.5);
  raw[96 + 5] = 0xf0;
  raw[96 + 9] = 0xc0;
  assert.deepEqual(Array.from(scalesQ3K(raw, 96)), Array.from({ length: 16 }, (_, k) => (k === 13 ? 63 : 0)));
  const out = decodeToF32(raw, "q3_k", 256);
  for (let e = 0; e < 256; e++) assert.equal(out[e], subOf(e) === 13 ? 15.5 : -16, `value ${e}`);
});

test("decodeToF32() q3_k: value = d · (scale − 32) · code over every scale and code", () => {
  const scales = Array.from({ length: 16 }, (_, k) => (k * 23 + 5) & 63);
  const codes = Array.from({ length: 256 }, (_, e) => ((e * 5 + (e >> 4)) & 7) - 4);
  const out = decodeToF32(q3Block(scales, codes, 0.0625), "q3_k", 256);
  assert.deepEqual(Array.from(scalesQ3K(q3Block(scales, codes, 0.0625), 96)), scales);
  for (let e = 0; e < 256; e++) assert.equal(out[e], 0.0625 * (scales[subOf(e)] - 32) * codes[e], `value ${e}`);
});

for (const [dtype, steps] of [["q2_k", 3], ["q3_k", 4]] as const) {
  test(`encodeFromF32() ${dtype} round-trips within a step of each 16-value sub-block's range`, () => {
    const rng = new Rng(dtype === "q2_k" ? 21 : 31);
    const values = Float32Array.from({ length: 4 * 256 }, (_, i) => rng.uniform(-2, 2) * (1 + (i >> 8)));
    values.fill(0, 256 * 2 + 16, 256 * 2 + 32); // a zero sub-block decodes to zeros
    const back = decodeToF32(encodeFromF32(values, dtype), dtype, values.length);
    for (let k = 0; k < values.length / 16; k++) {
      const sub = values.subarray(16 * k, 16 * k + 16);
      // q2_k: range [min(lo, 0), hi] in 3 steps; q3_k: the largest magnitude is 4 steps (codes −4…3).
      const span = dtype === "q2_k" ? Math.max(...sub) - Math.min(0, ...sub) : Math.max(...sub.map(Math.abs));
      // q2_k: half a step plus the 4-bit rounding of the sub-block's scale and min, within a step
      // here. q3_k: its clipping of the other sign at code 3 is a whole step, and the 6-bit rounding
      // of the scale (half of d = the block's largest scale / 32, times up to 4 codes) adds 1/16 of the
      // block's largest step, which is this sub-block's here: a block's values share one range.
      const tol = (span / steps) * (dtype === "q3_k" ? 1 + 1 / 16 : 1) + 1e-6;
      for (let l = 0; l < 16; l++) {
        const e = 16 * k + l;
        assert.ok(Math.abs(back[e] - values[e]) <= tol, `${dtype}[${e}] ${back[e]} vs ${values[e]} (tol ${tol})`);
      }
    }
    assert.ok(back.subarray(256 * 2 + 16, 256 * 2 + 32).every((v) => v === 0));
  });

  test(`encodeFromF32() ${dtype} keeps exactly representable blocks exactly`, () => {
    // Values on the block's own grid come back unchanged: the encoder picks that grid.
    const codes = Array.from({ length: 256 }, (_, e) => (dtype === "q2_k" ? (e * 3 + (e >> 4)) & 3 : ((e * 3 + (e >> 4)) & 7) - 4));
    for (let k = 0; k < 16; k++) codes[16 * k] = dtype === "q2_k" ? 3 : -4; // each sub-block spans its full grid
    if (dtype === "q2_k") for (let k = 0; k < 16; k++) codes[16 * k + 1] = 0;
    const raw = dtype === "q2_k" ? q2Block(new Array(16).fill(15), codes, 0.5, 0) : q3Block(new Array(16).fill(0), codes, 0.25);
    const values = decodeToF32(raw, dtype, 256);
    assert.deepEqual(Array.from(decodeToF32(encodeFromF32(values, dtype), dtype, 256)), Array.from(values));
  });
}
