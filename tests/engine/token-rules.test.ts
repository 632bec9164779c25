/**
 * vLLM's `allowed_token_ids` and `bad_words` (token-rules.ts): the masks, and on the story model the
 * outputs they allow, with and without speculation (the same tokens either way).
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";
import type { Speculation } from "../../src/engine/ngram-draft.ts";
import { TokenRules } from "../../src/engine/token-rules.ts";
import { loadModel } from "../../src/model/load.ts";

test("TokenRules.maskAfter() bars a bad word's last token only after the rest of it, and keeps to the allowed tokens", () => {
  const r = new TokenRules(16, undefined, [[3], [5, 6, 7]]);
  const barred = (tail: number[]) => Array.from({ length: 16 }, (_, t) => t).filter((t) => !r.maskAfter(tail)!.allows(t));
  assert.equal(r.lookBack, 2);
  assert.deepEqual(barred([1, 2]), [3], "a one-token word, always");
  assert.deepEqual(barred([5, 6]), [3, 7]);
  assert.deepEqual(barred([6, 5]), [3]);
  const allowed = new TokenRules(16, [2, 7, 9], [[5, 7]]);
  const allows = (tail: number[]) => Array.from({ length: 16 }, (_, t) => t).filter((t) => allowed.maskAfter(tail)?.allows(t) ?? true);
  assert.deepEqual(allows([1]), [2, 7, 9]);
  assert.deepEqual(allows([5]), [2, 9]);
  // Where the bad words would leave nothing, the allowed tokens stand.
  assert.deepEqual(new TokenRules(16, [7], [[5, 7]]).maskAfter([5])!.allows(7), true);
  assert.equal(new TokenRules(16, undefined, []).maskAfter([1, 2]), undefined);
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time there was a little girl named Lily", { addBos: true });

async function generate(req: Partial<GenerateRequest>, speculative?: Speculation): Promise<number[]> {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, ...(speculative ? { speculative } : {}) });
  try {
    return (await e.submit({ prompt, maxTokens: 60, temperature: 0, ignoreEos: true, ...req }).result).tokenIds;
  } finally {
    await e.stop();
  }
}

/** Whether `seq` holds `word` as consecutive tokens. */
const holds = (seq: readonly number[], word: readonly number[]) => seq.some((_, i) => word.every((t, j) => seq[i + j] === t));

test("Engine with bad_words never completes one and with allowed_token_ids samples only those, speculating or not", async () => {
  const plain = await generate({});
  // Two words the greedy story writes: one token of it, and a run of two.
  const words = [[plain[3]], plain.slice(8, 10)];
  const ngram: Speculation = { method: "ngram", numTokens: 4, maxN: 3, minN: 2 };
  const banned = await generate({ badWords: words });
  for (const w of words) assert.ok(!holds(banned, w), model.tokenizer.decode(banned));
  assert.deepEqual(await generate({ badWords: words }, ngram), banned, "the same tokens with n-gram drafts");
  const allowed = [...new Set(plain.slice(0, 12))];
  const kept = await generate({ allowedTokenIds: allowed, maxTokens: 20 });
  assert.ok(kept.every((t) => allowed.includes(t)), `${kept} within ${allowed}`);
  assert.deepEqual(await generate({ allowedTokenIds: allowed, maxTokens: 20 }, ngram), kept);
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 8 });
  try {
    assert.throws(() => e.submit({ prompt, allowedTokenIds: [99999] }), (err: unknown) => err instanceof RequestParamError && /allowed_token_ids/.test(err.message));
    assert.throws(() => e.submit({ prompt, allowedTokenIds: [] }), RequestParamError);
  } finally {
    await e.stop();
  }
});
