/**
 * Backend edges settled across backends (the shared cases are in conformance-cases-edges.ts): the
 * reference's argmax and sampler on NaN and -inf rows, f16 KV rounding past 65504 as ggml's, the
 * host-side index checks (one function every backend calls), rope's theta, WebGPU's host copies of
 * uploaded indices, and the weight chunk planner's 2³² element cap.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { envVar } from "../../src/runtime/env.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { AttentionIndexChecks, checkAttentionIndices } from "../../src/backend/shape-checks.ts";
import { BackendShapeError, type SamplingRow, type Tensor } from "../../src/backend/types.ts";
import { chunkRows, deviceBytes, gridPrefix, MAX_CHUNK_ELEMENTS, packWeight } from "../../src/backend/webgpu/weight-layout.ts";
import { byteSize } from "../../src/backend/dtype-codec.ts";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";

const skipGpu = envVar("EVOLVING_ALLOW_NO_WEBGPU") === "1";
const be = createReferenceBackend();
const f32 = (values: number[], shape = [values.length]) => be.upload(new Float32Array(values), shape);
const i32 = (values: number[], shape = [values.length]) => be.upload(new Int32Array(values), shape);
const read = async (t: Tensor) => Array.from(await be.download(t));
const row = (temperature: number): SamplingRow => ({ temperature, topK: 0, topP: 1, uniform: 0.5 });

test("argmax() never picks NaN, wherever it sits (a first-column NaN used to win on the reference)", async () => {
  const x = f32([NaN, 1, 3, 2, /**/ 1, NaN, 3, NaN, /**/ NaN, NaN, NaN, NaN, /**/ NaN, -Infinity, -Infinity, NaN], [4, 4]);
  assert.deepEqual(await read(be.argmax(x)), [2, 2, 0, 1]);
});

test("sample() ignores NaN logits and gives the argmax of a row without a finite largest logit", async () => {
  const x = f32([NaN, 5, NaN, 5, /**/ -Infinity, -Infinity, -Infinity, -Infinity, /**/ 0, Infinity, 1, Infinity, /**/ NaN, NaN, NaN, NaN], [4, 4]);
  for (const t of [1, 0.3, 0]) {
    // Row 0: tokens 1 and 3 share the mass; uniform 0.5 lands on token 3 (cumulative 0.5 is not > 0.5).
    assert.deepEqual(await read(be.sample(x, [row(t), row(t), row(t), row(t)])), [t === 0 ? 1 : 3, 0, 1, 0], `temperature ${t}`);
  }
});

test("kvWrite() into an f16 cache rounds as ggml: 65519 to 65504, from 65520 on to inf, NaN stays NaN", async () => {
  const values = [65504, 65519, 65520, -65520, 1e6, -Infinity, NaN, 65519.99];
  const n = values.length;
  const kc = be.zeros([n, 1, 1, 1], "f16");
  const k = f32(values, [n, 1, 1]);
  be.kvWrite(k, k, kc, kc, i32(values.map((_, i) => i)));
  assert.deepEqual(await read(kc), [65504, 65504, Infinity, -Infinity, Infinity, -Infinity, NaN, 65504]);
});

test("kvWrite() refuses an out-of-range slot before writing any row", async () => {
  const kc = be.zeros([2, 2, 1, 2], "f32");
  const vc = be.zeros([2, 2, 1, 2], "f32");
  const k = f32([1, 2, 3, 4], [2, 1, 2]);
  assert.throws(() => be.kvWrite(k, k, kc, vc, i32([0, 4])), (e: unknown) => e instanceof RangeError && /KV slot 4 at position 1 is outside 0\.\.3/.test(e.message));
  assert.deepEqual(await read(kc), [0, 0, 0, 0, 0, 0, 0, 0]);
});

test("checkAttentionIndices() checks the blocks rows read, in any row order, skipping those before a window", () => {
  const g = { numSeqs: 2, maxBlocks: 4, blockSize: 2, numBlocks: 5, maxContext: 8, window: 0 };
  const tables = Int32Array.of(0, 1, 2, -1, /**/ 3, 4, -9, -9);
  // Rows out of order; sequence 0 reads blocks 0..2 (position 5), sequence 1 blocks 0..1.
  checkAttentionIndices(Int32Array.of(1, 0, 0, 1), Int32Array.of(3, 5, 0, 2), tables, g);
  assert.throws(() => checkAttentionIndices(Int32Array.of(0), Int32Array.of(6), tables, g), /Block -1 of sequence 0 is outside 0\.\.4/);
  assert.throws(() => checkAttentionIndices(Int32Array.of(1, 1), Int32Array.of(0, 4), tables, g), /Block -9 of sequence 1/);
  // A window of 2 at position 7 reads positions 6..7 only: block 3, which is bad; at 5, block 2 only.
  const stale = Int32Array.of(-3, -3, 2, 1, /**/ 0, 0, 0, 0);
  checkAttentionIndices(Int32Array.of(0), Int32Array.of(5), stale, { ...g, window: 2 });
  assert.throws(() => checkAttentionIndices(Int32Array.of(0), Int32Array.of(5), stale, g), /Block -3 of sequence 0/);
  assert.throws(() => checkAttentionIndices(Int32Array.of(2), Int32Array.of(0), tables, g), /tokenSeq 2 at row 0 is outside 0\.\.1/);
  assert.throws(() => checkAttentionIndices(Int32Array.of(0), Int32Array.of(8), tables, g), /tokenPos 8 at row 0 exceeds/);
});

test("rope() refuses a theta that is not finite and positive, naming it", () => {
  const x = f32([1, 2, 3, 4], [1, 1, 4]);
  for (const theta of [0, -1, NaN, Infinity, -Infinity]) {
    assert.throws(() => be.rope(x, i32([3]), theta, "normal"), (e: unknown) => e instanceof BackendShapeError && e.message.includes(`got ${theta}`), `theta ${theta}`);
  }
  assert.throws(() => be.rope(x, i32([3]), 1e4, "normal", 4, f32([1, 2, 3])), /freqFactors \[3\] should hold rotaryDim\/2 = 2 values/);
});

test("chunkRows() keeps every chunk under 2^32 elements on a device that binds 4 GiB or more", () => {
  const GiB = 2 ** 30;
  // q4_0 rows of 8192 values take 5120 device bytes: 4 GiB holds 838860 of them, 6.9e9 elements.
  for (const [dtype, cols, maxBinding] of [["q4_0", 8192, 4 * GiB], ["q4_k", 4096, 8 * GiB], ["f16", 3, 2 ** 40], ["q8_0", 2 ** 20, 4 * GiB]] as const) {
    const rowBytes = deviceBytes(dtype, cols);
    const rows = chunkRows(2 ** 45, cols, rowBytes, maxBinding);
    assert.ok(rows * cols <= MAX_CHUNK_ELEMENTS, `${dtype}×${cols}: ${rows} rows hold ${rows * cols} elements`);
    assert.ok(rows * rowBytes <= maxBinding);
    assert.ok((rows + 1) * cols > MAX_CHUNK_ELEMENTS || (rows + 1) * rowBytes > maxBinding, "as many rows as fit");
  }
  // Under 4 GiB the byte limit decides, as before; a tensor smaller than a chunk is one chunk.
  assert.equal(chunkRows(100, 64, 256, 1024), 4);
  assert.equal(chunkRows(3, 64, 256, 2 * GiB), 3);
  assert.throws(() => chunkRows(1, 1024, 4096, 1024), /row of 4096 bytes exceeds the device's binding limit of 1024/);
});

test("packWeight() splits by chunkRows()", () => {
  const raw = new Uint8Array(10 * 8 * 4);
  const chunks = packWeight(raw, 10, 8, "f32", 100);
  assert.deepEqual(chunks.map((c) => [c.rowStart, c.rows, c.bytes.byteLength]), [[0, 3, 96], [3, 3, 96], [6, 3, 96], [9, 1, 32]]);
});

test("packWeight() starts every chunk of a lattice i-quant with its grid, and names the grid when a row and it do not fit", () => {
  // iq3_xxs: a 1 KiB grid, 100 device bytes per 256 values: rows of 512 take 200.
  const raw = new Uint8Array(byteSize("iq3_xxs", 10 * 512));
  for (let i = 0; i < raw.length; i++) raw[i] = (i * 37) & 255;
  const chunks = packWeight(raw, 10, 512, "iq3_xxs", 1024 + 3 * 200);
  assert.deepEqual(chunks.map((c) => [c.rowStart, c.rows, c.bytes.byteLength]), [[0, 3, 1624], [3, 3, 1624], [6, 3, 1624], [9, 1, 1224]]);
  for (const c of chunks) assert.deepEqual(c.bytes.subarray(0, 1024), gridPrefix("iq3_xxs"));
  // The first block of the second chunk: row 3's d (2 bytes), 2 bytes of padding, then its 96 bytes.
  const at = 3 * byteSize("iq3_xxs", 512);
  assert.deepEqual([...chunks[1].bytes.subarray(1024, 1028)], [raw[at], raw[at + 1], 0, 0]);
  assert.deepEqual(chunks[1].bytes.subarray(1028, 1124), raw.subarray(at + 2, at + 98));
  assert.throws(() => packWeight(raw, 10, 512, "iq3_xxs", 1024 + 199), /A iq3_xxs weight row of 200 bytes and the format's 1024-byte grid exceed the device's binding limit of 1223 bytes/);
});

test("WebGPU refuses out-of-range KV slots and attention indices with the reference's errors, from its host copies", async () => {
  const gpu = await createWebGpuBackend();
  try {
    const ids = new Int32Array([0, 4]);
    const slots = gpu.upload(ids, [2]);
    ids[1] = 1; // the host copy is the uploaded values, not the caller's array
    const kc = gpu.zeros([2, 2, 1, 2], "f32");
    const k = gpu.upload(new Float32Array([1, 2, 3, 4]), [2, 1, 2]);
    assert.throws(() => gpu.kvWrite(k, k, kc, kc, slots), /KV slot 4 at position 1 is outside 0\.\.3/);
    assert.deepEqual([...(await gpu.download(kc))], [0, 0, 0, 0, 0, 0, 0, 0]);
    // A reshaped view keeps the copy.
    assert.throws(() => gpu.kvWrite(k, k, kc, kc, gpu.reshape(slots, [2])), /KV slot 4/);
    const batch = { tokenSeq: gpu.upload(Int32Array.of(0), [1]), tokenPos: gpu.upload(Int32Array.of(1), [1]), blockTables: gpu.upload(Int32Array.of(2), [1, 1]), maxContext: 2 };
    const q = gpu.upload(new Float32Array(2), [1, 1, 2]);
    assert.throws(() => gpu.pagedAttention(q, kc, kc, batch, 1), /Block 2 of sequence 0 is outside 0\.\.1/);
  } finally {
    gpu.destroy();
  }
}, { ignore: skipGpu });

test("AttentionIndexChecks.check() checks a batch once across layers and again for new arrays or geometry", () => {
  const checks = new AttentionIndexChecks();
  const g = { numSeqs: 1, maxBlocks: 2, blockSize: 4, numBlocks: 4, maxContext: 8, window: 0 };
  const seqs = new Int32Array([0]), poss = new Int32Array([5]), tables = new Int32Array([1, 2]);
  checks.check(seqs, poss, tables, g);
  checks.check(seqs, poss, tables, g); // the next layer: nothing to redo
  // The same arrays against a smaller cache are checked again, and refused.
  assert.throws(() => checks.check(seqs, poss, tables, { ...g, numBlocks: 2 }), /Block 2 of sequence 0 is outside 0..1/);
  // New arrays are checked even where equal geometry passed before.
  assert.throws(() => checks.check(seqs, poss, new Int32Array([1, 9]), g), /Block 9 of sequence 0 is outside 0..3/);
});
