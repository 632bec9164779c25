/** forward() against a dense f64 transformer, and its invariances under chunking, paging and batching. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward, ForwardInputError, type PagedKv } from "../../src/model/forward.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { naiveLogits, randomModel, type RandomModelSpec } from "./forward-fixtures.ts";

const be = createReferenceBackend();
const BASE: RandomModelSpec = {
  architecture: "llama", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 40, vocab: 37,
  ropeLayout: "normal", tied: false, dtype: "f32", seed: 1,
};
const TOKENS = [1, 5, 9, 30, 2, 17, 17, 36, 0, 11];

async function logitsRows(t: import("../../src/backend/types.ts").Tensor): Promise<Float32Array[]> {
  const data = (await be.download(t)) as Float32Array;
  const vocab = t.shape[1];
  be.free(t);
  return Array.from({ length: t.shape[0] }, (_, i) => data.slice(i * vocab, (i + 1) * vocab));
}

function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tol: number, what: string): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < actual.length; i++) {
    assert.ok(Math.abs(actual[i] - expected[i]) <= tol, `${what}[${i}]: ${actual[i]} vs ${expected[i]}`);
  }
}

async function checkAgainstNaive(spec: RandomModelSpec, tol: number): Promise<void> {
  const host = randomModel(spec);
  const model = uploadModel(be, host);
  const kv = allocatePagedKv(be, host.config, 4, 4);
  // Non-contiguous blocks, out of order: paging must not matter.
  const rows = await logitsRows(forward(be, model, kv, {
    entries: [{ tokens: TOKENS, startPos: 0, blockTable: [3, 0, 2] }],
    allPositions: true,
  }));
  const expected = naiveLogits(host, TOKENS);
  rows.forEach((r, i) => assertClose(r, expected[i], tol, `${spec.architecture} position ${i}`));
}

test("forward() matches a dense transformer for Llama (normal rope, untied output, GQA)", async () => {
  await checkAgainstNaive(BASE, 1e-4);
});

test("forward() matches a dense transformer for Qwen2 (qkv bias, neox rope, tied output)", async () => {
  await checkAgainstNaive({ ...BASE, architecture: "qwen2", ropeLayout: "neox", tied: true, seed: 2 }, 1e-4);
});

test("forward() matches a dense transformer for Qwen3 (q/k norm, odd head count, MHA-to-1 GQA)", async () => {
  await checkAgainstNaive({ ...BASE, architecture: "qwen3", ropeLayout: "neox", heads: 3, kvHeads: 1, hidden: 24, seed: 3 }, 1e-4);
});

test("forward() matches a dense transformer with q8_0 and bf16 weights", async () => {
  await checkAgainstNaive({ ...BASE, dtype: "q8_0", ffn: 64, seed: 4 }, 1e-4);
  await checkAgainstNaive({ ...BASE, dtype: "bf16", tied: true, seed: 5 }, 1e-4);
});

async function lastLogits(kv: PagedKv, steps: { tokens: number[]; startPos: number }[], table: number[]) {
  const model = uploadModel(be, randomModel(BASE));
  let last: Float32Array[] = [];
  for (const s of steps) last = await logitsRows(forward(be, model, kv, { entries: [{ ...s, blockTable: table }] }));
  return last[0];
}

test("forward() gives the same last logits for one-shot prefill, chunked prefill and decode", async () => {
  const cfg = randomModel(BASE).config;
  const oneShot = await lastLogits(allocatePagedKv(be, cfg, 4, 4), [{ tokens: TOKENS, startPos: 0 }], [0, 1, 2]);
  const chunked = await lastLogits(allocatePagedKv(be, cfg, 4, 4), [
    { tokens: TOKENS.slice(0, 3), startPos: 0 },
    { tokens: TOKENS.slice(3, 9), startPos: 3 },
    { tokens: TOKENS.slice(9), startPos: 9 },
  ], [2, 3, 1]);
  const decode = await lastLogits(allocatePagedKv(be, cfg, 4, 4), TOKENS.map((t, i) => ({ tokens: [t], startPos: i })), [1, 0, 3]);
  assertClose(chunked, oneShot, 1e-5, "chunked");
  assertClose(decode, oneShot, 1e-5, "decode");
});

test("forward() over a ragged batch equals each entry run alone", async () => {
  const host = randomModel({ ...BASE, architecture: "qwen3", ropeLayout: "neox", seed: 6 });
  const model = uploadModel(be, host);
  const prompts = [[3, 4, 5], [7], [1, 2, 3, 4, 5, 6, 7, 8, 9], [20, 21]];
  const kv = allocatePagedKv(be, host.config, 8, 4);
  const tables = [[0], [1], [2, 3, 4], [5]];
  const batched = await logitsRows(forward(be, model, kv, {
    entries: prompts.map((tokens, i) => ({ tokens, startPos: 0, blockTable: tables[i] })),
  }));
  assert.equal(batched.length, prompts.length);
  for (const [i, tokens] of prompts.entries()) {
    const alone = allocatePagedKv(be, host.config, 3, 4);
    const [row] = await logitsRows(forward(be, model, alone, { entries: [{ tokens, startPos: 0, blockTable: [0, 1, 2] }] }));
    assertClose(batched[i], row, 1e-5, `entry ${i}`);
  }
});

test("forward() rejects short block tables, unknown tokens and foreign cache sizes", () => {
  const host = randomModel(BASE);
  const model = uploadModel(be, host);
  const kv = allocatePagedKv(be, host.config, 2, 4);
  const run = (tokens: number[], startPos: number, blockTable: number[]) =>
    forward(be, model, kv, { entries: [{ tokens, startPos, blockTable }] });
  assert.throws(() => run([1, 2, 3, 4, 5], 0, [0]), ForwardInputError);
  assert.throws(() => run([1, 2, 3, 4, 5], 0, [0]), /position 4.*1 blocks of 4/);
  assert.throws(() => run([37], 0, [0]), /token id 37/);
  assert.throws(() => run([1], 0, [2]), /block 2/);
  assert.throws(() => forward(be, model, kv, { entries: [] }), /at least one entry/);
});

test("forward() extraRows returns the last rows, then the asked rows of a ragged batch", async () => {
  const host = randomModel({ ...BASE, seed: 8 });
  const model = uploadModel(be, host);
  const entries = [{ tokens: [3, 4, 5], startPos: 0, blockTable: [0] }, { tokens: [9, 8, 7, 6, 5], startPos: 0, blockTable: [1, 2] }];
  const every = await logitsRows(forward(be, model, allocatePagedKv(be, host.config, 3, 4), { entries, allPositions: true }));
  const extraRows = [0, 7, 3, 3];
  const got = await logitsRows(forward(be, model, allocatePagedKv(be, host.config, 3, 4), { entries, extraRows }));
  assert.equal(got.length, 2 + extraRows.length);
  [2, 7, ...extraRows].forEach((row, i) => assertClose(got[i], every[row], 1e-6, `output row ${i} (flat row ${row})`));
  const kv = allocatePagedKv(be, host.config, 3, 4);
  assert.throws(() => forward(be, model, kv, { entries, extraRows: [8] }), /Extra logit row 8 is outside the step's 8 rows/);
});
