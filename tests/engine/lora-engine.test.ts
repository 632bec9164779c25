/**
 * LoRA adapters in the engine (Engine.loadAdapter, GenerateRequest.adapter): a request with an
 * adapter generates what the adapter merged into the weights generates, batched with base-model
 * requests and other adapters; prompts of different adapters, and of different cache salts
 * (GenerateRequest.cacheSalt), never share prefix-cache KV; unloads wait for the adapter's requests.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import type { LoraAdapter } from "../../src/model/lora.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { LoraAdapterError } from "../../src/engine/engine-adapters.ts";
import type { Engine } from "../../src/engine/engine.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { loraGgufBytes, mergeLora } from "../model/lora-files.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const dir = mkdtempSync(`${tmpdir()}/lora-engine-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const c = model.config;
const every = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wv", "wo", "wUp", "wDown"] as const).map((target) => ({ layer, target }))).flat();
async function adapter(name: string, seed: number, targets = every): Promise<LoraAdapter> {
  const path = `${dir}/${name}.gguf`;
  await writeFile(path, loraGgufBytes(c, { seed, rank: 8, alpha: 16, targets, magnitude: 0.5 }));
  return loadLoraAdapter(path, c);
}
const A = await adapter("a", 1);
const B = await adapter("b", 2, [{ layer: 0, target: "wq" }, { layer: 1, target: "wDown" }]);

const encode = (text: string) => model.tokenizer.encode(text, { addBos: true });
// 40 tokens or so: several full blocks of 4, so the prefix cache has something to share.
const STORY = encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends.");
const greedy = (extra: Partial<GenerateRequest> = {}): GenerateRequest => ({ prompt: STORY, maxTokens: 12, temperature: 0, ignoreEos: true, ...extra });

async function withEngine<T>(fn: (e: Engine) => Promise<T>, m = model, schedulerSteps = 1): Promise<T> {
  const e = createEngine(createReferenceBackend(), m, { numBlocks: 128, blockSize: 4, schedulerSteps });
  try {
    return await fn(e);
  } finally {
    await e.stop();
  }
}

const baseAlone = await withEngine(async (e) => (await e.submit(greedy()).result).tokenIds);
const mergedA = await withEngine(async (e) => (await e.submit(greedy()).result).tokenIds, mergeLora(model, A));
const mergedB = await withEngine(async (e) => (await e.submit(greedy()).result).tokenIds, mergeLora(model, B));

test("Engine.submit() with an adapter generates what its weights merged into the model generate, batched with others", async () => {
  assert.notDeepEqual(mergedA, baseAlone, "adapter a changes the greedy tokens (the check is not vacuous)");
  assert.notDeepEqual(mergedB, baseAlone, "adapter b changes them too");
  await withEngine(async (e) => {
    e.loadAdapter("a", A);
    e.loadAdapter("b", B);
    assert.deepEqual(e.adapterNames(), ["a", "b"]);
    // All three in one batch (distinct sessions, so none waits on another's prefix).
    const [ra, r0, rb] = await Promise.all([
      e.submit(greedy({ adapter: "a", sessionId: "1" })).result,
      e.submit(greedy({ sessionId: "2" })).result,
      e.submit(greedy({ adapter: "b", sessionId: "3" })).result,
    ]);
    assert.deepEqual(ra.tokenIds, mergedA);
    assert.deepEqual(r0.tokenIds, baseAlone);
    assert.deepEqual(rb.tokenIds, mergedB);
  });
});

test("Engine.submit() with adapters runs steps ahead (schedulerSteps) each with its adapter", async () => {
  await withEngine(async (e) => {
    e.loadAdapter("a", A);
    e.loadAdapter("b", B);
    const [ra, r0, rb] = await Promise.all([
      e.submit(greedy({ adapter: "a", sessionId: "1" })).result,
      e.submit(greedy({ sessionId: "2" })).result,
      e.submit(greedy({ adapter: "b", sessionId: "3" })).result,
    ]);
    assert.deepEqual([ra.tokenIds, r0.tokenIds, rb.tokenIds], [mergedA, baseAlone, mergedB]);
    assert.ok(e.metrics.stepsRunAhead > 0, "steps ran ahead");
  }, model, 4);
});

test("Engine.submit() reuses cached KV only within one adapter and one cache salt", async () => {
  await withEngine(async (e) => {
    e.loadAdapter("a", A);
    const first = await e.submit(greedy({ adapter: "a" })).result;
    assert.equal(first.cachedTokens, 0);
    const base = await e.submit(greedy()).result;
    assert.equal(base.cachedTokens, 0, "the base model does not reuse adapter a's KV");
    assert.deepEqual(base.tokenIds, baseAlone);
    const again = await e.submit(greedy({ adapter: "a" })).result;
    assert.ok(again.cachedTokens >= 32, `adapter a reuses its own KV (cached ${again.cachedTokens})`);
    assert.deepEqual(again.tokenIds, mergedA);
    const salted = await e.submit(greedy({ cacheSalt: "tenant-1" })).result;
    assert.equal(salted.cachedTokens, 0, "a salted prompt does not reuse unsalted KV");
    assert.equal((await e.submit(greedy({ cacheSalt: "tenant-2" })).result).cachedTokens, 0, "nor another salt's");
    const same = await e.submit(greedy({ cacheSalt: "tenant-1" })).result;
    assert.ok(same.cachedTokens >= 32, `the same salt reuses it (cached ${same.cachedTokens})`);
    assert.deepEqual(same.tokenIds, baseAlone);
    assert.equal((await e.submit(greedy({ adapter: "a", cacheSalt: "tenant-1" })).result).cachedTokens, 0, "a salt under an adapter is a namespace of its own");
  });
});

test("Engine.unloadAdapter() waits for the adapter's requests, and its slot serves the next adapter", async () => {
  await withEngine(async (e) => {
    e.loadAdapter("a", A);
    e.loadAdapter("b", B);
    assert.throws(() => e.submit(greedy({ adapter: "c" })), (err: Error) => err instanceof LoraAdapterError && err.notFound && /"c" is not loaded/.test(err.message));
    assert.throws(() => e.loadAdapter("a", B), (err: Error) => err instanceof LoraAdapterError && /named "a" is already loaded/.test(err.message));
    const running = e.submit(greedy({ adapter: "a", maxTokens: 30 }));
    await running.stream[Symbol.asyncIterator]().next(); // (not a for-await break: that would cancel it)
    assert.deepEqual(e.adapterRequests(), { running: ["a"], waiting: [] });
    assert.throws(() => e.unloadAdapter("a"), (err: Error) => err instanceof LoraAdapterError && /in use by 1 request/.test(err.message));
    await running.result;
    e.unloadAdapter("a");
    assert.deepEqual(e.adapterNames(), ["b"]);
    // "b" keeps slot 2 and its outputs; a new adapter takes slot 1 again.
    e.loadAdapter("a2", A);
    const [ra, rb] = await Promise.all([e.submit(greedy({ adapter: "a2", sessionId: "x" })).result, e.submit(greedy({ adapter: "b", sessionId: "y" })).result]);
    assert.deepEqual(ra.tokenIds, mergedA);
    assert.deepEqual(rb.tokenIds, mergedB);
    assert.throws(() => e.unloadAdapter("a"), (err: Error) => err instanceof LoraAdapterError && err.notFound);
  });
});
