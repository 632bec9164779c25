/** Engine.submit()'s check of the prompt's token ids: a bad one is refused alone, never run in a batch. */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { ContextLengthError, RequestParamError } from "../../src/engine/engine-types.ts";
import { loadModel } from "../../src/model/load.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const vocab = model.config.vocabSize;

test("Engine.submit() refuses a prompt token outside the vocabulary instead of failing the step of every request batched with it", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    const good = e.submit({ prompt: model.tokenizer.encode("Once upon a time", { addBos: true }), maxTokens: 4, temperature: 0, ignoreEos: true });
    for (const bad of [vocab, -1, 2.5, Number.NaN]) {
      assert.throws(
        () => e.submit({ prompt: [1, bad], maxTokens: 4, temperature: 0 }),
        (err: unknown) => err instanceof RequestParamError && err.message === `Prompt token 1 is ${bad}, outside this model's vocabulary of ${vocab} tokens`,
      );
    }
    const r = await good.result;
    assert.equal(r.error, undefined);
    assert.equal(r.finishReason, "length");
    assert.equal(r.tokenIds.length, 4);
    assert.equal(e.stats().waiting + e.stats().running, 0);
    assert.equal(e.activeRequests, 0);
  } finally {
    await e.stop();
  }
});

test("Engine.submit() embeds a prompt that fills the whole context (an embedding generates nothing), and refuses one token more", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, maxModelLen: 40 });
  try {
    const prompt = Array.from({ length: e.maxModelLen }, (_, i) => 1 + (i % 300));
    const r = await e.submit({ prompt, maxTokens: 1, temperature: 0, embed: true }).result;
    assert.equal(r.error, undefined);
    assert.equal(r.embedding?.length, model.config.hiddenSize);
    assert.throws(() => e.submit({ prompt: [...prompt, 5], maxTokens: 1, temperature: 0, embed: true }), ContextLengthError);
    // A generation still needs room for its output.
    assert.throws(() => e.submit({ prompt, maxTokens: 1, temperature: 0 }), ContextLengthError);
    assert.equal(e.stats().waiting + e.stats().running, 0);
  } finally {
    await e.stop();
  }
});
