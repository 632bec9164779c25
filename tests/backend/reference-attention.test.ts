/** The reference backend's paged KV write and paged attention against hand-computed cases. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { AttentionBatch, Tensor } from "../../src/backend/types.ts";

const be = createReferenceBackend();
const f32 = (values: number[], shape: number[]) => be.upload(new Float32Array(values), shape);
const i32 = (values: number[], shape = [values.length]) => be.upload(new Int32Array(values), shape);
const read = async (t: Tensor) => Array.from(await be.download(t));
const LN2 = Math.log(2);

function close(actual: number[], expected: number[], tol = 1e-6): void {
  assert.equal(actual.length, expected.length);
  actual.forEach((a, i) => assert.ok(Math.abs(a - expected[i]) <= tol, `[${i}] ${a} vs ${expected[i]}`));
}

test("kvWrite() stores rows at flat slots and rejects slots outside the cache", async () => {
  const kc = be.zeros([2, 2, 1, 2], "f32");
  const vc = be.zeros([2, 2, 1, 2], "f32");
  be.kvWrite(f32([1, 2, 3, 4], [2, 1, 2]), f32([5, 6, 7, 8], [2, 1, 2]), kc, vc, i32([3, 0]));
  assert.deepEqual(await read(kc), [3, 4, 0, 0, 0, 0, 1, 2]);
  assert.deepEqual(await read(vc), [7, 8, 0, 0, 0, 0, 5, 6]);
  assert.throws(() => be.kvWrite(f32([1, 2], [1, 1, 2]), f32([1, 2], [1, 1, 2]), kc, vc, i32([4])), /slot 4/);
  assert.throws(() => be.kvWrite(f32([1, 2], [1, 2, 1]), f32([1, 2], [1, 2, 1]), kc, vc, i32([0])), /do not fit/);
});

test("pagedAttention() follows a 2-block table, the causal limit and GQA head sharing", async () => {
  // blockSize 2, 3 blocks, 1 KV head, headDim 2; 2 query heads share it.
  const kc = be.zeros([3, 2, 1, 2], "f32");
  const vc = be.zeros([3, 2, 1, 2], "f32");
  // Sequence 0 has blocks [2, 0]: positions 0, 1 → slots 4, 5; position 2 → slot 0.
  // Sequence 1 has block [1]: position 0 → slot 2.
  const k = f32([1, 0, 0, 1, 1, 1, 5, 5], [4, 1, 2]);
  const v = f32([1, 0, 0, 2, 3, 3, 7, 8], [4, 1, 2]);
  be.kvWrite(k, v, kc, vc, i32([4, 5, 0, 2]));
  const batch: AttentionBatch = {
    tokenSeq: i32([0, 0, 1]),
    tokenPos: i32([1, 2, 0]),
    blockTables: i32([2, 0, 1, 99], [2, 2]), // 99: unused entry, must never be read
    maxContext: 3,
  };
  const q = f32([
    LN2, 0, 0, 0, // seq 0 pos 1: head 0 scores [ln2, 0]; head 1 uniform
    0, 0, LN2, LN2, // seq 0 pos 2: head 0 uniform over 3; head 1 scores [ln2, ln2, 2ln2]
    3, 1, -1, 4, // seq 1 pos 0: one key, so output = its value
  ], [3, 2, 2]);
  const out = await read(be.pagedAttention(q, kc, vc, batch, 1));
  close(out, [
    2 / 3, 2 / 3, 0.5, 1, // weights [2/3, 1/3] and [1/2, 1/2] over V rows 0, 1 (row 2 is in the future)
    4 / 3, 5 / 3, 1.75, 2, // uniform over 3 rows; weights [1/4, 1/4, 1/2]
    7, 8, 7, 8,
  ]);
});

test("pagedAttention() maps query head h to KV head floor(h / group)", async () => {
  // 4 query heads over 2 KV heads, headDim 1, one cached position in block 0.
  const kc = be.zeros([1, 16, 2, 1], "f32");
  const vc = be.zeros([1, 16, 2, 1], "f32");
  be.kvWrite(f32([1, 1], [1, 2, 1]), f32([10, 20], [1, 2, 1]), kc, vc, i32([0]));
  const batch: AttentionBatch = { tokenSeq: i32([0]), tokenPos: i32([0]), blockTables: i32([0], [1, 1]), maxContext: 1 };
  const out = await read(be.pagedAttention(f32([1, 2, 3, 4], [1, 4, 1]), kc, vc, batch, 0.5));
  assert.deepEqual(out, [10, 10, 20, 20]);
});

test("pagedAttention() applies the score scale", async () => {
  const kc = be.zeros([1, 2, 1, 1], "f32");
  const vc = be.zeros([1, 2, 1, 1], "f32");
  be.kvWrite(f32([LN2 * 2, 0], [2, 1, 1]), f32([1, 0], [2, 1, 1]), kc, vc, i32([0, 1]));
  const batch: AttentionBatch = { tokenSeq: i32([0]), tokenPos: i32([1]), blockTables: i32([0], [1, 1]), maxContext: 2 };
  // scores = 0.5 · [2ln2, 0] = [ln2, 0] → weights [2/3, 1/3]
  close(await read(be.pagedAttention(f32([1], [1, 1, 1]), kc, vc, batch, 0.5)), [2 / 3]);
});

test("pagedAttention() rejects mismatched shapes and positions past the block table", () => {
  const kc = be.zeros([1, 2, 1, 2], "f32");
  const vc = be.zeros([1, 2, 1, 2], "f32");
  const batch: AttentionBatch = { tokenSeq: i32([0]), tokenPos: i32([2]), blockTables: i32([0], [1, 1]), maxContext: 3 };
  assert.throws(() => be.pagedAttention(f32([0, 0], [1, 1, 2]), kc, vc, batch, 1), /tokenPos 2/);
  assert.throws(() => be.pagedAttention(f32([0, 0, 0], [1, 1, 3]), kc, vc, batch, 1), /do not fit cache/);
  assert.throws(() => be.pagedAttention(f32([0, 0, 0, 0, 0, 0], [1, 3, 2]), be.zeros([1, 2, 2, 2], "f32"),
    be.zeros([1, 2, 2, 2], "f32"), batch, 1), /do not fit cache/);
});

test("pagedAttention() with a window sees only the last `window` positions and never reads earlier blocks", async () => {
  // blockSize 2, headDim 1; sequence 0 has 5 positions in blocks [-1 (stale), 0, 1]: positions 0-1
  // lie in the stale block, which a window of 3 at position 4 (positions 2..4) must not touch.
  const kc = be.zeros([2, 2, 1, 1], "f32");
  const vc = be.zeros([2, 2, 1, 1], "f32");
  be.kvWrite(f32([0, 0, 0], [3, 1, 1]), f32([2, 4, 9], [3, 1, 1]), kc, vc, i32([0, 1, 2]));
  const batch: AttentionBatch = { tokenSeq: i32([0]), tokenPos: i32([4]), blockTables: i32([-1, 0, 1], [1, 3]), maxContext: 5 };
  // Equal scores: the mean of the values at positions 2, 3, 4.
  close(await read(be.pagedAttention(f32([1], [1, 1, 1]), kc, vc, batch, 1, { window: 3 })), [5]);
  assert.throws(() => be.pagedAttention(f32([1], [1, 1, 1]), kc, vc, batch, 1), /Block -1/);
  assert.throws(() => be.pagedAttention(f32([1], [1, 1, 1]), kc, vc, batch, 1, { window: 1.5 }), /window 1.5/);
});

test("pagedAttention() adds each head's sink to the softmax denominator, unscaled", async () => {
  // One key of score 0.5 · 2ln2 = ln2 (weight 2) and value 3; head 0's sink ln2 (weight 2), head 1's
  // sink -∞-like (no effect): outputs 3 · 2 / (2 + 2) and 3.
  const kc = be.zeros([1, 1, 1, 1], "f32");
  const vc = be.zeros([1, 1, 1, 1], "f32");
  be.kvWrite(f32([2 * LN2], [1, 1, 1]), f32([3], [1, 1, 1]), kc, vc, i32([0]));
  const batch: AttentionBatch = { tokenSeq: i32([0]), tokenPos: i32([0]), blockTables: i32([0], [1, 1]), maxContext: 1 };
  const sinks = f32([LN2, -80], [2]);
  close(await read(be.pagedAttention(f32([1, 1], [1, 2, 1]), kc, vc, batch, 0.5, { sinks })), [1.5, 3]);
  assert.throws(() => be.pagedAttention(f32([1, 1], [1, 2, 1]), kc, vc, batch, 0.5, { sinks: f32([0], [1]) }), /sinks \[1\] do not match 2/);
});

test("pagedAttention() gives each query head the bits of that head computed alone, for KV groups taken four heads at a time, then two, then one", async () => {
  let seed = 5;
  const rnd = (n: number) => Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32) - 0.5);
  // Groups of 6 (four, then two), 8 (four and four), 7 (four, two, one), 2 (stories260K's), 1 (plain
  // multi-head), with and without sinks.
  for (const [heads, kvHeads, withSinks] of [[6, 1, true], [16, 2, false], [14, 2, true], [8, 4, false], [3, 3, true]] as const) {
    const headDim = 8, blockSize = 4, blocks = 6, n = 3, scale = 0.3;
    const kv = blocks * blockSize * kvHeads * headDim;
    const kc = rnd(kv), vc = rnd(kv), qv = rnd(n * heads * headDim), sinks = rnd(heads);
    const table = [4, 0, 5, 2, 1, 3];
    const positions = [9, 10, 17];
    const batch: AttentionBatch = { tokenSeq: i32([0, 0, 0]), tokenPos: i32(positions), blockTables: i32(table, [1, blocks]), maxContext: 18 };
    const got = await read(be.pagedAttention(
      f32(qv, [n, heads, headDim]), f32(kc, [blocks, blockSize, kvHeads, headDim]), f32(vc, [blocks, blockSize, kvHeads, headDim]), batch, scale,
      withSinks ? { sinks: f32(sinks, [heads]) } : undefined,
    ));
    // One head at a time, in f64 as the reference sums: dots in order, softmax with the sink, V summed by position.
    const f = (x: number) => Math.fround(x);
    const want: number[] = [];
    positions.forEach((pos, t) => {
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / (heads / kvHeads));
        const rowOf = (p: number) => ((table[Math.floor(p / blockSize)] * blockSize + (p % blockSize)) * kvHeads + g) * headDim;
        const visible = Array.from({ length: pos + 1 }, (_, p) => p);
        const qb = (t * heads + h) * headDim;
        attendAlone((d) => f(qv[qb + d]), (p, d) => f(kc[rowOf(p) + d]), (p, d) => f(vc[rowOf(p) + d]), visible, headDim, scale, withSinks ? f(sinks[h]) : undefined, want);
      }
    });
    assert.deepEqual(got, want, `${heads} heads over ${kvHeads} KV heads`);
  }
});

test("pagedAttention() gives each token's heads the bits of that row computed alone, for prefill runs of several tokens, sequences and windows", async () => {
  let seed = 11;
  const rnd = (n: number) => Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32) - 0.5);
  const headDim = 4, blockSize = 4, blocks = 8, scale = 0.7;
  // Sequence 0: a run of seven tokens from position 0; sequence 1 (its blocks elsewhere) at 7, 8, 9,
  // which would continue that run were it the same sequence; sequence 0 again at 12 and 14 (a run with
  // a gap), then at 13 (going back: a run of its own).
  const tokenSeq = [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0];
  const tokenPos = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 14, 13];
  const tables = [[5, 0, 7, 2], [1, 6, 3, 4]];
  for (const [heads, kvHeads, window, withSinks] of [[1, 1, 0, false], [4, 2, 0, true], [6, 2, 0, false], [5, 5, 3, true], [8, 2, 5, false]] as const) {
    const kv = blocks * blockSize * kvHeads * headDim;
    const n = tokenSeq.length;
    const kc = rnd(kv), vc = rnd(kv), qv = rnd(n * heads * headDim), sinks = rnd(heads);
    const batch: AttentionBatch = { tokenSeq: i32(tokenSeq), tokenPos: i32(tokenPos), blockTables: i32(tables.flat(), [2, 4]), maxContext: 16 };
    const got = await read(be.pagedAttention(
      f32(qv, [n, heads, headDim]), f32(kc, [blocks, blockSize, kvHeads, headDim]), f32(vc, [blocks, blockSize, kvHeads, headDim]), batch, scale,
      { ...(window > 0 ? { window } : {}), ...(withSinks ? { sinks: f32(sinks, [heads]) } : {}) },
    ));
    const f = (x: number) => Math.fround(x);
    const want: number[] = [];
    for (let t = 0; t < n; t++) {
      const pos = tokenPos[t], table = tables[tokenSeq[t]];
      const first = window > 0 ? Math.max(0, pos - window + 1) : 0;
      for (let h = 0; h < heads; h++) {
        const g = Math.floor(h / (heads / kvHeads));
        const rowOf = (p: number) => ((table[Math.floor(p / blockSize)] * blockSize + (p % blockSize)) * kvHeads + g) * headDim;
        const visible = Array.from({ length: pos + 1 - first }, (_, i) => first + i);
        const qb = (t * heads + h) * headDim;
        attendAlone((d) => f(qv[qb + d]), (p, d) => f(kc[rowOf(p) + d]), (p, d) => f(vc[rowOf(p) + d]), visible, headDim, scale, withSinks ? f(sinks[h]) : undefined, want);
      }
    }
    assert.deepEqual(got, want, `${heads} heads over ${kvHeads} KV heads, window ${window}`);
  }
});

/**
 * One query row computed alone, in f64 as the reference sums: dots over the visible positions in
 * order, a softmax with the sink, V summed position by position; each dimension pushed as f32.
 */
function attendAlone(
  q: (d: number) => number, k: (p: number, d: number) => number, v: (p: number, d: number) => number,
  visible: readonly number[], headDim: number, scale: number, sink: number | undefined, out: number[],
): void {
  const scores = visible.map((p) => {
    let dot = 0;
    for (let d = 0; d < headDim; d++) dot += q(d) * k(p, d);
    return dot;
  });
  let max = sink ?? -Infinity;
  for (const x of scores) max = Math.max(max, x * scale);
  const e = scores.map((x) => Math.exp(x * scale - max));
  let sum = sink === undefined ? 0 : Math.exp(sink - max);
  for (const x of e) sum += x;
  const w = e.map((x) => x / sum);
  for (let d = 0; d < headDim; d++) {
    let acc = 0;
    visible.forEach((p, i) => (acc += w[i] * v(p, d)));
    out.push(Math.fround(acc));
  }
}
