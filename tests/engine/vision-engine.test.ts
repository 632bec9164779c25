/**
 * Images in the engine: a prompt's image positions take the vision tower's embeddings, through
 * chunked prefill, the prefix cache (an image's tokens are drawn from its pixels, so the same image
 * hits and another misses), preemption and WebGPU; requests whose images do not fit are refused.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { createEngine, type CreateEngineOptions } from "../../src/engine/engine-factory.ts";
import { type GenerateRequest, type PromptImage, RequestParamError } from "../../src/engine/engine-types.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { imageKey, imageTokenIds } from "../../src/model/vision/image-tokens.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { writeMmproj } from "../model/vision-files.ts";
import { writeTestGguf } from "../model/model-files.ts";
import { generate } from "../../src/engine/generate.ts";
import { uploadModel } from "../../src/model/device-weights.ts";

const dir = mkdtempSync(`${tmpdir()}/vision-engine-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const stories = `${projectRoot}/models/stories260K.gguf`;
writeMmproj(`${dir}/mmproj.gguf`, { lmHidden: 64, seed: 31, imageSize: 42, patchSize: 14 });
const model = await loadModel(stories, { mmproj: `${dir}/mmproj.gguf` });
const textOnly = await loadModel(stories);
const backend = createReferenceBackend();
const SIZE = 42;
const TOKENS = 9;

/** An image's preprocessed pixels (deterministic), its key and its prompt span from `start`. */
function image(seed: number, start: number): PromptImage {
  const pixels = Float32Array.from({ length: 3 * SIZE * SIZE }, (_, i) => 1.5 * Math.sin(i * 0.173 + seed * 1.7));
  return { start, length: TOKENS, pixels, key: imageKey(pixels) };
}

/**
 * A prompt: text and an image (then text and a second image where asked). It ends with the image, so
 * the answer follows its rows directly (after text, this tiny model's next words barely depend on them).
 */
function request(seeds: number[], m: LoadedModel = model): GenerateRequest {
  const prompt = m.tokenizer.encode("Once upon a time", { addBos: true });
  const images: PromptImage[] = [];
  for (const [i, seed] of seeds.entries()) {
    if (i > 0) prompt.push(...m.tokenizer.encode(" there was", { addBos: false }));
    const im = image(seed, prompt.length);
    images.push(im);
    prompt.push(...imageTokenIds(im.key, TOKENS, m.config.vocabSize));
  }
  return { prompt, images, maxTokens: 8, temperature: 0, ignoreEos: true };
}

async function answers(reqs: GenerateRequest[], o: CreateEngineOptions = {}, b: Backend = backend): Promise<{ tokens: number[][]; cached: number[] }> {
  const e = createEngine(b, model, { numBlocks: 64, blockSize: 4, ...o });
  try {
    const tokens: number[][] = [];
    const cached: number[] = [];
    // One after another: the later ones may hit what the earlier ones cached.
    for (const r of reqs) {
      const out = await e.submit(r).result;
      assert.equal(out.error, undefined);
      tokens.push(out.tokenIds);
      cached.push(out.cachedTokens);
    }
    return { tokens, cached };
  } finally {
    await e.stop();
  }
}

test("Engine with a vision tower: the image decides the answer, the same image hits the prefix cache into it and gives the same answer", async () => {
  const a = request([1]);
  const { tokens, cached } = await answers([a, request([2]), a]);
  assert.notDeepEqual(tokens[0], tokens[1], "another image, another answer");
  assert.deepEqual(tokens[2], tokens[0]);
  // The repeat's cached prefix runs into its image (the prompt's whole blocks); the other image's stopped before its own.
  assert.ok(cached[2] > a.images![0].start + TOKENS / 2, `the same image hits inside it (${cached[2]} cached, the image starts at ${a.images![0].start})`);
  assert.ok(cached[1] <= a.images![0].start, `another image misses from its start (${cached[1]} cached)`);
  // The image's tokens fed as text give another answer: its rows took the tower's embeddings.
  const { images: _, ...asText } = a;
  const text = await createEngine(backend, textOnly, { numBlocks: 64, blockSize: 4 }).submit(asText).result;
  assert.notDeepEqual(text.tokenIds, tokens[0]);
});

test("Engine with a vision tower gives the same answer with the image cut across prefill chunks, two images, and a cache hit inside the image", async () => {
  const two = request([3, 4]);
  const whole = await answers([two]);
  const chunked = await answers([two], { scheduler: { maxBatchTokens: 5 } });
  assert.deepEqual(chunked.tokens[0], whole.tokens[0]);
  // A first prompt that ends with the first image caches its whole blocks, the last of them inside
  // the image (its end is not a block's); the full prompt then starts mid-image and takes the rest of its rows.
  const first = two.images![0];
  assert.ok((first.start + TOKENS) % 4 !== 0, "the first image does not end a block");
  const partial: GenerateRequest = { ...two, prompt: two.prompt.slice(0, first.start + TOKENS), images: [first], maxTokens: 1 };
  const { tokens, cached } = await answers([partial, two]);
  assert.ok(cached[1] > two.images![0].start && cached[1] < two.images![0].start + TOKENS, `the hit ends inside the image (${cached[1]})`);
  assert.deepEqual(tokens[1], whole.tokens[0]);
});

test("Engine.submit() refuses images a text-only model, the wrong span or pixels, or overlapping spans, naming the problem", async () => {
  const e = createEngine(backend, textOnly, { numBlocks: 16 });
  const v = createEngine(backend, model, { numBlocks: 16 });
  try {
    const r = request([5]);
    const im = r.images![0];
    assert.throws(() => e.submit(request([5], textOnly)), (err: unknown) => err instanceof RequestParamError && /reads text only: images need a vision projector loaded \(--mmproj\)/.test(err.message));
    const refuse = (images: PromptImage[], pattern: RegExp) => assert.throws(() => v.submit({ ...r, images }), (err: unknown) => err instanceof RequestParamError && pattern.test(err.message));
    refuse([{ ...im, length: 4 }], /Image 0 takes 4 positions; this vision tower gives 9/);
    refuse([{ ...im, pixels: new Float32Array(12) }], /Image 0 holds 12 pixel values; this vision tower takes 5292/);
    refuse([{ ...im, start: r.prompt.length - 3 }], /ends at position \d+, past the prompt's \d+ tokens/);
    refuse([im, { ...im, start: im.start + 3 }], /Image 1 starts at position \d+, before the end of the one before/);
  } finally {
    await e.stop();
    await v.stop();
  }
});

test("Engine with a vision tower gives the same answer after its image's prompt is preempted and computed again", async () => {
  const reqs = [request([6]), request([7]), request([8])].map((r) => ({ ...r, maxTokens: 24 }));
  const roomy = await answers(reqs);
  // Three answers at once in a cache that holds fewer: some are preempted and recompute their images.
  const e = createEngine(backend, model, { numBlocks: 14, blockSize: 4, scheduler: { maxBatchTokens: 64 } });
  try {
    const outs = await Promise.all(reqs.map((r) => e.submit(r).result));
    assert.deepEqual(outs.map((o) => o.tokenIds), roomy.tokens);
    assert.ok(e.stats().preemptions > 0, "something was preempted");
  } finally {
    await e.stop();
  }
});

const gpu = await poisonedWebGpu("the vision engine's WebGPU test");
gpu.gpu?.destroy();

test("Engine.warmUp() with a vision tower on WebGPU compiles the tower's kernels: an image request after it compiles none", async () => {
  const webgpu = await createWebGpuBackend({ poison: true });
  const e = createEngine(webgpu, model, { numBlocks: 64, blockSize: 4 });
  try {
    await e.warmUp();
    const compiled = webgpu.stats().recorder.pipelines;
    const out = await e.submit(request([11, 12])).result;
    assert.equal(out.error, undefined);
    assert.equal(webgpu.stats().recorder.pipelines, compiled, "no kernel was compiled after the warm-up");
  } finally {
    await e.stop();
    webgpu.destroy();
  }
}, { ignore: gpu.skip });

test("Engine with a vision tower on WebGPU gives the reference backend's answer", async () => {
  const webgpu = (await poisonedWebGpu("the vision engine's WebGPU test")).gpu!;
  try {
    const r = request([9, 10]);
    const want = await answers([r]);
    const got = await answers([r], { kvCacheDtype: "f32" }, webgpu);
    assert.deepEqual(got.tokens, want.tokens);
  } finally {
    webgpu.destroy();
  }
}, { ignore: gpu.skip });

// Gemma 3: its projector pools the patches, and its images attend to themselves both ways.
writeMmproj(`${dir}/mmproj-gemma3.gguf`, { lmHidden: 32, seed: 33, projectorType: "gemma3", clip: false, postNorm: true, gelu: true, imageSize: 56, patchSize: 7, pooling: 2 });
// Sliding layers of a window of 24 (five of six, Gemma 3's pattern): an image of 16 fits in one.
const gemmaPath = await writeTestGguf(dir, "gemma3", { architecture: "gemma3", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: true, dtype: "f32", seed: 34, slidingWindow: 24 });
const gemma = await loadModel(gemmaPath, { mmproj: `${dir}/mmproj-gemma3.gguf` });
const GEMMA_TOKENS = 16;

/** A Gemma 3 prompt: `lead` tokens and an image (then 3 tokens and another image where asked); it ends with its last image. */
function gemmaRequest(seeds: number[], lead = 5): GenerateRequest {
  const prompt = Array.from({ length: lead }, (_, i) => 2 + i * 7);
  const images: PromptImage[] = [];
  for (const [i, seed] of seeds.entries()) {
    if (i > 0) prompt.push(40, 41, 42);
    const pixels = Float32Array.from({ length: 3 * 56 * 56 }, (_, i) => Math.sin(i * 0.291 + seed));
    const key = imageKey(pixels);
    images.push({ start: prompt.length, length: GEMMA_TOKENS, pixels, key });
    prompt.push(...imageTokenIds(key, GEMMA_TOKENS, 300));
  }
  return { prompt, images, maxTokens: 6, temperature: 0, ignoreEos: true, logprobs: 0 };
}

async function gemmaAnswers(reqs: GenerateRequest[], o: CreateEngineOptions = {}, b: Backend = backend, m: LoadedModel = gemma) {
  const e = createEngine(b, m, { numBlocks: 64, blockSize: 4, ...o });
  try {
    const out = [];
    for (const r of reqs) out.push(await e.submit(r).result);
    for (const r of out) assert.equal(r.error, undefined);
    // The first token's log probability: how the image moved the answer, where the greedy tokens of so small a model may not show it.
    return out.map((r) => ({ tokens: r.tokenIds, cached: r.cachedTokens, first: r.logprobs![0].logprob }));
  } finally {
    await e.stop();
  }
}

test("Engine with Gemma 3's tower: chunks never cut an image (its rows attend both ways), a hit inside one resumes it, the image decides the answer", async () => {
  const two = gemmaRequest([1, 2]);
  const [whole] = await gemmaAnswers([two]);
  // A budget of 5 tokens a step: each image (16 positions) still runs in one step, past the budget.
  const [chunked] = await gemmaAnswers([two], { scheduler: { maxBatchTokens: 5 } });
  assert.deepEqual(chunked.tokens, whole.tokens);
  const [other] = await gemmaAnswers([gemmaRequest([1, 3])]);
  assert.ok(Math.abs(other.first - whole.first) > 1e-4, `another second image, another answer (${other.first} against ${whole.first})`);
  // The same tower with causal images answers otherwise: the engine ran the images both ways.
  const causal = { ...gemma, config: { ...gemma.config, vision: { ...gemma.config.vision!, bidirectional: false } } };
  const [oneWay] = await gemmaAnswers([two], {}, backend, causal);
  assert.ok(Math.abs(oneWay.first - whole.first) > 1e-4, `causal images give another answer (${oneWay.first} against ${whole.first})`);
  // The first request ends just after its first image: its whole cached blocks end inside the image.
  const first = two.images![0];
  assert.ok((first.start + GEMMA_TOKENS) % 4 !== 0);
  const [, resumed] = await gemmaAnswers([{ ...two, prompt: two.prompt.slice(0, first.start + GEMMA_TOKENS + 1), images: [first], maxTokens: 1 }, two], { scheduler: { maxBatchTokens: 5 } });
  assert.ok(resumed.cached > first.start && resumed.cached < first.start + GEMMA_TOKENS, `the hit ends inside the image (${resumed.cached})`);
  assert.deepEqual(resumed.tokens, whole.tokens);
  // The sliding layers' windows in rings (--sliding-window-kv window): a ring holds an image's step past the budget.
  const [rings] = await gemmaAnswers([two], { slidingWindowKv: "window", scheduler: { maxBatchTokens: 5 } });
  assert.deepEqual(rings.tokens, whole.tokens);
});

test("Engine with Gemma 3's tower on WebGPU gives the reference backend's answer", async () => {
  const webgpu = (await poisonedWebGpu("the vision engine's WebGPU test")).gpu!;
  try {
    const r = gemmaRequest([4, 5]);
    const [want] = await gemmaAnswers([r]);
    const [got] = await gemmaAnswers([r], { kvCacheDtype: "f32" }, webgpu);
    assert.deepEqual(got.tokens, want.tokens);
  } finally {
    webgpu.destroy();
  }
}, { ignore: gpu.skip });

test("generate() with images gives the engine's answers: LLaVA's tower, and Gemma 3's with its images kept whole in chunks of 5", async () => {
  const device = uploadModel(backend, model);
  const r = request([13]);
  const [want] = (await answers([{ ...r, maxTokens: 6 }])).tokens;
  const [got] = await generate(device, backend, [r.prompt], { maxTokens: 6, stopAtEos: false, images: [r.images], prefillChunk: 5 });
  assert.deepEqual(got.ids, want);
  const g = gemmaRequest([6, 7]);
  const [gemmaWant] = await gemmaAnswers([g]);
  const [gemmaGot] = await generate(uploadModel(backend, gemma), backend, [g.prompt], { maxTokens: 6, stopAtEos: false, images: [g.images], prefillChunk: 5 });
  assert.deepEqual(gemmaGot.ids, gemmaWant.tokens);
  await assert.rejects(generate(device, backend, [r.prompt.slice(0, 10)], { maxTokens: 2, images: [r.images] }), /Prompt 0: Image 0 ends at position \d+, past the prompt's 10 tokens/);
});
