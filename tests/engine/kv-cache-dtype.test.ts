/**
 * The KV cache's element type (`--kv-cache-dtype`, engine/kv-cache.ts): which dtype "auto" takes on
 * each backend, what an f16 cache saves (twice the blocks for a memory budget; MLA's one shared
 * cache another half), that keys and values really are stored as f16 (logits move by rounding, not
 * more), that host copies of an f16 or shared cache round-trip exactly, and that the WebGPU engine
 * generates with it what the reference does.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend, KvDType } from "../../src/backend/types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { generate } from "../../src/engine/generate.ts";
import { allocatePagedKv, freePagedKv, kvBytesPerBlock, KvCapacityError, type KvDTypeChoice, KvDTypeError, resolveKvDtype, sharesKvCache } from "../../src/engine/kv-cache.ts";
import { asF32, type HostKv, hostKvBytes, readSlots, slotsOf, writeSlots } from "../../src/engine/kv-copy.ts";
import { f16BitsToF32Array, f16ToF32, f32ToF16 } from "../../src/backend/half-float.ts";
import type { ModelConfig } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { lastLogitsThroughCache } from "../model/step-logits.ts";
import { loadModel } from "../../src/model/load.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const reference = createReferenceBackend();
/** A backend whose attention takes f32 caches only (as CUDA's does today). */
const f32Only: Backend = { ...reference, info: { ...reference.info, name: "f32-only", kvDtypes: ["f32"] } };
/** stories260K's shape with multi-head latent attention declared: one shared cache per layer. */
const mlaConfig: ModelConfig = { ...model.config, mla: { qLoraRank: 0, kvLoraRank: 32, nopeDim: 8, ropeDim: 8, vHeadDim: 8 } };
const PROMPT = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play", { addBos: true });

test("resolveKvDtype() takes f16 for auto where the backend's attention reads it, and refuses what it cannot hold", () => {
  assert.equal(resolveKvDtype(reference, model.config), "f16");
  assert.equal(resolveKvDtype(reference, model.config, "f32"), "f32");
  assert.equal(resolveKvDtype(f32Only, model.config, "auto"), "f32");
  assert.throws(() => resolveKvDtype(f32Only, model.config, "f16"), (e: unknown) =>
    e instanceof KvDTypeError && /f32-only backend's attention takes f32 KV caches, not f16/.test(e.message));
  const odd = { ...model.config, headDim: 7 };
  assert.equal(resolveKvDtype(reference, odd), "f32", "two halves per word need an even head width");
  assert.throws(() => resolveKvDtype(reference, odd, "f16"), /needs an even head dimension; this model's is 7/);
  assert.throws(() => resolveKvDtype(reference, model.config, "q8" as KvDType), /Unknown KV cache dtype "q8"/);
});

test("kvBytesPerBlock() halves for f16 and for MLA's shared cache", () => {
  const c = model.config;
  const f32 = kvBytesPerBlock(c, 16, "f32");
  assert.equal(f32, 2 * c.numLayers * 16 * c.numKvHeads * c.headDim * 4);
  assert.equal(kvBytesPerBlock(c, 16, "f16"), f32 / 2);
  assert.equal(sharesKvCache(mlaConfig), true);
  assert.equal(kvBytesPerBlock(mlaConfig, 16, "f16"), f32 / 4);
});

test("createEngine() fits twice the KV blocks in a memory budget with an f16 cache", async () => {
  const budget = 40 * kvBytesPerBlock(model.config, 16, "f32");
  const f16 = createEngine(reference, model, { kvMemoryBytes: budget });
  const f32 = createEngine(reference, model, { kvMemoryBytes: budget, kvCacheDtype: "f32" });
  const cuda = createEngine(f32Only, model, { kvMemoryBytes: budget });
  try {
    assert.equal(f16.kvCacheDtype, "f16");
    assert.equal(f32.kvCacheDtype, "f32");
    assert.equal(cuda.kvCacheDtype, "f32");
    assert.equal(f32.stats().kvTotalBlocks, 40);
    assert.equal(f16.stats().kvTotalBlocks, 80);
    assert.throws(() => createEngine(f32Only, model, { kvMemoryBytes: budget, kvCacheDtype: "f16" }), KvDTypeError);
  } finally {
    await Promise.all([f16.stop(), f32.stop(), cuda.stop()]);
  }
});

/** Logits of the prompt's last position with a KV cache of `dtype` (step-logits.ts). */
function logitsWith(backend: Backend, dtype: KvDType): Promise<Float32Array> {
  return lastLogitsThroughCache(backend, model, PROMPT, dtype);
}

test("forward() with an f16 KV cache moves logits by f16 rounding only", async () => {
  const f32 = await logitsWith(reference, "f32");
  const f16 = await logitsWith(reference, "f16");
  let diff = 0;
  let spread = 0;
  for (let i = 0; i < f32.length; i++) {
    diff = Math.max(diff, Math.abs(f16[i] - f32[i]));
    spread = Math.max(spread, Math.abs(f32[i]));
  }
  assert.ok(diff > 0, "the cached keys and values were not rounded to f16");
  assert.ok(diff < 1e-2 * spread, `f16 KV moved a logit by ${diff} (spread ${spread})`);
});

test("readSlots() and writeSlots() copy an f16 cache and MLA's shared cache through the host exactly", async () => {
  for (const [config, dtype] of [[model.config, "f16"], [mlaConfig, "f32"], [mlaConfig, "f16"]] as const) {
    const src = allocatePagedKv(reference, config, 3, 4, dtype);
    const dst = allocatePagedKv(reference, config, 3, 4, dtype);
    try {
      const width = config.numKvHeads * config.headDim;
      const slots = slotsOf([2, 0], 7, 4);
      // Values that are not f16 (kvWrite rounds them), written through the backend into the source.
      const host: HostKv = {
        numTokens: 7,
        dtype: "f32",
        k: src.k.map((_, l) => Float32Array.from({ length: 7 * width }, (_, i) => Math.sin(l * 1000 + i) * 3.3)),
        v: src.v.map((_, l) => Float32Array.from({ length: 7 * width }, (_, i) => Math.cos(l * 1000 + i) * 1.7)),
      };
      if (sharesKvCache(config)) host.v = host.k;
      writeSlots(reference, src, slots, host);
      const read = await readSlots(reference, src, slots);
      if (sharesKvCache(config)) {
        assert.equal(src.v[0], src.k[0], "one cache per layer");
        assert.equal(read.v[0], read.k[0], "a shared cache is read once");
      }
      assert.equal(read.dtype, dtype, "the host copy keeps the cache's dtype");
      if (read.dtype === "f16") {
        // Half bits, half the bytes of f32: what kvWrite rounded the values to, exactly.
        assert.ok(read.k[0] instanceof Uint16Array);
        assert.equal(hostKvBytes(read), (sharesKvCache(config) ? 1 : 2) * config.numLayers * 7 * width * 2);
        assert.deepEqual(Array.from(f16BitsToF32Array(read.k[0])), Array.from(host.k[0], (x) => f16ToF32(f32ToF16(x))));
      } else assert.deepEqual(read.k[0], host.k[0]);
      writeSlots(reference, dst, slots, read);
      for (let l = 0; l < config.numLayers; l++) {
        assert.deepEqual(await reference.download(dst.k[l]), await reference.download(src.k[l]), `layer ${l} keys`);
        assert.deepEqual(await reference.download(dst.v[l]), await reference.download(src.v[l]), `layer ${l} values`);
      }
    } finally {
      freePagedKv(reference, src);
      freePagedKv(reference, dst);
    }
  }
});

const { gpu, why, skip } = await poisonedWebGpu("the WebGPU f16 KV cache tests");

test("generate() on webgpu with an f16 KV cache matches the reference backend's f16 cache", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const run = async (backend: Backend, dtype: KvDTypeChoice) => {
    const dm = uploadModel(backend, model);
    try {
      const [r] = await generate(dm, backend, [PROMPT], { maxTokens: 24, kvCacheDtype: dtype, stopAtEos: false });
      return r.ids;
    } finally {
      freeDeviceModel(backend, dm);
    }
  };
  const want = await run(reference, "f16");
  assert.deepEqual(await run(gpu, "auto"), want);
  assert.equal(resolveKvDtype(gpu, model.config), "f16");
  assert.ok(new Set(want).size > 3, `the continuation is not degenerate: ${want}`);
}, { ignore: skip });

test("readSlots() on webgpu reads an f16 cache's rows as the reference holds them", async () => {
  assert.ok(gpu, `webgpu is unavailable: ${why}`);
  const read = async (backend: Backend) => {
    const kv = allocatePagedKv(backend, model.config, 3, 4, "f16");
    const dm = uploadModel(backend, model);
    try {
      backend.free(forward(backend, dm, kv, { entries: [{ tokens: PROMPT.slice(0, 9), startPos: 0, blockTable: [1, 2, 0] }] }));
      return await readSlots(backend, kv, slotsOf([1, 2, 0], 9, 4));
    } finally {
      freePagedKv(backend, kv);
      freeDeviceModel(backend, dm);
    }
  };
  const [ours, want] = [asF32(await read(gpu)), asF32(await read(reference))];
  for (let l = 0; l < model.config.numLayers; l++) {
    for (const [got, ref] of [[ours.k[l], want.k[l]], [ours.v[l], want.v[l]]]) {
      // The backends' f32 forwards differ a little by layer 3, and f16 rounding then picks a neighbour
      // half; a misread row (layout, packing) would be off by the values' own size.
      for (let i = 0; i < ref.length; i++) assert.ok(Math.abs(got[i] - ref[i]) <= 4e-3 * Math.abs(ref[i]) + 1e-4, `layer ${l} [${i}]: ${got[i]} vs ${ref[i]}`);
    }
  }
}, { ignore: skip });

test("destroy() releases the WebGPU backend the KV dtype tests opened", () => {
  gpu?.destroy();
});

test("allocatePagedKv() turns a failed allocation into a KvCapacityError naming the blocks and bytes, and frees the layers it had", () => {
  let live = 0;
  let calls = 0;
  // A backend whose memory runs out at the third cache asked for.
  const tight: Backend = {
    ...reference,
    zeros: (shape, dtype) => {
      if (++calls === 3) throw new RangeError("Array buffer allocation failed");
      live++;
      return reference.zeros(shape, dtype);
    },
    free: (t) => {
      live--;
      reference.free(t);
    },
  };
  assert.throws(() => allocatePagedKv(tight, model.config, 1000, 16, "f16"), (e: unknown) =>
    e instanceof KvCapacityError &&
    e.message === `A KV cache of 1000 blocks (${(kvBytesPerBlock(model.config, 16, "f16") * 1000 / 2 ** 30).toFixed(2)} GiB in f16) could not be allocated on the reference backend (Array buffer allocation failed); ask for fewer blocks (--kv-blocks, --kv-memory-fraction)`);
  assert.equal(live, 0, "the two caches allocated before the failure are freed");
});
