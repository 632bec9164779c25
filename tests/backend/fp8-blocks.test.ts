/**
 * f8_e4m3 weight blocks (src/backend/quant-blocks-fp8.ts): the layout, the round-to-nearest-even
 * encoder, an FP8 checkpoint's codes and scales moved into blocks unchanged, and every one of the 254
 * finite codes decoded by the WebGPU backend exactly as the reference decodes it.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { byteSize, decodeToF32, denseBlockQuantStorage, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { E4M3_VALUES, fitsFp8Blocks, fp8Blocks, fp8Scale } from "../../src/backend/quant-blocks-fp8.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { dequantizeFp8 } from "../../src/model/fp8.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { seededRandom } from "../model/model-files.ts";

/** One block: `scale` then 32 codes (the rest 0). */
function block(scale: number, codes: number[]): Uint8Array {
  const out = new Uint8Array(36);
  new DataView(out.buffer).setFloat32(0, scale, true);
  out.set(codes, 4);
  return out;
}

test("f8_e4m3 blocks are 32 values in 36 bytes: an f32 scale, then the codes", () => {
  assert.equal(byteSize("f8_e4m3", 64), 72);
  assert.throws(() => byteSize("f8_e4m3", 48), /A f8_e4m3 tensor needs a multiple of 32 elements, got 48/);
  const values = decodeToF32(block(0.375, [0x38, 0x40, 0xb8, 0x01, 0x7e, 0x80]), "f8_e4m3", 32);
  assert.deepEqual(Array.from(values.subarray(0, 6)), [0.375, 0.75, -0.375, 0.375 * 2 ** -9, 0.375 * 448, -0]);
  assert.ok(Object.is(values[5], -0));
});

test("fp8Scale() is the smallest power of two within which 448 covers a block's largest magnitude, 0 below 2^-100", () => {
  assert.equal(fp8Scale(448), 1);
  assert.equal(fp8Scale(448.00003), 2);
  assert.equal(fp8Scale(224), 0.5);
  assert.equal(fp8Scale(224.00002), 1);
  assert.equal(fp8Scale(1.75), 2 ** -8);
  assert.equal(fp8Scale(1.7500001), 2 ** -7);
  assert.equal(fp8Scale(2 ** -100), 2 ** -108);
  assert.equal(fp8Scale(2 ** -100.5), 0);
  assert.equal(fp8Scale(0), 0);
});

test("encodeFromF32() f8_e4m3 scales by a power of two and rounds each value to the nearest code, ties to even", () => {
  // Scale 1 (448 in the block): values between codes go to the nearer one; halfway to the even code.
  // 1.0625 lies halfway between 1 (0x38) and 1.125 (0x39): 0x38. 1.1875 between 0x39 and 1.25 (0x3a): 0x3a.
  const x = new Float32Array(32);
  x.set([448, 1.0625, 1.1875, -1.2, 3 * 2 ** -10, 2 ** -11, -0, 0.0009]);
  const raw = encodeFromF32(x, "f8_e4m3");
  const view = new DataView(raw.buffer);
  assert.equal(view.getFloat32(0, true), 1);
  assert.deepEqual(Array.from(raw.subarray(4, 12)), [0x7e, 0x38, 0x3a, 0xba, 0x02, 0x00, 0x80, 0x00]);
  // A zero block: scale 0, codes 0. No block ever holds a NaN code.
  const zero = encodeFromF32(new Float32Array(32), "f8_e4m3");
  assert.ok(zero.every((b) => b === 0));
  const rng = seededRandom(7);
  const many = Float32Array.from({ length: 32 * 200 }, () => (rng() - 0.5) * 10 ** (rng() * 8 - 4));
  const enc = encodeFromF32(many, "f8_e4m3");
  for (let b = 0; b < 200; b++) for (let j = 0; j < 32; j++) assert.notEqual(enc[b * 36 + 4 + j] & 0x7f, 0x7f, `block ${b} value ${j}`);
  // Decoded values encode to themselves (the power-of-two scale never grows): host copies of a KV
  // cache rely on it.
  const back0 = decodeToF32(enc, "f8_e4m3", many.length);
  assert.deepEqual(decodeToF32(encodeFromF32(back0, "f8_e4m3"), "f8_e4m3", many.length), back0);
  // Decoded, each value is the nearest code × scale: within half a step of the E4M3 grid there.
  const back = decodeToF32(enc, "f8_e4m3", many.length);
  for (let i = 0; i < many.length; i++) {
    const s = new DataView(enc.buffer).getFloat32(Math.floor(i / 32) * 36, true);
    const q = Math.abs(many[i]) / s;
    const step = q < 2 ** -6 ? 2 ** -9 : 2 ** (Math.floor(Math.log2(q)) - 3);
    assert.ok(Math.abs(back[i] - many[i]) <= (step / 2) * s * (1 + 1e-6), `value ${i}: ${many[i]} → ${back[i]}`);
  }
});

test("fp8Blocks() moves a checkpoint's codes and scales into blocks that decode to dequantizeFp8's values exactly", () => {
  const rng = seededRandom(11);
  const [rows, cols] = [5, 96];
  const codes = Uint8Array.from({ length: rows * cols }, () => Math.floor(rng() * 256) & 0xfe | 0x10); // no NaN codes
  const cases: [Float32Array, [number, number] | undefined][] = [
    [Float32Array.from({ length: 2 * 3 }, () => rng() * 0.01), [4, 32]],
    [Float32Array.from({ length: 1 * 1 }, () => rng() * 0.01), [128, 128]],
    [Float32Array.from({ length: rows }, () => rng() * 0.01), undefined],
    [Float32Array.of(0.003), undefined],
  ];
  for (const [scales, blk] of cases) {
    const blocks = fp8Blocks(codes, rows, cols, scales, blk, () => assert.fail("no NaN codes here"));
    assert.equal(blocks.byteLength, byteSize("f8_e4m3", rows * cols));
    assert.deepEqual(decodeToF32(blocks, "f8_e4m3", rows * cols), dequantizeFp8(codes, rows, cols, scales, blk), `scales ${scales.length}, block ${blk}`);
  }
  assert.equal(fitsFp8Blocks(96, [128, 128]), true);
  assert.equal(fitsFp8Blocks(80, undefined), false);
  assert.equal(fitsFp8Blocks(96, [128, 48]), false);
  const nan: [number, number][] = [];
  codes[2 * cols + 7] = 0x7f;
  codes[4 * cols + 95] = 0xff;
  fp8Blocks(codes, rows, cols, Float32Array.of(1), undefined, (r, c) => nan.push([r, c]));
  assert.deepEqual(nan, [[2, 7], [4, 95]]);
});

test("denseBlockQuantStorage() holds f8_e4m3 as f16, or as bf16 when a value is past f16's largest", () => {
  const small = block(1, [0x7e]); // 448
  assert.equal(denseBlockQuantStorage(small, "f8_e4m3", 32).dtype, "f16");
  const large = block(200, [0x7e, 0x38]); // 89600
  const dense = denseBlockQuantStorage(large, "f8_e4m3", 32);
  assert.equal(dense.dtype, "bf16");
  assert.deepEqual(Array.from(decodeToF32(dense.raw, "bf16", 2)), [89600, 200]);
});

const { gpu, why, skip } = await poisonedWebGpu("f8_e4m3 on WebGPU");

test("embedding() on WebGPU decodes all 254 finite E4M3 codes of f8_e4m3 blocks as the reference does", async () => {
  assert.ok(gpu, why);
  const ref = createReferenceBackend();
  // 8 rows of 32: every code but the NaNs 0x7f and 0xff (the last row ends in two zeros), under
  // scales from 2^-20 to 123.5.
  const codes = Array.from({ length: 256 }, (_, c) => c).filter((c) => (c & 0x7f) !== 0x7f);
  const scales = [1, 0.5, 3.75, 1e-3, 2 ** -20, 123.5, 0.0078125, 7];
  const raw = new Uint8Array(8 * 36);
  for (let r = 0; r < 8; r++) raw.set(block(scales[r], codes.slice(r * 32, r * 32 + 32)), r * 36);
  const ids = Int32Array.from({ length: 8 }, (_, i) => i);
  const run = async (b: typeof gpu) => {
    const table = b!.uploadWeight(raw, [8, 32], "f8_e4m3");
    const out = await b!.download(b!.embedding(table, b!.upload(ids, [8])));
    return Array.from(out);
  };
  const want = await run(ref);
  assert.deepEqual(want.slice(0, 32), codes.slice(0, 32).map((c) => E4M3_VALUES[c]), "the reference reads code × 1");
  const got = await run(gpu);
  assert.equal(got.length, want.length);
  for (let i = 0; i < want.length; i++) assert.ok(Object.is(got[i], want[i]), `value ${i} (code 0x${(codes[i] ?? 0).toString(16)}, scale ${scales[i >> 5]}): ${got[i]} vs ${want[i]}`);
}, { ignore: skip });
