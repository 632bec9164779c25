/**
 * iq4_nl and iq4_xs (GGUF types 20 and 23: what llama.cpp's IQ4_NL and IQ4_XS files hold) on the
 * host: hand-built blocks decoded against llama.cpp's layout (ggml-common.h block_iq4_nl: f16 d,
 * qs[16]; block_iq4_xs: f16 d, u16 scales_h, scales_l[4], qs[128]) and its `dequantize_row_iq4_nl`
 * / `dequantize_row_iq4_xs`, with the codebook written out here from ggml-common.h's
 * `kvalues_iq4nl`, and the round-to-nearest encoders' codes checked to be the nearest.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { byteSize, decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { f16ToF32, f32ToF16 } from "../../src/backend/half-float.ts";
import { Rng } from "./conformance-support.ts";

const CODEBOOK = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/** An iq4_xs block: 8 six-bit `scales` (stored, offset by 32), `codes` (256, value order, 0…15), d. */
function xsBlock(scales: readonly number[], codes: readonly number[], d: number): Uint8Array {
  const out = new Uint8Array(136);
  const view = new DataView(out.buffer);
  view.setUint16(0, f32ToF16(d), true);
  let high = 0;
  for (let ib = 0; ib < 8; ib++) {
    out[4 + (ib >> 1)] |= (scales[ib] & 0xf) << (4 * (ib & 1));
    high |= (scales[ib] >> 4) << (2 * ib);
    // Sub-block ib's 16 bytes: value j in the low nibble of byte j, value j + 16 in its high nibble.
    for (let j = 0; j < 16; j++) out[8 + 16 * ib + j] = codes[32 * ib + j] | (codes[32 * ib + j + 16] << 4);
  }
  view.setUint16(2, high, true);
  return out;
}

test("iq4_nl and iq4_xs blocks are 32 values in 18 bytes and 256 in 136, as ggml's block_iq4_nl and block_iq4_xs", () => {
  assert.equal(byteSize("iq4_nl", 64), 36);
  assert.equal(byteSize("iq4_xs", 512), 272);
  assert.throws(() => byteSize("iq4_xs", 128), /iq4_xs tensor needs a multiple of 256 elements, got 128/);
  assert.throws(() => byteSize("iq4_nl", 48), /iq4_nl tensor needs a multiple of 32 elements, got 48/);
});

test("decodeToF32() reads iq4_nl blocks as d times the codebook entry of each nibble", () => {
  const rng = new Rng(20);
  const codes = Array.from({ length: 64 }, () => Math.floor(rng.next() * 16));
  const ds = [0.03125, -1.5];
  const raw = new Uint8Array(36);
  for (let b = 0; b < 2; b++) {
    new DataView(raw.buffer).setUint16(18 * b, f32ToF16(ds[b]), true);
    for (let j = 0; j < 16; j++) raw[18 * b + 2 + j] = codes[32 * b + j] | (codes[32 * b + j + 16] << 4);
  }
  const out = decodeToF32(raw, "iq4_nl", 64);
  for (let e = 0; e < 64; e++) assert.equal(out[e], Math.fround(ds[e >> 5] * CODEBOOK[codes[e]]), `value ${e}`);
});

test("decodeToF32() reads iq4_xs blocks with each sub-block's 6-bit scale split over scales_l and scales_h", () => {
  const rng = new Rng(23);
  const codes = Array.from({ length: 256 }, () => Math.floor(rng.next() * 16));
  // Every scale's high bits differ from its neighbours', so a misplaced scales_h pair shows.
  const scales = [0, 63, 17, 48, 33, 1, 62, 31];
  const d = 0.0078125;
  const out = decodeToF32(xsBlock(scales, codes, d), "iq4_xs", 256);
  for (let e = 0; e < 256; e++) {
    const dl = Math.fround(d * (scales[e >> 5] - 32));
    assert.equal(out[e], Math.fround(dl * CODEBOOK[codes[e]]), `value ${e} (sub-block ${e >> 5})`);
  }
});

for (const dtype of ["iq4_nl", "iq4_xs"] as const) {
  test(`encodeFromF32() to ${dtype} writes each value's nearest codebook entry under the block's decoded scale`, () => {
    const rng = new Rng(dtype === "iq4_nl" ? 5 : 6);
    const values = Float32Array.from({ length: 512 }, () => (rng.next() - 0.5) * 4 * (1 + rng.next()));
    const raw = encodeFromF32(values, dtype);
    const back = decodeToF32(raw, dtype, values.length);
    // The scale each value was coded under, from the block itself.
    const view = new DataView(raw.buffer, raw.byteOffset);
    for (let e = 0; e < values.length; e++) {
      let dl: number;
      if (dtype === "iq4_nl") dl = f16ToF32(view.getUint16(18 * (e >> 5), true));
      else {
        const b = 136 * (e >> 8);
        const ib = (e >> 5) & 7;
        const ls = ((raw[b + 4 + (ib >> 1)] >> (4 * (ib & 1))) & 0xf) | (((view.getUint16(b + 2, true) >> (2 * ib)) & 3) << 4);
        dl = Math.fround(f16ToF32(view.getUint16(b, true)) * (ls - 32));
      }
      const best = Math.min(...CODEBOOK.map((k) => Math.abs(Math.fround(dl * k) - values[e])));
      assert.ok(Math.abs(back[e] - values[e]) <= best + 1e-6, `${dtype}[${e}]: ${back[e]} for ${values[e]}, nearest is ${best} away`);
    }
    // The value of largest magnitude in a block sits at the codebook's −127 end (or near it for iq4_xs).
    const first = values.subarray(0, 32).reduce((m, v) => (Math.abs(v) > Math.abs(m) ? v : m), 0);
    assert.ok(Math.abs(back[values.subarray(0, 32).indexOf(first)] - first) <= Math.abs(first) / 16, `largest ${first}`);
  });
}
