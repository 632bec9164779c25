/**
 * Repetition penalty (repeat-penalty.ts): the seen tokens a row gets, incrementally and after a
 * draft, and the engine applying the penalty before logit biases on a scripted model whose choice
 * it changes.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { RequestParamError } from "../../src/engine/engine-types.ts";
import { RepeatTracker } from "../../src/engine/repeat-penalty.ts";
import { loadModel } from "../../src/model/load.ts";
import { type ScriptedModelSpec, scriptedVocab, writeScriptedModel } from "../model/scripted-model.ts";

const seenOf = (t: { seen: { allows(id: number): boolean } }, ids: number[]) => ids.filter((id) => t.seen.allows(id));

test("RepeatTracker.next() marks the prompt's and output's tokens, new ones only, without changing a mask it handed out", () => {
  const r = new RepeatTracker(1.2, 40);
  const first = r.next([3, 5, 3]);
  assert.deepEqual(seenOf(first, [3, 4, 5, 6]), [3, 5]);
  assert.equal(first.factor, 1.2);
  const same = r.next([3, 5, 3, 5]);
  assert.equal(same.seen, first.seen, "no new token: the same mask");
  const more = r.next([3, 5, 3, 5, 6]);
  assert.deepEqual(seenOf(more, [3, 4, 5, 6]), [3, 5, 6]);
  assert.deepEqual(seenOf(first, [3, 4, 5, 6]), [3, 5], "the earlier step's mask is untouched");
  assert.throws(() => r.next([3]), /counted 5 tokens, got 1/);
});

test("RepeatTracker.next() leaves an image's positions unpenalized: their ids are drawn from its pixels, not text", () => {
  const r = new RepeatTracker(1.2, 40, [[2, 5]]);
  const first = r.next([3, 5, 7, 8, 9, 11]);
  assert.deepEqual(seenOf(first, [3, 5, 7, 8, 9, 11]), [3, 5, 11]);
  // An output token that happens to be one of the image's ids is penalized once the model writes it.
  assert.deepEqual(seenOf(r.next([3, 5, 7, 8, 9, 11, 8]), [7, 8, 9]), [8]);
});

test("RepeatTracker.continuation() gives draft row j the tokens before it, draft tokens included, and counts the committed ones only", () => {
  const r = new RepeatTracker(1.5, 40);
  const rows = r.continuation([1, 2], [7, 2, 9]);
  assert.equal(rows.length, 4);
  assert.deepEqual(rows.map((row) => seenOf(row, [1, 2, 7, 9])), [[1, 2], [1, 2, 7], [1, 2, 7], [1, 2, 7, 9]]);
  assert.equal(rows[2], rows[1], "a draft token already seen adds no mask");
  assert.deepEqual(seenOf(r.next([1, 2]), [1, 2, 7, 9]), [1, 2], "the draft is not counted");
});

// " a" and " b" alternate forever; "Done." ends. A bias on "Done." loses to a fresh " a" (logit ~70
// against 35) but beats a seen one divided by 4 (~17.5).
const SPEC: ScriptedModelSpec = {
  pieces: [" a", " b", "Done."],
  literalPieces: true,
  next: [["~", " a"], [" a", " b"], [" b", " a"], ["Done.", "<eos>"]],
};
const dir = mkdtempSync(`${tmpdir()}/repeat-penalty-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
await writeScriptedModel(`${dir}/looper.gguf`, SPEC);
const model = await loadModel(`${dir}/looper.gguf`);
const vocab = scriptedVocab(SPEC);

test("Engine applies repetitionPenalty before logit biases, to tokens of the prompt and the output", async () => {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 16, blockSize: 4 });
  try {
    const texts = async (prompt: number[], repetitionPenalty?: number) => {
      const r = await engine.submit({ prompt, maxTokens: 6, temperature: 0, logitBias: [[vocab.idOf("Done."), 35]], ...(repetitionPenalty ? { repetitionPenalty } : {}) }).result;
      return r.tokenIds.map((id) => model.tokenizer.decode([id]));
    };
    const tilde = [vocab.idOf("~")];
    assert.deepEqual(await texts(tilde), [" a", " b", " a", " b", " a", " b"], "without the penalty the loop goes on");
    assert.deepEqual(await texts(tilde, 4), [" a", " b", "Done."], "the second \" a\" is seen: 70 / 4 < 35");
    assert.deepEqual(await texts([vocab.idOf(" a"), ...tilde], 4), ["Done."], "a token of the prompt counts as seen");
    assert.deepEqual(await texts(tilde, 1.5), [" a", " b", " a", " b", " a", " b"], "70 / 1.5 still beats 35");
    // "Done." seen in the prompt: its logit 0 is penalized (0), then biased (35), so it still beats a
    // seen " a"; biased first, it would have been 35 / 4 and lost.
    assert.deepEqual(await texts([vocab.idOf("Done."), ...tilde], 4), [" a", " b", "Done."], "the penalty comes before the bias");
    assert.throws(() => engine.submit({ prompt: tilde, repetitionPenalty: 0 }), (e: Error) => e instanceof RequestParamError && /repetition_penalty must be a positive number, got 0/.test(e.message));
  } finally {
    await engine.stop();
  }
});
