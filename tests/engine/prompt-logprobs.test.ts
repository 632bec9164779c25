/**
 * Prompt log probabilities (`GenerateRequest.promptLogprobs`, the engine side of `echo` with
 * `logprobs`): each prompt token's log probability given those before it, against a dense f64
 * transformer, across chunked prefills, batching with other requests and a warm prefix cache.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { loadModel } from "../../src/model/load.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { type GenerateRequest, type GenerateResult, RequestParamError, type StreamDelta } from "../../src/engine/engine-types.ts";
import type { TokenLogprob } from "../../src/engine/logprobs.ts";
import type { SchedulerConfig } from "../../src/engine/scheduler-types.ts";
import { promptLogprobRowLimit } from "../../src/engine/engine.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { naiveLogits, randomModel, type RandomModelSpec } from "../model/forward-fixtures.ts";

const SPEC: RandomModelSpec = {
  architecture: "qwen2", hidden: 16, layers: 2, heads: 4, kvHeads: 2, headDim: 4, ffn: 24, vocab: 29,
  ropeLayout: "neox", tied: false, dtype: "f32", seed: 21,
};
const host = randomModel(SPEC);
const letters = (ids: readonly number[]) => ids.map((i) => String.fromCharCode(97 + (i % 26))).join("");
const model: LoadedModel = {
  ...host,
  config: { ...host.config, eosTokenIds: [] },
  tokenizer: { vocabSize: SPEC.vocab, encode: () => [], decode: letters },
  source: "random",
};
const PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21];

/** log softmax of the dense model's logits at each position: row i scores token i + 1. */
function naiveLogprobs(tokens: readonly number[]): Float64Array[] {
  return naiveLogits(host, tokens).map((row) => {
    const max = row.reduce((a, b) => Math.max(a, b), -Infinity);
    const z = max + Math.log(row.reduce((a, b) => a + Math.exp(b - max), 0));
    return row.map((l) => l - z);
  });
}

function assertMatchesNaive(got: readonly (TokenLogprob | null)[], tokens: readonly number[], top: number): void {
  const want = naiveLogprobs(tokens);
  assert.equal(got.length, tokens.length);
  assert.equal(got[0], null, "nothing predicts the first token");
  for (let i = 1; i < tokens.length; i++) {
    const lp = got[i];
    assert.ok(lp, `position ${i} has a log probability`);
    assert.equal(lp.id, tokens[i]);
    assert.ok(Math.abs(lp.logprob - want[i - 1][tokens[i]]) < 1e-4, `position ${i}: ${lp.logprob} vs ${want[i - 1][tokens[i]]}`);
    const order = [...want[i - 1].keys()].sort((a, b) => want[i - 1][b] - want[i - 1][a]);
    assert.deepEqual(lp.top.map(([id]) => id), order.slice(0, top), `position ${i}'s alternatives`);
  }
}

async function run(reqs: GenerateRequest[], warm: number[][] = [], o: Partial<SchedulerConfig> = { maxBatchTokens: 4 }): Promise<{ results: GenerateResult[]; firsts: StreamDelta[] }> {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, blockSize: 4, scheduler: o });
  try {
    for (const p of warm) await e.submit({ prompt: p, maxTokens: 1, temperature: 0 }).result;
    const hs = reqs.map((r) => e.submit(r));
    const firsts = await Promise.all(hs.map(async (h) => {
      let first: StreamDelta | undefined;
      for await (const d of h.stream) first ??= d;
      return first!;
    }));
    return { results: await Promise.all(hs.map((h) => h.result)), firsts };
  } finally {
    await e.stop();
  }
}

test("Engine promptLogprobs match a dense transformer across chunked prefills", async () => {
  const { results, firsts } = await run([{ prompt: PROMPT, maxTokens: 3, temperature: 0, promptLogprobs: 3 }]);
  assertMatchesNaive(results[0].promptLogprobs!, PROMPT, 3);
  assert.deepEqual(firsts[0].promptLogprobs, results[0].promptLogprobs, "the first delta carries them");
  const plain = await run([{ prompt: PROMPT, maxTokens: 3, temperature: 0 }]);
  assert.equal(plain.results[0].promptLogprobs, undefined, "none unless asked");
  assert.deepEqual(results[0].tokenIds, plain.results[0].tokenIds, "asking changes nothing generated");
});

test("Engine promptLogprobs hold when the step's prompt rows are limited (maxPromptLogprobRows)", async () => {
  const other = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3];
  const limited = await run([
    { prompt: PROMPT, maxTokens: 3, temperature: 0, promptLogprobs: 2 },
    { prompt: other, maxTokens: 3, temperature: 0, promptLogprobs: 1 },
    { prompt: [...other].reverse(), maxTokens: 4, temperature: 0 },
  ], [], { maxBatchTokens: 32, maxPromptLogprobRows: 3 });
  assertMatchesNaive(limited.results[0].promptLogprobs!, PROMPT, 2);
  assertMatchesNaive(limited.results[1].promptLogprobs!, other, 1);
  const alone = await run([{ prompt: [...other].reverse(), maxTokens: 4, temperature: 0 }]);
  assert.deepEqual(limited.results[2].tokenIds, alone.results[0].tokenIds);
});

test("promptLogprobRowLimit() keeps a step's scored rows near 128 MiB of f32 logits", () => {
  assert.equal(promptLogprobRowLimit(151_936), 220);
  assert.equal(promptLogprobRowLimit(32_000), 1048);
  assert.equal(promptLogprobRowLimit(10_000_000), 16, "never fewer than 16");
});

test("Engine promptLogprobs compute the whole prompt when its prefix is cached", async () => {
  // The same prompt (and one sharing its first 12 tokens) ran before: their blocks are cached.
  const warm = [PROMPT, [...PROMPT.slice(0, 12), 1, 2, 3]];
  const { results } = await run([{ prompt: PROMPT, maxTokens: 2, temperature: 0, promptLogprobs: 0 }], warm);
  assertMatchesNaive(results[0].promptLogprobs!, PROMPT, 0);
  assert.equal(results[0].cachedTokens, 0, "nothing was taken from the cache");
  const again = await run([{ prompt: PROMPT, maxTokens: 2, temperature: 0 }], warm);
  assert.ok(again.results[0].cachedTokens >= 12, "without the ask the cache serves the prefix");
});

test("Engine promptLogprobs of one request are unchanged by others in the same steps", async () => {
  const other = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3];
  const mixed = await run([
    { prompt: other, maxTokens: 6, temperature: 0 },
    { prompt: PROMPT, maxTokens: 4, temperature: 0, promptLogprobs: 2, logprobs: 1 },
    { prompt: [...other].reverse(), maxTokens: 5, temperature: 0, promptLogprobs: 1 },
  ], [], { maxBatchTokens: 12 });
  assertMatchesNaive(mixed.results[1].promptLogprobs!, PROMPT, 2);
  assertMatchesNaive(mixed.results[2].promptLogprobs!, [...other].reverse(), 1);
  const alone = await run([{ prompt: other, maxTokens: 6, temperature: 0 }]);
  assert.deepEqual(mixed.results[0].tokenIds, alone.results[0].tokenIds);
  assert.equal(mixed.results[0].promptLogprobs, undefined);
});

test("Engine promptLogprobs of a prompt and its greedy continuation agree with the generation's logprobs", async () => {
  // What an evaluation harness does: score prompt + continuation, compare with generating it.
  const { results: [gen] } = await run([{ prompt: PROMPT, maxTokens: 5, temperature: 0, logprobs: 2 }]);
  const full = [...PROMPT, ...gen.tokenIds];
  const { results: [scored] } = await run([{ prompt: full, maxTokens: 1, temperature: 0, promptLogprobs: 2 }]);
  gen.logprobs!.forEach((lp, i) => {
    const p = scored.promptLogprobs![PROMPT.length + i]!;
    assert.equal(p.id, lp.id);
    assert.ok(Math.abs(p.logprob - lp.logprob) < 1e-5, `token ${i}: ${p.logprob} vs ${lp.logprob}`);
    assert.deepEqual(p.top.map(([id]) => id), lp.top.map(([id]) => id));
    assert.equal(p.top[0][0], p.id, "greedy: each continuation token is the most likely");
  });
});

test("Engine refuses a prompt log-probability count outside 0..20", () => {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 8, blockSize: 4 });
  for (const promptLogprobs of [21, -1, 0.5]) {
    assert.throws(() => e.submit({ prompt: PROMPT.slice(0, 3), promptLogprobs }), (err: unknown) => err instanceof RequestParamError && /top prompt log probabilities .* got/.test(err.message));
  }
  void e.stop();
});

// The same on WebGPU (stories260K, chunked prefill), against the reference backend. WebGPU must
// really run in CI (lavapipe provides an adapter): there an unavailable adapter fails, as in
// tests/model/forward-golden.test.ts.
const { gpu, why, skip } = await poisonedWebGpu("the WebGPU prompt log probability test");

test("Engine promptLogprobs on WebGPU match the reference backend's", async () => {
  if (!gpu) throw new Error(`No WebGPU adapter in CI: ${why}`);
  const stories = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const prompt = stories.tokenizer.encode("Once upon a time there was a little girl named Lily. She loved to play outside in the park.", { addBos: true });
  const scored = async (backend: Backend) => {
    const e = createEngine(backend, stories, { numBlocks: 16, scheduler: { maxBatchTokens: 16 } });
    try {
      return await e.submit({ prompt, maxTokens: 2, temperature: 0, promptLogprobs: 2 }).result;
    } finally {
      await e.stop();
    }
  };
  const [want, got] = [await scored(createReferenceBackend()), await scored(gpu)];
  assert.equal(got.promptLogprobs!.length, prompt.length);
  assert.equal(got.promptLogprobs![0], null);
  for (let i = 1; i < prompt.length; i++) {
    const [g, w] = [got.promptLogprobs![i]!, want.promptLogprobs![i]!];
    assert.equal(g.id, prompt[i]);
    assert.ok(Math.abs(g.logprob - w.logprob) < 2e-3, `position ${i}: ${g.logprob} vs ${w.logprob}`);
    assert.equal(g.top[0][0], w.top[0][0], `position ${i}'s likeliest token`);
  }
  assert.deepEqual(got.tokenIds, want.tokenIds);
}, { ignore: skip });
