/**
 * N-gram speculative decoding: drafts from the context (ngram-draft.ts), the scheduler feeding and
 * committing them (Scheduler.propose / commit), and the engine keeping exactly what decoding one
 * token a step would have produced, greedy and seeded, through stop strings, EOS and max_tokens.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine } from "../../src/engine/engine-factory.ts";
import { Engine } from "../../src/engine/engine.ts";
import { GREEDY_ROW, modelStepRunner, type StepRunner } from "../../src/engine/engine-runner.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import type { GenerateRequest, GenerateResult, StreamDelta } from "../../src/engine/engine-types.ts";
import type { OutputGrammar } from "../../src/engine/grammar.ts";
import type { TokenMask } from "../../src/engine/output-constraint.ts";
import { checkSpeculation, ngramDraft, type NgramSpeculation, parseSpeculativeConfig, SpeculationConfigError } from "../../src/engine/ngram-draft.ts";
import { seededUniforms } from "../../src/engine/sampler-rng.ts";
import { stepShapeOf } from "../../src/engine/step-record.ts";
import { tokenTextOf } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { fakeSample, make, range } from "./scheduler-fixtures.ts";

const NGRAM: NgramSpeculation = { method: "ngram", numTokens: 5, maxN: 4, minN: 2 };

test("ngramDraft() copies what followed the latest earlier occurrence of the longest suffix", () => {
  // Suffix [7, 8] occurred at 0 (then 1, 2) and at 5 (then 9, 4); the latest wins.
  assert.deepEqual(ngramDraft([7, 8, 1, 2, 3, 7, 8, 9, 4, 7, 8], NGRAM, 5), [9, 4, 7, 8]);
  // A longer suffix beats a later shorter one: [3, 7, 8] occurred only at 2.
  assert.deepEqual(ngramDraft([3, 7, 8, 5, 5, 7, 8, 6, 3, 7, 8], NGRAM, 3), [5, 5, 7]);
  // The limit caps the draft; the draft stops at the sequence's end.
  assert.deepEqual(ngramDraft([7, 8, 1, 2, 3, 7, 8, 9, 4, 7, 8], NGRAM, 1), [9]);
  // A run of one token predicts more of it (the occurrence overlaps the suffix).
  assert.deepEqual(ngramDraft([5, 1, 1, 1, 1], NGRAM, 4), [1]);
});

test("ngramDraft() proposes nothing without a match of at least minN tokens", () => {
  assert.deepEqual(ngramDraft([1, 2, 3, 4, 5, 6], NGRAM, 5), []);
  assert.deepEqual(ngramDraft([1, 2, 3, 9, 2], NGRAM, 5), [], "only a 1-token suffix repeats");
  assert.deepEqual(ngramDraft([1, 2, 3, 9, 2], { maxN: 3, minN: 1 }, 5), [3, 9, 2]);
  assert.deepEqual(ngramDraft([4], NGRAM, 5), []);
  assert.deepEqual(ngramDraft([1, 2, 1, 2], NGRAM, 0), []);
});

test("parseSpeculativeConfig() reads vLLM's ngram keys and refuses the rest by name", () => {
  assert.deepEqual(parseSpeculativeConfig('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'), { method: "ngram", numTokens: 3, maxN: 4, minN: 4 });
  assert.deepEqual(parseSpeculativeConfig('{"method": "ngram", "num_speculative_tokens": 3}'), { method: "ngram", numTokens: 3, maxN: 5, minN: 5 });
  assert.deepEqual(parseSpeculativeConfig('{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":6,"prompt_lookup_min":2}'), { method: "ngram", numTokens: 2, maxN: 6, minN: 2 });
  const refuses = (text: string, re: RegExp) => assert.throws(() => parseSpeculativeConfig(text), (e: Error) => e instanceof SpeculationConfigError && re.test(e.message));
  refuses('{"method": "medusa", "num_speculative_tokens": 3}', /"medusa" is not supported/);
  refuses('{"method": "eagle", "num_speculative_tokens": 3}', /must be the directory of an EAGLE head for method "eagle", got null/);
  refuses('{"method": "ngram"}', /needs num_speculative_tokens/);
  refuses('{"method": "ngram", "num_speculative_tokens": 0}', /num_speculative_tokens must be an integer from 1 to 32, got 0/);
  refuses('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 3}', /prompt_lookup_min \(5\) exceeds prompt_lookup_max \(3\)/);
  assert.deepEqual(parseSpeculativeConfig('{"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 4}').disableByBatchSize, 4);
  refuses('{"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0}', /disable_by_batch_size must be an integer from 1/);
  refuses('{"method": "ngram", "num_speculative_tokens": 2, "model": "x"}', /Unknown speculative config key "model"/);
  refuses('{"method": "ngram", "num_speculative_tokens": "4"}', /must be a number, got "4"/);
  refuses("ngram", /must be a JSON object, got "ngram"/);
  assert.throws(() => checkSpeculation({ ...NGRAM, maxN: 1.5 }), /prompt_lookup_max must be an integer/);
});

test("seededUniforms().rewind() repeats the draws taken back", () => {
  const u = seededUniforms(3);
  const first = [u.next(), u.next(), u.next()];
  u.rewind(2);
  assert.deepEqual([u.next(), u.next()], first.slice(1));
  assert.throws(() => u.rewind(4), /Cannot rewind 4 draws of 3/);
});

test("Scheduler.propose() feeds a decode's draft after its token and commit() keeps the accepted part", () => {
  const { sched } = make(16, 4);
  sched.submit(0, range(6, 10));
  const prefill = sched.schedule();
  sched.commit(prefill, new Map([[0, 50]]));
  const seq = sched.get(0)!;
  assert.equal(seq.tokens.length, 7);
  sched.propose(0, [51, 52, 53, 54]);
  const step = sched.schedule();
  const e = step.entries[0];
  assert.deepEqual(e.tokens, [50, 51, 52, 53, 54]);
  assert.equal(e.draft, 4);
  assert.equal(e.startPos, 6);
  assert.equal(e.prefill, false);
  assert.equal(step.numTokens, 5);
  // Positions 6..10 need blocks 1 and 2 (of 4 tokens each), so three blocks in all.
  assert.equal(e.blockTable.length, 3);
  const used = sched.stats().kvUsedBlocks;
  // The step log counts a row per fed token, each reading one more position (7..11).
  assert.deepEqual(stepShapeOf(step.entries), { prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 5, decodeAttnTokens: 7 + 8 + 9 + 10 + 11 });
  // Two draft tokens agree, then the model sampled 60: the sequence gains 51, 52, 60.
  sched.commit(step, new Map([[0, 60]]), new Map([[0, [51, 52]]]));
  assert.deepEqual(seq.tokens.slice(6), [50, 51, 52, 60]);
  assert.equal(seq.numComputed, 9);
  assert.deepEqual(seq.draft, []);
  // Ten tokens fit in three blocks; none was freed, and the next step feeds 60 alone.
  assert.equal(seq.blockTable.length, 3);
  assert.equal(sched.stats().kvUsedBlocks, used);
  const next = sched.schedule();
  assert.deepEqual(next.entries[0].tokens, [60]);
  assert.equal(next.entries[0].draft, undefined);
  sched.commit(next, new Map([[0, 61]]));
});

test("Scheduler.commit() with rollBack feeds a draft's taken tokens again with the step's token and the new sample, and that step verifies the next draft", () => {
  const { sched } = make(16, 4);
  sched.submit(0, range(6, 10));
  sched.commit(sched.schedule(), new Map([[0, 50]]));
  const seq = sched.get(0)!;
  sched.propose(0, [51, 52, 53]);
  const step = sched.schedule();
  const rolledBack: number[] = [];
  // One of three taken, then 60 sampled: the state ran through all three, so it goes back.
  sched.commit(step, new Map([[0, 60]]), new Map([[0, [51]]]), (id) => rolledBack.push(id));
  assert.deepEqual(rolledBack, [0]);
  assert.deepEqual(seq.tokens.slice(6), [50, 51, 60]);
  assert.equal(seq.numComputed, 6, "computed again from the step's start");
  assert.deepEqual([sched.stats().specStateRollbacks, sched.stats().specRefedTokens], [1, 2]);
  // A draft proposed now follows all three pending tokens, and the next step verifies it after them.
  sched.propose(0, [61, 62]);
  const again = sched.schedule();
  assert.deepEqual(again.entries[0].tokens, [50, 51, 60, 61, 62]);
  assert.deepEqual([again.entries[0].startPos, again.entries[0].draft], [6, 2]);
  // Both taken, then 63: nothing to put back, and the sequence is computed through 62.
  sched.commit(again, new Map([[0, 63]]), new Map([[0, [61, 62]]]), (id) => rolledBack.push(id));
  assert.deepEqual(rolledBack, [0]);
  assert.deepEqual(seq.tokens.slice(6), [50, 51, 60, 61, 62, 63]);
  assert.equal(seq.numComputed, 11);
});

test("Scheduler verifies drafts of at most maxDraftingSequences sequences a step; the others decode without theirs", () => {
  const { sched } = make(16, 4, { maxDraftingSequences: 1 });
  sched.submit(0, range(5, 10));
  sched.submit(1, range(5, 30));
  sched.commit(sched.schedule(), new Map([[0, 50], [1, 60]]));
  sched.propose(0, [51, 52]);
  sched.propose(1, [61, 62]);
  const step = sched.schedule();
  assert.deepEqual(step.entries.map((e) => [e.seqId, e.tokens.length, e.draft ?? 0]), [[0, 3, 2], [1, 1, 0]]);
  sched.commit(step, new Map([[0, 53], [1, 63]]), new Map([[0, [51, 52]]]));
  assert.deepEqual(sched.get(1)!.tokens.slice(5), [60, 63], "the draft left out is dropped");
});

test("Scheduler.commit() returns the blocks of rejected draft tokens and refuses a non-prefix", () => {
  const { sched } = make(16, 4);
  sched.submit(0, range(4, 10));
  sched.commit(sched.schedule(), new Map([[0, 50]]));
  const seq = sched.get(0)!;
  sched.propose(0, [1, 2, 3, 4, 5, 6]);
  const step = sched.schedule();
  assert.equal(seq.blockTable.length, 3, "positions 4..10 reach block 2");
  // Nothing accepted: five tokens need two blocks, the third goes back to the pool.
  sched.commit(step, new Map([[0, 70]]), new Map([[0, []]]));
  assert.equal(seq.blockTable.length, 2);
  assert.equal(sched.stats().kvUsedBlocks, 2);
  sched.propose(0, [8, 9]);
  const bad = sched.schedule();
  assert.throws(() => sched.commit(bad, new Map([[0, 1]]), new Map([[0, [9]]])), /do not begin sequence 0's draft \[8, 9\]/);
});

test("Scheduler drafts only within the token budget and never preempt for a draft", () => {
  const { sched } = make(3, 4, { maxBatchTokens: 3 });
  sched.submit(0, range(3, 10));
  sched.commit(sched.schedule(), new Map([[0, 50]]));
  sched.propose(0, [1, 2, 3, 4]);
  const step = sched.schedule();
  assert.deepEqual(step.entries[0].tokens, [50, 1, 2], "budget 3: the pending token and two draft tokens");
  sched.commit(step, new Map([[0, 9]]), new Map([[0, [1, 2]]]));
  // 7 tokens in two blocks; a 6-token draft would need a third and fourth block, and the pool has one more.
  sched.submit(1, range(3, 20));
  const other = sched.schedule();
  sched.commit(other, new Map([[0, 5], [1, 6]]));
  assert.equal(sched.stats().kvUsedBlocks, 3);
  sched.propose(0, [1, 1, 1, 1, 1, 1]);
  const tight = sched.schedule();
  assert.equal(tight.preempted.length, 0, "no one is preempted for a draft");
  const e0 = tight.entries.find((e) => e.seqId === 0)!;
  assert.equal(e0.draft, undefined, "the draft is dropped when its blocks are not free");
  assert.equal(e0.tokens.length, 1);
  // The draft left out was for the tokens before this step: the commit forgets it.
  sched.commit(tight, fakeSample(tight));
  assert.deepEqual(sched.get(0)!.draft, []);
});

// --- the engine on the real tiny model -------------------------------------------------------

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
// Told twice, so the second telling can be copied from the first.
const tale = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park.";
const prompt = model.tokenizer.encode(`${tale} ${tale} ${tale.slice(0, 40)}`, { addBos: true });

interface Run {
  result: GenerateResult;
  deltas: StreamDelta[];
  steps: number;
  drafted: number;
  accepted: number;
}

async function run(req: Partial<GenerateRequest>, speculative?: NgramSpeculation, from: number[] = prompt): Promise<Run> {
  let steps = 0;
  const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, onStep: () => steps++, ...(speculative ? { speculative } : {}) });
  try {
    const h = e.submit({ prompt: from, maxTokens: 80, temperature: 0, ...req });
    const deltas: StreamDelta[] = [];
    for await (const d of h.stream) deltas.push(d);
    const s = e.stats();
    return { result: await h.result, deltas, steps, drafted: s.specDraftTokens, accepted: s.specAcceptedTokens };
  } finally {
    await e.stop();
  }
}

const plainGreedy = await run({});
const specGreedy = await run({}, NGRAM);

test("Engine speculative decoding gives the greedy tokens of one-token steps, in fewer steps", () => {
  assert.deepEqual(specGreedy.result.tokenIds, plainGreedy.result.tokenIds);
  assert.equal(specGreedy.result.text, plainGreedy.result.text);
  assert.equal(specGreedy.result.finishReason, plainGreedy.result.finishReason);
  assert.equal(plainGreedy.drafted, 0);
  assert.ok(specGreedy.accepted >= 10, `accepted ${specGreedy.accepted} of ${specGreedy.drafted} draft tokens`);
  assert.ok(specGreedy.accepted < specGreedy.drafted, "some draft tokens were rejected too");
  // Each accepted token saves its step: one prefill step, then one step per sampled token.
  assert.equal(plainGreedy.steps, plainGreedy.result.completionTokens);
  assert.equal(specGreedy.steps, specGreedy.result.completionTokens - specGreedy.accepted);
  assert.deepEqual(specGreedy.deltas.flatMap((d) => d.tokenIds), specGreedy.result.tokenIds);
  assert.equal(specGreedy.deltas.map((d) => d.text).join(""), specGreedy.result.text);
  assert.ok(specGreedy.deltas.some((d) => d.tokenIds.length > 1), "accepted tokens arrive in one delta with their step's sample");
});

test("Engine speculative decoding with multi-step decoding runs steps ahead where no sequence verifies a draft, and gives the tokens of one-token steps", async () => {
  for (const req of [{}, { temperature: 0.9, seed: 11 }]) {
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, schedulerSteps: 4, speculative: NGRAM });
    try {
      // The retold tale (drafts taken) and a fresh opening (few drafts: its steps run ahead), side by side.
      const story = model.tokenizer.encode("Tom had a red kite.", { addBos: true });
      const [retold, fresh] = await Promise.all([prompt, story].map((p) => e.submit({ prompt: p, maxTokens: 80, temperature: 0, ...req }).result));
      const s = e.stats();
      assert.deepEqual(retold.tokenIds, (await run(req, undefined, prompt)).result.tokenIds, JSON.stringify(req));
      assert.deepEqual(fresh.tokenIds, (await run(req, undefined, story)).result.tokenIds, JSON.stringify(req));
      assert.ok(s.specAcceptedTokens > 0, `drafts taken (${s.specAcceptedTokens})`);
      assert.ok(s.stepsRunAhead > 0, `steps ran ahead (${s.stepsRunAhead})`);
    } finally {
      await e.stop();
    }
  }
});

test("modelStepRunner() samples a draft's rows after all of an entry's pending tokens: each row the greedy token of a lone forward there", async () => {
  const backend = createReferenceBackend();
  const device = uploadModel(backend, model);
  const table = [0, 1, 2, 3, 4, 5, 6, 7];
  const tokens = prompt.slice(0, 30);
  // Every position's greedy token, from one forward over all of them.
  const lone = allocatePagedKv(backend, model.config, 8, 16);
  const logits = await backend.download(forward(backend, device, lone, { entries: [{ tokens, startPos: 0, blockTable: table }], allPositions: true })) as Float32Array;
  const vocab = model.config.vocabSize;
  const argmax = (row: number) => {
    let best = 0;
    for (let v = 1; v < vocab; v++) if (logits[row * vocab + v] > logits[row * vocab + best]) best = v;
    return best;
  };
  // A sequence computed through 24 feeds 3 pending tokens (24..26), then a draft of 3 (27..29).
  const kv = allocatePagedKv(backend, model.config, 8, 16);
  const runner = modelStepRunner(backend, device, kv);
  await runner.run([{ seqId: 1, tokens: tokens.slice(0, 24), startPos: 0, blockTable: table, sample: true, prefill: true }], [GREEDY_ROW]);
  const out = await runner.run(
    [{ seqId: 1, tokens: tokens.slice(24), startPos: 24, blockTable: table, sample: true, prefill: false, draft: 3 }],
    [GREEDY_ROW], { drafts: [[GREEDY_ROW, GREEDY_ROW, GREEDY_ROW]] },
  );
  // Draft row j is the row of position 26 + j (it predicts draft token j); the entry's row is the last.
  assert.deepEqual(Array.from(out.draftIds![0]!), [26, 27, 28].map(argmax));
  assert.equal(out.ids[0], argmax(29));
});

test("Engine speculative decoding keeps seeded sampling's tokens (temperature, top-p, top-k)", async () => {
  for (const req of [{ temperature: 0.9, seed: 11 }, { temperature: 0.7, topP: 0.9, seed: 5 }, { temperature: 1, topK: 3, seed: 2 }]) {
    const [plain, spec] = [await run(req), await run(req, NGRAM)];
    assert.deepEqual(spec.result.tokenIds, plain.result.tokenIds, JSON.stringify(req));
    assert.ok(spec.drafted > 0, `drafts were verified for ${JSON.stringify(req)}`);
  }
});

test("Engine speculative decoding ends where one-token steps end: max_tokens and stop strings inside accepted drafts", async () => {
  const text = plainGreedy.result.text;
  // Every budget from 2 to 40 tokens: some end inside a step that accepted several tokens.
  for (let n = 2; n <= 40; n += 3) {
    const spec = await run({ maxTokens: n }, NGRAM);
    assert.deepEqual(spec.result.tokenIds, plainGreedy.result.tokenIds.slice(0, n), `max_tokens ${n}`);
    assert.equal(spec.result.finishReason, "length");
    assert.equal(spec.result.completionTokens, n);
  }
  for (const stop of [...new Set(text.split(/\s+/).filter((w) => w.length >= 3))].slice(0, 12)) {
    const [plain, spec] = [await run({ stop: [stop] }), await run({ stop: [stop] }, NGRAM)];
    assert.deepEqual(spec.result, { ...plain.result, firstTokenS: spec.result.firstTokenS, lastTokenS: spec.result.lastTokenS, queueS: spec.result.queueS }, `stop ${JSON.stringify(stop)}`);
    assert.deepEqual(spec.deltas.flatMap((d) => d.tokenIds), spec.result.tokenIds);
  }
});

/**
 * A runner whose "model" always follows token t with NEXT(t), so drafts copied from a cycle in the
 * prompt are accepted whole: an EOS inside an accepted draft must end the request there.
 */
function cycleRunner(next: (t: number) => number): StepRunner & { drafted: number[]; drafts: number[][] } {
  const drafted: number[] = [];
  const drafts: number[][] = [];
  return {
    numBlocks: 64, blockSize: 4, drafted, drafts,
    run(entries, _rows, extras) {
      const ids = Int32Array.from(entries, (e) => next(e.tokens[e.tokens.length - 1]));
      const draftIds = entries.map((e, i) => {
        if (!e.draft) return undefined;
        drafted.push(e.draft);
        drafts.push(e.tokens.slice(-e.draft));
        assert.equal(extras?.drafts?.[i]?.length, e.draft, "a sampling row per draft token");
        // Row j feeds tokens[j] and samples what follows it.
        return Int32Array.from({ length: e.draft }, (_, j) => next(e.tokens[j]));
      });
      return Promise.resolve({ ids, draftIds });
    },
    close() {},
  };
}

test("Engine speculative decoding ends at an EOS inside an accepted draft, without the tokens after it", async () => {
  const eos = model.config.eosTokenIds[0];
  const cycle = [10, 11, 12, 13, eos];
  const next = (t: number) => cycle[(cycle.indexOf(t) + 1) % cycle.length] ?? 10;
  for (const [ignoreEos, expected] of [[false, [12, 13]], [true, [12, 13, eos, 10, 11, 12, 13, eos, 10, 11]]] as const) {
    const runner = cycleRunner(next);
    const e = new Engine({ runner, config: model.config, tokenizer: model.tokenizer, speculative: NGRAM });
    try {
      const r = await e.submit({ prompt: [1, 10, 11, 12, 13, eos, 10, 11], maxTokens: 10, temperature: 0, ignoreEos }).result;
      assert.deepEqual(r.tokenIds, expected, `ignoreEos ${ignoreEos}`);
      assert.equal(r.finishReason, ignoreEos ? "length" : "stop");
      assert.equal(r.completionTokens, ignoreEos ? 10 : 3, "the EOS counts, what followed it in the draft does not");
      assert.ok(runner.drafted.length > 0 && e.stats().specAcceptedTokens >= 2, "the EOS came inside an accepted draft");
      // Unless EOS is ignored, a draft ends at its first EOS: rows after it would verify what is never kept.
      const past = runner.drafts.filter((d) => d.indexOf(eos) >= 0 && d.indexOf(eos) < d.length - 1);
      assert.equal(past.length > 0, ignoreEos, `drafts ${JSON.stringify(runner.drafts)}`);
    } finally {
      await e.stop();
    }
  }
});

test("Engine speculative decoding drafts for no one while more sequences run than disableByBatchSize", async () => {
  const drafted = async (limit: number) => {
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 64, speculative: { ...NGRAM, disableByBatchSize: limit } });
    try {
      await Promise.all([0, 1, 2].map((i) => e.submit({ prompt, maxTokens: 30 + i, temperature: 0 }).result));
      return e.stats().specDraftTokens;
    } finally {
      await e.stop();
    }
  };
  assert.ok((await drafted(3)) > 0, "three running, limit 3: drafts");
  // Limit 1: drafts only once two of the three have finished (their budgets differ by a token).
  const few = await drafted(1);
  assert.ok(few > 0 && few <= 2 * NGRAM.numTokens, `drafted ${few} tokens`);
});

test("Engine speculative decoding refuses a setting out of range", () => {
  assert.throws(() => createEngine(createReferenceBackend(), model, { numBlocks: 8, speculative: { ...NGRAM, numTokens: 99 } }), SpeculationConfigError);
});

// --- grammars, penalties and log probabilities: every draft row as its own one-token step -----

/**
 * Runs `req` without and with speculation and checks that they agree token for token (log
 * probabilities too, one per token, in the deltas as in the result) and that drafts were accepted.
 */
async function agrees(req: Partial<GenerateRequest>, from: number[] = prompt): Promise<Run> {
  const what = JSON.stringify(req);
  const [plain, spec] = [await run(req, undefined, from), await run(req, NGRAM, from)];
  assert.deepEqual(spec.result.tokenIds, plain.result.tokenIds, what);
  assert.equal(spec.result.text, plain.result.text, what);
  assert.equal(spec.result.finishReason, plain.result.finishReason, what);
  assert.deepEqual(spec.result.logprobs, plain.result.logprobs, `the same log probabilities for ${what}`);
  assert.ok(spec.accepted > 0, `draft tokens accepted for ${what}: ${spec.accepted} of ${spec.drafted}`);
  for (const r of [plain, spec]) {
    assert.deepEqual(r.deltas.flatMap((d) => d.tokenIds), r.result.tokenIds, what);
    if (req.logprobs === undefined) continue;
    assert.equal(r.result.logprobs?.length, r.result.tokenIds.length, `one log probability per token for ${what}`);
    for (const d of r.deltas) assert.equal(d.logprobs?.length ?? 0, d.tokenIds.length, `a delta's tokens each with its log probability (${what})`);
    assert.deepEqual(r.deltas.flatMap((d) => d.logprobs ?? []), r.result.logprobs, what);
  }
  return spec;
}

const SEEDED = { temperature: 0.8, seed: 7 };
/** Lower-case text only: drafts that copy "Lily" are cut at the capital, and rows sample among what is left. */
const LOWER: OutputGrammar = { kind: "regex", pattern: "[a-z ,.]*" };
/** At most 50 characters: the rows of a draft that reaches past them may only end the answer. */
const SHORT: OutputGrammar = { kind: "regex", pattern: "[A-Za-z ,.]{1,50}" };
/** A JSON string, told twice in the prompt as a JSON line. */
const STORY: OutputGrammar = { kind: "json", schema: { type: "string", maxLength: 120 } };
const storyPrompt = model.tokenizer.encode(`{"story": "${tale}"}\n{"story": "${tale}"}\n`, { addBos: true });

test("Engine speculative decoding under an output grammar gives the tokens of one-token steps, greedy and seeded", async () => {
  for (const grammar of [LOWER, SHORT]) {
    for (const req of [{ grammar }, { grammar, ...SEEDED }]) await agrees(req);
  }
  await agrees({ grammar: STORY }, storyPrompt);
  const short = await agrees({ grammar: SHORT });
  assert.equal(short.result.text.length, 50, "the answer ends where the grammar does");
  const lower = await agrees({ grammar: LOWER });
  assert.ok(!/[A-Z]/.test(lower.result.text) && lower.drafted > 0);
});

test("Engine speculative decoding with presence and frequency penalties counts the draft tokens before each row", async () => {
  for (const req of [{ presencePenalty: 0.5, frequencyPenalty: 0.3 }, { frequencyPenalty: 0.6, logitBias: [[prompt[5], 2]] as [number, number][] }]) {
    await agrees(req);
    await agrees({ ...req, ...SEEDED });
  }
});

test("Engine speculative decoding with a repetition penalty counts the draft tokens before each row as seen", async () => {
  for (const req of [{ repetitionPenalty: 1.3 }, { repetitionPenalty: 1.05, ...SEEDED }, { repetitionPenalty: 0.7, frequencyPenalty: 0.2, ...SEEDED }]) {
    await agrees(req);
  }
  // The penalty does something: the tokens differ from those without it.
  const [plain, penalized] = [await run(SEEDED), await run({ repetitionPenalty: 1.3, ...SEEDED })];
  assert.notDeepEqual(penalized.result.tokenIds, plain.result.tokenIds);
});

test("Engine speculative decoding reports each token's log probability as one-token steps do", async () => {
  for (const req of [{ logprobs: 0 }, { logprobs: 3 }, { logprobs: 2, ...SEEDED }]) await agrees(req);
  // A stop string and max_tokens inside an accepted draft keep the log probabilities of the tokens kept.
  const words = plainGreedy.result.text.split(/\s+/).filter((w) => w.length >= 4);
  await agrees({ logprobs: 1, stop: [words[words.length >> 1]] });
  await agrees({ logprobs: 1, maxTokens: 23 });
});

test("Engine speculative decoding with a grammar, penalties and log probabilities at once", async () => {
  await agrees({ grammar: LOWER, logprobs: 2, presencePenalty: 0.4, frequencyPenalty: 0.2, ...SEEDED });
  await agrees({ grammar: SHORT, logprobs: 1, frequencyPenalty: 0.5 });
});

/**
 * A runner whose "model" follows token t with NEXT(t) where the row's grammar mask allows it, and
 * else with the lowest token the mask allows (EOS where only that may come): each row must be masked
 * with the grammar state its draft prefix leads to, the entry's own row with the one after the
 * whole draft.
 */
function maskedCycleRunner(next: (t: number) => number): StepRunner {
  const pick = (want: number, mask: TokenMask | undefined) => {
    if (!mask || mask.allows(want)) return want;
    let id = 0;
    while (!mask.allows(id)) id++;
    return id;
  };
  return {
    numBlocks: 64, blockSize: 4,
    run(entries, _rows, extras) {
      const ids = Int32Array.from(entries, (e, i) => pick(next(e.tokens[e.tokens.length - 1]), extras?.masks?.[i]));
      const draftIds = entries.map((e, i) => (e.draft ? Int32Array.from({ length: e.draft }, (_, j) => pick(next(e.tokens[j]), extras?.draftMasks?.[i]?.[j])) : undefined));
      return Promise.resolve({ ids, draftIds });
    },
    close() {},
  };
}

test("Engine speculative decoding masks a draft's rows and the row after it with the states the draft leads to", async () => {
  const texts = Array.from({ length: model.config.vocabSize }, (_, id) => tokenTextOf(model.tokenizer, id));
  const letters = ["a", "b", "c", "d"].map((c) => texts.indexOf(c));
  const next = (t: number) => letters[(letters.indexOf(t) + 1) % letters.length];
  // Nine letters at most: the draft is cut before a tenth, and the row after it may only end the answer.
  const grammar: OutputGrammar = { kind: "regex", pattern: "[abcd]{1,9}" };
  const answer = async (speculative?: NgramSpeculation) => {
    const e = new Engine({ runner: maskedCycleRunner(next), config: model.config, tokenizer: model.tokenizer, ...(speculative ? { speculative } : {}) });
    try {
      const r = await e.submit({ prompt: [1, ...letters, ...letters, letters[0]], maxTokens: 20, temperature: 0, grammar }).result;
      return { r, accepted: e.stats().specAcceptedTokens };
    } finally {
      await e.stop();
    }
  };
  const [plain, spec] = [await answer(), await answer(NGRAM)];
  assert.equal(plain.r.text, "bcdabcdab");
  assert.deepEqual(spec.r.tokenIds, plain.r.tokenIds);
  assert.equal(spec.r.finishReason, "stop");
  assert.ok(spec.accepted >= 5, `accepted ${spec.accepted}`);
});
