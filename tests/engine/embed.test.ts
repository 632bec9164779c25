/**
 * Embedding requests in the engine (GenerateRequest.embed): the prompt's last hidden state after
 * the output norm, nothing generated; the same across chunked prefill, a prefix-cache hit and
 * batching beside generating requests; and on WebGPU (lavapipe in CI) as on the reference backend.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const STORY = model.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park.", { addBos: true });
const embedOf = (prompt: number[]): GenerateRequest => ({ prompt, maxTokens: 1, temperature: 0, embed: true });

function close(a: readonly number[], b: readonly number[], tol: number, what: string): void {
  assert.equal(a.length, b.length, what);
  a.forEach((x, i) => assert.ok(Math.abs(x - b[i]) <= tol, `${what}: dimension ${i}: ${x} vs ${b[i]}`));
}

test("Engine.submit() with embed returns the last hidden state, generates nothing, and gives the same vector chunked, cached and batched", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, blockSize: 4, scheduler: { maxBatchTokens: 8 } });
  try {
    const first = await e.submit(embedOf(STORY)).result;
    assert.equal(first.embedding?.length, model.config.hiddenSize);
    assert.deepEqual([first.tokenIds, first.completionTokens, first.text, first.finishReason], [[], 0, "", "stop"]);
    assert.equal(first.promptTokens, STORY.length);
    // Again: its prefix now comes from the cache (all but the last token); beside a generating request.
    const gen = e.submit({ prompt: STORY.slice(0, 9), maxTokens: 6, temperature: 0 });
    const again = await e.submit(embedOf(STORY)).result;
    assert.ok(again.cachedTokens > 0, "the prefix cache served part of the prompt");
    close(again.embedding!, first.embedding!, 1e-5, "cached and batched");
    assert.equal((await gen.result).completionTokens, 6);
    // A different prompt gives a different vector.
    const other = await e.submit(embedOf(STORY.slice(0, 12))).result;
    assert.ok(other.embedding!.some((x, i) => Math.abs(x - first.embedding![i]) > 1e-3));
  } finally {
    await e.stop();
  }
});

const { gpu, why, skip } = await poisonedWebGpu("the WebGPU embedding test");

test("Engine.submit() with embed on WebGPU matches the reference backend", async () => {
  if (!gpu) throw new Error(`No WebGPU adapter in CI: ${why}`);
  const embedded = async (backend: Backend) => {
    const e = createEngine(backend, model, { numBlocks: 16, scheduler: { maxBatchTokens: 16 } });
    try {
      return (await e.submit(embedOf(STORY)).result).embedding!;
    } finally {
      await e.stop();
    }
  };
  const want = await embedded(createReferenceBackend());
  const got = await embedded(gpu);
  // WebGPU's f16 KV cache and its own sums: 1.3e-3 apart at most where the largest value is 8.6 (measured).
  close(got, want, 1e-3 * Math.max(...want.map(Math.abs)), "WebGPU vs reference");
}, { ignore: skip });
