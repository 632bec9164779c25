import assert from "node:assert/strict";
import { test } from "../harness.ts";
import {
  bf16ToF32,
  byteSize,
  decodeToF32,
  denseBlockQuantStorage,
  encodeFromF32,
  f16ToF32,
  f32ToBf16,
  f32ToF16,
} from "../../src/backend/dtype-codec.ts";
import { f16BitsToF32Array, f32ArrayToF16Bits } from "../../src/backend/half-float.ts";

test("f32ToF16() and f16ToF32() match hand-computed half values", () => {
  assert.equal(f32ToF16(1), 0x3c00);
  assert.equal(f32ToF16(-2), 0xc000);
  assert.equal(f32ToF16(65504), 0x7bff);
  assert.equal(f32ToF16(1e6), 0x7c00); // overflow → inf
  assert.equal(f32ToF16(2 ** -24), 0x0001); // smallest subnormal
  assert.equal(f16ToF32(0x3555), 0.333251953125);
  assert.equal(f16ToF32(0x0001), 2 ** -24);
  // round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 → rounds to 1
  assert.equal(f32ToF16(1 + 2 ** -11), 0x3c00);
  assert.equal(f32ToF16(1 + 3 * 2 ** -11), 0x3c02);
});

test("f32ToBf16() rounds to nearest even and bf16ToF32() inverts it", () => {
  assert.equal(f32ToBf16(1), 0x3f80);
  assert.equal(bf16ToF32(0x3f80), 1);
  assert.equal(bf16ToF32(f32ToBf16(3.140625)), 3.140625);
  assert.equal(f32ToBf16(1 + 2 ** -8), 0x3f80); // halfway → even
  assert.ok(Number.isNaN(bf16ToF32(f32ToBf16(NaN))));
});

test("encodeFromF32() q8_0 uses llama.cpp's block layout and decodeToF32() inverts it", () => {
  const values = new Float32Array(64).map((_, i) => (i - 20) / 7);
  const raw = encodeFromF32(values, "q8_0");
  assert.equal(raw.byteLength, byteSize("q8_0", 64));
  assert.equal(raw.byteLength, 68);
  const view = new DataView(raw.buffer);
  // block 0: amax = 20/7, d = amax/127; the first quant is round(-20/7 / d) = -127
  assert.equal(view.getInt8(2), -127);
  assert.equal(f16ToF32(view.getUint16(0, true)), f16ToF32(f32ToF16(20 / 7 / 127)));
  const back = decodeToF32(raw, "q8_0", 64);
  for (let i = 0; i < 64; i++) {
    // error bound: half a quantization step of the element's block (d = amax / 127), plus f16 rounding of d
    const block = values.subarray(i - (i % 32), i - (i % 32) + 32);
    const step = Math.max(...block.map(Math.abs)) / 127;
    assert.ok(Math.abs(back[i] - values[i]) <= step * 0.5 + 1e-3, `element ${i}: ${back[i]} vs ${values[i]}`);
  }
});

test("decodeToF32() rejects a buffer shorter than its element count", () => {
  assert.throws(() => decodeToF32(new Uint8Array(6), "f32", 2), /Need 8 bytes for 2 f32 values, got 6/);
  assert.throws(() => byteSize("q8_0", 33), /multiple of 32 elements, got 33/);
});

test("f32ArrayToF16Bits() and f16BitsToF32Array() agree with f32ToF16() and f16ToF32() on every half and on random f32 bits", () => {
  const halves = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const widened = f16BitsToF32Array(halves);
  for (let h = 0; h < 65536; h++) {
    const want = f16ToF32(h);
    assert.ok(Object.is(widened[h], want) || (Number.isNaN(want) && Number.isNaN(widened[h])), `half 0x${h.toString(16)}: ${widened[h]} vs ${want}`);
  }
  // Every half but NaN survives f16 → f32 → f16 bit for bit (NaN payloads become the quiet NaN).
  const back = f32ArrayToF16Bits(widened);
  for (let h = 0; h < 65536; h++) if (!Number.isNaN(widened[h])) assert.equal(back[h], h, `half 0x${h.toString(16)}`);
  // Random f32 bit patterns cover rounding ties, overflow to infinity, subnormal halves and NaN.
  let seed = 12345;
  const bits = Uint32Array.from({ length: 200_000 }, () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0));
  // Values near half's range too (exponents 100..150), where the fast path's rounding carries.
  for (let i = 0; i < bits.length; i += 2) bits[i] = (bits[i] & 0x807fffff) | ((100 + (bits[i] % 51)) << 23);
  const values = new Float32Array(bits.buffer);
  const packed = f32ArrayToF16Bits(values);
  for (let i = 0; i < values.length; i++) assert.equal(packed[i], f32ToF16(values[i]), `f32 0x${bits[i].toString(16)}`);
});

test("denseBlockQuantStorage() keeps block formats as f16 (bf16 for mxfp4 past f16's range) and passes others through", () => {
  const values = Float32Array.from({ length: 256 }, (_, i) => Math.sin(i) * 0.7);
  const q4k = encodeFromF32(values, "q4_k");
  const dense = denseBlockQuantStorage(q4k, "q4_k", 256);
  assert.equal(dense.dtype, "f16");
  const exact = decodeToF32(q4k, "q4_k", 256);
  const stored = decodeToF32(dense.raw, "f16", 256);
  for (let i = 0; i < 256; i++) assert.equal(stored[i], f16ToF32(f32ToF16(exact[i])), `value ${i}`);
  // mxfp4: an e8m0 scale byte of 200 (2^72) leaves f16's range, so the weight is kept as bf16.
  const mx = encodeFromF32(values.subarray(0, 32), "mxfp4");
  mx[0] = 200;
  assert.equal(denseBlockQuantStorage(mx, "mxfp4", 32).dtype, "bf16");
  for (const dtype of ["f32", "f16", "bf16", "q8_0"] as const) {
    const raw = encodeFromF32(values.subarray(0, 32), dtype);
    const same = denseBlockQuantStorage(raw, dtype, 32);
    assert.equal(same.dtype, dtype);
    assert.equal(same.raw, raw);
  }
});
