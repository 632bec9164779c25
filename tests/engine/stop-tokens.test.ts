/**
 * vLLM's stop_token_ids and min_tokens in the engine: more tokens that end the output as EOS does,
 * and no end before a count, on a scripted model (" a b a b …" after "~", "Done." then EOS after
 * "."), and min_tokens' masks on a draft's rows.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { sampledRowAsks } from "../../src/engine/draft-extras.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import type { Active } from "../../src/engine/engine-request.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";
import { TokenMask } from "../../src/engine/output-constraint.ts";
import { model } from "../serve/looper-model.ts";

const id = (text: string) => model.tokenizer.encode(text, { addBos: false })[0];
const TILDE = [id("~")];
const DOT = [id(".")];

async function run(req: Partial<GenerateRequest> & { prompt: number[] }) {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 16, blockSize: 4 });
  try {
    const r = await engine.submit({ maxTokens: 8, temperature: 0, ...req }).result;
    return { texts: r.tokenIds.map((t) => model.tokenizer.decode([t])), r };
  } finally {
    await engine.stop();
  }
}

test("Engine ends an output at a stop token id as at EOS, without it, under ignore_eos too", async () => {
  const plain = await run({ prompt: TILDE });
  assert.deepEqual(plain.texts.slice(0, 3), [" a", " b", " a"]);
  assert.equal(plain.r.finishReason, "length");
  const stopped = await run({ prompt: TILDE, stopTokenIds: [id(" b")] });
  assert.deepEqual(stopped.texts, [" a"]);
  assert.equal(stopped.r.finishReason, "stop");
  assert.equal(stopped.r.text, " a");
  assert.equal(stopped.r.completionTokens, 2, "the stop token counts as generated, as EOS does");
  const ignoring = await run({ prompt: TILDE, ignoreEos: true, stopTokenIds: [id(" b")] });
  assert.deepEqual([ignoring.texts, ignoring.r.finishReason], [[" a"], "stop"], "ignore_eos ignores EOS, not the stop token ids");
  const eosIgnored = await run({ prompt: DOT, ignoreEos: true });
  assert.equal(eosIgnored.r.finishReason, "length", "ignore_eos alone runs past Done.'s EOS");
});

test("Engine samples no end before min_tokens, then ends as usual", async () => {
  const early = await run({ prompt: DOT });
  assert.deepEqual(early.texts, ["Done."], "EOS right after Done.");
  const held = await run({ prompt: DOT, minTokens: 3 });
  assert.equal(held.texts[0], "Done.");
  assert.equal(held.texts.length, 3, `EOS barred until three tokens: ${JSON.stringify(held.texts)}`);
  assert.equal(held.r.finishReason, "stop");
  const both = await run({ prompt: TILDE, stopTokenIds: [id(" b")], minTokens: 4 });
  assert.ok(!both.texts.slice(0, 4).includes(" b"), `the stop token is barred before four tokens: ${JSON.stringify(both.texts)}`);
  assert.ok(both.texts.length >= 4);
  for (const bad of [{ stopTokenIds: [1 << 20] }, { minTokens: -1 }, { minTokens: 1.5 }]) {
    await assert.rejects(run({ prompt: DOT, ...bad }), (e: Error) => e instanceof RequestParamError, JSON.stringify(bad));
  }
});

test("sampledRowAsks() bars the ends on a draft's rows before min_tokens, counting the draft tokens before each", () => {
  const mask = new TokenMask(64);
  for (let t = 0; t < 64; t++) mask.set(t, t !== 5);
  // One output token so far; min_tokens 3: rows 0 and 1 sample output tokens 1 and 2, rows 2 and 3 tokens 3 and 4.
  const a = { seq: { tokens: [9, 9, 9, 7], promptLength: 3 }, minTokens: { count: 3, mask } } as unknown as Active;
  const { masks } = sampledRowAsks(a, [1, 2, 3]);
  assert.deepEqual(masks.map((m) => m === undefined ? "free" : m.allows(5) ? "allows" : "bars"), ["bars", "bars", "free", "free"]);
});
