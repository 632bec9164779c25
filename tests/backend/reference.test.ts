/** The reference backend against hand-computed small cases: memory, elementwise, matmul, rope. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { BackendShapeError, MASKED_LOGIT, MIN_ROUTE_SHARE, type Tensor } from "../../src/backend/types.ts";
import { encodeFromF32 } from "../../src/backend/dtype-codec.ts";

const be = createReferenceBackend();
const f32 = (values: number[], shape: number[]) => be.upload(new Float32Array(values), shape);
const i32 = (values: number[]) => be.upload(new Int32Array(values), [values.length]);
const read = async (t: Tensor) => Array.from(await be.download(t));

function close(actual: number[], expected: number[], tol = 1e-6): void {
  assert.equal(actual.length, expected.length, `length ${actual.length} vs ${expected.length}`);
  actual.forEach((a, i) => assert.ok(Math.abs(a - expected[i]) <= tol, `[${i}] ${a} vs ${expected[i]}`));
}

test("upload(), download(), zeros() and reshape() round-trip values", async () => {
  const t = f32([1, 2, 3, 4, 5, 6], [2, 3]);
  assert.deepEqual(await read(t), [1, 2, 3, 4, 5, 6]);
  const v = be.reshape(t, [3, 2]);
  assert.deepEqual(v.shape, [3, 2]);
  assert.deepEqual(await read(v), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(await read(be.zeros([2, 2], "i32")), [0, 0, 0, 0]);
  assert.equal((await be.download(i32([7, -1]))) instanceof Int32Array, true);
  assert.throws(() => be.reshape(t, [4, 2]), BackendShapeError);
  assert.throws(() => f32([1, 2, 3], [2, 2]), /3 values for shape \[2, 2\]/);
});

test("free() makes later use of the tensor and its views fail", async () => {
  const t = f32([1, 2], [1, 2]);
  const v = be.reshape(t, [2]);
  be.free(t);
  await assert.rejects(() => be.download(v), /after free/);
});

test("uploadWeight() dequantizes f16, bf16 and q8_0", async () => {
  const f16 = new Uint8Array([0x00, 0x3c, 0x00, 0xc0]); // 1, -2
  assert.deepEqual(await read(be.uploadWeight(f16, [1, 2], "f16")), [1, -2]);
  const bf16 = new Uint8Array([0x80, 0x3f, 0x40, 0x40]); // 1, 3
  assert.deepEqual(await read(be.uploadWeight(bf16, [2], "bf16")), [1, 3]);
  const q = new Uint8Array(34);
  q[0] = 0x00;
  q[1] = 0x38; // scale 0.5
  for (let j = 0; j < 32; j++) q[2 + j] = (j - 16) & 0xff;
  const deq = await read(be.uploadWeight(q, [1, 32], "q8_0"));
  assert.deepEqual(deq, Array.from({ length: 32 }, (_, j) => (j - 16) * 0.5));
  assert.throws(() => be.uploadWeight(new Uint8Array(34), [2, 16], "q8_0"), /multiple of 32/);
});

test("embedding() gathers rows of any weight dtype and rejects bad ids", async () => {
  const table = be.uploadWeight(encodeFromF32(new Float32Array([1, 2, 3, 4, 5, 6]), "f16"), [3, 2], "f16");
  assert.deepEqual(await read(be.embedding(table, i32([2, 0, 2]))), [5, 6, 1, 2, 5, 6]);
  assert.throws(() => be.embedding(table, i32([3])), /Token id 3/);
});

test("gatherRows() picks rows by index", async () => {
  const x = f32([1, 2, 3, 4, 5, 6], [3, 2]);
  assert.deepEqual(await read(be.gatherRows(x, i32([1, 1, 0]))), [3, 4, 3, 4, 1, 2]);
});

test("sliceColumns() and concatColumns() cut and join the last dim; bad windows and mismatched rows are refused", async () => {
  const x = f32([1, 2, 3, 4, 5, 6, 7, 8], [2, 1, 4]);
  const middle = be.sliceColumns(x, 1, 2);
  assert.deepEqual(middle.shape, [2, 1, 2]);
  assert.deepEqual(await read(middle), [2, 3, 6, 7]);
  const joined = be.concatColumns(middle, f32([9, 10], [2, 1, 1]));
  assert.deepEqual(joined.shape, [2, 1, 3]);
  assert.deepEqual(await read(joined), [2, 3, 9, 6, 7, 10]);
  assert.throws(() => be.sliceColumns(x, 3, 2), /start 3, width 2 does not fit the last dim of \[2, 1, 4\]/);
  assert.throws(() => be.sliceColumns(x, 0, 0), BackendShapeError);
  assert.throws(() => be.concatColumns(x, f32([1, 2, 3], [3, 1, 1])), /must share every dim but the last/);
});

test("rmsnorm() matches hand-computed values", async () => {
  // [3, 4]: mean of squares 12.5, rms 3.5355339; weight [1, 2]
  const y = be.rmsnorm(f32([3, 4, 0, 0], [2, 2]), f32([1, 2], [2]), 0);
  close((await read(y)).slice(0, 2), [0.8485281, 2.2627417]);
  // eps keeps an all-zero row finite
  const z = be.rmsnorm(f32([0, 0], [1, 2]), f32([1, 1], [2]), 1e-5);
  assert.deepEqual(await read(z), [0, 0]);
  assert.throws(() => be.rmsnorm(f32([1, 2], [1, 2]), f32([1, 2, 3], [3]), 0), /\[3\].*\[1, 2\]/);
});

test("siluMul(), add() and softmax() match hand-computed values", async () => {
  close(await read(be.siluMul(f32([1, 0, -1], [3]), f32([2, 5, 1], [3]))), [1.4621172, 0, -0.2689414]);
  assert.deepEqual(await read(be.add(f32([1, 2], [2]), f32([10, -2], [2]))), [11, 0]);
  close(await read(be.softmax(f32([0, Math.log(3), 5, 5], [2, 2]))), [0.25, 0.75, 0.5, 0.5]);
  // Large logits must not overflow.
  close(await read(be.softmax(f32([1000, 1000], [1, 2]))), [0.5, 0.5]);
  assert.throws(() => be.add(f32([1, 2], [2]), f32([1, 2], [1, 2])), /\[2\] and \[1, 2\] differ/);
});

test("argmax() returns the lowest index on ties", async () => {
  assert.deepEqual(await read(be.argmax(f32([1, 3, 3, -1, -1, -2], [2, 3]))), [1, 0]);
});

test("matmul() computes x·Wᵀ + bias", async () => {
  const x = f32([1, 2, -1, 0.5], [2, 2]);
  const w = f32([1, 0, 0, 1, 1, 1], [3, 2]);
  assert.deepEqual(await read(be.matmul(x, w)), [1, 2, 3, -1, 0.5, -0.5]);
  assert.deepEqual(await read(be.matmul(x, w, f32([0.5, 0, -1], [3]))), [1.5, 2, 2, -0.5, 0.5, -1.5]);
  assert.throws(() => be.matmul(f32([1, 2, 3], [1, 3]), w), /\[1, 3\] does not fit weight \[3, 2\]/);
  assert.throws(() => be.matmul(x, w, f32([1], [1])), BackendShapeError);
});

test("matmul() gives every output the bits of its own f64 dot product, across its row and column blocks and their remainders", async () => {
  let seed = 99;
  const rnd = (n: number) => Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32) - 0.5);
  // Rows in blocks of four with one to three left over; a single row's weights in blocks of four with some left over.
  for (const [n, k, m] of [[1, 37, 11], [4, 16, 3], [6, 29, 5], [11, 8, 9]]) {
    const xv = Float32Array.from(rnd(n * k)), wv = Float32Array.from(rnd(m * k)), bv = Float32Array.from(rnd(m));
    const got = await read(be.matmul(f32([...xv], [n, k]), f32([...wv], [m, k]), f32([...bv], [m])));
    const want: number[] = [];
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < m; j++) {
        let acc = 0;
        for (let c = 0; c < k; c++) acc += xv[i * k + c] * wv[j * k + c];
        want.push(Math.fround(acc + bv[j]));
      }
    }
    assert.deepEqual(got, want, `${n}×${k} · ${m}×${k}`);
    const bare = await read(be.matmul(f32([...xv], [n, k]), f32([...wv], [m, k])));
    assert.deepEqual(bare, want.map((_, o) => {
      const i = Math.floor(o / m), j = o % m;
      let acc = 0;
      for (let c = 0; c < k; c++) acc += xv[i * k + c] * wv[j * k + c];
      return Math.fround(acc);
    }), `${n}×${k} · ${m}×${k} without a bias`);
  }
});

test("matmulExperts() gives every output the bits of its own f64 dot product with its row's expert, shared or per-expert input", async () => {
  let seed = 7;
  const rnd = (n: number) => Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32) - 0.5);
  const experts = 3, inner = 13;
  // Expert rows in blocks of four with some left over (out 9), and fewer than four (out 3).
  for (const out of [9, 3]) {
    const wv = Float32Array.from(rnd(experts * out * inner));
    const ids = [2, 0, 1, 2, 0, 0];
    for (const perExpert of [false, true]) {
      const rows = perExpert ? 6 : 3;
      const xv = Float32Array.from(rnd(rows * inner));
      const got = await read(be.matmulExperts(f32([...xv], [rows, inner]), f32([...wv], [experts, out, inner]), be.upload(new Int32Array(ids), [3, 2])));
      const want: number[] = [];
      ids.forEach((e, r) => {
        const xb = (perExpert ? r : Math.floor(r / 2)) * inner;
        for (let o = 0; o < out; o++) {
          let acc = 0;
          for (let c = 0; c < inner; c++) acc += xv[xb + c] * wv[(e * out + o) * inner + c];
          want.push(Math.fround(acc));
        }
      });
      assert.deepEqual(got, want, `out ${out}, ${perExpert ? "per-expert" : "shared"} input`);
    }
  }
});

test("matmul() against a q8_0 weight matches hand-computed sums", async () => {
  const raw = new Uint8Array(68);
  raw[1] = 0x38; // row 0: scale 0.5, quants 0..31 → 0, 0.5, ..., 15.5
  for (let j = 0; j < 32; j++) raw[2 + j] = j;
  raw[35] = 0x3c; // row 1: scale 1, quants all -1
  raw.fill(0xff, 36, 68);
  const w = be.uploadWeight(raw, [2, 32], "q8_0");
  const ones = f32(new Array(32).fill(1), [1, 32]);
  assert.deepEqual(await read(be.matmul(ones, w)), [248, -32]);
  const oneHot = f32(Array.from({ length: 32 }, (_, j) => (j === 5 ? 2 : 0)), [1, 32]);
  assert.deepEqual(await read(be.matmul(oneHot, w)), [5, -2]);
});

test("rope() rotates adjacent pairs in the normal layout", async () => {
  // headDim 4, theta 10000: pair 0 turns by pos·1, pair 1 by pos·0.01.
  const y = be.rope(f32([1, 0, 1, 0, 1, 2, 3, 4], [2, 1, 4]), i32([1, 0]), 10000, "normal");
  close(await read(y), [0.5403023, 0.8414710, 0.99995, 0.00999983, 1, 2, 3, 4]);
});

test("rope() rotates half-split pairs in the neox layout and honours rotaryDim", async () => {
  // Pairs (0, 2) and (1, 3): x0 = 1, x2 = 1 turned by 1 rad; x1 = 2, x3 = 0 turned by 0.01 rad.
  const y = be.rope(f32([1, 2, 1, 0], [1, 1, 4]), i32([1]), 10000, "neox");
  close(await read(y), [0.5403023 - 0.8414710, 2 * 0.99995, 0.8414710 + 0.5403023, 2 * 0.00999983]);
  // rotaryDim 2 with neox pairs (0, 1) at frequency 1 and leaves dims 2, 3 alone; two heads.
  const z = be.rope(f32([1, 0, 7, 8, 0, 1, 9, 9], [1, 2, 4]), i32([2]), 10000, "neox", 2);
  close(await read(z), [-0.4161468, 0.9092974, 7, 8, -0.9092974, -0.4161468, 9, 9]);
  assert.throws(() => be.rope(f32([1, 2], [1, 1, 2]), i32([0, 1]), 10000, "normal"), BackendShapeError);
});

test("rope() divides each pair's frequency by its freqFactors entry", async () => {
  // headDim 4, theta 10000, pos 2, factors [2, 0.5]: pair 0 turns by 2·1/2 = 1 rad, pair 1 by 2·0.01/0.5 = 0.04 rad.
  const y = be.rope(f32([1, 0, 0, 1], [1, 1, 4]), i32([2]), 10000, "normal", undefined, f32([2, 0.5], [2]));
  close(await read(y), [0.5403023, 0.8414710, -0.0399893, 0.9992001]);
  // neox with rotaryDim 2: one pair (0, 1) turned by 3·1/4 = 0.75 rad; dims 2, 3 pass through.
  const z = be.rope(f32([1, 0, 5, 6], [1, 1, 4]), i32([3]), 10000, "neox", 2, f32([4], [1]));
  close(await read(z), [0.7316889, 0.6816388, 5, 6]);
  assert.throws(() => be.rope(f32([1, 0, 0, 1], [1, 1, 4]), i32([2]), 10000, "normal", undefined, f32([2, 1, 1], [3])),
    (e: unknown) => e instanceof BackendShapeError && /freqFactors \[3\]/.test(e.message));
});

test("rope() multiplies the rotated pairs by its magnitude and leaves the unrotated dims", async () => {
  // neox, rotaryDim 2, pos 3, factor 4: pair (0, 1) turned by 0.75 rad then times 1.5; dims 2, 3 pass through.
  const z = be.rope(f32([1, 0, 5, 6], [1, 1, 4]), i32([3]), 10000, "neox", 2, f32([4], [1]), 1.5);
  close(await read(z), [0.7316889 * 1.5, 0.6816388 * 1.5, 5, 6]);
  assert.throws(() => be.rope(f32([1, 0, 0, 1], [1, 1, 4]), i32([2]), 10000, "normal", undefined, undefined, -1),
    (e: unknown) => e instanceof BackendShapeError && /rope magnitude -1 must be a positive number/.test(e.message));
});

test("ops reject tensors from another backend", () => {
  const foreign: Tensor = { shape: [1], dtype: "f32", backend: "webgpu" };
  assert.throws(() => be.add(foreign, foreign), /belongs to backend "webgpu"/);
});

test("maskLogits() sets exactly the tokens whose bit is 0 to MASKED_LOGIT, on the rows named", async () => {
  // Vocabulary 35: two words per row, the second covering tokens 32..34 only.
  const x = f32(Array.from({ length: 3 * 35 }, (_, i) => i), [3, 35]);
  const allowed = [[0, 5, 31, 33], [1, 32, 34]];
  const bits = new Int32Array(4);
  allowed.forEach((ids, k) => ids.forEach((v) => (bits[k * 2 + (v >> 5)] |= 1 << (v & 31))));
  be.maskLogits(x, i32([2, 0]), be.upload(bits, [2, 2]));
  const out = await read(x);
  for (let row = 0; row < 3; row++) {
    const ok = row === 2 ? allowed[0] : row === 0 ? allowed[1] : null;
    for (let v = 0; v < 35; v++) assert.equal(out[row * 35 + v], ok === null || ok.includes(v) ? row * 35 + v : Math.fround(MASKED_LOGIT), `row ${row} token ${v}`);
  }
  assert.throws(() => be.maskLogits(x, i32([0]), be.upload(new Int32Array(1), [1, 1])), /maskLogits bits \[1, 1\] do not match 1 rows of 2 words for a vocabulary of 35/);
  assert.throws(() => be.maskLogits(x, i32([1, 1]), be.upload(new Int32Array(4), [2, 2])), /row 1 appears twice/);
  assert.throws(() => be.maskLogits(x, i32([3]), be.upload(new Int32Array(2), [1, 2])), /row 3 at 0 is outside 0..2/);
});

test("moeRoute() chooses by sigmoid plus selection bias and weighs by the unbiased sigmoid", async () => {
  const sig = (x: number) => 1 / (1 + Math.exp(-x));
  const logits = f32([0, 2, -1, 1], [1, 4]);
  const bias = f32([1, 0, 0, 0.5], [4]);
  // Scores σ + b: 1.5, 0.881, 0.269, 1.231 → experts 0, 3; weights σ(0), σ(1) over their sum, × 2.
  const biased = be.moeRoute(logits, 2, { normalize: true, gating: "sigmoid", selectionBias: bias, scale: 2 });
  assert.deepEqual(await read(biased.ids), [0, 3]);
  const picked = sig(0) + sig(1);
  close(await read(biased.weights), [(2 * sig(0)) / picked, (2 * sig(1)) / picked]);
  // Without a bias the largest logits win; unnormalised sigmoid weights stay the sigmoids.
  const plain = be.moeRoute(logits, 2, { normalize: false, gating: "sigmoid" });
  assert.deepEqual(await read(plain.ids), [1, 3]);
  close(await read(plain.weights), [sig(2), sig(1)]);
  // Softmax with a bias chooses by probability + bias.
  const soft = be.moeRoute(logits, 1, { normalize: false, selectionBias: bias });
  const total = [0, 2, -1, 1].reduce((a, l) => a + Math.exp(l), 0);
  assert.deepEqual(await read(soft.ids), [0]);
  close(await read(soft.weights), [1 / total]);
});

test("moeRoute() with groups chooses only within the groups whose two best probabilities sum highest", async () => {
  // Groups of two: {3, -5}, {2, 2}, {0, 0}. By probability e³ + e⁻⁵ beats 2e² beats 2, so with one
  // group used both experts of group 0 are chosen although experts 2 and 3 each beat expert 1.
  const logits = f32([3, -5, 2, 2, 0, 0], [1, 6]);
  const one = be.moeRoute(logits, 2, { normalize: true, groups: { count: 3, used: 1 } });
  assert.deepEqual(await read(one.ids), [0, 1]);
  close(await read(one.weights), [1 / (1 + Math.exp(-8)), 1 / (1 + Math.exp(8))]);
  const two = be.moeRoute(logits, 2, { normalize: true, groups: { count: 3, used: 2 } });
  assert.deepEqual(await read(two.ids), [0, 2]);
  assert.throws(() => be.moeRoute(logits, 2, { normalize: true, groups: { count: 4, used: 1 } }), /groups \{"count":4,"used":1\} do not fit 6 experts/);
  assert.throws(() => be.moeRoute(logits, 3, { normalize: true, groups: { count: 3, used: 1 } }), /k within the used groups/);
});

test("moeRoute() refuses a bias of the wrong length, an unknown gating and a non-finite scale", () => {
  const logits = f32([0, 1, 2], [1, 3]);
  assert.throws(() => be.moeRoute(logits, 1, { normalize: true, selectionBias: f32([0, 0], [2]) }), /selection bias \[2\] needs 3 values/);
  assert.throws(() => be.moeRoute(logits, 1, { normalize: true, gating: "relu" as "sigmoid" }), /Unknown moeRoute gating "relu"/);
  assert.throws(() => be.moeRoute(logits, 1, { normalize: true, scale: NaN }), /scale must be a finite number, got NaN/);
});

test("moeRoute() renormalises by at least MIN_ROUTE_SHARE, so vanishing sigmoids give tiny weights, not NaN", async () => {
  const logits = [-60, -61, -90];
  const r = be.moeRoute(f32(logits, [1, 3]), 2, { normalize: true, gating: "sigmoid" });
  assert.deepEqual(await read(r.ids), [0, 1]);
  const sig = (x: number) => 1 / (1 + Math.exp(-x));
  const weights = await read(r.weights);
  weights.forEach((w, j) => assert.ok(Math.abs(w - sig(logits[j]) / MIN_ROUTE_SHARE) <= 1e-6 * Math.abs(w), `${w}`));
});

test("pagedAttention() soft-caps the scaled scores before the softmax, and softcap() is cap · tanh(x / cap)", async () => {
  // One sequence of three positions, one head of 4 dims: each output checked against the definition.
  const q = [1, 2, -1, 0.5, 0.3, -0.2, 0.9, 1.1, -0.7, 0.4, 0.2, 0.8];
  const k = Array.from({ length: 16 }, (_, i) => (i < 12 ? Math.sin(i + 1) * 2 : 0));
  const v = Array.from({ length: 16 }, (_, i) => (i < 12 ? Math.cos(i * 0.7) : 0));
  const batch = { tokenSeq: be.upload(Int32Array.from([0, 0, 0]), [3]), tokenPos: be.upload(Int32Array.from([0, 1, 2]), [3]), blockTables: be.upload(Int32Array.from([0]), [1, 1]), maxContext: 3 };
  const expected = (cap: number) => {
    const out: number[] = [];
    for (let t = 0; t < 3; t++) {
      const s = Array.from({ length: t + 1 }, (_, j) => {
        const dot = 0.5 * [0, 1, 2, 3].reduce((a, e) => a + q[t * 4 + e] * k[j * 4 + e], 0);
        return cap ? cap * Math.tanh(dot / cap) : dot;
      });
      const m = Math.max(...s);
      const w = s.map((x) => Math.exp(x - m));
      const z = w.reduce((a, b) => a + b);
      for (let e = 0; e < 4; e++) out.push(w.reduce((a, x, j) => a + (x / z) * v[j * 4 + e], 0));
    }
    return out;
  };
  const run = (softcap?: number) => read(be.pagedAttention(f32(q, [3, 1, 4]), f32(k, [1, 4, 1, 4]), f32(v, [1, 4, 1, 4]), batch, 0.5, { softcap }));
  close(await run(), expected(0), 1e-6);
  close(await run(0.5), expected(0.5), 1e-6);
  assert.ok(Math.abs((await run(0.5))[4] - (await run())[4]) > 0.1, "the cap bends these scores");
  close(await read(be.softcap(f32([0, 30, -300, 3], [4]), 30)), [0, 30 * Math.tanh(1), -30 * Math.tanh(10), 30 * Math.tanh(0.1)], 1e-5);
  assert.throws(() => be.softcap(f32([1], [1]), 0), (e: unknown) => e instanceof BackendShapeError && /softcap cap 0 must be a positive number/.test(e.message));
  assert.throws(() => be.pagedAttention(f32(q, [3, 1, 4]), f32(k, [1, 4, 1, 4]), f32(v, [1, 4, 1, 4]), batch, 0.5, { softcap: -1 }), /Attention softcap -1 must be a positive number/);
});

test("rmsnorm() with a weight [groups, d] norms each row alone and weighs row r by weight row r mod groups; reluSquared() is max(x, 0)²", async () => {
  // Two tokens of two groups of 3: rows 0 and 2 take weight row 0, rows 1 and 3 weight row 1.
  const x = [1, 2, 3, -4, 0, 4, 0.5, 0.5, 0.5, 2, -2, 1];
  const w = [1, 2, 3, -1, 0.5, 2];
  const want: number[] = [];
  for (let r = 0; r < 4; r++) {
    const row = x.slice(r * 3, r * 3 + 3);
    const inv = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / 3 + 1e-6);
    row.forEach((v, c) => want.push(v * inv * w[(r % 2) * 3 + c]));
  }
  close(await read(be.rmsnorm(f32(x, [4, 3]), f32(w, [2, 3]), 1e-6)), want, 1e-6);
  assert.throws(() => be.rmsnorm(f32(x, [3, 4]), f32(w, [2, 3]), 1e-6), (e: unknown) => e instanceof BackendShapeError && /rmsnorm weight \[2, 3\] does not match input \[3, 4\]/.test(e.message));
  assert.throws(() => be.rmsnorm(f32(x.slice(0, 9), [3, 3]), f32(w, [2, 3]), 1e-6), /rmsnorm weight \[2, 3\] does not match input \[3, 3\]/);
  close(await read(be.reluSquared!(f32([-2, 0, 0.5, 3], [2, 2]))), [0, 0, 0.25, 9], 0);
});
