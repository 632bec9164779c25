/**
 * Engine.warmUp (engine-warmup.ts) on a fresh WebGPU backend: after it, serving compiles no kernel
 * a typical mix of requests needs (prompts, decode batches of every matmul width, log
 * probabilities, biases, penalties, grammars, token rules, steps run ahead with penalties, and a
 * context long enough to split attention): the pipeline count stays where the warm-up left it.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { loadModel } from "../../src/model/load.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const tale = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park.";
const prompt = model.tokenizer.encode(tale, { addBos: true });
const probe = await poisonedWebGpu("the WebGPU warm-up test");
probe.gpu?.destroy();

test("Engine.warmUp() compiles every WebGPU kernel serving then uses", async () => {
  // A hardware GPU's settings (lavapipe's own never split attention or take the gemv path).
  const backend = await createWebGpuBackend({ poison: true, attentionSplitGroups: 128, gemvMaxRows: 4 });
  const engine = createEngine(backend, model, { numBlocks: 96, schedulerSteps: 4 });
  try {
    await engine.warmUp();
    const compiled = backend.stats().recorder.pipelines;
    const comma = model.tokenizer.encode(",", { addBos: false })[0];
    const kinds: Partial<GenerateRequest>[] = [
      {}, { temperature: 0 }, { logprobs: 2 }, { logitBias: [[comma, -5]] }, { repetitionPenalty: 1.2 }, { presencePenalty: 0.5, frequencyPenalty: 0.5 },
      { grammar: { kind: "regex", pattern: "[a-z ]*" } }, { badWords: [[comma]] }, { minTokens: 4 }, { promptLogprobs: 1 },
    ];
    // Plain requests, then penalized ones (both run ahead), then batches of up to 24 of every kind,
    // then one request whose context passes 512 keys.
    for (const batch of [[0, 1, 2], [4, 5], ...[8, 16, 24].map((n) => Array.from({ length: n }, (_, i) => i % kinds.length))]) {
      await Promise.all(batch.map((k, i) => engine.submit({ prompt: prompt.slice(0, 8 + i), maxTokens: 9, temperature: 0.8, seed: i, ...kinds[k] }).result));
    }
    const long = model.tokenizer.encode(Array.from({ length: 24 }, () => tale).join(" "), { addBos: true }).slice(0, 505);
    assert.equal((await engine.submit({ prompt: long, maxTokens: 6, temperature: 0.8, seed: 1 }).result).completionTokens, 6);
    assert.equal(backend.stats().recorder.pipelines, compiled, "no kernel was compiled after the warm-up");
  } finally {
    await engine.stop();
    backend.destroy();
  }
}, { ignore: probe.skip });
