/**
 * The host-memory KV tier (`kvOffloadBlocks`, src/engine/kv-offload.ts) on the WebGPU backend:
 * evicted blocks are gathered and downloaded while the step that reuses them is being recorded,
 * and written back with `upload` + `kvWrite` before the returning prompt is admitted. A prompt
 * restored from host memory must generate what recompute generates on the same backend, and a
 * corrupted host copy must make it generate something else (so the comparison can fail).
 * WebGPU must really run in CI (lavapipe provides an adapter): there, an unavailable adapter fails
 * instead of skipping, as in tests/model/forward-golden.test.ts.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import type { Backend, KvDType } from "../../src/backend/types.ts";
import { Engine } from "../../src/engine/engine.ts";
import { modelStepRunner, type StepRunner } from "../../src/engine/engine-runner.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { allocatePagedKv, freePagedKv, kvBytesPerBlock } from "../../src/engine/kv-cache.ts";
import { type HostKv, hostKvBytes, readSlots, slotsOf, writeSlots } from "../../src/engine/kv-copy.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const BLOCK = 16;
// The same prompts as tests/engine/kv-offload.test.ts: STORY fills two full blocks, the fillers push it out of 12.
const STORY = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends every day.", { addBos: true });
const greedy = (prompt: number[], maxTokens = 8): GenerateRequest => ({ prompt, maxTokens, temperature: 0, ignoreEos: true });
const filler = (i: number) => model.tokenizer.encode(`The dog number ${i} ran to the big red ball and the cat sat on the mat all day long. `.repeat(3), { addBos: true });

// Poisoned op outputs (NaN) make a restore that reads a buffer before it is written show up.
const { gpu, why, skip } = await poisonedWebGpu("the WebGPU host KV tier tests");

/**
 * An engine on `backend` built as createEngine builds it, except that `corrupt`, when given, is
 * applied to every block copy that reaches the host (the negative control).
 */
function engineOn(backend: Backend, kvOffloadBlocks: number, corrupt?: (kv: HostKv) => void, dtype: KvDType = "f32"): Engine {
  const device = uploadModel(backend, model);
  const kv = allocatePagedKv(backend, model.config, 12, BLOCK, dtype);
  const base = modelStepRunner(backend, device, kv, () => {
    freePagedKv(backend, kv);
    freeDeviceModel(backend, device);
  });
  const runner: StepRunner = corrupt === undefined ? base : {
    ...base,
    readBlocks: async (ids) => {
      const host = await base.readBlocks!(ids);
      corrupt(host);
      return host;
    },
  };
  return new Engine({ runner, config: model.config, tokenizer: model.tokenizer, kvOffloadBlocks });
}

async function run(e: Engine, req: GenerateRequest) {
  const h = e.submit(req);
  for await (const _ of h.stream) { /* drain */ }
  return await h.result;
}

/** Runs STORY, pushes it out of the 12-block device cache with other prompts, then runs it again. */
async function evictAndReturn(e: Engine) {
  try {
    const first = await run(e, greedy(STORY));
    for (let i = 0; i < 4; i++) await run(e, greedy(filler(i), 4));
    const again = await run(e, greedy(STORY));
    return { first, again, stats: e.stats() };
  } finally {
    await e.stop();
  }
}

const full = Math.floor((STORY.length - 1) / BLOCK) * BLOCK;

test("HostKvOffload on webgpu: a prompt restored from host KV generates what recompute generates", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const recompute = await evictAndReturn(engineOn(gpu, 0));
  assert.equal(recompute.again.cachedTokens, 0, "without a host tier the evicted prompt is recomputed");
  const restored = await evictAndReturn(engineOn(gpu, 64));
  assert.ok(full > 0);
  assert.equal(restored.again.cachedTokens, full, "the prompt's full blocks came back from host memory");
  assert.equal(restored.stats.kvRestoredBlocks, full / BLOCK);
  assert.ok(restored.stats.kvOffloadedBlocks >= full / BLOCK);
  assert.deepEqual(restored.again.tokenIds, recompute.again.tokenIds);
  assert.deepEqual(restored.again.tokenIds, restored.first.tokenIds);
}, { ignore: skip });

test("HostKvOffload on webgpu: an f16 cache's blocks come back from host memory as they left", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  // The host copy is read as half bits (downloadHalfRows) and written back as they are (writeHalfRows): exact.
  const copies: HostKv[] = [];
  const recompute = await evictAndReturn(engineOn(gpu, 0, undefined, "f16"));
  const restored = await evictAndReturn(engineOn(gpu, 64, (kv) => void copies.push(kv), "f16"));
  assert.equal(restored.again.cachedTokens, full, "the prompt's full blocks came back from host memory");
  assert.ok(copies.length >= full / BLOCK);
  for (const kv of copies) {
    assert.equal(kv.dtype, "f16");
    // Half the host memory of an f32 copy: a block's KV at 2 bytes a value.
    assert.equal(hostKvBytes(kv), kvBytesPerBlock(model.config, BLOCK, "f16"));
  }
  assert.deepEqual(restored.again.tokenIds, recompute.again.tokenIds);
  assert.deepEqual(restored.again.tokenIds, restored.first.tokenIds);
}, { ignore: skip });

test("HostKvOffload on webgpu: a corrupted host copy changes the restored prompt's output (negative control)", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const recompute = await evictAndReturn(engineOn(gpu, 0));
  // Negated K flips every attention score on the restored positions; a scaled V swamps what they carry.
  const poisoned = await evictAndReturn(engineOn(gpu, 64, (kv) => {
    for (const k of kv.k) for (let i = 0; i < k.length; i++) k[i] = -k[i];
    for (const v of kv.v) for (let i = 0; i < v.length; i++) v[i] *= 8;
  }));
  assert.equal(poisoned.again.cachedTokens, full, "the corrupted blocks were restored, not recomputed");
  assert.notDeepEqual(poisoned.again.tokenIds, recompute.again.tokenIds);
}, { ignore: skip });

test("readSlots() and writeSlots() on webgpu move an f16 cache as half bits (downloadHalfRows, writeHalfRows): the bits the f32 path gives", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  assert.ok(gpu.downloadHalfRows, "WebGPU downloads half bits");
  const kv = allocatePagedKv(gpu, model.config, 4, BLOCK, "f16");
  try {
    const { numLayers, numKvHeads, headDim } = model.config;
    const n = BLOCK + 5;
    const slots = slotsOf([3, 1], n, BLOCK);
    // Values of every magnitude, negatives and some past f16's range (they round to infinity alike).
    const values = () => Float32Array.from({ length: n * numKvHeads * headDim }, (_, i) => (i % 2 ? -1 : 1) * 2 ** ((i % 37) - 20) * (1 + (i % 5) / 7) * (i % 41 === 0 ? 1e6 : 1));
    writeSlots(gpu, kv, slots, { numTokens: n, dtype: "f32", k: Array.from({ length: numLayers }, values), v: Array.from({ length: numLayers }, values) });
    const raw = await readSlots(gpu, kv, slots);
    // The same backend without the half-bit ops: gather as f32 and pack on the host; widen and kvWrite.
    const plain = new Proxy(gpu, {
      get: (t, p) => (p === "downloadHalfRows" || p === "writeHalfRows" ? undefined : typeof Reflect.get(t, p) === "function" ? Reflect.get(t, p).bind(t) : Reflect.get(t, p)),
    });
    const viaF32 = await readSlots(plain, kv, slots);
    assert.equal(raw.dtype, "f16");
    assert.ok(raw.k[0] instanceof Uint16Array && raw.k[0].length === n * numKvHeads * headDim);
    assert.deepEqual(raw, viaF32);
    // And back (writeHalfRows): the half bits written into other slots read back the same, whichever way.
    const other = slotsOf([0, 2], n, BLOCK);
    writeSlots(gpu, kv, other, raw);
    assert.deepEqual(await readSlots(gpu, kv, other), raw);
    writeSlots(plain, kv, slotsOf([2, 0], n, BLOCK), raw);
    assert.deepEqual(await readSlots(plain, kv, slotsOf([2, 0], n, BLOCK)), raw, "the f32 path writes the same bits");
  } finally {
    freePagedKv(gpu, kv);
  }
}, { ignore: skip });

test("destroy() releases the WebGPU backend the host KV tier tests opened", () => {
  gpu?.destroy();
});
