/**
 * The fp8 KV cache (`--kv-cache-dtype fp8`, f8_e4m3: 32 E4M3 codes under a power-of-two scale per 32
 * values, engine/kv-cache.ts): which models and backends take it, what it saves (32/9 the blocks of
 * f32 for a memory budget), that keys and values are really stored so (logits move, boundedly), that
 * host copies round-trip exactly, as half bits where f16 holds them (moves between workers, swap and
 * the host tier rely on it), and that
 * the WebGPU engine computes with it what the reference does.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend, KvDType } from "../../src/backend/types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { generate } from "../../src/engine/generate.ts";
import { allocatePagedKv, freePagedKv, kvBytesPerBlock, kvDtypeChoice, KvDTypeError, resolveKvDtype } from "../../src/engine/kv-cache.ts";
import { asF32, type HostKv, hostKvBytes, readSlots, slotsOf, writeSlots } from "../../src/engine/kv-copy.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { lastLogitsThroughCache } from "../model/step-logits.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ModelFileSpec, randomHfWeights, writeHfDirectory } from "../model/model-files.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

// A small random Llama whose heads are 64 wide (whole 32-value blocks); stories260K's are 8.
const SPEC: ModelFileSpec = { architecture: "llama", hidden: 128, layers: 2, heads: 4, kvHeads: 2, headDim: 64, ffn: 192, vocab: 300, tied: false, dtype: "f32", seed: 97 };
const dir = mkdtempSync(`${tmpdir()}/kv-fp8-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
await writeHfDirectory(dir, SPEC, randomHfWeights(SPEC));
const model = await loadModel(dir);
const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const reference = createReferenceBackend();
const f32Only: Backend = { ...reference, info: { ...reference.info, name: "f32-only", kvDtypes: ["f32"] } };
const PROMPT = [1, 17, 120, 255, 3, 42, 299, 64, 7, 8, 90, 91, 200, 13, 14, 15, 16, 150, 151];

test("kvDtypeChoice() reads vLLM's fp8 names; resolveKvDtype() takes f8_e4m3 only when asked, for rows of whole 32-value blocks", () => {
  assert.equal(kvDtypeChoice("fp8"), "f8_e4m3");
  assert.equal(kvDtypeChoice("fp8_e4m3"), "f8_e4m3");
  assert.equal(kvDtypeChoice("f8_e4m3"), "f8_e4m3");
  assert.equal(kvDtypeChoice("fp8_e5m2"), undefined);
  assert.equal(kvDtypeChoice("constructor"), undefined);
  assert.equal(resolveKvDtype(reference, model.config), "f16", "auto stays f16");
  assert.equal(resolveKvDtype(reference, model.config, "f8_e4m3"), "f8_e4m3");
  // stories260K's rows are 4 heads of 8: one block, one scale for the four.
  assert.equal(resolveKvDtype(reference, stories.config, "f8_e4m3"), "f8_e4m3");
  assert.throws(() => resolveKvDtype(reference, { ...stories.config, numKvHeads: 3 }, "f8_e4m3"), (e: unknown) =>
    e instanceof KvDTypeError && /An fp8 \(f8_e4m3\) KV cache needs rows of whole 32-value blocks and heads of a multiple of 4 dims; this model's rows are 3 heads of 8/.test(e.message));
  assert.throws(() => resolveKvDtype(reference, { ...stories.config, numKvHeads: 16, headDim: 6 }, "f8_e4m3"), /rows are 16 heads of 6/);
  assert.throws(() => resolveKvDtype(f32Only, model.config, "f8_e4m3"), /f32-only backend's attention takes f32 KV caches, not f8_e4m3/);
  assert.throws(() => resolveKvDtype(reference, model.config, "fp8" as KvDType), /Unknown KV cache dtype "fp8"; use auto, f16, f32 or fp8 \(f8_e4m3\)/);
});

test("createEngine() fits 32/9 the f32 cache's KV blocks in a memory budget with an f8_e4m3 cache", async () => {
  const c = model.config;
  const f32 = kvBytesPerBlock(c, 16, "f32");
  assert.equal(kvBytesPerBlock(c, 16, "f8_e4m3"), (f32 / 4 / 32) * 36);
  const budget = 40 * f32;
  const engine = createEngine(reference, model, { kvMemoryBytes: budget, kvCacheDtype: "f8_e4m3" });
  try {
    assert.equal(engine.kvCacheDtype, "f8_e4m3");
    assert.equal(engine.stats().kvTotalBlocks, Math.floor((40 * 32) / 9));
  } finally {
    await engine.stop();
  }
});

test("createEngine() with a draft model whose rows an fp8 cache cannot hold says it is the draft's", () => {
  const draft = { ...stories, config: { ...stories.config, numKvHeads: 3 } };
  const speculative = { method: "draft_model" as const, model: "draft.gguf", numTokens: 2 };
  assert.throws(() => createEngine(reference, model, { kvCacheDtype: "f8_e4m3", speculative }, draft), (e: unknown) =>
    e instanceof KvDTypeError && /^The draft model's KV cache: An fp8 \(f8_e4m3\) KV cache needs rows of whole 32-value blocks and heads of a multiple of 4 dims; the draft's rows are 3 heads of 8$/.test(e.message));
});

/** Logits of the prompt's last position with a KV cache of `dtype` (step-logits.ts). */
function logitsWith(backend: Backend, dtype: KvDType): Promise<Float32Array> {
  return lastLogitsThroughCache(backend, model, PROMPT, dtype);
}

/** Largest |a − b| and the largest |b|. */
function worst(a: Float32Array, b: Float32Array): { diff: number; spread: number } {
  let diff = 0;
  let spread = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    spread = Math.max(spread, Math.abs(b[i]));
  }
  return { diff, spread };
}

test("forward() with an f8_e4m3 KV cache moves logits by E4M3 rounding, more than f16's", async () => {
  const f32 = await logitsWith(reference, "f32");
  const f16 = worst(await logitsWith(reference, "f16"), f32);
  const f8 = worst(await logitsWith(reference, "f8_e4m3"), f32);
  assert.ok(f8.diff > f16.diff, `f8 ${f8.diff} vs f16 ${f16.diff}: the cached rows were not rounded to E4M3`);
  assert.ok(f8.diff < 0.05 * f8.spread, `f8_e4m3 KV moved a logit by ${f8.diff} (spread ${f8.spread})`);
});

test("readSlots() and writeSlots() copy an f8_e4m3 cache through the host exactly: as half bits where f16 holds its values, else f32", async () => {
  const width = model.config.numKvHeads * model.config.headDim;
  // KV-sized values (f16 holds E4M3's 4 significant bits there), and a copy with a block of values
  // around 1e-9, whose codes times their scale f16 cannot hold.
  for (const tiny of [false, true]) {
    const src = allocatePagedKv(reference, model.config, 3, 4, "f8_e4m3");
    const dst = allocatePagedKv(reference, model.config, 3, 4, "f8_e4m3");
    try {
      const slots = slotsOf([2, 0], 7, 4);
      const host: HostKv = {
        numTokens: 7,
        dtype: "f32",
        k: src.k.map((_, l) => Float32Array.from({ length: 7 * width }, (_, i) => Math.sin(l * 1000 + i) * 3.3 * 2 ** ((i % 13) - 6) * (tiny && l === 1 && i < 32 ? 1e-9 : 1))),
        v: src.v.map((_, l) => Float32Array.from({ length: 7 * width }, (_, i) => Math.cos(l * 1000 + i) * 1.7)),
      };
      writeSlots(reference, src, slots, host);
      const read = await readSlots(reference, src, slots);
      assert.equal(read.dtype, tiny ? "f32" : "f16");
      assert.equal(hostKvBytes(read), 2 * model.config.numLayers * 7 * width * (tiny ? 4 : 2));
      assert.notDeepEqual(asF32(read).k[0], host.k[0], "kvWrite rounded the values");
      writeSlots(reference, dst, slots, read);
      for (let l = 0; l < model.config.numLayers; l++) {
        assert.deepEqual(await reference.download(dst.k[l]), await reference.download(src.k[l]), `layer ${l} keys`);
        assert.deepEqual(await reference.download(dst.v[l]), await reference.download(src.v[l]), `layer ${l} values`);
      }
    } finally {
      freePagedKv(reference, src);
      freePagedKv(reference, dst);
    }
  }
});

const { gpu, why, skip } = await poisonedWebGpu("the WebGPU fp8 KV cache tests");

test("forward() on webgpu with an f8_e4m3 KV cache gives the reference's logits; its rows come back as written", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const ours = await logitsWith(gpu, "f8_e4m3");
  const want = await logitsWith(reference, "f8_e4m3");
  // The backends' f32 keys differ in their last bits, and a value near a rounding boundary may take
  // the neighbouring code (1/16 of itself): the logits stay within a small fraction of their spread.
  const { diff, spread } = worst(ours, want);
  assert.ok(diff < 5e-3 * spread, `webgpu vs reference with f8_e4m3 KV: ${diff} (spread ${spread})`);
  // A round trip through the host on the device: read, written into a second cache, read again.
  const src = allocatePagedKv(gpu, model.config, 3, 16, "f8_e4m3");
  const dst = allocatePagedKv(gpu, model.config, 3, 16, "f8_e4m3");
  const dm = uploadModel(gpu, model);
  try {
    gpu.free(forward(gpu, dm, src, { entries: [{ tokens: PROMPT, startPos: 0, blockTable: [1, 2, 0] }] }));
    const slots = slotsOf([1, 2, 0], PROMPT.length, 16);
    const first = await readSlots(gpu, src, slots);
    writeSlots(gpu, dst, slots, first);
    const again = await readSlots(gpu, dst, slots);
    assert.deepEqual(again, first);
  } finally {
    freePagedKv(gpu, src);
    freePagedKv(gpu, dst);
    freeDeviceModel(gpu, dm);
  }
}, { ignore: skip });

test("generate() on webgpu with an f8_e4m3 KV cache continues greedily as the reference does", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const run = async (backend: Backend) => {
    const dm = uploadModel(backend, model);
    try {
      const [r] = await generate(dm, backend, [PROMPT], { maxTokens: 16, kvCacheDtype: "f8_e4m3", stopAtEos: false });
      return r.ids;
    } finally {
      freeDeviceModel(backend, dm);
    }
  };
  const want = await run(reference);
  assert.deepEqual(await run(gpu), want);
  assert.ok(new Set(want).size > 3, `the continuation is not degenerate: ${want}`);
}, { ignore: skip });

test("generate() on stories260K with an f8_e4m3 KV cache: the webgpu continuation is the reference's, close to f16's", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const prompt = stories.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play", { addBos: true });
  const run = async (backend: Backend, dtype: KvDType) => {
    const dm = uploadModel(backend, stories);
    try {
      const [r] = await generate(dm, backend, [prompt], { maxTokens: 24, kvCacheDtype: dtype, stopAtEos: false });
      return r.ids;
    } finally {
      freeDeviceModel(backend, dm);
    }
  };
  const want = await run(reference, "f8_e4m3");
  assert.deepEqual(await run(gpu, "f8_e4m3"), want);
  // A trained model's greedy path: the first tokens are f16's (E4M3's rounding moves no early argmax).
  const f16 = await run(reference, "f16");
  assert.deepEqual(want.slice(0, 8), f16.slice(0, 8), `f8 ${want} vs f16 ${f16}`);
}, { ignore: skip });

test("destroy() releases the WebGPU backend the fp8 KV tests opened", () => {
  gpu?.destroy();
});
