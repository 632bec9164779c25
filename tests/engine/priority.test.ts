/**
 * Request priorities in the engine (GenerateRequest.priority, vLLM's): an urgent request takes the
 * one running slot from a less urgent one, which is recomputed and ends with the tokens it would
 * have had; equal priorities keep first-come order.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { loadModel } from "../../src/model/load.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const encode = (text: string) => model.tokenizer.encode(text, { addBos: true });
const SLOW: GenerateRequest = { prompt: encode("Once upon a time"), maxTokens: 60, temperature: 0, ignoreEos: true };
const QUICK: GenerateRequest = { prompt: encode("Tom had a red ball"), maxTokens: 4, temperature: 0, ignoreEos: true };

/** Runs `first`, and `second` once `first` has streamed a token; returns the order they ended in and their tokens. */
async function race(first: GenerateRequest, second: GenerateRequest) {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, scheduler: { maxRunning: 1 } });
  try {
    const ended: string[] = [];
    const a = e.submit(first);
    const aResult = a.result.then((r) => (ended.push("first"), r));
    let bResult: Promise<unknown> | undefined;
    for await (const _ of a.stream) bResult ??= e.submit(second).result.then((r) => (ended.push("second"), r));
    const [ra] = await Promise.all([aResult, bResult]);
    return { ended, tokens: ra.tokenIds, stats: e.stats() };
  } finally {
    await e.stop();
  }
}

test("Engine.submit() with a lower priority preempts the running request, which ends with the same tokens", async () => {
  const alone = await race(SLOW, { ...QUICK, maxTokens: 1 });
  const raced = await race({ ...SLOW, priority: 2 }, { ...QUICK, priority: -1 });
  assert.deepEqual(raced.ended, ["second", "first"]);
  assert.ok(raced.stats.priorityPreemptions >= 1, `priority preemptions: ${raced.stats.priorityPreemptions}`);
  assert.deepEqual(raced.tokens, alone.tokens, "recomputed after its preemption, the output is unchanged");
});

test("Engine.submit() with equal priorities serves first come first", async () => {
  const raced = await race({ ...SLOW, priority: 1 }, { ...QUICK, priority: 1 });
  assert.deepEqual(raced.ended, ["first", "second"]);
  assert.equal(raced.stats.priorityPreemptions, 0);
});

test("Engine.submit() refuses a priority that is not a whole number", async () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    for (const priority of [0.5, Number.NaN, 2 ** 60]) assert.throws(() => e.submit({ ...QUICK, priority }), RequestParamError);
  } finally {
    await e.stop();
  }
});
