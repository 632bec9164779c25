/**
 * WebGPU misuse and limits: tensors past the device's binding limit, the pool's size cap, use after
 * destroy() or a lost device, tensors of another backend instance, reshapes of chunked weights, and
 * out-of-range row ids. Each must end in a typed error (or the CUDA backend's zero rows), never a
 * vague WebGPU validation error at some later submit, a flush that pretends work ran, or junk.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { envVar } from "../../src/runtime/env.ts";
import { type Backend, BackendShapeError } from "../../src/backend/types.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { BufferPool } from "../../src/backend/webgpu/buffer-pool.ts";
import { WebGpuError } from "../../src/backend/webgpu/device.ts";
import { GpuTensor } from "../../src/backend/webgpu/tensor.ts";

const skip = envVar("EVOLVING_ALLOW_NO_WEBGPU") === "1";

const f32Bytes = (values: number[]) => new Uint8Array(Float32Array.from(values).buffer);

test("zeros() and op outputs past the device's storage binding limit throw a BackendShapeError naming it", async () => {
  const gpu = await createWebGpuBackend({ poison: true });
  try {
    const limit = gpu.context.gpu.device.limits.maxStorageBufferBindingSize;
    const named = (e: unknown) => e instanceof BackendShapeError && e.message.includes(String(Math.min(limit, gpu.context.gpu.maxBuffer)));
    // A KV cache this large used to be "allocated", and the first kernel to bind it failed later.
    assert.throws(() => gpu.zeros([limit / 4 + 1], "f32"), named);
    assert.throws(() => gpu.zeros([limit / 2 + 4], "f16"), named);
    // An output of 4097 × 8193 f32 values (134 MB) cannot be bound either.
    const x = gpu.upload(new Float32Array(4097), [4097, 1]);
    const w = gpu.uploadWeight(new Uint8Array(8193 * 4), [8193, 1], "f32");
    assert.throws(() => gpu.matmul(x, w), named);
    // Nothing half-recorded is left behind: the backend still works.
    const a = gpu.upload(Float32Array.from([1, 2]), [2]);
    assert.deepEqual([...(await gpu.download(gpu.add(a, a)))], [2, 4]);
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

test("BufferPool caps a size class at its largest buffer and refuses larger requests", async () => {
  const gpu = await createWebGpuBackend();
  try {
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
    // With a limit like 2^31 − 1, a request just under it must not round up to a 2^31-byte class.
    const pool = new BufferPool(gpu.context.gpu.device, usage, 1002);
    assert.equal(pool.maxBytes, 1000);
    const pb = pool.acquire(999);
    assert.equal(pb.size, 1000);
    pool.release(pb);
    assert.equal(pool.acquire(600).size, 1000);
    assert.equal(pool.acquire(300).size, 512);
    assert.throws(() => pool.acquire(1001), (e: unknown) => e instanceof BackendShapeError && /1001 bytes.*1000 bytes/.test(e.message));
    pool.trim();
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

test("ops on a destroyed webgpu backend throw a WebGpuError that says so; free() is harmless", async () => {
  const gpu = await createWebGpuBackend();
  const a = gpu.upload(Float32Array.from([1, 2]), [2]);
  gpu.destroy();
  const destroyed = (e: unknown) => e instanceof WebGpuError && /destroyed/.test(e.message);
  assert.throws(() => gpu.add(a, a), destroyed);
  assert.throws(() => gpu.upload(Float32Array.from([1]), [1]), destroyed);
  await assert.rejects(gpu.download(a), destroyed);
  await assert.rejects(gpu.flush(), destroyed);
  gpu.free(a);
  gpu.destroy();
}, { ignore: skip });

test("download() and flush() on a lost webgpu device reject with a WebGpuError naming the loss", async () => {
  const gpu = await createWebGpuBackend();
  try {
    const a = gpu.upload(Float32Array.from([1, 2]), [2]);
    await gpu.download(a);
    const device = gpu.context.gpu.device;
    device.destroy(); // what a driver reset looks like to the backend, once reported
    await device.lost;
    const lost = (e: unknown) => e instanceof WebGpuError && /device was lost \(destroyed/.test(e.message);
    // These used to fail with an empty AbortError (Node) or a bare OperationError (Deno), after
    // handing the lost device more commands; flush() resolved as if work had run.
    assert.throws(() => gpu.add(a, a), lost);
    assert.throws(() => gpu.upload(Float32Array.from([1]), [1]), lost);
    await assert.rejects(gpu.download(a), lost);
    await assert.rejects(gpu.flush(), lost);
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

test("a tensor of another webgpu backend instance is refused at the op with a BackendShapeError", async () => {
  const one = await createWebGpuBackend();
  const two = await createWebGpuBackend();
  try {
    const a = one.upload(Float32Array.from([1, 2, 3]), [3]);
    const b = two.upload(Float32Array.from([4, 5, 6]), [3]);
    assert.throws(() => two.add(a, b), (e: unknown) => e instanceof BackendShapeError && /another webgpu backend/.test(e.message));
    assert.throws(() => two.free(a), BackendShapeError);
    assert.deepEqual([...(await two.download(two.add(b, b)))], [8, 10, 12]);
    assert.deepEqual([...(await one.download(a))], [1, 2, 3]);
  } finally {
    one.destroy();
    two.destroy();
  }
}, { ignore: skip });

test("reshape() of a weight split into row chunks keeps its last dim or throws", async () => {
  const gpu = await createWebGpuBackend({ poison: true, maxBindingBytes: 64 });
  try {
    const values = Array.from({ length: 64 }, (_, i) => i);
    const w = gpu.uploadWeight(f32Bytes(values), [8, 8], "f32"); // 2 rows a chunk
    // A new last dim used to read rows of the old width from the wrong chunks: zeros and junk.
    assert.throws(() => gpu.reshape(w, [4, 16]), (e: unknown) => e instanceof BackendShapeError && /\[8, 8\] to \[4, 16\]/.test(e.message));
    assert.throws(() => gpu.reshape(w, [64]), BackendShapeError);
    assert.deepEqual([...(await gpu.download(gpu.reshape(w, [2, 4, 8])))], values);
    // An unchunked tensor reshapes freely.
    const x = gpu.upload(Float32Array.from([1, 2, 3, 4]), [2, 2]);
    assert.deepEqual([...(await gpu.download(gpu.reshape(x, [4])))], [1, 2, 3, 4]);
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });

test("embedding() and gatherRows() on webgpu refuse uploaded ids outside the table as the reference does, and give zero rows, never stale data, for device ids", async () => {
  // Poisoned outputs stand for recycled buffers: an unwritten row used to come back NaN (or another tensor's data).
  for (const maxBindingBytes of [undefined, 16]) {
    const gpu = await createWebGpuBackend({ poison: true, maxBindingBytes });
    const ref = createReferenceBackend();
    try {
      const table = gpu.uploadWeight(f32Bytes([1, 2, 3, 4, 5, 6, 7, 8]), [4, 2], "f32");
      const bad = Int32Array.from([3, -1, 0, 4, 99]);
      const uploaded = gpu.upload(bad, [5]);
      const x = gpu.upload(Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]), [4, 2]);
      const half = gpu.zeros([4, 2], "f16");
      // The host copy of an uploaded id list is checked, with the reference's message.
      const refTable = ref.uploadWeight(f32Bytes([1, 2, 3, 4, 5, 6, 7, 8]), [4, 2], "f32");
      assert.throws(() => ref.embedding(refTable, ref.upload(bad, [5])), /Token id -1 at position 1 is outside 0\.\.3/);
      assert.throws(() => gpu.embedding(table, uploaded), /Token id -1 at position 1 is outside 0\.\.3/);
      assert.throws(() => gpu.gatherRows(x, uploaded), /Row index -1 at position 1 is outside 0\.\.3/);
      await assert.rejects(gpu.downloadHalfRows(half, uploaded), /Row index -1 at position 1 is outside 0\.\.3/);
      assert.throws(() => gpu.writeHalfRows(half, uploaded, new Uint16Array(10)), /Row index -1 at position 1 is outside 0\.\.3/);
      // Ids the device computed have no host copy: the kernels write zero rows for those outside.
      const ids = new GpuTensor(uploaded.shape, "i32", (uploaded as GpuTensor).storage);
      const want = [7, 8, 0, 0, 1, 2, 0, 0, 0, 0];
      assert.deepEqual([...(await gpu.download(gpu.embedding(table, ids)))], want, `maxBindingBytes ${maxBindingBytes}`);
      assert.deepEqual([...(await gpu.download(gpu.gatherRows(x, ids)))], want);
      assert.deepEqual([...(await gpu.downloadHalfRows(half, ids))], new Array(10).fill(0));
    } finally {
      gpu.destroy();
    }
  }
}, { ignore: skip });

test("row-wise and elementwise ops on webgpu refuse a scalar (rank 0) as the reference does", async () => {
  const gpu = await createWebGpuBackend();
  try {
    for (const b of [createReferenceBackend(), gpu] as Backend[]) {
      const s = b.upload(Float32Array.from([2]), []);
      const ops: [string, () => unknown][] = [
        ["rmsnorm", () => b.rmsnorm(s, b.upload(Float32Array.from([1]), [1]), 1e-6)],
        ["softmax", () => b.softmax(s)],
        ["argmax", () => b.argmax(s)],
        ["add", () => b.add(s, s)],
        ["siluMul", () => b.siluMul(s, s)],
        ["scatterAdd", () => b.scatterAdd(s, b.upload(Int32Array.from([0]), [1]), b.upload(Float32Array.from([1]), [1]))],
      ];
      for (const [name, run] of ops) {
        // webgpu used to treat the scalar as one row of one column and compute.
        assert.throws(run, (e: unknown) => e instanceof BackendShapeError && /at least 1 dimension/.test(e.message), `${b.info.name} ${name}`);
      }
    }
  } finally {
    gpu.destroy();
  }
}, { ignore: skip });
