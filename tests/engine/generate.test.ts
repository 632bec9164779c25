/** generate() on random-weight models: greedy against a dense transformer, batching invariance, seeds, stops. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { generate, GenerateInputError } from "../../src/engine/generate.ts";
import { BlockAllocator, KvCapacityError } from "../../src/engine/kv-cache.ts";
import { seededUniforms } from "../../src/engine/sampler-rng.ts";
import { naiveLogits, randomModel, type RandomModelSpec } from "../model/forward-fixtures.ts";

const be = createReferenceBackend();
const SPEC: RandomModelSpec = {
  architecture: "qwen2", hidden: 16, layers: 2, heads: 4, kvHeads: 2, headDim: 4, ffn: 24, vocab: 29,
  ropeLayout: "neox", tied: false, dtype: "f32", seed: 11,
};
const host = randomModel(SPEC);
const model = uploadModel(be, host);
const noEos = { ...model, config: { ...model.config, eosTokenIds: [] } };
const PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21], [22, 23], [24, 25, 26, 27],
  [3, 3, 3, 3, 3], [28, 0], [7, 14, 21, 28, 6, 13, 20]];

function naiveGreedy(prompt: number[], n: number): number[] {
  const seq = [...prompt];
  for (let i = 0; i < n; i++) {
    const logits = naiveLogits(host, seq).at(-1)!;
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v] > logits[best]) best = v;
    seq.push(best);
  }
  return seq.slice(prompt.length);
}

test("generate() greedy ids equal a dense transformer's argmax continuation", async () => {
  const [r] = await generate(noEos, be, [[1, 2, 3, 4, 5]], { maxTokens: 6, blockSize: 4, prefillChunk: 3 });
  assert.deepEqual(r.ids, naiveGreedy([1, 2, 3, 4, 5], 6));
  assert.equal(r.finishReason, "length");
  assert.deepEqual(r.promptIds, [1, 2, 3, 4, 5]);
});

test("generate() of 8 prompts as one ragged batch equals each prompt alone", async () => {
  const opts = { maxTokens: 5, blockSize: 4, prefillChunk: 4 };
  const batched = await generate(noEos, be, PROMPTS, opts);
  for (const [i, p] of PROMPTS.entries()) {
    const [alone] = await generate(noEos, be, [p], { ...opts, prefillChunk: 64 });
    assert.deepEqual(batched[i].ids, alone.ids, `prompt ${i}`);
  }
});

test("generate() with a seed reproduces its samples and each sequence keeps its own stream", async () => {
  const opts = { maxTokens: 8, temperature: 1.5, topK: 20, topP: 0.95, seed: 1234 };
  const a = await generate(noEos, be, PROMPTS.slice(0, 3), opts);
  const b = await generate(noEos, be, PROMPTS.slice(0, 3), opts);
  assert.deepEqual(a.map((r) => r.ids), b.map((r) => r.ids));
  const c = await generate(noEos, be, PROMPTS.slice(0, 3), { ...opts, seed: 99 });
  assert.notDeepEqual(a.map((r) => r.ids), c.map((r) => r.ids));
  const greedy = await generate(noEos, be, PROMPTS.slice(0, 3), { maxTokens: 8 });
  assert.notDeepEqual(a.map((r) => r.ids), greedy.map((r) => r.ids));
});

test("generate() stops at an EOS id and leaves it out of the output", async () => {
  const [free] = await generate(noEos, be, [[1, 2, 3]], { maxTokens: 4 });
  const eosModel = { ...model, config: { ...model.config, eosTokenIds: [free.ids[2]] } };
  const [r] = await generate(eosModel, be, [[1, 2, 3]], { maxTokens: 4 });
  assert.equal(r.finishReason, "stop");
  assert.deepEqual(r.ids, free.ids.slice(0, free.ids.indexOf(free.ids[2])));
  const [ignored] = await generate(eosModel, be, [[1, 2, 3]], { maxTokens: 4, stopAtEos: false });
  assert.deepEqual(ignored.ids, free.ids);
});

test("generate() with schedulerSteps gives the tokens of one-token steps, through EOS, budgets and the context", async () => {
  const seeded = { maxTokens: 13, temperature: 1.5, topK: 20, topP: 0.95, seed: 1234 };
  for (const opts of [{ maxTokens: 11 }, seeded]) {
    const one = await generate(noEos, be, PROMPTS.slice(0, 3), opts);
    for (const steps of [2, 4, 16]) assert.deepEqual(await generate(noEos, be, PROMPTS.slice(0, 3), { ...opts, schedulerSteps: steps }), one, `${steps} steps`);
  }
  // An EOS mid-group ends the sequence there; the others go on.
  const [free] = await generate(noEos, be, [[1, 2, 3], [4, 5]], { maxTokens: 9 });
  const eosModel = { ...model, config: { ...model.config, eosTokenIds: [free.ids[3]] } };
  const want = await generate(eosModel, be, [[1, 2, 3], [4, 5]], { maxTokens: 9 });
  assert.deepEqual(await generate(eosModel, be, [[1, 2, 3], [4, 5]], { maxTokens: 9, schedulerSteps: 4 }), want);
  const prompt = new Array(host.config.contextLength - 6).fill(3);
  const [r] = await generate(noEos, be, [prompt], { maxTokens: 10, prefillChunk: 128, schedulerSteps: 8 });
  assert.deepEqual(r, (await generate(noEos, be, [prompt], { maxTokens: 10, prefillChunk: 128 }))[0]);
  assert.equal(r.ids.length, 6);
  await assert.rejects(() => generate(model, be, [[1]], { maxTokens: 1, schedulerSteps: 0 }), /Invalid schedulerSteps: 0/);
});

test("generate() rejects prompts longer than the context and bad options", async () => {
  const tooLong = new Array(host.config.contextLength + 1).fill(1);
  await assert.rejects(() => generate(model, be, [tooLong], { maxTokens: 1 }), GenerateInputError);
  await assert.rejects(() => generate(model, be, [tooLong], { maxTokens: 1 }), /257 tokens, more than the context length 256/);
  await assert.rejects(() => generate(model, be, [[1]], { maxTokens: 1, topP: 0 }), /Invalid topP: 0/);
  await assert.rejects(() => generate(model, be, [[]], { maxTokens: 1 }), /Prompt 0 is empty/);
});

test("generate() stops at the context length", async () => {
  const prompt = new Array(host.config.contextLength - 2).fill(3);
  const [r] = await generate(noEos, be, [prompt], { maxTokens: 10, prefillChunk: 128 });
  assert.equal(r.ids.length, 2);
  assert.equal(r.finishReason, "length");
});

test("BlockAllocator hands out and takes back blocks, and refuses to over-allocate", () => {
  const a = new BlockAllocator(3);
  const table: number[] = [];
  a.ensure(table, 17, 16);
  assert.deepEqual(table, [0, 1]);
  assert.throws(() => a.allocate(2), KvCapacityError);
  assert.equal(a.available, 1);
  a.release(table);
  assert.equal(a.available, 3);
});

test("seededUniforms() is deterministic per (seed, stream) and stays in [0, 1)", () => {
  const draw = (seed: number, stream: number) => {
    const u = seededUniforms(seed, stream);
    return Array.from({ length: 1000 }, () => u.next());
  };
  assert.deepEqual(draw(5, 0), draw(5, 0));
  assert.notDeepEqual(draw(5, 0), draw(5, 1));
  assert.notDeepEqual(draw(5, 0), draw(6, 0));
  const xs = draw(0, 0);
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  assert.ok(Math.abs(mean - 0.5) < 0.05, `mean ${mean}`);
});
