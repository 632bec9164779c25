/**
 * The 1–3-bit i-quants' host codec (quant-blocks-iq.ts; GGUF types 16–19, 21, 22, 29):
 * block sizes as ggml-common.h's static_asserts; the grids' sizes and first/last (and a few chosen)
 * entries written out here from ggml-common.h; per format an all-zero block (grid entry 0, + signs,
 * the smallest scale) and one block with a chosen grid index, sign mask and scale, the values worked
 * out by hand from the layout and `dequantize_row_*` in ggml-quants.c; and seeded random blocks
 * whose decoded bytes' FNV-1a digest and a few values were taken from llama.cpp's own C
 * `dequantize_row_*` (compiled from the llama.cpp release node-llama-cpp bundles).
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { byteSize, decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { IQ1S_GRID } from "../../src/backend/iq1-grid.ts";
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS } from "../../src/backend/iq-grids.ts";
import { IQ_BLOCKS, type IqDType } from "../../src/backend/quant-blocks-iq.ts";
import { GGML_TYPES } from "../../src/model/gguf-types.ts";
import { setIqScale } from "../model/iq-blocks.ts";
import { Rng } from "./conformance-support.ts";

/** Entry `i` of a grid as ggml-common.h writes it: hex of the little-endian word. */
function entryHex(grid: Uint8Array | Int8Array, bytes: number, i: number): string {
  let s = "";
  for (let b = bytes - 1; b >= 0; b--) s += (grid[i * bytes + b] & 0xff).toString(16).padStart(2, "0");
  return "0x" + s;
}

/** A zero block of `dtype` with scale `d`, its DataView, and the decode of it. */
function zeroBlock(dtype: IqDType, d = 1): { raw: Uint8Array; view: DataView; decode: () => Float32Array } {
  const raw = new Uint8Array(IQ_BLOCKS[dtype].bytes);
  setIqScale(raw, 0, dtype, d);
  return { raw, view: new DataView(raw.buffer), decode: () => decodeToF32(raw, dtype, 256) };
}

/** Asserts out[from…] equals `want` exactly. */
function expectAt(out: Float32Array, from: number, want: readonly number[], what: string): void {
  assert.deepEqual(Array.from(out.subarray(from, from + want.length)), want.map(Math.fround), what);
}

test("i-quant super-blocks are 256 values in ggml-common.h's sizes, as GGUF's type table says", () => {
  const want: Record<IqDType, [number, number]> = {
    iq2_xxs: [16, 66], iq2_xs: [17, 74], iq3_xxs: [18, 98], iq1_s: [19, 50], iq3_s: [21, 110], iq2_s: [22, 82], iq1_m: [29, 56],
  };
  for (const [dtype, [id, bytes]] of Object.entries(want) as [IqDType, [number, number]][]) {
    assert.deepEqual(IQ_BLOCKS[dtype], { values: 256, bytes }, dtype);
    // Every one is a weight dtype, kept as stored.
    assert.equal(GGML_TYPES.get(id)?.dtype, dtype);
    assert.equal(GGML_TYPES.get(id)?.blockBytes, bytes);
    assert.equal(byteSize(dtype, 512), 2 * bytes);
  }
  assert.throws(() => byteSize("iq2_xxs", 128), /iq2_xxs tensor needs a multiple of 256 elements, got 128/);
  assert.throws(() => decodeToF32(new Uint8Array(65), "iq2_xxs", 256), /Need 66 bytes for 256 iq2_xxs values, got 65/);
});

test("the i-quant grids have ggml-common.h's sizes and entries", () => {
  const cases: [string, Uint8Array | Int8Array, number, number, Record<number, string>][] = [
    ["iq2xxs_grid", IQ2XXS_GRID, 8, 256, { 0: "0x0808080808080808", 1: "0x080808080808082b", 255: "0x2b2b2b1908081908" }],
    ["iq2xs_grid", IQ2XS_GRID, 8, 512, { 0: "0x0808080808080808", 511: "0x2b2b2b2b2b2b2b2b" }],
    ["iq2s_grid", IQ2S_GRID, 8, 1024, { 0: "0x0808080808080808", 773: "0x192b08082b190808", 1023: "0x2b2b2b2b2b2b2b2b" }],
    ["iq3xxs_grid", IQ3XXS_GRID, 4, 256, { 0: "0x04040404", 7: "0x04041414", 200: "0x2c043e04", 255: "0x3e341c04" }],
    ["iq3s_grid", IQ3S_GRID, 4, 512, { 0: "0x01010101", 300: "0x07030503", 511: "0x0f0f0101" }],
    ["iq1s_grid", IQ1S_GRID, 8, 2048, { 0: "0xffffffffffffffff", 768: "0x00ff0001ff0100ff", 1234: "0x0001ff00ff01ff01", 2047: "0x0101010101010101" }],
  ];
  for (const [name, grid, bytes, n, entries] of cases) {
    assert.equal(grid.length, n * bytes, `${name} size`);
    for (const [i, hex] of Object.entries(entries)) assert.equal(entryHex(grid, bytes, Number(i)), hex, `${name}[${i}]`);
  }
  assert.ok(IQ1S_GRID.every((v) => v === -1 || v === 0 || v === 1));
  assert.deepEqual(KMASK_IQ2XS, [1, 2, 4, 8, 16, 32, 64, 128]);
});

test("ksigns_iq2xs keeps the 7 stored sign bits and sets the 8th to make the minus signs even", () => {
  assert.equal(KSIGNS_IQ2XS.length, 128);
  assert.deepEqual(KSIGNS_IQ2XS.slice(0, 8), [0, 129, 130, 3, 132, 5, 6, 135]);
  KSIGNS_IQ2XS.forEach((s, i) => {
    assert.equal(s & 127, i);
    assert.equal(s.toString(2).split("1").length % 2, 1, `ksigns[${i}] = ${s} has an even count of bits`);
  });
});

test("iq2_xxs: zero block is grid 0 (eights) times d·0.5·0.25; a chosen block applies index bytes, 7-bit sign fields with parity, 4-bit scale", () => {
  const z = zeroBlock("iq2_xxs", 0.5);
  assert.ok(z.decode().every((v) => v === 8 * 0.5 * 0.5 * 0.25));
  // Sub-block 0: index bytes 0, 1, 255, 0; sign fields 1 (→ 129: bits 0 and 7), 3 (bits 0, 1); scale 15.
  z.raw.set([0, 1, 255, 0], 2);
  z.view.setUint32(6, (15 << 28) | (3 << 7) | 1, true);
  const out = z.decode();
  const db = 0.5 * 15.5 * 0.25;
  expectAt(out, 0, [-8, 8, 8, 8, 8, 8, 8, -8].map((v) => v * db), "group 0");
  expectAt(out, 8, [-43, -8, 8, 8, 8, 8, 8, 8].map((v) => v * db), "group 1: grid 1 = 0x…082b");
  expectAt(out, 16, [8, 25, 8, 8, 25, 43, 43, 43].map((v) => v * db), "group 2: grid 255 = 0x2b2b2b1908081908");
  expectAt(out, 32, [0.5, 0.5], "sub-block 1 untouched");
});

test("iq2_xs: a u16 per 8 values holds a 9-bit index and 7 sign bits; each nibble of scales[ib] scales 16 values", () => {
  const z = zeroBlock("iq2_xs");
  assert.ok(z.decode().every((v) => v === 1));
  z.view.setUint16(2 + 2 * 7, 511 | (1 << 9), true); // sub-block 1, group 3: grid 511 (all 0x2b), sign field 1 → bits 0, 7
  z.raw[66 + 1] = 0x52; // sub-block 1: groups 0-1 scale 2, groups 2-3 scale 5
  const out = z.decode();
  expectAt(out, 32, Array(16).fill(8 * 2.5 * 0.25), "groups 0-1");
  expectAt(out, 48, Array(8).fill(8 * 5.5 * 0.25), "group 2");
  expectAt(out, 56, [-43, 43, 43, 43, 43, 43, 43, -43].map((v) => v * 5.5 * 0.25), "group 3");
});

test("iq2_s: a qs byte plus 2 qh bits index the grid; the signs are explicit bytes after the indices", () => {
  const z = zeroBlock("iq2_s");
  assert.ok(z.decode().every((v) => v === 1));
  z.raw[2 + 4 * 2 + 1] = 0x05; // sub-block 2, group 1: low index bits
  z.raw[66 + 2] = 0x0c; // qh bits 2-3: group 1's high index bits → index 0x305 = 773
  z.raw[34 + 4 * 2 + 1] = 0xf0; // its signs: values 4-7 negative
  z.raw[74 + 2] = 0x03; // groups 0-1 scale 3, groups 2-3 scale 0
  const out = z.decode();
  expectAt(out, 64, Array(8).fill(8 * 3.5 * 0.25), "group 0");
  expectAt(out, 72, [8, 8, 25, 43, -8, -8, -43, -25].map((v) => v * 3.5 * 0.25), "group 1: grid 773 = 0x192b08082b190808");
  expectAt(out, 80, Array(16).fill(1), "groups 2-3");
});

test("iq3_xxs: two 4-value grid entries per 8 values; after the 64 index bytes a u32 per 32 of sign fields and a scale", () => {
  const z = zeroBlock("iq3_xxs");
  assert.ok(z.decode().every((v) => v === 1)); // grid 0 = fours, d·0.5·0.5
  z.raw[2 + 4] = 7; // group 2's first half: 0x04041414
  z.raw[2 + 5] = 200; // its second half: 0x2c043e04
  z.view.setUint32(66, (3 << 28) | (5 << 14), true); // scale 3; group 2's sign field 5 → values 0 and 2 negative
  const out = z.decode();
  const db = 3.5 * 0.5;
  expectAt(out, 0, Array(16).fill(4 * db), "groups 0-1");
  expectAt(out, 16, [-20, 20, -4, 4, 4, 62, 4, 44].map((v) => v * db), "group 2");
  expectAt(out, 32, [1], "sub-block 1");
});

test("iq3_s: a qh bit per 4 values lifts the index past 255; explicit sign bytes; odd 4-bit scales per 32", () => {
  const z = zeroBlock("iq3_s");
  assert.ok(z.decode().every((v) => v === 1)); // grid 0 = ones, d·(1 + 0)
  z.raw[2 + 8 * 3 + 5] = 44; // sub-block 3, group 2, second half: 44 …
  z.raw[66 + 3] = 1 << 5; // … + 256 from qh bit 2·2 + 1 → grid 300 = 0x07030503
  z.raw[74 + 4 * 3 + 2] = 0x81; // its signs: values 0 and 7 negative
  z.raw[106 + 1] = 0x20; // sub-blocks 2 (low nibble) and 3 (high): scales 1 + 2·0 and 1 + 2·2
  const out = z.decode();
  expectAt(out, 64, Array(32).fill(1), "sub-block 2");
  expectAt(out, 96, Array(16).fill(5), "sub-block 3, groups 0-1");
  expectAt(out, 112, [-1, 1, 1, 1, 3, 5, 3, -7].map((v) => v * 5), "sub-block 3, group 2");
});

test("iq1_s: a u16 per 32 values holds 3 high index bits per 8, a 3-bit odd scale and the sign of the ±0.125 delta", () => {
  const z = zeroBlock("iq1_s");
  assert.ok(z.decode().every((v) => v === -0.875)); // grid 0 = all −1, plus 0.125
  z.view.setUint16(34 + 2 * 5, (5 << 12) | 0x8000 | (3 << 3), true); // sub-block 5: scale 11, delta −0.125, group 1 → grid 768
  const out = z.decode();
  expectAt(out, 160, Array(8).fill(11 * -1.125), "group 0");
  expectAt(out, 168, [-1, 0, 1, -1, 1, 0, -1, 0].map((v) => 11 * (v - 0.125)), "group 1: grid 768 = 0x00ff0001ff0100ff");
  expectAt(out, 192, [-0.875], "sub-block 6");
});

test("iq1_m: the f16 d in the scales' top nibbles, 3-bit scales per 16 values, a delta sign per 8 in qh", () => {
  const z = zeroBlock("iq1_m");
  assert.equal(new DataView(z.raw.buffer).getUint16(48 + 6, true) >> 12, 0x3, "d = 1.0 = 0x3c00: nibble 3 in scales[3]");
  assert.ok(z.decode().every((v) => v === -0.875));
  z.view.setUint16(48, (2 << 6) | (7 << 9), true); // sub-block 1: first 16 values scale 5, last 16 scale 15
  z.raw[32 + 2] = 0xb0; // sub-block 1, group 1: index bits 0x300 → grid 768; bit 7 → delta −0.125
  const out = z.decode();
  expectAt(out, 0, Array(32).fill(-0.875), "sub-block 0");
  expectAt(out, 32, Array(8).fill(5 * -0.875), "group 0");
  expectAt(out, 40, [-1, 0, 1, -1, 1, 0, -1, 0].map((v) => 5 * (v - 0.125)), "group 1");
  expectAt(out, 48, Array(16).fill(15 * -0.875), "groups 2-3");
  z.raw.set([0, 0], 48);
  setIqScale(z.raw, 0, "iq1_m", -0.25);
  assert.ok(z.decode().subarray(0, 32).every((v) => v === -0.25 * -0.875), "d = −0.25");
});

/** FNV-1a over bytes. */
function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}

// Four random blocks per format (Rng(160 + k) bytes, then d = ±0.01·(b + 1) set), decoded by llama.cpp's C.
const LLAMA_CPP: [IqDType, number, number[]][] = [
  ["iq2_xxs", 0xbbdc1744, [-0.2813100814819336, -0.23004913330078125, -1.4511909484863281, -0.440093994140625]],
  ["iq2_xs", 0x5a37fb5b, [0.806422233581543, 0.5913763046264648, 0.869964599609375, -0.920196533203125]],
  ["iq2_s", 0xb1766c02, [-0.46885013580322266, -0.2187967300415039, -0.16124343872070312, 0.920196533203125]],
  ["iq3_xxs", 0xeccd6ce8, [0.5501174926757812, 0.45009613037109375, 6.749725341796875, 0.840179443359375]],
  ["iq3_s", 0xda88aaa3, [-1.1902542114257812, 0.9502029418945312, 3.509857177734375, -0.360076904296875]],
  ["iq1_s", 0x2a765e72, [-0.02625560760498047, 0.013752937316894531, 0.23624038696289062, 0.025005340576171875]],
  ["iq1_m", 0x242b8a1a, [-0.05626201629638672, -0.01625347137451172, 0.4387321472167969, 0.055011749267578125]],
];

LLAMA_CPP.forEach(([dtype, digest, samples], k) => {
  test(`decodeToF32() reads random ${dtype} blocks bit for bit as llama.cpp's dequantize_row_${dtype}`, () => {
    const rng = new Rng(160 + k);
    const { bytes } = IQ_BLOCKS[dtype];
    const raw = new Uint8Array(4 * bytes);
    for (let i = 0; i < raw.length; i++) raw[i] = Math.floor(rng.next() * 256);
    for (let b = 0; b < 4; b++) setIqScale(raw, b * bytes, dtype, (b % 2 ? -1 : 1) * 0.01 * (b + 1));
    const out = decodeToF32(raw, dtype, 1024);
    assert.deepEqual([0, 100, 517, 1023].map((i) => out[i]), samples);
    assert.equal(fnv1a(new Uint8Array(out.buffer)), digest);
  });
});
