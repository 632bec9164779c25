/**
 * The bundled stories260K model end to end on every available backend: the golden greedy ids
 * (identical from llama.cpp, llama2.c and PyTorch) and batching invariance over 8 prompts.
 * WebGPU must really run in CI: there, an unavailable adapter fails instead of skipping.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { projectRoot, sharedRoot, test } from "../harness.ts";
import { selectBackend } from "../../src/backend/select.ts";
import type { Backend } from "../../src/backend/types.ts";
import { generate } from "../../src/engine/generate.ts";
import { type DeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { inCi } from "../webgpu-fixture.ts";

const golden = JSON.parse(readFileSync(`${sharedRoot}/reference/stories260K-greedy.json`, "utf8")) as {
  prompt: string;
  prompt_ids_with_bos: number[];
  greedy20: number[];
  text: string;
};
const host = await loadModel(`${projectRoot}/models/stories260K.gguf`);

const PROMPTS = [
  "Once upon a time",
  "The cat sat on the mat",
  "Tom and Lily went to the park. They saw a big dog",
  "One day",
  "The little bird was sad because",
  "Mom said",
  "There was a boy named Tim who loved to play with his red ball in the garden every day",
  "A",
];

interface Available {
  backend?: Backend;
  model?: DeviceModel;
  why: string;
}

async function open(name: "reference" | "webgpu" | "cuda"): Promise<Available> {
  try {
    const { backend, reason } = await selectBackend(name);
    return { backend, model: uploadModel(backend, host), why: reason };
  } catch (e) {
    return { why: e instanceof Error ? e.message : String(e) };
  }
}

const backends = {
  reference: await open("reference"),
  webgpu: await open("webgpu"),
  cuda: await open("cuda"),
};

for (const [name, avail] of Object.entries(backends)) {
  // WebGPU is required in CI (lavapipe provides an adapter); CUDA only where a GPU exists.
  const required = name === "reference" || (name === "webgpu" && inCi);
  const skip = !avail.model && !required;
  if (skip) console.error(`skipping ${name} golden/batching tests: ${avail.why}`);

  test(`generate() on ${name} reproduces the stories260K golden greedy ids`, async () => {
    assert.ok(avail.backend && avail.model, `${name} is unavailable: ${avail.why}`);
    const promptIds = host.tokenizer.encode(golden.prompt, { addBos: host.config.addBos });
    assert.deepEqual(promptIds, golden.prompt_ids_with_bos);
    const [r] = await generate(avail.model, avail.backend, [promptIds], { maxTokens: 20, temperature: 0 });
    assert.deepEqual(r.ids, golden.greedy20);
    assert.equal(host.tokenizer.decode(r.ids), golden.text);
  }, { ignore: skip });

  test(`generate() on ${name}: 8 prompts as one ragged batch equal each prompt alone`, async () => {
    assert.ok(avail.backend && avail.model, `${name} is unavailable: ${avail.why}`);
    const ids = PROMPTS.map((p) => host.tokenizer.encode(p, { addBos: host.config.addBos }));
    const opts = { maxTokens: 10, temperature: 0, stopAtEos: false, prefillChunk: 8 };
    const batched = await generate(avail.model, avail.backend, ids, opts);
    for (const [i, p] of ids.entries()) {
      const [alone] = await generate(avail.model, avail.backend, [p], { ...opts, prefillChunk: 64 });
      assert.deepEqual(batched[i].ids, alone.ids, `prompt ${i} "${PROMPTS[i]}"`);
    }
    // Different prompts must lead somewhere different, or the comparison proves little.
    assert.ok(new Set(batched.map((r) => r.ids.join(","))).size >= 6);
  }, { ignore: skip });
}

test("destroy() releases every backend the golden tests opened", () => {
  for (const avail of Object.values(backends)) avail.backend?.destroy();
});
