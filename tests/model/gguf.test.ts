/** GGUF writer → reader round trips and the reader's errors on bad files. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { blockValues, byteSize, decodeToF32 } from "../../src/backend/dtype-codec.ts";
import { WEIGHT_DTYPES, type WeightDType } from "../../src/backend/types.ts";
import { readGgufHeader, readGgufTensor } from "../../src/model/gguf-reader.ts";
import { GGML_TYPES, ggmlTypeOf, GgufType } from "../../src/model/gguf-types.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import { loadModel } from "../../src/model/load.ts";
import { openRandomAccess, writeFile } from "../../src/runtime/fs.ts";
import { test } from "../harness.ts";
import { expectLoadError, ggufBytes, randomHfWeights, type ModelFileSpec } from "./model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/gguf-test-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** Byte offset of the ggml type field of tensor `name` (GGUF tensor info: name, n_dims, ne[], type). */
function typeFieldOffset(bytes: Uint8Array, name: string, dims: number): number {
  const needle = new TextEncoder().encode(name);
  for (let i = 0; i + needle.length <= bytes.length; i++) {
    if (needle.every((b, j) => bytes[i + j] === b) && new DataView(bytes.buffer).getUint32(i + needle.length, true) === dims) {
      return i + needle.length + 4 + 8 * dims;
    }
  }
  throw new Error(`tensor ${name} not found`);
}

async function roundTrip(bytes: Uint8Array, name: string) {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, bytes);
  const file = await openRandomAccess(path);
  return { file, header: await readGgufHeader(file), path };
}

/** `loadModel(path)` rejects with a one-line ModelLoadError matching `pattern`. */
function expectPathError(path: string, pattern: RegExp): Promise<void> {
  return expectLoadError(loadModel(path), pattern);
}

const SPEC: ModelFileSpec = {
  architecture: "llama", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300,
  tied: true, dtype: "f32", seed: 7,
};

test("encodeGguf() and readGgufHeader() round-trip every metadata value type", async () => {
  const meta = [
    ["u8", { type: GgufType.UINT8, value: 250 }],
    ["i8", { type: GgufType.INT8, value: -7 }],
    ["u16", { type: GgufType.UINT16, value: 65000 }],
    ["i16", { type: GgufType.INT16, value: -30000 }],
    ["u32", gguf.u32(4000000000)],
    ["i32", gguf.i32(-2000000000)],
    ["f32", gguf.f32(0.5)],
    ["bool", gguf.bool(true)],
    ["str", gguf.str("héllo ▁ world")],
    ["u64", gguf.u64(2n ** 60n)],
    ["i64", { type: GgufType.INT64, value: -5 }],
    ["f64", gguf.f64(Math.PI)],
    ["arr.str", gguf.arr(GgufType.STRING, ["a", "", "<0x0A>"])],
    ["arr.f32", gguf.arr(GgufType.FLOAT32, [1.5, -2])],
    ["arr.empty", gguf.arr(GgufType.INT32, [])],
  ] as const;
  const { file, header } = await roundTrip(encodeGguf({ metadata: meta.map(([k, e]) => [k, e]), tensors: [] }), "meta");
  await file.close();
  assert.equal(header.version, 3);
  assert.equal(header.alignment, 32);
  for (const [key, entry] of meta) assert.deepEqual(header.metadata.get(key), entry, key);
});

/** The weight dtypes a GGUF file holds. */
const GGUF_DTYPES = WEIGHT_DTYPES.filter((d) => d !== "f8_e4m3");

test("GGML_TYPES agrees with the codec on the block size and bytes of every type we load", () => {
  for (const [id, t] of GGML_TYPES) {
    if (t.dtype === undefined) continue;
    assert.deepEqual([t.blockSize, t.blockBytes], [blockValues(t.dtype), byteSize(t.dtype, blockValues(t.dtype))], t.name);
    assert.equal(ggmlTypeOf(t.dtype), id, t.name);
  }
  // Every weight dtype but f8_e4m3 (an FP8 checkpoint's blocks, which no GGUF type holds).
  assert.deepEqual(new Set([...GGML_TYPES.values()].flatMap((t) => (t.dtype ? [t.dtype] : []))), new Set(GGUF_DTYPES));
  assert.throws(() => ggmlTypeOf("f8_e4m3"), /No ggml type stores dtype "f8_e4m3"/);
});


// Largest |decoded - written| per dtype for values in [-3, 3]: half a code step (a 4-bit step is a block's range / 15),
// a whole step for q4_0 / q5_0, whose scale is set by the largest value of one sign and clips the other side;
// mxfp4 half its widest step (2 to 3 where amax is in [2, 4)), or clips amax in [1, 2) to 1.5;
// q2_k half its step of up to 6 / 3 (measured 0.998: its 4-bit scales and mins add a little), q3_k
// a whole step of up to 3 / 4 (the other sign clipped at code 3) plus its 6-bit scale's rounding;
// iq4_nl the other sign clipped at code 113 of 127 (0.33 of 3), iq4_xs that with a sub-block scale of
// the super-block's other sign clipped at 31 of 32 (3 − 113 · 3/127 · 31/32 = 0.414).
// The lattice i-quants snap 8 (iq3: 4) values at once to one of 256–1024 grid entries, which may
// give up one value of a group for the rest: their bound is on the root-mean-square error relative
// to the values' instead (ROUND_TRIP_RMS; measured 0.33 iq2_xxs, 0.30 iq2_xs, 0.24 iq2_s, 0.23
// iq3_xxs, 0.13 iq3_s; iq1_s and iq1_m, three levels under one scale per 32 or 16, 0.42).
const ROUND_TRIP_TOL: Partial<Record<WeightDType, number>> = {
  f32: 0, f16: 2e-3, bf16: 2e-2, q8_0: 3 / 127, q4_0: 0.38, q4_1: 0.21, q5_0: 0.19, q5_1: 0.11, q4_k: 0.21, q5_k: 0.11, q6_k: 0.06,
  mxfp4: 0.5, q2_k: 1.05, q3_k: 0.85, iq4_nl: 0.34, iq4_xs: 0.42,
};
const ROUND_TRIP_RMS: Partial<Record<WeightDType, number>> = { iq2_xxs: 0.35, iq2_xs: 0.32, iq2_s: 0.26, iq3_xxs: 0.25, iq3_s: 0.15, iq1_s: 0.45, iq1_m: 0.45 };

for (const dtype of GGUF_DTYPES) {
  test(`readGgufTensor() returns what encodeGguf() wrote for ${dtype}, shape outermost first`, async () => {
    const values = Float32Array.from({ length: 3 * 256 }, (_, i) => Math.sin(i) * 3);
    const t = hostTensorFromF32("w", [3, 256], values, dtype);
    const odd = hostTensorFromF32("v", [5], Float32Array.from([1, 2, 3, 4, 5]), "f32");
    const { file, header } = await roundTrip(encodeGguf({ metadata: [], tensors: [odd, t], alignment: 64 }), `t-${dtype}`);
    try {
      assert.equal(header.alignment, 64);
      const info = header.tensors.find((x) => x.name === "w")!;
      assert.deepEqual(info.shape, [3, 256]);
      assert.equal(info.offset % 64, 0);
      const back = await readGgufTensor(file, info);
      assert.equal(back.dtype, dtype);
      assert.deepEqual(back.data, t.data);
      const decoded = decodeToF32(back.data, dtype, values.length);
      const tol = ROUND_TRIP_TOL[dtype];
      if (tol !== undefined) decoded.forEach((v, i) => assert.ok(Math.abs(v - values[i]) <= tol, `${dtype}[${i}] ${v} vs ${values[i]}`));
      else {
        const err = Math.sqrt(decoded.reduce((a, v, i) => a + (v - values[i]) ** 2, 0) / values.reduce((a, v) => a + v * v, 0));
        assert.ok(err <= ROUND_TRIP_RMS[dtype]!, `${dtype}: relative RMS error ${err}`);
      }
      assert.deepEqual(Array.from(decodeToF32((await readGgufTensor(file, header.tensors[0])).data, "f32", 5)), [1, 2, 3, 4, 5]);
    } finally {
      await file.close();
    }
  });
}

test("loadModel() reports a missing file with its path", async () => {
  await expectPathError(`${dir}/nope.gguf`, /^Model file not found: ".*nope\.gguf"$/);
});

test("loadModel() rejects a GGUF cut short, naming the truncation", async () => {
  const full = ggufBytes(SPEC, randomHfWeights(SPEC));
  await writeFile(`${dir}/cut-data.gguf`, full.subarray(0, full.byteLength - 100));
  await expectPathError(`${dir}/cut-data.gguf`, /is truncated: tensor ".*" ends at byte \d+ but the file has \d+/);
  await writeFile(`${dir}/cut-header.gguf`, full.subarray(0, 2000));
  await expectPathError(`${dir}/cut-header.gguf`, /is truncated/);
  await writeFile(`${dir}/tiny.gguf`, full.subarray(0, 10));
  await expectPathError(`${dir}/tiny.gguf`, /is truncated: only 10 bytes/);
});

test("loadModel() rejects bad magic bytes and absurd counts", async () => {
  const full = ggufBytes(SPEC, randomHfWeights(SPEC));
  const bad = full.slice();
  bad.set([0x47, 0x47, 0x4d, 0x4c], 0);
  await writeFile(`${dir}/magic.gguf`, bad);
  await expectPathError(`${dir}/magic.gguf`, /is not a GGUF file: bad magic bytes 47 47 4d 4c/);
  const absurd = full.slice();
  new DataView(absurd.buffer).setBigUint64(16, 2n ** 40n, true); // metadata count
  await writeFile(`${dir}/absurd.gguf`, absurd);
  await expectPathError(`${dir}/absurd.gguf`, /is corrupt: metadata count 1099511627776 is larger than the file allows/);
  const version = full.slice();
  new DataView(version.buffer).setUint32(4, 1, true);
  await writeFile(`${dir}/v1.gguf`, version);
  await expectPathError(`${dir}/v1.gguf`, /has version 1; only versions 2 and 3 are supported/);
});

test("loadModel() names the tensor and type it cannot load", async () => {
  const bytes = ggufBytes(SPEC, randomHfWeights(SPEC));
  const at = typeFieldOffset(bytes, "blk.0.attn_q.weight", 2);
  const view = new DataView(bytes.buffer);
  assert.equal(view.getUint32(at, true), 0);
  view.setUint32(at, 9, true); // Q8_1 (llama.cpp's activation format): smaller than F32, so the data still lies inside the file
  await writeFile(`${dir}/q81.gguf`, bytes);
  await expectPathError(`${dir}/q81.gguf`, /Tensor "blk\.0\.attn_q\.weight" in ".*" has type Q8_1; supported types are F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, BF16, MXFP4/);
  view.setUint32(at, 99, true);
  await writeFile(`${dir}/t99.gguf`, bytes);
  await expectPathError(`${dir}/t99.gguf`, /tensor "blk\.0\.attn_q\.weight" has unknown ggml type 99/);
});

test("loadModel() rejects an unknown architecture by name", async () => {
  const w = hostTensorFromF32("token_embd.weight", [4, 32], new Float32Array(128), "f32");
  await writeFile(`${dir}/arch.gguf`, encodeGguf({ metadata: [["general.architecture", gguf.str("mamba")]], tensors: [w] }));
  await expectPathError(`${dir}/arch.gguf`, /Unknown architecture "mamba" in ".*"; supported: llama, qwen2, qwen3/);
});
