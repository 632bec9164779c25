/**
 * CUDA kernels against the reference backend on an NVIDIA GPU (skipped without one): every
 * matmul path (GEMV, tensor core, SIMT) for every weight dtype, the row ops, rope, the fused ops,
 * embedding, sampling. Outputs are poisoned with NaN before each op.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import type { SamplingRow } from "../../src/backend/types.ts";
import type { CudaWeightDType } from "../../src/backend/cuda/tensor.ts";
import { createCudaBackend } from "../../src/backend/cuda/index.ts";
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { assertClose, both, bothWeight, cuda, poison, rand, ref } from "./cuda-helpers.ts";

const skip = { ignore: !cuda };
const DTYPES: CudaWeightDType[] = ["f32", "f16", "bf16", "q8_0"];

test("matmul() matches the reference on the gemv, tensor-core and simt paths for every weight dtype", async () => {
  // [n, K, N]: gemv (n ≤ 8, K % 8 == 0), gemv scalar (K % 8 != 0), tensor core (f16/bf16, K % 32 == 0), simt.
  const shapes = [[1, 64, 33], [3, 40, 17], [8, 256, 130], [37, 128, 70], [130, 96, 129], [19, 36, 5]];
  for (const dtype of DTYPES) {
    for (const [n, k, out] of shapes) {
      if (dtype === "q8_0" && k % 32 !== 0) continue;
      const [xc, xr] = both(rand(n * k, n * 7 + k), [n, k]);
      const [wc, wr] = bothWeight(rand(out * k, out + k * 3), [out, k], dtype);
      const [bc, br] = both(rand(out, 5), [out]);
      poison(n * out);
      const path = cuda!.matmulPath(dtype, n, k, out);
      await assertClose(cuda!.matmul(xc, wc, bc), ref.matmul(xr, wr, br), `${dtype} [${n},${k},${out}] ${path}`, 1e-4, 1e-4);
    }
  }
}, skip);

test("matmul() with matmulPrecision 'fast' rounds activations to 16 bits on the tensor-core path only", async () => {
  const fast = createCudaBackend({ matmulPrecision: "fast" });
  try {
    const [n, k, out] = [64, 256, 96];
    const xv = rand(n * k, 1), wv = rand(out * k, 2);
    const xr = ref.upload(xv, [n, k]);
    const wr = ref.uploadWeight(encodeFromF32(wv, "bf16"), [out, k], "bf16");
    const y = fast.matmul(fast.upload(xv, [n, k]), fast.uploadWeight(encodeFromF32(wv, "bf16"), [out, k], "bf16"));
    const got = await fast.download(y), want = await ref.download(ref.matmul(xr, wr));
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
    // One bf16 rounding of x: errors of order 2^-9·√k·E|x||w| ≈ 1e-2, far above exact mode's 1e-4.
    assert.ok(worst > 1e-4 && worst < 0.1, `worst error ${worst}`);
  } finally {
    fast.destroy();
  }
}, skip);

test("download() of f16, bf16 and q8_0 weights equals the reference's dequantization", async () => {
  for (const dtype of DTYPES) {
    const [wc, wr] = bothWeight(rand(64 * 96, 11), [64, 96], dtype);
    await assertClose(wc, wr, `download ${dtype}`, 0, 0);
  }
}, skip);

test("uploadWeight() keeps GGUF's other block formats and f8_e4m3 as their f16 dequantization: matmul and download match the reference", async () => {
  for (const dtype of ["q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4", "f8_e4m3"] as const) {
    const [n, k, out] = [3, 512, 40];
    const [xc, xr] = both(rand(n * k, 21), [n, k]);
    const [wc, wr] = bothWeight(rand(out * k, 22), [out, k], dtype);
    assert.equal(wc.dtype, "f16", dtype);
    poison(n * out);
    // The reference holds the same f16 values (bothWeight), so the download is exact and the
    // matmul differs only by f32 accumulation order.
    assert.equal(wr.dtype, "f16", dtype);
    await assertClose(cuda!.matmul(xc, wc), ref.matmul(xr, wr), `matmul ${dtype}`, 1e-4, 1e-4);
    await assertClose(wc, wr, `download ${dtype}`, 0, 0);
  }
}, skip);

test("uploadWeight() keeps an mxfp4 weight whose scales leave f16's range as bf16, exactly", async () => {
  // Blocks under E8M0 scales 88 … 167 (2^-40 … 2^39 halved): values f16 cannot hold, bf16 holds exactly.
  const [rows, k] = [40, 64];
  const raw = new Uint8Array((rows * k / 32) * 17);
  for (let b = 0; b < rows * 2; b++) {
    raw[b * 17] = 88 + b;
    for (let j = 1; j < 17; j++) raw[b * 17 + j] = (b * 7 + j * 13) & 0xff;
  }
  const wc = cuda!.uploadWeight(raw, [rows, k], "mxfp4");
  const wr = ref.uploadWeight(raw, [rows, k], "mxfp4");
  assert.equal(wc.dtype, "bf16");
  await assertClose(wc, wr, "download mxfp4 as bf16", 0, 0);
  // Scales inside f16's exact range stay f16.
  const [small] = bothWeight(rand(rows * k, 24), [rows, k], "mxfp4");
  assert.equal(small.dtype, "f16");
}, skip);

test("rmsnorm(), add(), siluMul(), softmax() and argmax() match the reference (odd sizes)", async () => {
  for (const [rows, cols] of [[1, 7], [5, 333], [3, 4097], [2, 20000]]) {
    const [xc, xr] = both(rand(rows * cols, cols, 3), [rows, cols]);
    const [yc, yr] = both(rand(rows * cols, cols + 1, 3), [rows, cols]);
    const [wc, wr] = both(rand(cols, 2), [cols]);
    poison(rows * cols);
    await assertClose(cuda!.rmsnorm(xc, wc, 1e-5), ref.rmsnorm(xr, wr, 1e-5), `rmsnorm ${cols}`);
    poison(rows * cols);
    await assertClose(cuda!.add(xc, yc), ref.add(xr, yr), `add ${cols}`);
    poison(rows * cols);
    await assertClose(cuda!.siluMul(xc, yc), ref.siluMul(xr, yr), `siluMul ${cols}`);
    poison(rows * cols);
    await assertClose(cuda!.softmax(xc), ref.softmax(xr), `softmax ${cols}`, 1e-7, 1e-4);
    assert.deepEqual(await cuda!.download(cuda!.argmax(xc)), await ref.download(ref.argmax(xr)));
  }
  const ties = new Float32Array([1, 5, 5, 2, -Infinity, -Infinity, 3, 3]);
  const [tc] = both(ties, [2, 4]);
  assert.deepEqual(Array.from(await cuda!.download(cuda!.argmax(tc))), [1, 2]);
}, skip);

test("addRmsnorm() equals add() then rmsnorm() of the reference", async () => {
  for (const cols of [64, 1000, 4096, 14336]) {
    const [xc, xr] = both(rand(3 * cols, 1, 2), [3, cols]);
    const [rc, rr] = both(rand(3 * cols, 2, 2), [3, cols]);
    const [wc, wr] = both(rand(cols, 3), [cols]);
    poison(3 * cols, 4);
    const { sum, normed } = cuda!.addRmsnorm(xc, rc, wc, 1e-6);
    const s = ref.add(xr, rr);
    await assertClose(sum, s, `addRmsnorm sum ${cols}`);
    await assertClose(normed, ref.rmsnorm(s, wr, 1e-6), `addRmsnorm norm ${cols}`);
  }
}, skip);

test("rope() matches the reference for both layouts, partial rotary dims and large positions", async () => {
  const [n, heads, dim] = [5, 3, 64];
  const [pc, pr] = both(Int32Array.from([0, 1, 17, 4095, 131071]), [n]);
  const [xc, xr] = both(rand(n * heads * dim, 9), [n, heads, dim]);
  for (const layout of ["normal", "neox"] as const) {
    for (const rot of [64, 32]) {
      poison(n * heads * dim);
      await assertClose(cuda!.rope(xc, pc, 500000, layout, rot), ref.rope(xr, pr, 500000, layout, rot),
        `rope ${layout} ${rot}`, 2e-5, 1e-4);
    }
  }
}, skip);

/** Frequency divisors in [1, 8], the range Llama 3.1's rope_freqs spans. */
const factorsIn1To8 = (count: number, seed: number) => rand(count, seed).map((v) => 4.5 + 3.5 * v);

test("rope() with freqFactors matches the reference for both layouts and partial rotary dims", async () => {
  const [n, heads, dim] = [5, 3, 64];
  const [pc, pr] = both(Int32Array.from([0, 1, 17, 4095, 131071]), [n]);
  const [xc, xr] = both(rand(n * heads * dim, 10), [n, heads, dim]);
  for (const layout of ["normal", "neox"] as const) {
    for (const rot of [64, 32]) {
      const [fc, fr] = both(factorsIn1To8(rot / 2, rot), [rot / 2]);
      poison(n * heads * dim);
      await assertClose(cuda!.rope(xc, pc, 500000, layout, rot, fc), ref.rope(xr, pr, 500000, layout, rot, fr),
        `rope ${layout} ${rot} with factors`, 2e-5, 1e-4);
    }
  }
}, skip);

test("ropeKvWrite() equals rope() of q and k plus kvWrite() of k and v", async () => {
  const [n, heads, kvHeads, dim, blocks, bs] = [4, 4, 2, 32, 3, 4];
  const width = (heads + 2 * kvHeads) * dim;
  const qkv = rand(n * width, 21);
  const [qkvC] = both(qkv, [n, width]);
  const [pc, pr] = both(Int32Array.from([3, 4, 5, 9]), [n]);
  const [sc, sr] = both(Int32Array.from([7, 0, 11, 2]), [n]);
  const kcC = cuda!.zeros([blocks, bs, kvHeads, dim], "f32"), vcC = cuda!.zeros([blocks, bs, kvHeads, dim], "f32");
  const kcR = ref.zeros([blocks, bs, kvHeads, dim], "f32"), vcR = ref.zeros([blocks, bs, kvHeads, dim], "f32");
  const part = (from: number, h: number) => {
    const out = new Float32Array(n * h * dim);
    for (let t = 0; t < n; t++) out.set(qkv.subarray(t * width + from * dim, t * width + (from + h) * dim), t * h * dim);
    return ref.upload(out, [n, h, dim]);
  };
  const q = cuda!.ropeKvWrite(qkvC, pc, sc, heads, 10000, "neox", kcC, vcC, 16);
  ref.kvWrite(ref.rope(part(heads, kvHeads), pr, 10000, "neox", 16), part(heads + kvHeads, kvHeads), kcR, vcR, sr);
  await assertClose(q, ref.rope(part(0, heads), pr, 10000, "neox", 16), "ropeKvWrite q");
  await assertClose(kcC, kcR, "ropeKvWrite k cache");
  await assertClose(vcC, vcR, "ropeKvWrite v cache", 0, 0);
}, skip);

test("ropeKvWrite() with freqFactors equals rope() with them of q and k plus kvWrite()", async () => {
  const [n, heads, kvHeads, dim, blocks, bs] = [4, 4, 2, 32, 3, 4];
  const width = (heads + 2 * kvHeads) * dim;
  const qkv = rand(n * width, 22);
  const [qkvC] = both(qkv, [n, width]);
  const [pc, pr] = both(Int32Array.from([3, 40, 5, 9000]), [n]);
  const [sc, sr] = both(Int32Array.from([7, 0, 11, 2]), [n]);
  const [fc, fr] = both(factorsIn1To8(dim / 2, 23), [dim / 2]);
  const kcC = cuda!.zeros([blocks, bs, kvHeads, dim], "f32"), vcC = cuda!.zeros([blocks, bs, kvHeads, dim], "f32");
  const kcR = ref.zeros([blocks, bs, kvHeads, dim], "f32"), vcR = ref.zeros([blocks, bs, kvHeads, dim], "f32");
  const part = (from: number, h: number) => {
    const out = new Float32Array(n * h * dim);
    for (let t = 0; t < n; t++) out.set(qkv.subarray(t * width + from * dim, t * width + (from + h) * dim), t * h * dim);
    return ref.upload(out, [n, h, dim]);
  };
  const q = cuda!.ropeKvWrite(qkvC, pc, sc, heads, 500000, "normal", kcC, vcC, undefined, fc);
  ref.kvWrite(ref.rope(part(heads, kvHeads), pr, 500000, "normal", undefined, fr), part(heads + kvHeads, kvHeads), kcR, vcR, sr);
  await assertClose(q, ref.rope(part(0, heads), pr, 500000, "normal", undefined, fr), "ropeKvWrite q with factors", 2e-5, 1e-4);
  await assertClose(kcC, kcR, "ropeKvWrite k cache with factors", 2e-5, 1e-4);
  await assertClose(vcC, vcR, "ropeKvWrite v cache with factors", 0, 0);
}, skip);

test("embedding(), gatherRows() and kvWrite() match the reference", async () => {
  for (const dtype of DTYPES) {
    const [tc, tr] = bothWeight(rand(50 * 64, 4), [50, 64], dtype);
    const [ic, ir] = both(Int32Array.from([0, 49, 7, 7]), [4]);
    poison(4 * 64);
    await assertClose(cuda!.embedding(tc, ic), ref.embedding(tr, ir), `embedding ${dtype}`, 0, 0);
  }
  const [xc, xr] = both(rand(6 * 10, 5), [6, 10]);
  const [gc, gr] = both(Int32Array.from([5, 0, 5]), [3]);
  await assertClose(cuda!.gatherRows(xc, gc), ref.gatherRows(xr, gr), "gatherRows", 0, 0);
  assert.throws(() => cuda!.gatherRows(xc, both(Int32Array.from([6]), [1])[0]), /Row index 6/);
}, skip);

test("sample() picks the reference's token for greedy, top-k, top-p and mixed rows", async () => {
  for (const vocab of [10, 1000, 50000]) {
    const rows: SamplingRow[] = [
      { temperature: 0, topK: 0, topP: 1, uniform: 0.3 },
      { temperature: 0.8, topK: 0, topP: 1, uniform: 0.61 },
      { temperature: 1.2, topK: 5, topP: 1, uniform: 0.25 },
      { temperature: 0.7, topK: 0, topP: 0.9, uniform: 0.93 },
      { temperature: 1, topK: 40, topP: 0.5, uniform: 0.07 },
    ];
    const [lc, lr] = both(rand(rows.length * vocab, vocab, 4), [rows.length, vocab]);
    assert.deepEqual(Array.from(await cuda!.download(cuda!.sample(lc, rows))),
      Array.from(await ref.download(ref.sample(lr, rows))), `vocab ${vocab}`);
  }
}, skip);
