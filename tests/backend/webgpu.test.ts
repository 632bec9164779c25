/**
 * WebGPU-specific behaviour that the conformance suite does not reach: weights split into row
 * chunks, f16 without shader-f16, both matmul kernels whatever the device's default, the buffer
 * pool's counters and reuse, the pipeline cache, uploads
 * into buffers still read by unsubmitted work, and kernel template errors.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { envVar } from "../../src/runtime/env.ts";
import { blockValues, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { type Backend, WEIGHT_DTYPES, type WeightDType } from "../../src/backend/types.ts";
import { createWebGpuBackend, type WebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { KernelTemplateError, loadKernelSources, specialiseKernel } from "../../src/backend/webgpu/kernel-source.ts";
import { sizeClass } from "../../src/backend/webgpu/buffer-pool.ts";
import { compareOutputs, Rng } from "./conformance-support.ts";

const skip = envVar("EVOLVING_ALLOW_NO_WEBGPU") === "1";
const ref = createReferenceBackend();

async function linearOutputs(b: Backend, rng: Rng, dtype: WeightDType, n: number, k: number, m: number) {
  const w = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
  const x = b.upload(rng.f32(n * k), [n, k]);
  const ids = b.upload(rng.i32(9, m), [9]);
  const out = [await b.download(b.matmul(x, w)), await b.download(b.embedding(w, ids)), await b.download(w)];
  b.free(w);
  return out;
}

test("matmul() and embedding() on webgpu handle weights split into row chunks", async () => {
  const gpu = await createWebGpuBackend({ poison: true, maxBindingBytes: 4096 });
  try {
    // The repacked block formats (q8_0, q4_0, iq4_nl, q5_0, mxfp4, q3_k, q6_k) pack each chunk from its first row.
    const cases = [
      ["f16", 1, 70, 100], ["q8_0", 6, 64, 90], ["f32", 37, 40, 61], ["bf16", 2, 33, 77],
      ["q4_0", 3, 64, 90], ["q5_0", 9, 96, 70], ["q6_k", 5, 256, 40], ["q4_k", 2, 512, 30], ["q5_1", 1, 64, 80],
      ["mxfp4", 7, 96, 90], ["q3_k", 4, 256, 40], ["q2_k", 3, 512, 30], ["iq4_nl", 3, 96, 90], ["iq4_xs", 2, 512, 30],
    ] as const;
    for (const [dtype, n, k, m] of cases) {
      const want = await linearOutputs(ref, new Rng(7), dtype, n, k, m);
      const got = await linearOutputs(gpu, new Rng(7), dtype, n, k, m);
      assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `${dtype} ${n}×${k}×${m}`);
    }
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

test("matmul(), embedding() and matmulExperts() on webgpu find a lattice i-quant's grid at the head of every chunk", async () => {
  // 9216-byte bindings: the grid (1–8 KiB) and 6 to 52 rows of 512 values after it, so each weight
  // spans 2 to 12 chunks, and every expert stack several too.
  const gpu = await createWebGpuBackend({ poison: true, maxBindingBytes: 9216 });
  try {
    for (const dtype of ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"] as const) {
      const want = await linearOutputs(ref, new Rng(9), dtype, 3, 512, 70);
      const got = await linearOutputs(gpu, new Rng(9), dtype, 3, 512, 70);
      assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `${dtype} 3×512×70`);
      const wantE = await expertOutputs(ref, new Rng(13), dtype, 3, 30, 512);
      const gotE = await expertOutputs(gpu, new Rng(13), dtype, 3, 30, 512);
      assert.equal(compareOutputs(gotE, wantE, { atol: 1e-4, rtol: 1e-4 }), undefined, `${dtype} experts 3×30×512`);
    }
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

/**
 * matmulExperts outputs for a stacked [experts, out, inner] weight, a token's input and each expert's
 * own; then matmulExpertsGlu's with a second stack as the up projection (SiLU, then GELU).
 */
async function expertOutputs(b: Backend, rng: Rng, dtype: WeightDType, experts: number, out: number, inner: number) {
  const n = 3;
  const k = 2;
  const w = b.uploadWeight(encodeFromF32(rng.f32(experts * out * inner), dtype), [experts, out, inner], dtype);
  const ids = b.upload(Int32Array.from([0, experts - 1, 1, 2, experts - 1, 0]), [n, k]);
  const x = b.upload(rng.f32(n * inner), [n, inner]);
  const xe = b.upload(rng.f32(n * k * inner), [n * k, inner]);
  const u = b.uploadWeight(encodeFromF32(rng.f32(experts * out * inner), dtype), [experts, out, inner], dtype);
  const res = [
    await b.download(b.matmulExperts(x, w, ids)), await b.download(b.matmulExperts(xe, w, ids)),
    await b.download(b.matmulExpertsGlu!(x, w, u, ids, "silu")), await b.download(b.matmulExpertsGlu!(xe, w, u, ids, "gelu")),
  ];
  for (const t of [w, u, ids, x, xe]) b.free(t);
  return res;
}

test("matmulExperts() on webgpu reads experts whose rows straddle weight chunks, in both kernels", async () => {
  // 4096-byte bindings hold fewer rows than one expert has, or a number that does not divide its
  // rows, so chunk boundaries fall inside experts and inside a workgroup's four outputs.
  for (const gemvMaxRows of [0, 64]) {
    const gpu = await createWebGpuBackend({ poison: true, maxBindingBytes: 4096, gemvMaxRows });
    try {
      const stacks = [["f32", 4, 37, 40], ["q8_0", 3, 45, 64], ["q4_k", 3, 30, 256], ["f16", 5, 70, 33], ["mxfp4", 3, 37, 96],
        ["q3_k", 3, 30, 256], ["q2_k", 3, 50, 256], ["iq4_xs", 3, 30, 256], ["iq4_nl", 3, 37, 96]] as const;
      for (const [dtype, experts, out, inner] of stacks) {
        const want = await expertOutputs(ref, new Rng(11), dtype, experts, out, inner);
        const got = await expertOutputs(gpu, new Rng(11), dtype, experts, out, inner);
        assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `gemvMaxRows ${gemvMaxRows} ${dtype} ${experts}×${out}×${inner}`);
      }
    } finally {
      gpu.destroy();
    }
  }
}, { ignore: skip });

test("matmulExperts() on webgpu splits an expert's many rows into tiles (prefill routing)", async () => {
  // 90 tokens × 3 experts each of 5, skewed so expert 0 gets every token (three 32-row tiles and a
  // part tile) and expert 4 none; GEMV (gemvMaxRows 128) and tiled (0) kernels against the reference.
  const [n, k, experts, out, inner] = [90, 3, 5, 45, 64];
  const ids = Int32Array.from({ length: n * k }, (_, i) => (i % k === 0 ? 0 : 1 + ((i * 7) % 3)));
  const run = async (b: Backend, rng: Rng) => {
    const w = b.uploadWeight(encodeFromF32(rng.f32(experts * out * inner), "q8_0"), [experts, out, inner], "q8_0");
    const x = b.upload(rng.f32(n * inner), [n, inner]);
    const xe = b.upload(rng.f32(n * k * inner), [n * k, inner]);
    const idsT = b.upload(ids, [n, k]);
    const res = [await b.download(b.matmulExperts(x, w, idsT)), await b.download(b.matmulExperts(xe, w, idsT))];
    for (const t of [w, x, xe, idsT]) b.free(t);
    return res;
  };
  const want = await run(ref, new Rng(12));
  for (const gemvMaxRows of [0, 128]) {
    const gpu = await createWebGpuBackend({ poison: true, gemvMaxRows });
    try {
      assert.equal(compareOutputs(await run(gpu, new Rng(12)), want, { atol: 1e-4, rtol: 1e-4 }), undefined, `gemvMaxRows ${gemvMaxRows}`);
    } finally {
      gpu.destroy();
    }
  }
}, { ignore: skip });

test("embedding() and matmul() on webgpu decode every mxfp4 code under scales 2^-24 … 2^24 exactly", async () => {
  // Rows of 64 values (two blocks), each with every code twice (both nibbles of a byte, so every
  // lane of a word and both halves of the block), under E8M0 scales 104 … 152: 2^-24 … 2^24 halved.
  const rows = 49;
  const raw = new Uint8Array(rows * 2 * 17);
  for (let b = 0; b < rows * 2; b++) {
    raw[b * 17] = 104 + (b >> 1);
    for (let j = 0; j < 16; j++) raw[b * 17 + 1 + j] = ((j + b) & 15) | ((15 - ((j + 3 * b) & 15)) << 4);
  }
  const run = async (b: Backend) => {
    const w = b.uploadWeight(raw, [rows, 64], "mxfp4");
    const ids = b.upload(Int32Array.from({ length: rows }, (_, i) => rows - 1 - i), [rows]);
    // x one-hot on column c: matmul's column c of the output is the weight's column c.
    const x = b.upload(Float32Array.from({ length: 3 * 64 }, (_, i) => (i % 64 === [0, 21, 63][Math.floor(i / 64)] ? 1 : 0)), [3, 64]);
    const res = [await b.download(b.embedding(w, ids)), await b.download(b.matmul(x, w)), await b.download(w)];
    for (const t of [w, ids, x]) b.free(t);
    return res;
  };
  const want = await run(ref);
  const magnitudes = Array.from(want[2], Math.abs).filter((v) => v > 0);
  assert.deepEqual([Math.min(...magnitudes), Math.max(...magnitudes)], [2 ** -24, 12 * 2 ** 24]);
  const gpu = await backend();
  assert.equal(compareOutputs(await run(gpu), want, { atol: 0, rtol: 0 }), undefined);
}, { ignore: skip });

test("matmul() on webgpu reads f16 weights from u32 words without shader-f16", async () => {
  const gpu = await createWebGpuBackend({ poison: true, useF16: false });
  try {
    assert.equal(gpu.info.f16, false);
    for (const [n, k, m] of [[1, 64, 37], [9, 30, 11]]) {
      const want = await linearOutputs(ref, new Rng(3), "f16", n, k, m);
      const got = await linearOutputs(gpu, new Rng(3), "f16", n, k, m);
      assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `f16 ${n}×${k}×${m}`);
    }
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

test("matmul() on webgpu matches reference through both the GEMV and the register-blocked kernel", async () => {
  for (const gemvMaxRows of [0, 4]) {
    const gpu = await createWebGpuBackend({ poison: true, gemvMaxRows });
    try {
      for (const dtype of WEIGHT_DTYPES) {
        for (const [n, k, m] of [[1, 64, 37], [4, 96, 45], [3, 35, 9], [2, 32, 517], [5, 256, 45]]) {
          if (k % blockValues(dtype) !== 0) continue;
          const want = await linearOutputs(ref, new Rng(n * 1000 + k), dtype, n, k, m);
          const got = await linearOutputs(gpu, new Rng(n * 1000 + k), dtype, n, k, m);
          assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `gemvMaxRows ${gemvMaxRows} ${dtype} ${n}×${k}×${m}`);
        }
      }
    } finally {
      gpu.destroy();
    }
  }
}, { ignore: skip });

test("matmulAdd() on webgpu adds the residual in both matmul kernels, over weights split into row chunks", async () => {
  const run = async (b: Backend, dtype: WeightDType, n: number, k: number, m: number, withBias: boolean) => {
    const rng = new Rng(n * 7919 + k * 31 + m);
    const w = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
    const x = b.upload(rng.f32(n * k), [n, k]);
    const residual = b.upload(rng.f32(n * m, -4, 4), [n, m]);
    const bias = withBias ? b.upload(rng.f32(m), [m]) : undefined;
    const out = await b.download(b.matmulAdd!(x, w, residual, bias));
    // The residual is read, not written.
    const after = await b.download(residual);
    for (const t of [w, x, residual, ...(bias ? [bias] : [])]) b.free(t);
    return [out, after];
  };
  for (const gemvMaxRows of [0, 8]) {
    // 4096-byte bindings: the weights below are several row chunks, each adding its columns' residuals.
    const gpu = await createWebGpuBackend({ poison: true, gemvMaxRows, maxBindingBytes: 4096 });
    try {
      for (const [dtype, n, k, m] of [["f32", 1, 40, 61], ["f16", 3, 70, 100], ["q8_0", 6, 64, 90], ["q4_k", 2, 256, 30], ["f32", 37, 40, 61], ["q6_k", 9, 256, 40]] as const) {
        for (const withBias of [false, true]) {
          const want = await run(ref, dtype, n, k, m, withBias);
          const got = await run(gpu, dtype, n, k, m, withBias);
          assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `gemvMaxRows ${gemvMaxRows} ${dtype} ${n}×${k}×${m}${withBias ? " +bias" : ""}`);
        }
      }
      const x = gpu.upload(new Float32Array(6), [2, 3]);
      const w = gpu.upload(new Float32Array(12), [4, 3]);
      const r = gpu.upload(new Float32Array(6), [2, 3]);
      assert.throws(() => gpu.matmulAdd(x, w, r), /matmul residual \[2, 3\] does not fit input \[2, 3\] and weight \[4, 3\]/);
      assert.throws(() => ref.matmulAdd!(ref.upload(new Float32Array(6), [2, 3]), ref.upload(new Float32Array(12), [4, 3]), ref.upload(new Float32Array(6), [2, 3])), /matmul residual \[2, 3\] does not fit input \[2, 3\] and weight \[4, 3\]/);
      for (const t of [x, w, r]) gpu.free(t);
    } finally {
      gpu.destroy();
    }
  }
}, { ignore: skip });

test("matmulGlu() on webgpu matches reference in both kernels, over weights split into row chunks, and refuses mismatched weights", async () => {
  const run = async (b: Backend, dtype: WeightDType, n: number, k: number, m: number, activation: "silu" | "gelu") => {
    const rng = new Rng(n * 7919 + k * 31 + m);
    const g = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
    const u = b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype);
    const x = b.upload(rng.f32(n * k, -2, 2), [n, k]);
    const out = await b.download(b.matmulGlu!(x, g, u, activation));
    for (const t of [g, u, x]) b.free(t);
    return [out];
  };
  for (const gemvMaxRows of [0, 8]) {
    // 4096-byte bindings: several row chunks per weight, gate and up chunk for chunk.
    const gpu = await createWebGpuBackend({ poison: true, gemvMaxRows, maxBindingBytes: 4096 });
    try {
      for (const [dtype, n, k, m, act] of [["f32", 1, 40, 61, "silu"], ["f16", 3, 70, 100, "gelu"], ["q8_0", 6, 64, 90, "silu"], ["q4_k", 2, 256, 30, "gelu"], ["f32", 37, 40, 61, "gelu"], ["iq3_s", 9, 256, 40, "silu"]] as const) {
        const want = await run(ref, dtype, n, k, m, act);
        const got = await run(gpu, dtype, n, k, m, act);
        assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `gemvMaxRows ${gemvMaxRows} ${dtype} ${n}×${k}×${m} ${act}`);
      }
    } finally {
      gpu.destroy();
    }
  }
  for (const b of [ref, await backend()]) {
    const x = b.upload(new Float32Array(6), [2, 3]);
    const g = b.upload(new Float32Array(12), [4, 3]);
    const u = b.uploadWeight(new Uint8Array(24), [4, 3], "f16");
    assert.throws(() => b.matmulGlu!(x, g, u, "silu"), /matmulGlu gate weight \[4, 3\] f32 and up weight \[4, 3\] f16 differ/);
    for (const t of [x, g, u]) b.free(t);
  }
}, { ignore: skip });

test("matmulQkv() on webgpu matches reference in both kernels, and over weights split into row chunks", async () => {
  const run = async (b: Backend, dtype: WeightDType, n: number, k: number, ms: readonly number[]) => {
    const rng = new Rng(n * 7919 + k * 31 + ms[0]);
    const ws = ms.map((m) => b.uploadWeight(encodeFromF32(rng.f32(m * k), dtype), [m, k], dtype));
    const x = b.upload(rng.f32(n * k, -2, 2), [n, k]);
    const outs = b.matmulQkv!(x, ws[0], ws[1], ws[2]);
    const got = [];
    for (const t of outs) got.push(await b.download(t));
    for (const t of [...ws, x, ...outs]) b.free(t);
    return got;
  };
  // 4096-byte bindings split the larger weights into row chunks (the op then runs three matmuls).
  for (const [gemvMaxRows, maxBindingBytes] of [[0, undefined], [8, undefined], [8, 4096]] as const) {
    const gpu = await createWebGpuBackend({ poison: true, gemvMaxRows, maxBindingBytes });
    try {
      for (const [dtype, n, k, ms] of [["f32", 1, 40, [24, 8, 8]], ["f16", 3, 70, [100, 20, 20]], ["q8_0", 6, 64, [90, 30, 30]], ["q4_k", 2, 256, [30, 10, 10]], ["f32", 37, 40, [61, 7, 7]]] as const) {
        const want = await run(ref, dtype, n, k, ms);
        const got = await run(gpu, dtype, n, k, ms);
        assert.equal(compareOutputs(got, want, { atol: 1e-4, rtol: 1e-4 }), undefined, `gemvMaxRows ${gemvMaxRows} binding ${maxBindingBytes} ${dtype} ${n}×${k}×${ms.join("/")}`);
      }
    } finally {
      gpu.destroy();
    }
  }
}, { ignore: skip });

let shared: WebGpuBackend | undefined;
async function backend(): Promise<WebGpuBackend> {
  shared ??= await createWebGpuBackend({ poison: true });
  return shared;
}

test("WebGpuBackend.stats() counts pool bytes and reuses a freed buffer of the same size class", async () => {
  const gpu = await backend();
  await gpu.flush();
  const before = gpu.stats().pool;
  const a = gpu.zeros([1000], "f32");
  const mid = gpu.stats().pool;
  assert.equal(mid.inUseBytes - before.inUseBytes, sizeClass(4000));
  assert.ok(mid.peakInUseBytes >= mid.inUseBytes);
  gpu.free(a);
  assert.equal(gpu.stats().pool.inUseBytes, before.inUseBytes);
  const b = gpu.zeros([990], "f32"); // same 4 KiB class
  const after = gpu.stats().pool;
  assert.equal(after.creations, mid.creations);
  assert.equal(after.allocatedBytes, mid.allocatedBytes);
  assert.deepEqual([...(await gpu.download(b))].every((v) => v === 0), true);
  gpu.free(b);
}, { ignore: skip });

test("WebGpuBackend caches pipelines by template parameters, not by shapes", async () => {
  const gpu = await backend();
  const rng = new Rng(11);
  const run = async (n: number, k: number, m: number) => {
    const x = gpu.upload(rng.f32(n * k), [n, k]);
    const w = gpu.uploadWeight(encodeFromF32(rng.f32(m * k), "f16"), [m, k], "f16");
    const y = gpu.matmul(x, w);
    await gpu.download(y);
    for (const t of [x, w, y]) gpu.free(t);
  };
  await run(2, 64, 40);
  await run(20, 64, 40);
  const pipelines = gpu.stats().recorder.pipelines;
  await run(3, 128, 77);
  await run(33, 256, 5);
  assert.equal(gpu.stats().recorder.pipelines, pipelines);
}, { ignore: skip });

test("upload() on webgpu into a recycled buffer leaves earlier recorded ops reading the old data", async () => {
  const gpu = await backend();
  const a = gpu.upload(Float32Array.from([1, 2, 3, 4]), [4]);
  const sum = gpu.add(a, a); // recorded, not yet submitted
  gpu.free(a);
  const b = gpu.upload(Float32Array.from([10, 20, 30, 40]), [4]); // reuses a's buffer
  assert.deepEqual([...(await gpu.download(sum))], [2, 4, 6, 8]);
  assert.deepEqual([...(await gpu.download(b))], [10, 20, 30, 40]);
}, { ignore: skip });

test("specialiseKernel() names a missing template parameter", () => {
  const sources = loadKernelSources();
  assert.throws(() => specialiseKernel(sources, "elementwise", {}), (e: unknown) =>
    e instanceof KernelTemplateError && /"OP_ADD"/.test(e.message));
  const add = specialiseKernel(sources, "elementwise", { OP_ADD: true, OP_OAI: false, OP_GELU: false, OP_SOFTCAP: false, OP_RELU2: false, OP_GELU1: false });
  assert.match(add, /x \+ b\[i\]/);
  assert.doesNotMatch(add, /exp\(/);
});

test("webgpu test backend is released", () => {
  shared?.destroy();
});
