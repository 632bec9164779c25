import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { createEngine, type CreateEngineOptions } from "../../src/engine/engine-factory.ts";
import { Engine } from "../../src/engine/engine.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { HostKvSwap, KvSwapError } from "../../src/engine/kv-swap.ts";
import type { SchedulerStats } from "../../src/engine/scheduler-types.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const STARTS = ["Once upon a time", "Tom had a red ball", "The sun was hot and", "Lily saw a big dog", "One day a bird"];
const prompts = STARTS.map((s) => [1, ...model.tokenizer.encode(s)]);
const MAX_TOKENS = 40;

/** Runs every prompt concurrently (greedy) and returns the outputs, the stats and the pool's final use. */
async function runAll(o: CreateEngineOptions): Promise<{ outputs: number[][]; stats: SchedulerStats; used: number }> {
  const e = createEngine(createReferenceBackend(), model, o);
  try {
    const hs = prompts.map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }));
    const rs = await Promise.all(hs.map((h) => h.result));
    for (const r of rs) assert.equal(r.finishReason, "length", r.error);
    return { outputs: rs.map((r) => r.tokenIds), stats: e.stats(), used: e.pool.numUsedBlocks() };
  } finally {
    await e.stop();
  }
}

// Five sequences of ~47 tokens need 15+ blocks of 16; 8 blocks force preemption.
const TIGHT: CreateEngineOptions = { numBlocks: 8, scheduler: { maxBatchTokens: 64 } };
const baseline = await runAll({ numBlocks: 64 });

test("Engine preemption: recompute and swap give the unpressured greedy outputs; swap recomputes nothing", async () => {
  assert.equal(baseline.stats.preemptions, 0);
  const rec = await runAll({ ...TIGHT, scheduler: { ...TIGHT.scheduler, preemption: "recompute" } });
  const swap = await runAll({ ...TIGHT, scheduler: { ...TIGHT.scheduler, preemption: "swap" } });
  assert.deepEqual(rec.outputs, baseline.outputs);
  assert.deepEqual(swap.outputs, baseline.outputs);
  assert.ok(rec.stats.preemptions > 0 && swap.stats.preemptions > 0, "the tiny pool forced preemption");
  assert.ok(rec.stats.recomputedTokens > 0, "recompute preemption prefills tokens again");
  assert.equal(rec.stats.swapOuts, 0);
  assert.equal(swap.stats.swapOuts, swap.stats.preemptions, "every victim fit the default swap space");
  assert.equal(swap.stats.recomputedTokens, 0);
  assert.ok(swap.stats.swappedOutBlocks > 0);
  assert.equal(swap.stats.swappedInBlocks, swap.stats.swappedOutBlocks, "everything swapped out came back");
  for (const r of [rec, swap]) {
    assert.equal(r.used, 0, "every KV block is back in the pool");
    assert.equal(r.stats.swapUsedBlocks, 0);
  }
});

test("Engine preemption: a full swap space falls back to recompute with the same outputs", async () => {
  const some = await runAll({ ...TIGHT, scheduler: { ...TIGHT.scheduler, preemption: "swap", swapSpaceBlocks: 3 } });
  const none = await runAll({ ...TIGHT, scheduler: { ...TIGHT.scheduler, preemption: "swap", swapSpaceBlocks: 0 } });
  assert.deepEqual(some.outputs, baseline.outputs);
  assert.deepEqual(none.outputs, baseline.outputs);
  assert.ok(some.stats.swapOuts > 0, "victims that fit were swapped");
  assert.ok(some.stats.swapOuts < some.stats.preemptions, "victims that did not fit were recomputed");
  assert.ok(some.stats.recomputedTokens > 0);
  assert.equal(none.stats.swapOuts, 0);
  assert.ok(none.stats.preemptions > 0 && none.stats.recomputedTokens > 0);
  for (const r of [some, none]) {
    assert.equal(r.used, 0);
    assert.equal(r.stats.swapUsedBlocks, 0);
  }
});

test("HostKvSwap.restore() writes the saved KV at new slots of every layer", async () => {
  const b = createReferenceBackend();
  const c = { ...model.config, numLayers: 2, numKvHeads: 2, headDim: 4 };
  const kv = allocatePagedKv(b, c, 6, 4);
  const width = c.numKvHeads * c.headDim;
  const fill = (seed: number, n: number) => Float32Array.from({ length: n * width }, (_, i) => Math.sin(seed * 7 + i));
  const put = (layer: number, slots: number[], k: Float32Array, v: Float32Array) =>
    b.kvWrite(b.upload(k, [slots.length, c.numKvHeads, c.headDim]), b.upload(v, [slots.length, c.numKvHeads, c.headDim]), kv.k[layer], kv.v[layer], b.upload(Int32Array.from(slots), [slots.length]));
  const src = [4 * 4, 4 * 4 + 1, 4 * 4 + 2, 4 * 4 + 3, 1 * 4, 1 * 4 + 1]; // 6 tokens over blocks [4, 1]
  for (let l = 0; l < 2; l++) put(l, src, fill(l, 6), fill(l + 10, 6));
  const host = new HostKvSwap(b, kv);
  host.save({ seqId: 9, blockTable: [4, 1], numTokens: 6 });
  // Poison the source blocks, as a forward reusing them would.
  for (let l = 0; l < 2; l++) put(l, src, new Float32Array(6 * width).fill(NaN), new Float32Array(6 * width).fill(NaN));
  await host.restore({ seqId: 9, blockTable: [2, 5], numTokens: 6 });
  const dst = [8, 9, 10, 11, 20, 21];
  for (let l = 0; l < 2; l++) {
    const k = (await b.download(kv.k[l])) as Float32Array;
    const v = (await b.download(kv.v[l])) as Float32Array;
    const rows = (a: Float32Array) => dst.flatMap((s) => [...a.subarray(s * width, (s + 1) * width)]);
    assert.deepEqual(rows(k), [...fill(l, 6)]);
    assert.deepEqual(rows(v), [...fill(l + 10, 6)]);
  }
  assert.equal(host.size, 0);
  await assert.rejects(host.restore({ seqId: 9, blockTable: [2, 5], numTokens: 6 }), KvSwapError);
});

test("Engine refuses swap preemption with a runner that cannot copy KV to host memory", () => {
  const runner = { numBlocks: 4, blockSize: 4, run: () => Promise.resolve({ ids: new Int32Array(0) }), close: () => {} };
  assert.throws(() => new Engine({ runner, config: model.config, tokenizer: model.tokenizer, scheduler: { preemption: "swap" } }), /Preemption mode "swap" needs a runner/);
});
