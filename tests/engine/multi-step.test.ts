/**
 * Multi-step decoding (EngineOptions.schedulerSteps, run-ahead.ts): a step of plain decodes runs
 * several one-token steps, each fed the token the one before sampled without reading it back, and
 * commits them together. The scheduler's side (Scheduler.lookAhead, commit) on a fake forward; the
 * engine's on stories260K, on the reference backend and on WebGPU (poisoned outputs): the tokens must
 * be those of one-token steps, greedy and seeded, through EOS, stop strings, max_tokens and the
 * context's end, with log probabilities (each step's, from its raw logits), a fixed logit bias and
 * repetition, presence and frequency penalties (those of the group's own tokens applied on the device),
 * while requests that cannot run ahead (a grammar) and requests arriving mid-way are served as before.
 */
import assert from "node:assert/strict";
import { projectRoot, test } from "../harness.ts";
import type { Backend } from "../../src/backend/types.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Engine } from "../../src/engine/engine.ts";
import { modelStepRunner, type StepRunner } from "../../src/engine/engine-runner.ts";
import type { GenerateRequest, GenerateResult } from "../../src/engine/engine-types.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { make, range } from "./scheduler-fixtures.ts";

test("Scheduler.lookAhead() takes the blocks of the steps ahead and commit() keeps their tokens", () => {
  const { sched } = make(16, 4);
  sched.submit(0, range(6, 10));
  sched.commit(sched.schedule(), new Map([[0, 50]]));
  const seq = sched.get(0)!;
  const step = sched.schedule();
  assert.equal(seq.blockTable.length, 2, "positions 0..6");
  assert.equal(sched.lookAhead(step, 3), 3);
  // Positions 6..9 are fed (the pending token and three sampled ones): three blocks.
  assert.equal(step.entries[0].lookahead, 3);
  assert.equal(step.entries[0].blockTable.length, 3);
  assert.equal(seq.blockTable.length, 3);
  assert.throws(() => sched.commit(step, new Map([[0, 54]]), new Map([[0, [51, 52]]])), /gives sequence 0 2 fed tokens; it looked ahead 3/);
});

test("Scheduler.commit() of a step that looked ahead appends every token and computes all but the last", () => {
  const { sched } = make(16, 4);
  sched.submit(0, range(6, 10));
  sched.commit(sched.schedule(), new Map([[0, 50]]));
  const step = sched.schedule();
  sched.lookAhead(step, 3);
  const out = sched.commit(step, new Map([[0, 54]]), new Map([[0, [51, 52, 53]]]));
  const seq = sched.get(0)!;
  assert.deepEqual(out, [seq]);
  assert.deepEqual(seq.tokens.slice(6), [50, 51, 52, 53, 54]);
  assert.equal(seq.numComputed, 10);
  const next = sched.schedule();
  assert.deepEqual(next.entries[0].tokens, [54]);
  assert.equal(next.entries[0].startPos, 10);
  assert.equal(next.entries[0].lookahead, undefined, "a plan does not look ahead unless asked");
});

test("Scheduler.lookAhead() grants the most steps the free blocks hold, and refuses a prefill", () => {
  const { sched } = make(3, 4, { watermarkBlocks: 1 });
  sched.submit(0, range(3, 10));
  const prefill = sched.schedule();
  assert.throws(() => sched.lookAhead(prefill, 2), /sequence 0\) that is not a plain decode/);
  sched.commit(prefill, new Map([[0, 50]]));
  const step = sched.schedule();
  // Positions 3..8 need three blocks; one is free above the watermark of one: positions 3..7 fit in two.
  assert.equal(sched.lookAhead(step, 5), 4);
  assert.equal(step.entries[0].lookahead, 4);
  assert.equal(sched.get(0)!.blockTable.length, 2);
});

test("Scheduler.lookAhead() on a full pool grants the steps the entries' last blocks still hold", () => {
  const { sched } = make(3, 4, { watermarkBlocks: 1 });
  sched.submit(0, range(5, 10));
  sched.commit(sched.schedule(), new Map([[0, 50]]));
  // Positions 0..5 in two blocks; the third block is the watermark.
  const step = sched.schedule();
  assert.equal(sched.get(0)!.blockTable.length, 2);
  assert.equal(sched.lookAhead(step, 4), 2, "positions 6 and 7 are the second block's last slots");
  assert.equal(sched.get(0)!.blockTable.length, 2, "no block taken");
});

const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
const tale = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park.";
const prompt = model.tokenizer.encode(tale, { addBos: true });

/**
 * An engine on `backend` whose runner notes how far each step looked ahead. Its clock is fake: each
 * forward takes `forwardMs` (so the group window, 100 ms, depends on nothing but the test).
 */
interface EngineSetup {
  maxModelLen?: number;
  /** Each forward's time on the fake clock (default 1 ms). */
  forwardMs?: number;
  /** false: a runner whose backend cannot apply penalties on the device. */
  penalizesAhead?: false;
  maxRunning?: number;
  /** KV blocks of 16 tokens (default 48). */
  numBlocks?: number;
}

function engineOn(backend: Backend, schedulerSteps: number, o: EngineSetup = {}): { engine: Engine; aheads: number[] } {
  const { maxModelLen, forwardMs = 1, penalizesAhead, maxRunning, numBlocks = 48 } = o;
  const kv = allocatePagedKv(backend, model.config, numBlocks, 16);
  const inner = { ...modelStepRunner(backend, uploadModel(backend, model), kv), ...(penalizesAhead === false ? { penalizesAhead } : {}) };
  const aheads: number[] = [];
  let ms = 0;
  const runner: StepRunner = {
    ...inner,
    run: (entries, rows, extras) => {
      const k = entries[0]?.lookahead ?? 0;
      aheads.push(k);
      ms += forwardMs * (k + 1);
      return inner.run(entries, rows, extras);
    },
  };
  const now = () => ms;
  const scheduler = maxRunning ? { scheduler: { maxRunning } } : {};
  return { engine: new Engine({ runner, config: model.config, tokenizer: model.tokenizer, schedulerSteps, now, ...(maxModelLen ? { maxModelLen } : {}), ...scheduler }), aheads };
}

/** Results of `reqs` submitted together (`late` after the first step), and how far the steps looked ahead. */
async function serve(backend: Backend, steps: number, reqs: Partial<GenerateRequest>[], late: Partial<GenerateRequest>[] = [], o: EngineSetup = {}) {
  const { engine, aheads } = engineOn(backend, steps, o);
  try {
    const handles = reqs.map((r) => engine.submit({ prompt, maxTokens: 40, temperature: 0, ...r }));
    const lateHandles: Promise<GenerateResult>[] = [];
    if (late.length > 0) {
      // Arrives while the others decode, possibly mid-way through a group of steps.
      await handles[0].stream[Symbol.asyncIterator]().next();
      for (const r of late) lateHandles.push(engine.submit({ prompt: prompt.slice(0, 12), maxTokens: 20, temperature: 0, ...r }).result);
    }
    const results = await Promise.all([...handles.map((h) => h.result), ...lateHandles]);
    return { results: results.map(({ text, tokenIds, finishReason, logprobs }) => ({ text, tokenIds, finishReason, logprobs })), aheads, itl: engine.metrics.itl };
  } finally {
    await engine.stop();
  }
}

const CASES: Partial<GenerateRequest>[] = [
  {},
  { temperature: 0.8, seed: 9, maxTokens: 37 },
  { temperature: 1, topK: 5, topP: 0.9, seed: 4, maxTokens: 3 },
  { temperature: 0.9, minP: 0.05, seed: 11, stop: [" the"] },
  { temperature: 0.7, seed: 5, logprobs: 3, maxTokens: 30 },
  // A fixed bias is added at every step run ahead: "." and "," barred, " the" favoured.
  { maxTokens: 30, logitBias: [[model.tokenizer.encode(".", { addBos: false })[0], -100], [model.tokenizer.encode(",", { addBos: false })[0], -100], [model.tokenizer.encode(" the", { addBos: false })[0], 2]] },
];

// Penalties of quarter multiples: a group's device sums round as one step's host sums (exactly).
const PENALIZED: Partial<GenerateRequest>[] = [
  { repetitionPenalty: 1.5 },
  { frequencyPenalty: 0.75, presencePenalty: 0.5, temperature: 0.8, seed: 6 },
  { repetitionPenalty: 1.25, presencePenalty: 1.5, logprobs: 2, logitBias: [[model.tokenizer.encode(",", { addBos: false })[0], -2.5]], temperature: 0.7, seed: 8, maxTokens: 30 },
  // A plain request in the same groups.
  { maxTokens: 30 },
];

// The last token: the tokenizer puts a "▁" before a text's first word.
/** Waits (with a deadline only against a hang) until the engine holds no request. */
async function eventuallyIdle(engine: Engine): Promise<void> {
  for (let i = 0; i < 3000 && engine.activeRequests > 0; i++) await new Promise((r) => setTimeout(r, 10));
}

const tokenOf = (text: string) => model.tokenizer.encode(text, { addBos: false }).at(-1)!;
// Masks the host knows for every step ahead: allowed tokens, one-token bad words, min_tokens' bar on stop tokens.
const MASKED: Partial<GenerateRequest>[] = [
  { allowedTokenIds: [...new Set(prompt.slice(1))], temperature: 0.9, seed: 3 },
  { badWords: [[tokenOf("the")], [tokenOf("was")], [tokenOf(".")]], temperature: 0.7, seed: 4 },
  // Stops at the first "." but for min_tokens, which bars it (a stop token) for the first 20 tokens.
  { stopTokenIds: [tokenOf(".")], minTokens: 20, temperature: 0.8, seed: 5 },
];

const webgpu = await poisonedWebGpu("the WebGPU multi-step tests");
const BACKENDS: [string, Backend | undefined, boolean][] = [["the reference backend", createReferenceBackend(), false], ["WebGPU", webgpu.gpu, webgpu.skip]];

for (const [name, backend, skip] of BACKENDS) {
  const on = backend!;

  test(`Engine schedulerSteps gives the tokens of one-token steps on ${name}, greedy and seeded`, async () => {
    const plain = await serve(on, 1, CASES);
    const ahead = await serve(on, 4, CASES);
    assert.deepEqual(ahead.results, plain.results);
    assert.ok(plain.aheads.every((k) => k === 0));
    assert.ok(ahead.aheads.some((k) => k === 3), `looked ahead: ${ahead.aheads.join(",")}`);
    // A request with 3 tokens to give never runs past them: its last steps look ahead less.
    assert.equal(ahead.results[2].tokenIds.length, 3);
    assert.ok(ahead.aheads.length < plain.aheads.length / 2, `${ahead.aheads.length} runs against ${plain.aheads.length}`);
  }, { ignore: skip });

  test(`Engine schedulerSteps applies repetition, presence and frequency penalties to the tokens a group samples on ${name}`, async () => {
    const plain = await serve(on, 1, PENALIZED);
    const ahead = await serve(on, 4, PENALIZED);
    assert.deepEqual(ahead.results, plain.results);
    assert.ok(ahead.aheads.some((k) => k === 3), `looked ahead: ${ahead.aheads.join(",")}`);
    // The penalties change the tokens, so a group that missed those of its own tokens would differ.
    const unpenalized = await serve(on, 1, PENALIZED.map(({ repetitionPenalty: _r, presencePenalty: _p, frequencyPenalty: _f, ...r }) => r));
    for (let i = 0; i < 3; i++) assert.notDeepEqual(unpenalized.results[i].tokenIds, plain.results[i].tokenIds, `request ${i}`);
    // A runner whose backend cannot apply them on the device decodes penalized requests a step a read.
    const stepwise = await serve(on, 4, PENALIZED.slice(0, 3), [], { penalizesAhead: false });
    assert.deepEqual(stepwise.results, plain.results.slice(0, 3));
    assert.ok(stepwise.aheads.every((k) => k === 0), `looked ahead: ${stepwise.aheads.join(",")}`);
  }, { ignore: skip });

  test(`Engine schedulerSteps applies allowed_token_ids, one-token bad words and min_tokens to the steps a group runs ahead on ${name}`, async () => {
    const plain = await serve(on, 1, MASKED);
    const ahead = await serve(on, 4, MASKED);
    assert.deepEqual(ahead.results, plain.results);
    assert.ok(ahead.aheads.some((k) => k === 3), `looked ahead: ${ahead.aheads.join(",")}`);
    // The masks change the tokens, so a group that missed them at its further steps would differ.
    const unmasked = await serve(on, 1, MASKED.map(({ allowedTokenIds: _a, badWords: _b, minTokens: _m, ...r }) => r));
    for (let i = 0; i < MASKED.length; i++) assert.notDeepEqual(unmasked.results[i].tokenIds, plain.results[i].tokenIds, `request ${i}`);
    const allowed = new Set(MASKED[0].allowedTokenIds);
    assert.ok(plain.results[0].tokenIds.every((t) => allowed.has(t)));
    assert.ok(plain.results[2].tokenIds.length >= 20 && plain.results[2].finishReason === "stop", `${plain.results[2].tokenIds.length} ${plain.results[2].finishReason}`);
  }, { ignore: skip });

  test(`Engine schedulerSteps serves grammar requests one step at a time, and log-probability and late requests as they come, on ${name}`, async () => {
    const reqs: Partial<GenerateRequest>[] = [{ maxTokens: 30 }, { temperature: 0.8, seed: 3, maxTokens: 24 }];
    const late: Partial<GenerateRequest>[] = [{ logprobs: 2 }, { grammar: { kind: "regex", pattern: "[a-z ]*" }, temperature: 0.7, seed: 5 }];
    const plain = await serve(on, 1, reqs, late);
    const ahead = await serve(on, 6, reqs, late);
    assert.deepEqual(ahead.results, plain.results);
    assert.ok(ahead.aheads.some((k) => k > 0), "the two plain requests looked ahead before and after the others");
    assert.equal(ahead.results[2].logprobs?.length, ahead.results[2].tokenIds.length);
  }, { ignore: skip });

  test(`Engine schedulerSteps looks ahead while requests wait for a running slot on ${name}`, async () => {
    const reqs: Partial<GenerateRequest>[] = [{ maxTokens: 9 }, { maxTokens: 14, temperature: 0.8, seed: 1 }, { maxTokens: 7 }, { maxTokens: 10, temperature: 0.9, seed: 2 }];
    const plain = await serve(on, 1, reqs, [], { maxRunning: 2 });
    const ahead = await serve(on, 4, reqs, [], { maxRunning: 2 });
    assert.deepEqual(ahead.results, plain.results);
    // The first two decode in groups while the other two wait for their slots (the first ends at its 9th token).
    assert.ok(ahead.aheads.slice(0, 3).includes(3), `looked ahead: ${ahead.aheads.join(",")}`);
  }, { ignore: skip });

  test(`Engine schedulerSteps looks ahead while requests wait for KV blocks on ${name}`, async () => {
    // 7 blocks: three prompts of 17 tokens (2 blocks, none shared) get in, the fourth finds none free
    // above the watermark (1) and waits; the three decode within their second blocks.
    const reqs = [{ maxTokens: 12 }, { maxTokens: 14, temperature: 0.8, seed: 1 }, { maxTokens: 10 }, { maxTokens: 12, temperature: 0.9, seed: 2 }]
      .map((r, i): Partial<GenerateRequest> => ({ ...r, prompt: prompt.slice(3 * i, 3 * i + 17) }));
    const plain = await serve(on, 1, reqs, [], { numBlocks: 7 });
    const ahead = await serve(on, 4, reqs, [], { numBlocks: 7 });
    assert.deepEqual(ahead.results, plain.results);
    assert.ok(ahead.aheads.slice(0, 3).some((k) => k > 0), `looked ahead: ${ahead.aheads.join(",")}`);
  }, { ignore: skip });

  test(`Engine schedulerSteps lets a request be cancelled mid-group, the others unchanged and every block back, on ${name}`, async () => {
    const reqs: Partial<GenerateRequest>[] = [{ maxTokens: 30 }, { maxTokens: 30, temperature: 0.8, seed: 6, repetitionPenalty: 1.25 }, { maxTokens: 30, temperature: 0.9, seed: 7 }];
    const plain = await serve(on, 1, reqs);
    const { engine, aheads } = engineOn(on, 4);
    try {
      const handles = reqs.map((r) => engine.submit({ prompt, maxTokens: 40, temperature: 0, ...r }));
      // Cancel the second once it has streamed a few tokens (some of them from a group).
      let seen = 0;
      for await (const d of handles[1].stream) {
        seen += d.tokenIds.length;
        if (seen >= 6) break;
      }
      const results = await Promise.all(handles.map((h) => h.result));
      assert.equal(results[1].finishReason, "abort");
      assert.deepEqual([results[0].tokenIds, results[2].tokenIds], [plain.results[0].tokenIds, plain.results[2].tokenIds]);
      assert.ok(aheads.some((k) => k > 0), `looked ahead: ${aheads.join(",")}`);
      await eventuallyIdle(engine);
      assert.equal(engine.pool.numUsedBlocks(), 0);
    } finally {
      await engine.stop();
    }
  }, { ignore: skip });

  test(`Engine schedulerSteps never runs past a request's max_tokens on ${name}`, async () => {
    const ahead = await serve(on, 8, [{ maxTokens: 5, temperature: 0.8, seed: 2 }]);
    assert.deepEqual(ahead.results, (await serve(on, 1, [{ maxTokens: 5, temperature: 0.8, seed: 2 }])).results);
    // The prefill samples the first token; one group gives the other four (1 + 3 ahead).
    assert.deepEqual(ahead.aheads, [0, 3]);
    // The ITL histogram counts a gap per token after the first, each a share of the group's wait.
    assert.equal(ahead.itl.count, 4);
    assert.ok(ahead.itl.sum > 0);
  }, { ignore: skip });

  test(`Engine schedulerSteps keeps a group within 100 ms of measured decode steps on ${name}`, async () => {
    // Forwards of 30 ms: three fit the window, so groups look ahead 2 however many steps are allowed.
    const slow = await serve(on, 8, [{ maxTokens: 20 }], [], { forwardMs: 30 });
    assert.deepEqual(slow.results, (await serve(on, 1, [{ maxTokens: 20 }])).results);
    // The prefill (a step of 30 ms, not a decode), the first decode group before any decode was measured (8), then threes, and two for the last two tokens.
    assert.deepEqual(slow.aheads, [0, 7, 2, 2, 2, 1]);
    // Forwards longer than the window: one step a read after the first measurement.
    assert.deepEqual((await serve(on, 8, [{ maxTokens: 12 }], [], { forwardMs: 120 })).aheads, [0, 7, 0, 0, 0]);
  }, { ignore: skip });

  test(`Engine schedulerSteps stops at the context's end on ${name}`, async () => {
    const limit = prompt.length + 10;
    const plain = await serve(on, 1, [{ maxTokens: undefined }], [], { maxModelLen: limit });
    const ahead = await serve(on, 8, [{ maxTokens: undefined }], [], { maxModelLen: limit });
    assert.deepEqual(ahead.results, plain.results);
    assert.equal(ahead.results[0].finishReason, "length");
    assert.equal(ahead.results[0].tokenIds.length, 10);
    // The prefill, 8 tokens in one group (1 + 7 ahead), then one step for the last token: never past the context.
    assert.deepEqual(ahead.aheads, [0, 7, 0]);
  }, { ignore: skip });

  test(`Engine queues prompt chunks nobody reads without waiting for them, and gives the same tokens, on ${name}`, async () => {
    // A prompt of 4 chunks of 16 tokens: the first three sample nothing.
    const long = model.tokenizer.encode(`${tale} ${tale} ${tale}`, { addBos: true }).slice(0, 60);
    const run = async (onStep?: () => void) => {
      const kv = allocatePagedKv(on, model.config, 48, 16);
      const inner = modelStepRunner(on, uploadModel(on, model), kv);
      const unread: boolean[] = [];
      const runner: StepRunner = { ...inner, run: (entries, rows, extras) => (unread.push(extras?.unread === true), inner.run(entries, rows, extras)) };
      const engine = new Engine({ runner, config: model.config, tokenizer: model.tokenizer, scheduler: { maxBatchTokens: 16 }, ...(onStep ? { onStep } : {}) });
      try {
        const reqs = [{ prompt: long, maxTokens: 6, temperature: 0.8, seed: 3 }, { prompt: long.slice(0, 40), maxTokens: 6, temperature: 0, promptLogprobs: 1 }];
        const results = await Promise.all(reqs.map((r) => engine.submit(r).result));
        return { results: results.map(({ tokenIds, promptLogprobs }) => ({ tokenIds, promptLogprobs })), unread };
      } finally {
        await engine.stop();
      }
    };
    const unread = await run();
    const read = await run(() => {});
    assert.deepEqual(unread.results, read.results);
    assert.ok(unread.unread.filter((u) => u).length >= 2, `unread steps: ${unread.unread}`);
    assert.ok(read.unread.every((u) => !u), "a measured step is read");
    // A chunk of the scored prompt is read (its rows are scored): only the steps of the other prompt's early chunks are not.
    assert.ok(unread.unread.length === read.unread.length);
  }, { ignore: skip });

  test(`Engine.warmUp() runs a prompt, a decode and a decode run ahead, and leaves nothing behind, on ${name}`, async () => {
    const { engine, aheads } = engineOn(on, 4);
    try {
      await engine.warmUp();
      // A prompt, (on WebGPU: decodes of 8, 16 and 24,) a decode asking for everything, one run ahead,
      // (on WebGPU: one at the end of a 512-token context).
      assert.deepEqual(aheads, on.info.preparesKernelsLazily ? [0, 0, 0, 0, 0, 1, 0] : [0, 0, 1]);
      const st = engine.stats();
      assert.deepEqual([st.kvUsedBlocks, st.prefixQueriedTokens, engine.metrics.promptTokens, engine.metrics.generationTokens], [0, 0, 0, 0]);
      const after = await engine.submit({ prompt, maxTokens: 12, temperature: 0.8, seed: 4 }).result;
      assert.deepEqual(after.tokenIds, (await serve(on, 1, [{ maxTokens: 12, temperature: 0.8, seed: 4 }])).results[0].tokenIds);
      assert.equal(after.cachedTokens, 0, "nothing was cached");
      await assert.rejects(() => engine.warmUp(), /warms up only before its first request/);
    } finally {
      await engine.stop();
    }
  }, { ignore: skip });
}
