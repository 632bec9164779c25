/**
 * The reference backend (the oracle every backend is checked against) on edge cases: routing's
 * MIN_ROUTE_SHARE clamp under softmax, rejected mutating ops leaving their target untouched, and
 * hand-computed cases pinning rmsnorm's eps, rope's partial neox pairing, f16 KV rounding and the
 * sampler's extreme parameters against llama.cpp / PyTorch.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { BackendShapeError, MIN_ROUTE_SHARE, type SamplingRow, type Tensor } from "../../src/backend/types.ts";

const be = createReferenceBackend();
const f32 = (values: number[], shape: number[]) => be.upload(new Float32Array(values), shape);
const i32 = (values: number[], shape = [values.length]) => be.upload(new Int32Array(values), shape);
const read = async (t: Tensor) => Array.from(await be.download(t));

function close(actual: number[], expected: number[], tol = 1e-6): void {
  assert.equal(actual.length, expected.length, `length ${actual.length} vs ${expected.length}`);
  actual.forEach((a, i) => assert.ok(Math.abs(a - expected[i]) <= tol * Math.max(1, Math.abs(expected[i])), `[${i}] ${a} vs ${expected[i]}`));
}

test("moeRoute() clamps the chosen experts' softmax share, not their unnormalised sum, to MIN_ROUTE_SHARE", async () => {
  // llama.cpp's build_moe_ffn: weights = probs[chosen] / clamp(sum(probs[chosen]), 6.1e-5, inf), with
  // probs the row's softmax. 63 experts at logit 0 and one at -8 that a bias forces in: its
  // probability e^-8 / (63 + e^-8) ≈ 5.3e-6 is below the clamp, so its weight is that / MIN_ROUTE_SHARE.
  const logits = [...new Array(63).fill(0), -8];
  const bias = [...new Array(63).fill(0), 10];
  const r = be.moeRoute(f32(logits, [1, 64]), 1, { normalize: true, selectionBias: f32(bias, [64]) });
  assert.deepEqual(await read(r.ids), [63]);
  const p = Math.exp(-8) / (63 + Math.exp(-8));
  close(await read(r.weights), [p / MIN_ROUTE_SHARE]);
});

test("moeRoute() with softmax groups renormalises over the chosen share when it is above the clamp", async () => {
  // Group 1 (experts 2, 3) sums higher than group 0, whose expert 0 holds the row's largest logit.
  const logits = [2, -9, 1.5, 1.5];
  const r = be.moeRoute(f32(logits, [1, 4]), 2, { normalize: true, groups: { count: 2, used: 1 } });
  assert.deepEqual(await read(r.ids), [2, 3]);
  close(await read(r.weights), [0.5, 0.5]);
});

test("scatterAdd() rejecting a repeated offset leaves its target as it was", async () => {
  const x = f32([0, 0, 0], [3]);
  assert.throws(() => be.scatterAdd(x, i32([0, 0]), f32([1, 1], [2])), BackendShapeError);
  assert.throws(() => be.scatterAdd(x, i32([1, 3]), f32([1, 1], [2])), /offset 3 at 1/);
  assert.deepEqual(await read(x), [0, 0, 0]);
});

test("maskLogits() and penalizeRepeats() rejecting a later row leave the earlier rows as they were", async () => {
  const logits = f32([1, 2, 3, 4], [2, 2]);
  assert.throws(() => be.maskLogits(logits, i32([0, 0]), i32([0, 0], [2, 1])), /row 0 appears twice/);
  assert.throws(() => be.maskLogits(logits, i32([0, 5]), i32([0, 0], [2, 1])), /row 5 at 1/);
  const all = i32([3, 3], [2, 1]);
  assert.throws(() => be.penalizeRepeats(logits, i32([0, 1]), all, f32([2, 0], [2])), /factor 0 at 1/);
  assert.throws(() => be.penalizeRepeats(logits, i32([1, 1]), all, f32([2, 2], [2])), /row 1 appears twice/);
  assert.deepEqual(await read(logits), [1, 2, 3, 4]);
});

test("rmsnorm() adds eps inside the square root, as llama.cpp and HF do", async () => {
  // 1 / sqrt(mean(1, 1) + 1) = 1/√2; eps outside the root would give 0.5.
  close(await read(be.rmsnorm(f32([1, 1], [1, 2]), f32([1, 2], [2]), 1)), [Math.SQRT1_2, Math.SQRT2]);
  assert.deepEqual(await read(be.rmsnorm(f32([0, 0], [1, 2]), f32([1, 1], [2]), 1e-6)), [0, 0]);
});

test("rope() neox with a partial rotaryDim pairs i with i + rotaryDim/2 and leaves the tail, at a large position", async () => {
  // headDim 6, rotaryDim 4: pairs (0, 2) and (1, 3), dims 4 and 5 untouched (llama.cpp rope_neox).
  const pos = 100000;
  const x = f32([1, 0, 0, 1, 7, 8], [1, 1, 6]);
  const out = await read(be.rope(x, i32([pos]), 10000, "neox", 4, f32([1, 4], [2])));
  const a0 = pos, a1 = (pos * 10000 ** -0.5) / 4;
  close(out, [Math.cos(a0), -Math.sin(a1), Math.sin(a0), Math.cos(a1), 7, 8], 1e-5);
});

test("kvWrite() into an f16 cache rounds to nearest, ties to even, subnormals included", async () => {
  const values = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 2049, 2051, 2 ** -25, 3 * 2 ** -26, -65519];
  const n = values.length;
  const kc = be.zeros([n, 1, 1, 1], "f16");
  const vc = be.zeros([n, 1, 1, 1], "f16");
  const k = f32(values, [n, 1, 1]);
  be.kvWrite(k, k, kc, vc, i32(values.map((_, i) => i)));
  assert.deepEqual(await read(kc), [1, 1 + 2 ** -9, 2048, 2052, 0, 2 ** -24, -65504]);
});

test("sample() at extreme parameters: top-k past the vocabulary, a tiny top-p, min-p 1", async () => {
  const logits = f32([Math.log(1), Math.log(2), Math.log(3), Math.log(4)], [1, 4]);
  const row = (over: Partial<SamplingRow>): SamplingRow => ({ temperature: 1, topK: 0, topP: 1, uniform: 0.05, ...over });
  // uniform 0.05 over p = [0.1, 0.2, 0.3, 0.4] sorted descending lands on the top token; 0.99 on the last.
  assert.deepEqual(await read(be.sample(logits, [row({ topK: 100, uniform: 0.99 })])), [0]);
  assert.deepEqual(await read(be.sample(logits, [row({ topP: 1e-9, uniform: 0.99 })])), [3]);
  assert.deepEqual(await read(be.sample(logits, [row({ minP: 1, uniform: 0.99 })])), [3]);
  assert.throws(() => be.sample(logits, [row({ topP: 0 })]), /invalid topP 0/);
  assert.throws(() => be.sample(logits, [row({ topK: -1 })]), /invalid topK -1/);
});
