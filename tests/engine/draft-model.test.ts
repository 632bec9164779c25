/**
 * Draft-model speculative decoding (draft-model.ts): the proposer drafts its model's greedy
 * continuation, keeps the draft KV that still agrees and recomputes only the rest, lets a new
 * sequence continue a finished one's, and gives up a draft (never a wrong one) when its cache is full;
 * the engine keeps exactly the target's tokens, greedy and seeded, whatever the draft model.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { checkDraftVocabulary, DraftModelError, DraftModelProposer, type DraftModelSpeculation, type DraftWant, loadDraftModel } from "../../src/engine/draft-model.ts";
import type { StepEntry } from "../../src/engine/scheduler-types.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { modelStepRunner, type StepRunner } from "../../src/engine/engine-runner.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { allocatePagedKv, kvBytesPerBlock } from "../../src/engine/kv-cache.ts";
import { parseSpeculativeConfig, SpeculationConfigError } from "../../src/engine/ngram-draft.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { firstLayers } from "../model/model-files.ts";
import { Engine } from "../../src/engine/engine.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
/** The first two of stories260K's five layers. */
const shallow: LoadedModel = firstLayers(model, 2);
const encode = (text: string) => model.tokenizer.encode(text, { addBos: true });
const STORY = encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.");
const PROMPTS = [STORY, encode("Tom had a red ball. He liked to"), encode("The sun was shining and the birds")];
const spec = (numTokens: number): DraftModelSpeculation => ({ method: "draft_model", model: modelPath, numTokens });
const spec3 = spec(3);

async function generate(reqs: GenerateRequest[], speculative?: DraftModelSpeculation, draft?: LoadedModel) {
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 128, blockSize: 4, ...(speculative ? { speculative } : {}) }, draft);
  try {
    const out = await Promise.all(reqs.map((r) => e.submit(r).result));
    return { tokens: out.map((r) => r.tokenIds), drafted: e.metrics.specDraftTokens, accepted: e.metrics.specAcceptedTokens };
  } finally {
    await e.stop();
  }
}

const greedyReqs = PROMPTS.map((prompt) => ({ prompt, maxTokens: 24, temperature: 0, ignoreEos: true }));
const seededReqs = PROMPTS.map((prompt, i) => ({ prompt, maxTokens: 24, temperature: 0.9, topP: 0.95, seed: 7 + i, ignoreEos: true }));
const plainGreedy = await generate(greedyReqs);
const plainSeeded = await generate(seededReqs);

test("Engine with a draft model that is the model itself accepts every draft token and generates the same tokens", async () => {
  const on = await generate(greedyReqs, spec(4), model);
  assert.deepEqual(on.tokens, plainGreedy.tokens);
  assert.ok(on.drafted >= 40, `drafted ${on.drafted}`);
  assert.equal(on.accepted, on.drafted, "a draft KV out of step with its tokens would propose other tokens than the model's");
});

test("Engine with a shallower draft model keeps the model's own tokens, greedy and seeded", async () => {
  const greedy = await generate(greedyReqs, spec(3), shallow);
  assert.deepEqual(greedy.tokens, plainGreedy.tokens);
  assert.ok(greedy.accepted > 0 && greedy.accepted < greedy.drafted, `accepted ${greedy.accepted} of ${greedy.drafted}: the draft agrees sometimes`);
  const seeded = await generate(seededReqs, spec(3), shallow);
  assert.deepEqual(seeded.tokens, plainSeeded.tokens, "rejected draft rows give their uniforms back");
  assert.notDeepEqual(plainSeeded.tokens, plainGreedy.tokens);
  for (const schedule of ["cost", "constant"] as const) {
    assert.deepEqual((await generate(greedyReqs, { ...spec(3), schedule }, shallow)).tokens, plainGreedy.tokens, schedule);
    assert.deepEqual((await generate(seededReqs, { ...spec(3), schedule }, shallow)).tokens, plainSeeded.tokens, schedule);
  }
});

test("Engine with a draft model keeps a grammar's, penalties' and log probabilities' tokens", async () => {
  const reqs: GenerateRequest[] = PROMPTS.map((prompt, i) => ({
    prompt, maxTokens: 20, temperature: 0.7, seed: 3 + i, ignoreEos: true, grammar: { kind: "regex", pattern: "[a-z ]*" }, frequencyPenalty: 0.3, logprobs: 1,
  }));
  const e = (speculative?: DraftModelSpeculation) => createEngine(createReferenceBackend(), model, { numBlocks: 128, blockSize: 4, ...(speculative ? { speculative } : {}) }, speculative ? shallow : undefined);
  const run = async (speculative?: DraftModelSpeculation) => {
    const engine = e(speculative);
    try {
      const out = await Promise.all(reqs.map((r) => engine.submit(r).result));
      return { out, accepted: engine.metrics.specAcceptedTokens };
    } finally {
      await engine.stop();
    }
  };
  const [plain, spec] = [await run(), await run(spec3)];
  assert.deepEqual(spec.out.map((r) => r.tokenIds), plain.out.map((r) => r.tokenIds));
  assert.ok(spec.accepted > 0, `accepted ${spec.accepted}`);
  spec.out.forEach((r, i) => {
    assert.match(r.text, /^[a-z ]*$/);
    r.logprobs!.forEach((lp, k) => assert.ok(Math.abs(lp.logprob - plain.out[i].logprobs![k].logprob) < 1e-4, `request ${i} token ${k}`));
  });
});

test("Engine whose draft model fails decodes as without drafts and counts the failures", async () => {
  const backend = createReferenceBackend();
  const runner = modelStepRunner(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, 128, 4, "f32"));
  const failing: StepRunner = { numBlocks: 64, blockSize: 4, run: () => Promise.reject(new Error("device lost")), close: () => {} };
  const e = new Engine({ runner, config: model.config, tokenizer: model.tokenizer, speculative: spec(3), draft: { runner: failing, contextLength: 1024 } });
  try {
    const out = await Promise.all(greedyReqs.map((r) => e.submit(r).result));
    assert.deepEqual(out.map((r) => r.tokenIds), plainGreedy.tokens);
    assert.equal(e.metrics.specDraftTokens, 0);
    assert.ok(e.metrics.stepErrors > 0, "the failures are counted");
  } finally {
    await e.stop();
  }
});

/**
 * A runner over stories260K with `blocks` KV blocks of 4 that records the tokens each forward feeds;
 * `chained`: with StepRunner.draftGreedy (drafts on the device, one read), else without.
 */
function recordingRunner(blocks: number, chained = false): { runner: StepRunner; fed: number[] } {
  const backend = createReferenceBackend();
  const { draftGreedy, ...inner } = modelStepRunner(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, blocks, 4, "f32"));
  const fed: number[] = [];
  const count = (entries: readonly StepEntry[]) => entries.reduce((n, e) => n + e.tokens.length, 0);
  const runner: StepRunner = { ...inner, run: (entries, rows, extras) => (fed.push(count(entries)), inner.run(entries, rows, extras)) };
  if (chained) runner.draftGreedy = (entries, steps) => (fed.push(count(entries), ...Array(steps - 1).fill(entries.length)), draftGreedy!(entries, steps));
  return { fed, runner };
}

test("DraftModelProposer.propose() drafts the same on the device in one read (StepRunner.draftGreedy) as step by step", async () => {
  const g = plainGreedy.tokens;
  const [stepwise, chained] = [recordingRunner(64), recordingRunner(64, true)].map(({ runner, fed }) => ({ p: new DraftModelProposer(runner, model.config.vocabSize), fed }));
  // Rounds of two sequences with different limits, then accepted tokens, a rejection, and a new turn.
  const other = PROMPTS[1];
  const rounds: DraftWant[][] = [
    [{ seqId: 1, tokens: STORY, limit: 4 }, { seqId: 2, tokens: other, limit: 2 }],
    [{ seqId: 1, tokens: [...STORY, ...g[0].slice(0, 3)], limit: 3 }, { seqId: 2, tokens: [...other, 5, 6], limit: 4 }],
    [{ seqId: 1, tokens: [...STORY, ...g[0].slice(0, 3), 9, 9], limit: 1 }],
  ];
  for (const wants of rounds) {
    const [s0, c0] = [stepwise.fed.length, chained.fed.length];
    const [a, b] = [await stepwise.p.propose(wants), await chained.p.propose(wants)];
    assert.deepEqual([...b], [...a]);
    for (const w of wants) assert.equal(a.get(w.seqId)?.length, w.limit);
    // Each round's first forward feeds only what changed since the last, chained or not.
    assert.equal(chained.fed[c0], stepwise.fed[s0]);
    assert.equal(chained.fed.length - c0, Math.max(...wants.map((w) => w.limit)), "one forward per draft token");
  }
  assert.equal(chained.fed[0], STORY.length + other.length);
  stepwise.p.release(1);
  chained.p.release(1);
  const next = [...STORY, ...g[0].slice(0, 3), 9, 9, 7];
  assert.deepEqual([...await chained.p.propose([{ seqId: 3, tokens: next, limit: 3 }])], [...await stepwise.p.propose([{ seqId: 3, tokens: next, limit: 3 }])]);
});

test("DraftModelProposer.propose() drafts the greedy continuation and recomputes only tokens that changed", async () => {
  const g = plainGreedy.tokens[0];
  const { runner, fed } = recordingRunner(16);
  const p = new DraftModelProposer(runner, model.config.vocabSize);
  assert.deepEqual((await p.propose([{ seqId: 1, tokens: STORY, limit: 4 }])).get(1), g.slice(0, 4));
  assert.deepEqual(fed, [STORY.length, 1, 1, 1], "the prompt, then one forward per further draft token");
  // Two draft tokens accepted and the model's own third: the draft KV of all three is kept.
  fed.length = 0;
  assert.deepEqual((await p.propose([{ seqId: 1, tokens: [...STORY, ...g.slice(0, 3)], limit: 2 }])).get(1), g.slice(3, 5));
  assert.deepEqual(fed, [1, 1]);
  // Rejected draft tokens (and other text after them): the KV from the first on is computed again,
  // and the draft is what a proposer that never saw the rejected tokens drafts.
  fed.length = 0;
  const rejected = [...STORY, g[0], ...PROMPTS[1].slice(1, 6)];
  const fresh = new DraftModelProposer(recordingRunner(16).runner, model.config.vocabSize);
  const truth = (await fresh.propose([{ seqId: 9, tokens: rejected, limit: 3 }])).get(9)!;
  assert.deepEqual((await p.propose([{ seqId: 1, tokens: rejected, limit: 3 }])).get(1), truth);
  assert.deepEqual(fed, [5, 1, 1]);
  // A finished sequence's draft KV serves a new one continuing it.
  p.release(1);
  fed.length = 0;
  const next = [...rejected, truth[0], 77, 78];
  const nextTruth = (await fresh.propose([{ seqId: 10, tokens: next, limit: 2 }])).get(10);
  assert.deepEqual((await p.propose([{ seqId: 2, tokens: next, limit: 2 }])).get(2), nextTruth);
  assert.equal(fed[0], 2, "only the last two tokens are new to the draft KV");
});

test("DraftModelProposer.propose() takes blocks from idle drafts and proposes nothing it has no room for", async () => {
  const g = plainGreedy.tokens;
  const { runner } = recordingRunner(16);
  const p = new DraftModelProposer(runner, model.config.vocabSize);
  const need = (tokens: number[], limit: number) => Math.ceil((tokens.length + limit - 1) / 4);
  assert.ok(need(STORY, 4) > 8 && need(STORY, 4) <= 16);
  assert.deepEqual((await p.propose([{ seqId: 1, tokens: STORY, limit: 4 }])).get(1), g[0].slice(0, 4));
  // Sequence 1 does not draft this round: its blocks go to sequence 2.
  const other = PROMPTS[1];
  const twice = [...other, ...g[1].slice(0, 8), ...other, ...g[1].slice(0, 8), 1, 2, 3];
  assert.ok(need(twice, 4) > 16 - need(STORY, 4));
  const second = await p.propose([{ seqId: 2, tokens: twice, limit: 4 }]);
  assert.equal(second.get(2)?.length, 4);
  // Both at once do not fit: one drafts, the other gets no draft (not a wrong one).
  const both = await p.propose([{ seqId: 1, tokens: STORY, limit: 4 }, { seqId: 2, tokens: twice, limit: 4 }]);
  assert.equal(both.size, 1);
  if (both.has(1)) assert.deepEqual(both.get(1), g[0].slice(0, 4));
  else assert.deepEqual(both.get(2), second.get(2));
  // A prompt longer than the whole draft cache never drafts.
  assert.equal((await p.propose([{ seqId: 3, tokens: [...twice, ...twice], limit: 4 }])).size, 0);
  // Drafts stop at the draft model's context, whatever room its cache has.
  const short = (context: number) => new DraftModelProposer(recordingRunner(16).runner, model.config.vocabSize, context);
  assert.deepEqual((await short(STORY.length + 2).propose([{ seqId: 1, tokens: STORY, limit: 4 }])).get(1), g[0].slice(0, 3));
  assert.equal((await short(STORY.length - 1).propose([{ seqId: 1, tokens: STORY, limit: 4 }])).size, 0);
});

test("DraftModelProposer.observe() lengthens drafts accepted whole, shortens the others and pauses after rejected single tokens", async () => {
  const g = plainGreedy.tokens[0];
  const p = new DraftModelProposer(recordingRunner(32).runner, model.config.vocabSize, Infinity, { numTokens: 5, schedule: "heuristic" });
  const draftLength = async () => (await p.propose([{ seqId: 1, tokens: STORY, limit: 8 }])).get(1)?.length ?? 0;
  assert.equal(await draftLength(), 5);
  p.observe(1, 5, 2);
  assert.equal(await draftLength(), 4);
  p.observe(1, 4, 4);
  assert.equal(await draftLength(), 5, "+2, at most num_speculative_tokens");
  for (let k = 4; k >= 1; k--) {
    p.observe(1, k + 1, 0);
    assert.equal(await draftLength(), k);
  }
  // Single-token drafts rejected outright: 1, then 2, then 4 steps without drafts.
  const pattern: number[] = [];
  for (let step = 0; step < 10; step++) {
    const n = await draftLength();
    pattern.push(n);
    if (n > 0) p.observe(1, n, 0);
  }
  assert.deepEqual(pattern, [1, 0, 1, 0, 0, 1, 0, 0, 0, 0]);
  p.observe(1, 1, 1);
  assert.equal(await draftLength(), 3, "a draft accepted whole ends the pauses and lengthens the next");
  assert.deepEqual((await p.propose([{ seqId: 1, tokens: STORY, limit: 8 }])).get(1), g.slice(0, 3));
  const constant = new DraftModelProposer(recordingRunner(32).runner, model.config.vocabSize, Infinity, { numTokens: 5, schedule: "constant" });
  constant.observe(1, 5, 0);
  assert.equal((await constant.propose([{ seqId: 1, tokens: STORY, limit: 8 }])).get(1)?.length, 5);
});

test("DraftModelProposer.propose() under the cost schedule stops drafting where drafts fail and keeps drafting long where they pass", async () => {
  // Each proposal round measures 5 ms for its forwards; target steps cost 50 ms and 1 ms a row.
  const proposer = () => {
    let ms = 0;
    return new DraftModelProposer(recordingRunner(32).runner, model.config.vocabSize, Infinity, { numTokens: 4, schedule: "cost" }, () => (ms += 5));
  };
  // A decode verifying a draft: one row per token it feeds.
  const decodeRows = (rows: number): StepEntry => ({ seqId: 1, tokens: Array(rows).fill(1), startPos: 40, blockTable: [], sample: true, prefill: false });
  const lengths = async (p: DraftModelProposer, accept: (n: number) => number) => {
    const out: number[] = [];
    for (let round = 1; round <= 9; round++) {
      const n = (await p.propose([{ seqId: 1, tokens: STORY, limit: 8 }])).get(1)?.length ?? 0;
      out.push(n);
      if (n > 0) p.observe(1, n, accept(n));
      if (round === 1) for (const rows of [1, 5, 2, 4]) p.observeTargetStep([decodeRows(rows)], 0.05 + 0.001 * rows);
    }
    return out;
  };
  assert.deepEqual(await lengths(proposer(), () => 0), [4, 0, 0, 0, 0, 0, 0, 1, 0], "the longest until measured, then none but a probe every 8 rounds");
  assert.deepEqual(await lengths(proposer(), (n) => n), [4, 4, 4, 4, 4, 4, 4, 3, 4], "the longest, and one shorter every 8 rounds");
});

test("checkDraftVocabulary() refuses a draft model whose tokens differ", () => {
  const swapped = {
    ...model, source: "other.gguf",
    tokenizer: { ...model.tokenizer, vocabSize: model.tokenizer.vocabSize, decode: (ids: readonly number[], o?: { special?: boolean }) => (ids[0] === 300 ? "zzz" : model.tokenizer.decode(ids, o)), tokenText: undefined },
  };
  checkDraftVocabulary(model, shallow);
  assert.throws(() => checkDraftVocabulary(model, swapped), (e: Error) => e instanceof DraftModelError && /draft model "other\.gguf" and model ".*stories260K\.gguf" have different vocabularies: token 300 is "zzz" in the draft/.test(e.message));
  const smaller = { ...swapped, tokenizer: { ...model.tokenizer, vocabSize: 100 } };
  assert.throws(() => checkDraftVocabulary(model, smaller), /different vocabularies: 100 and 512 tokens/);
});

test("loadDraftModel() names a missing draft model file", async () => {
  await assert.rejects(loadDraftModel({ ...spec(2), model: "/nope/draft.gguf" }, model), /The speculative draft model cannot be loaded: Model file not found: "\/nope\/draft\.gguf"/);
  assert.equal((await loadDraftModel(spec(2), model)).config.numLayers, model.config.numLayers);
});

test("parseSpeculativeConfig() reads vLLM's draft_model keys", () => {
  assert.deepEqual(parseSpeculativeConfig('{"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 4}'), { method: "draft_model", model: "d.gguf", numTokens: 4 });
  assert.deepEqual(parseSpeculativeConfig('{"model": "d.gguf", "num_speculative_tokens": 2, "disable_by_batch_size": 8}'), { method: "draft_model", model: "d.gguf", numTokens: 2, disableByBatchSize: 8 });
  const refuses = (text: string, re: RegExp) => assert.throws(() => parseSpeculativeConfig(text), (e: Error) => e instanceof SpeculationConfigError && re.test(e.message));
  refuses('{"method": "draft_model", "num_speculative_tokens": 4}', /The speculative model must be the path of a draft model, got null/);
  refuses('{"method": "draft_model", "model": "d.gguf"}', /needs num_speculative_tokens/);
  refuses('{"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 4, "prompt_lookup_max": 3}', /Unknown speculative config key "prompt_lookup_max" for method "draft_model"/);
  refuses('{"method": "draft_model", "model": 3, "num_speculative_tokens": 4}', /got 3/);
  assert.equal((parseSpeculativeConfig('{"model": "d.gguf", "num_speculative_tokens": 2, "num_speculative_tokens_schedule": "constant"}') as DraftModelSpeculation).schedule, "constant");
  refuses('{"model": "d.gguf", "num_speculative_tokens": 2, "num_speculative_tokens_schedule": "dynamic"}', /num_speculative_tokens_schedule must be "heuristic", "constant" or "cost", got "dynamic"/);
});

test("createEngine() refuses draft_model speculation without the draft model", () => {
  assert.throws(() => createEngine(createReferenceBackend(), model, { numBlocks: 16, speculative: spec(2) }), /needs the draft model loaded/);
});

test("createEngine() fits the draft model's KV cache in the same memory budget as the model's", async () => {
  const perBlock = kvBytesPerBlock(model.config, 16, "f16") + kvBytesPerBlock(shallow.config, 16, "f16");
  const budget = 30 * perBlock + perBlock / 2;
  const drafting = createEngine(createReferenceBackend(), model, { kvMemoryBytes: budget, speculative: spec(2) }, shallow);
  const plain = createEngine(createReferenceBackend(), model, { kvMemoryBytes: budget });
  try {
    assert.equal(drafting.kvCacheDtype, "f16");
    assert.equal(drafting.stats().kvTotalBlocks, 30);
    assert.equal(plain.stats().kvTotalBlocks, Math.floor(budget / kvBytesPerBlock(model.config, 16, "f16")));
    // A block count given outright is the model's, and the draft's cache matches it.
    const counted = createEngine(createReferenceBackend(), model, { numBlocks: 12, speculative: spec(2) }, shallow);
    assert.equal(counted.stats().kvTotalBlocks, 12);
    await counted.stop();
  } finally {
    await Promise.all([drafting.stop(), plain.stop()]);
  }
});
