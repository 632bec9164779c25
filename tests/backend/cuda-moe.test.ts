/**
 * CUDA mixture-of-experts kernels (kernels-cuda/moe.cu) against the reference on an NVIDIA GPU
 * (skipped without one), beyond the shared conformance cases: the route → expert matmul → combine
 * chain on device-made ids, clamped ids, more output tiles than a grid's y extent, and the limits.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BackendShapeError, type WeightDType } from "../../src/backend/types.ts";
import { assertClose, both, bothWeight, cuda, poison, rand, ref } from "./cuda-helpers.ts";

const skip = { ignore: !cuda };

test("moeRoute → matmulExperts → moeCombine on device ids matches the reference for every stored dtype", async () => {
  const [n, experts, k, out] = [5, 16, 4, 130];
  // [dtype, inner, tolerance]: q4_k is f16 on the device (its dequantization rounded to f16).
  const runs: [WeightDType, number, number][] = [["f32", 256, 1e-4], ["f32", 36, 1e-4], ["f16", 256, 1e-4],
    ["bf16", 72, 1e-4], ["q8_0", 256, 1e-4], ["q4_k", 256, 1e-3]];
  for (const [dtype, inner, tol] of runs) {
    const [lc, lr] = both(rand(n * experts, inner, 4), [n, experts]);
    const [xc, xr] = both(rand(n * inner, inner + 1), [n, inner]);
    const [wc, wr] = bothWeight(rand(experts * out * inner, inner + 2), [experts, out, inner], dtype);
    poison(n * k);
    const rc = cuda!.moeRoute(lc, k, { normalize: true }), rr = ref.moeRoute(lr, k, { normalize: true });
    assert.deepEqual(await cuda!.download(rc.ids), await ref.download(rr.ids), `${dtype} ids`);
    await assertClose(rc.weights, rr.weights, `${dtype} weights`, 1e-6, 1e-5);
    poison(n * k * out);
    const yc = cuda!.matmulExperts(xc, wc, rc.ids), yr = ref.matmulExperts(xr, wr, rr.ids);
    await assertClose(yc, yr, `${dtype} in=${inner} matmulExperts`, tol, tol);
    poison(n * out);
    await assertClose(cuda!.moeCombine(yc, rc.weights), ref.moeCombine(yr, rr.weights), `${dtype} moeCombine`, tol, tol);
  }
}, skip);

test("matmulExperts() clamps expert ids outside 0..experts-1 on the device", async () => {
  const [experts, out, inner] = [3, 17, 64];
  const [wc] = bothWeight(rand(experts * out * inner, 1), [experts, out, inner], "f16");
  const [xc] = both(rand(2 * inner, 2), [2, inner]);
  const wild = cuda!.upload(Int32Array.from([-5, 99]), [2, 1]);
  const clamped = cuda!.upload(Int32Array.from([0, experts - 1]), [2, 1]);
  poison(2 * out);
  const got = await cuda!.download(cuda!.matmulExperts(xc, wc, wild));
  assert.deepEqual(got, await cuda!.download(cuda!.matmulExperts(xc, wc, clamped)));
}, skip);

test("matmulExperts() covers more output tiles than a grid's y extent (65535 · 8 outputs)", async () => {
  const [out, inner] = [65535 * 8 + 24, 8];
  const [wc, wr] = bothWeight(rand(2 * out * inner, 3), [2, out, inner], "f16");
  const [xc, xr] = both(rand(inner, 4), [1, inner]);
  const [ic, ir] = both(Int32Array.from([1]), [1, 1]);
  poison(out);
  await assertClose(cuda!.matmulExperts(xc, wc, ic), ref.matmulExperts(xr, wr, ir), "wide matmulExperts", 1e-4, 1e-4);
}, skip);

test("moeRoute() with k = experts and -inf logits orders like the reference; limits throw", async () => {
  const logits = Float32Array.from([-Infinity, 2, -Infinity, 2, 0, -1, -Infinity, 7]);
  const [lc, lr] = both(logits, [1, 8]);
  const rc = cuda!.moeRoute(lc, 8, { normalize: false }), rr = ref.moeRoute(lr, 8, { normalize: false });
  assert.deepEqual(await cuda!.download(rc.ids), await ref.download(rr.ids));
  await assertClose(rc.weights, rr.weights, "weights", 1e-6, 1e-5);
  const big = cuda!.zeros([1, 4097], "f32");
  assert.throws(() => cuda!.moeRoute(big, 2, { normalize: true }), BackendShapeError);
  const [w3] = bothWeight(rand(2 * 4 * 32, 5), [2, 4, 32], "q8_0");
  assert.throws(() => cuda!.matmul(cuda!.zeros([1, 32], "f32"), w3), BackendShapeError);
}, skip);
