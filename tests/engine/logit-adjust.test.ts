/**
 * Logit biases and penalties: the additions one request's output implies (LogitAdjuster), their
 * scatter into a batch's logits (addToLogits), and their effect on what the engine generates with
 * stories260K on the reference backend.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { addToLogits } from "../../src/engine/engine-runner.ts";
import { type GenerateRequest, RequestParamError } from "../../src/engine/engine-types.ts";
import { checkSamplingRequest, LogitAdjuster } from "../../src/engine/logit-adjust.ts";
import { loadModel } from "../../src/model/load.ts";

const req = (extra: Partial<GenerateRequest>): GenerateRequest => ({ prompt: [1, 2, 3], ...extra });

test("LogitAdjuster.of() is undefined when every bias and penalty is zero", () => {
  assert.equal(LogitAdjuster.of(req({})), undefined);
  assert.equal(LogitAdjuster.of(req({ presencePenalty: 0, frequencyPenalty: 0, logitBias: [[5, 0]] })), undefined);
  assert.notEqual(LogitAdjuster.of(req({ logitBias: [[5, -1]] })), undefined);
});

test("LogitAdjuster.next() subtracts presence once and frequency per appearance, on top of the biases", () => {
  const adj = LogitAdjuster.of(req({ presencePenalty: 0.5, frequencyPenalty: 0.25, logitBias: [[7, 3], [9, -100]] }))!;
  const tokens = [1, 2, 3]; // the prompt; output starts at 3
  assert.deepEqual([...adj.next(tokens, 3)].sort((a, b) => a[0] - b[0]), [[7, 3], [9, -100]]);
  tokens.push(5, 5, 7);
  assert.deepEqual(
    [...adj.next(tokens, 3)].sort((a, b) => a[0] - b[0]),
    [[5, -0.5 - 2 * 0.25], [7, 3 - 0.5 - 0.25], [9, -100]],
  );
  tokens.push(5);
  assert.equal(adj.next(tokens, 3).get(5), -0.5 - 3 * 0.25, "counts grow with the output, counted once each");
  assert.equal(adj.next(tokens, 3).get(5), -0.5 - 3 * 0.25, "a second call with no new token counts nothing again");
});

test("LogitAdjuster.next() leaves out a token whose bias its penalty cancels, and keeps a repeated bias's last value", () => {
  const adj = LogitAdjuster.of(req({ presencePenalty: 1, logitBias: [[4, 2], [4, 1]] }))!;
  assert.deepEqual([...adj.next([0, 4], 1)], []);
});

test("checkSamplingRequest() refuses token ids outside the vocabulary and non-finite values", () => {
  checkSamplingRequest(req({ logitBias: [[0, 1], [511, -100]], presencePenalty: 2 }), 512);
  assert.throws(() => checkSamplingRequest(req({ logitBias: [[512, 1]] }), 512), (e: unknown) => e instanceof RequestParamError && /Token 512 in logit_bias is outside this model's vocabulary of 512 tokens/.test(e.message));
  assert.throws(() => checkSamplingRequest(req({ logitBias: [[-1, 1]] }), 512), RequestParamError);
  assert.throws(() => checkSamplingRequest(req({ logitBias: [[3, NaN]] }), 512), /The logit_bias of token 3 must be a finite number, got NaN/);
  assert.throws(() => checkSamplingRequest(req({ frequencyPenalty: Infinity }), 512), /The frequency_penalty must be a finite number, got Infinity/);
});

test("addToLogits() adds each row's additions to that row only", async () => {
  const b = createReferenceBackend();
  const logits = b.upload(new Float32Array(2 * 4), [2, 4]);
  addToLogits(b, logits, [new Map([[1, 2.5]]), new Map()]);
  addToLogits(b, logits, [undefined, new Map([[1, -1], [3, 7]])]);
  assert.deepEqual([...(await b.download(logits))], [0, 2.5, 0, 0, 0, -1, 0, 7]);
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const prompt = model.tokenizer.encode("Once upon a time", { addBos: true });

async function greedy(extra: Partial<GenerateRequest>): Promise<number[]> {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
  try {
    const h = e.submit({ prompt, maxTokens: 12, temperature: 0, ignoreEos: true, ...extra });
    for await (const _ of h.stream) { /* drain */ }
    return (await h.result).tokenIds;
  } finally {
    await e.stop();
  }
}

test("Engine applies logit_bias: +100 forces a token at every step, -100 bans it", async () => {
  const base = await greedy({});
  const [a] = base;
  assert.deepEqual(await greedy({ logitBias: [[a, 100]] }), Array(12).fill(a));
  const banned = await greedy({ logitBias: [[a, -100]] });
  assert.ok(!banned.includes(a), `token ${a} still generated: ${banned}`);
  assert.ok(banned.length === 12);
});

test("Engine applies frequency_penalty: two equally biased tokens alternate instead of one repeating", async () => {
  const [a, b] = await greedy({});
  const both: [number, number][] = [[a, 100], [b, 100]];
  const plain = await greedy({ logitBias: both });
  const count = (ids: number[], t: number) => ids.filter((x) => x === t).length;
  assert.ok(Math.min(count(plain, a), count(plain, b)) <= 1, `without a penalty one token repeats: ${plain}`);
  const penalized = await greedy({ logitBias: both, frequencyPenalty: 2 });
  assert.ok(penalized.every((t) => t === a || t === b), `${penalized}`);
  assert.ok(Math.min(count(penalized, a), count(penalized, b)) >= 4, `with frequency_penalty 2 both recur: ${penalized}`);
});
