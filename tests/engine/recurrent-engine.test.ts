/**
 * An engine serving a model with Gated DeltaNet layers (a random Qwen3.5): each sequence keeps its
 * recurrent state in its own slot through chunked prefills, concurrent decodes, multi-step decoding,
 * preemption and speculative decoding (n-gram, suffix and draft-model drafts; the state put back where
 * a draft is not all taken), so every output is the one a lone forward gives; slots go back when
 * sequences end; what cannot carry the state is refused.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createEngine, type CreateEngineOptions, kvBlockCount, scratchSlotsOf } from "../../src/engine/engine-factory.ts";
import { allocatePagedKv, kvBytesPerBlock, stateBytesPerSlot } from "../../src/engine/kv-cache.ts";
import { StateSlotError, StateSlots } from "../../src/engine/state-slots.ts";
import { checkpointChunk, StateCheckpoints } from "../../src/engine/state-checkpoints.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { attentionLayers, type LoadedModel } from "../../src/model/config.ts";
import { greedySteps } from "../oracle/oracle-compare.ts";
import { generate } from "../../src/engine/generate.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";
import { loraGgufBytes } from "../model/lora-files.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";

const SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 301,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
};
const dir = mkdtempSync(`${tmpdir()}/recurrent-engine-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const model = await loadModel(await writeTestGguf(dir, "qwen35", SPEC));
const backend = createReferenceBackend();
const PROMPTS = [[5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99], [7, 7, 1, 254], [13, 42, 2, 5, 77, 160, 31, 9, 12, 290, 6, 48, 3]];
const MAX_TOKENS = 10;

/** Each prompt's greedy tokens from a lone forward over its own state. */
const alone = await Promise.all(PROMPTS.map(async (prompt) => {
  const kv = allocatePagedKv(backend, model.config, 4, 16);
  return (await greedySteps(backend, uploadModel(backend, model), kv, prompt, MAX_TOKENS, [0, 1, 2, 3])).tokens;
}));

async function runAll(o: CreateEngineOptions, prompts = PROMPTS): Promise<{ outputs: number[][]; preemptions: number }> {
  const e = createEngine(backend, model, o);
  try {
    const rs = await Promise.all(prompts.map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result));
    for (const r of rs) assert.equal(r.finishReason, "length", r.error);
    return { outputs: rs.map((r) => r.tokenIds), preemptions: e.stats().preemptions };
  } finally {
    await e.stop();
  }
}

test("Engine with Gated DeltaNet layers: concurrent chunked prefills and decodes give each prompt's lone greedy tokens", async () => {
  assert.ok(alone.some((t, i) => t.join() !== alone[(i + 1) % alone.length].join()), "the prompts' outputs differ");
  // A 5-token budget cuts every prompt into chunks that carry the state from step to step.
  const chunked = await runAll({ numBlocks: 32, scheduler: { maxBatchTokens: 5, maxRunning: 3 } });
  assert.deepEqual(chunked.outputs, alone);
  // Three slots held by three sequences at once, then reused by the same prompts again (no prefix hit).
  const again = await runAll({ numBlocks: 32, scheduler: { maxRunning: 3 } }, [...PROMPTS, ...PROMPTS]);
  assert.deepEqual(again.outputs, [...alone, ...alone]);
});

test("Engine with Gated DeltaNet layers: multi-step decoding and recompute preemption keep every sequence's state", async () => {
  const ahead = await runAll({ numBlocks: 32, schedulerSteps: 4 });
  assert.deepEqual(ahead.outputs, alone);
  // The three sequences end at 31, 14 and 23 tokens: 18 blocks of 4 in all; a pool of 10 preempts.
  const tight = await runAll({ numBlocks: 10, blockSize: 4, scheduler: { maxBatchTokens: 8, preemption: "recompute" } });
  assert.ok(tight.preemptions > 0, "the small pool forced preemption");
  assert.deepEqual(tight.outputs, alone);
});

test("Engine with Gated DeltaNet layers: swap preemption takes each sequence's state to host memory with its blocks and back", async () => {
  const e = createEngine(backend, model, { numBlocks: 10, blockSize: 4, scheduler: { maxBatchTokens: 8, preemption: "swap" } });
  try {
    const rs = await Promise.all(PROMPTS.map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result));
    assert.deepEqual(rs.map((r) => r.tokenIds), alone);
    const st = e.stats();
    assert.ok(st.swapOuts > 0 && st.swappedInBlocks > 0, `sequences went out and came back (${st.swapOuts} swap-outs)`);
    assert.equal(st.swapUsedBlocks, 0);
  } finally {
    await e.stop();
  }
});

/** Suffix drafts from earlier answers: a second round of the same prompts drafts from the first's. */
const SUFFIX = { method: "suffix", numTokens: 4, maxDepth: 24, maxCachedRequests: 100, maxSpecFactor: 4, minTokenProb: 0.1 } as const;

/** Each prompt twice, the second round after the first, on an engine with `speculative`; its outputs and stats. */
async function twoRounds(m: LoadedModel, o: CreateEngineOptions, draft?: LoadedModel): Promise<{ outputs: number[][]; stats: ReturnType<ReturnType<typeof createEngine>["stats"]> }> {
  const e = createEngine(backend, m, o, draft);
  try {
    const ask = (prompt: number[]) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    const first = await Promise.all(PROMPTS.map(ask));
    const second = await Promise.all(PROMPTS.map(ask));
    for (const r of [...first, ...second]) assert.equal(r.finishReason, "length", r.error);
    return { outputs: [...first, ...second].map((r) => r.tokenIds), stats: e.stats() };
  } finally {
    await e.stop();
  }
}

test("Engine with Gated DeltaNet layers and speculative decoding: a draft not all taken puts the state back and feeds the taken tokens again, so outputs are the lone greedy tokens", async () => {
  // Blocks of 4 and a 6-token budget: drafts verified beside chunked prefills and block-ending decodes.
  for (const speculative of [SUFFIX, { method: "ngram", numTokens: 3, maxN: 3, minN: 1 } as const]) {
    const { outputs, stats } = await twoRounds(model, { numBlocks: 64, blockSize: 4, speculative, scheduler: { maxBatchTokens: 6, maxRunning: 3 } });
    assert.deepEqual(outputs, [...alone, ...alone], speculative.method);
    assert.ok(stats.specAcceptedTokens > 0, `${speculative.method}: some drafts were taken`);
    assert.ok(stats.specAcceptedTokens < stats.specDraftTokens, `${speculative.method}: some were not (${stats.specAcceptedTokens} of ${stats.specDraftTokens}), so states went back`);
    // Each put back feeds its step's token and the drafts taken again: one token at least.
    assert.ok(stats.specStateRollbacks > 0 && stats.specRefedTokens >= stats.specStateRollbacks, JSON.stringify([stats.specStateRollbacks, stats.specRefedTokens]));
  }
});

test("Engine with Gated DeltaNet layers drafting with a draft model (attention only, the same vocabulary) gives the lone greedy tokens", async () => {
  const draft = await loadModel(await writeTestGguf(dir, "qwen3-draft", { architecture: "qwen3", hidden: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 305 }));
  const speculative = { method: "draft_model", model: "qwen3-draft.gguf", numTokens: 3, schedule: "constant" } as const;
  const { outputs, stats } = await twoRounds(model, { numBlocks: 64, blockSize: 4, speculative, scheduler: { maxBatchTokens: 6, maxRunning: 3 } }, draft);
  assert.deepEqual(outputs, [...alone, ...alone]);
  assert.ok(stats.specDraftTokens > 0, "the draft model drafted");
  // A random draft is seldom right: its drafts not all taken put the state back.
  assert.ok(stats.specStateRollbacks > 0 && stats.specAcceptedTokens < stats.specDraftTokens, JSON.stringify([stats.specStateRollbacks, stats.specAcceptedTokens, stats.specDraftTokens]));
});

test("scratchSlotsOf() keeps a state from before a draft for every sequence that may verify one, and createEngine() refuses a draft model with recurrent layers", () => {
  const ngram = { method: "ngram", numTokens: 3, maxN: 3, minN: 1 } as const;
  assert.equal(scratchSlotsOf(model.config, { scheduler: { maxRunning: 5 }, speculative: ngram }), 5);
  assert.equal(scratchSlotsOf(model.config, { scheduler: { maxRunning: 5 }, speculative: { ...ngram, disableByBatchSize: 2 } }), 2);
  assert.equal(scratchSlotsOf(model.config, { scheduler: { maxRunning: 5 } }), 0);
  // Their states come out of the budget with the slots and checkpoints: 5 + 5 + 5 states against 5 + 5.
  const budget = { kvMemoryBytes: 64 * stateBytesPerSlot(model.config), blockSize: 4, scheduler: { maxRunning: 5 } };
  const perBlock = kvBytesPerBlock(model.config, 4, "f32");
  assert.equal(kvBlockCount(model, budget, "f32"), Math.floor(54 * stateBytesPerSlot(model.config) / perBlock));
  assert.equal(kvBlockCount(model, { ...budget, speculative: ngram }, "f32"), Math.floor(49 * stateBytesPerSlot(model.config) / perBlock));
  assert.throws(
    () => createEngine(backend, model, { numBlocks: 8, speculative: { method: "draft_model", model: "draft.gguf", numTokens: 3 } }, model),
    /A draft model with Gated DeltaNet layers \(qwen35\) is not supported: its state cannot follow its rejected tokens back/,
  );
});

test("StateSlots assigns a slot at position 0, keeps it, refuses a sequence resuming without one, and frees it", () => {
  const slots = new StateSlots(2);
  const [a, b] = slots.assign([{ seqId: 4, startPos: 0 }, { seqId: 9, startPos: 0 }]);
  assert.notEqual(a.stateSlot, b.stateSlot);
  assert.equal(slots.assign([{ seqId: 4, startPos: 12 }])[0].stateSlot, a.stateSlot);
  assert.throws(() => slots.assign([{ seqId: 5, startPos: 0 }]), (e: unknown) => e instanceof StateSlotError && /All 2 recurrent state slots are held/.test(e.message));
  assert.throws(() => slots.assign([{ seqId: 6, startPos: 3 }]), /Sequence 6 continues at position 3 without its recurrent state/);
  slots.release(9);
  assert.equal(slots.held, 1);
  assert.equal(slots.assign([{ seqId: 5, startPos: 0 }])[0].stateSlot, b.stateSlot);
  // The warm-up's entries (negative ids) hold a slot for their step only.
  slots.release(5);
  slots.assign([{ seqId: -1, startPos: 2 }]);
  assert.equal(slots.held, 1);
  slots.endStep();
  assert.equal(slots.assign([{ seqId: 7, startPos: 0 }]).length, 1);
});

/** The greedy tokens of `prompt` from a lone forward (of `of`, the Qwen3.5 by default). */
async function loneGreedy(prompt: number[], of: LoadedModel = model): Promise<number[]> {
  const kv = allocatePagedKv(backend, of.config, 24, 4);
  return (await greedySteps(backend, uploadModel(backend, of), kv, prompt, MAX_TOKENS, Array.from({ length: 24 }, (_, i) => i))).tokens;
}

for (const schedulerSteps of [1, 3]) {
  test(`Engine with Gated DeltaNet layers: an agent's next turn resumes from the state checkpoint where its last answer's whole blocks end (${schedulerSteps === 1 ? "one-step" : "multi-step"} decoding)`, async () => {
    // Blocks of 4: the first prompt's 21 tokens keep a checkpoint after 20, and its decodes one that
    // moves on a block at a time: 30 tokens computed (the last sampled is never fed), the last after 28.
    // The next turn holds the first prompt, its output and a tool result, and computes only what
    // follows those 28 tokens. Three look-ahead steps a group cross blocks inside groups.
    const turn1 = PROMPTS[0];
    const e = createEngine(backend, model, { numBlocks: 64, blockSize: 4, schedulerSteps });
    const e0 = createEngine(backend, model, { numBlocks: 64, blockSize: 4, stateCheckpoints: 0, schedulerSteps });
    try {
      const out1 = (await e.submit({ prompt: turn1, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result).tokenIds;
      assert.deepEqual(out1, alone[0]);
      assert.equal(e.checkpoints?.size, 2, "the prompt's checkpoint and the answer's");
      const turn2 = [...turn1, ...out1, 150, 151, 152, 153, 154, 155, 156];
      const want = await loneGreedy(turn2);
      const before = e.stats().prefixHitTokens;
      const out2 = (await e.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result).tokenIds;
      assert.deepEqual(out2, want, "resumed from the checkpoint, the tokens are those of a whole prefill");
      assert.equal(e.stats().prefixHitTokens - before, 28, "the hit reaches the answer's checkpoint: 7 blocks of 4");
      assert.equal(e.checkpoints?.restores, 1);
      // The third turn: the second computed 47 tokens (again into the cached blocks it kept past 28:
      // had it released them, its own would be refused as duplicates and nothing after them cached).
      const turn3 = [...turn2, ...out2, 160, 161, 162, 163, 164, 165, 166];
      const want3 = await loneGreedy(turn3);
      const hits2 = e.stats().prefixHitTokens;
      assert.deepEqual((await e.submit({ prompt: turn3, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result).tokenIds, want3);
      assert.equal(e.stats().prefixHitTokens - hits2, 44, "resumed where the second answer's whole blocks end");
      // A prompt that repeats the second turn's prompt but not its answer resumes at its prompt's checkpoint (36).
      const retry = [...turn2, 170, 171];
      const hits3 = e.stats().prefixHitTokens;
      assert.deepEqual((await e.submit({ prompt: retry, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result).tokenIds, await loneGreedy(retry));
      assert.equal(e.stats().prefixHitTokens - hits3, 36);
      // Without checkpoints nothing is reused, and the tokens are the same.
      const plain = (await e0.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result).tokenIds;
      assert.deepEqual(plain, want);
      assert.equal(e0.stats().prefixHitTokens, 0);
      // A prompt that leaves the first one's tokens early finds no checkpoint: no hit, still right.
      const other = [...turn1.slice(0, 10), 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3];
      const hits = e.stats().prefixHitTokens;
      assert.deepEqual((await e.submit({ prompt: other, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result).tokenIds, await loneGreedy(other));
      assert.equal(e.stats().prefixHitTokens, hits, "blocks cached but no checkpoint among them: nothing taken");
    } finally {
      await e.stop();
      await e0.stop();
    }
  });
}

test("StateCheckpoints matches whole tokens, keeps pending ones out until settled, and evicts the least recently used", () => {
  const cps = new StateCheckpoints(2, 4);
  const a = cps.reserve([1, 2, 3, 4])!;
  assert.equal(cps.longest([1, 2, 3, 4, 5], 4), undefined, "pending until its step has run");
  cps.settle(a);
  assert.deepEqual(cps.longest([1, 2, 3, 4, 5], 4), { id: a, length: 4 });
  assert.equal(cps.longest([1, 2, 3, 9, 5], 4), undefined, "a token differs");
  assert.equal(cps.longest([1, 2, 3, 4, 5], 3), undefined, "longer than the hit");
  assert.equal(cps.reserve([1, 2, 3, 4]), undefined, "the same tokens are kept once");
  const b = cps.reserve([1, 2, 3, 4, 5, 6, 7, 8])!;
  cps.settle(b);
  assert.deepEqual(cps.longest([1, 2, 3, 4, 5, 6, 7, 8, 9], 8), { id: b, length: 8 });
  cps.touch(a);
  const c = cps.reserve([9, 9, 9, 9])!;
  assert.equal(c, b, "b was used least recently");
  assert.throws(() => cps.reserve([1, 2, 3]), /A state checkpoint needs whole blocks of 4 tokens, got 3/);
  // Another cache namespace (an adapter, a cache salt) keeps its own, and finds only its own.
  const ns = new StateCheckpoints(2, 4);
  ns.settle(ns.reserve([1, 2, 3, 4])!);
  assert.equal(ns.longest([1, 2, 3, 4, 5], 4, 7), undefined, "the base's checkpoint is not namespace 7's");
  const own = ns.reserve([1, 2, 3, 4], undefined, 7);
  assert.notEqual(own, undefined, "the same tokens in namespace 7 are another checkpoint");
  ns.settle(own!);
  assert.deepEqual(ns.longest([1, 2, 3, 4, 5], 4, 7), { id: own, length: 4 });
  assert.deepEqual(checkpointChunk(21, 0, 64, 4), { n: 20, atBoundary: true });
  assert.deepEqual(checkpointChunk(21, 20, 1, 4), { n: 1, atBoundary: false });
  assert.deepEqual(checkpointChunk(21, 8, 12, 4), { n: 12, atBoundary: true });
  assert.deepEqual(checkpointChunk(3, 0, 3, 4), { n: 3, atBoundary: false });
});

test("StateCheckpoints.reserveDecode() keeps one checkpoint per decoding sequence, learns its tokens when settled, and never takes a pending one", () => {
  const cps = new StateCheckpoints(2, 4);
  const p = cps.reserve([1, 2, 3, 4])!;
  cps.settle(p);
  const d = cps.reserveDecode(7, 8)!;
  assert.notEqual(d, p);
  assert.equal(cps.longest([1, 2, 3, 4, 5, 6, 7, 8, 9], 8)?.id, p, "pending: its tokens are not known yet");
  cps.settle(d, [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.deepEqual(cps.longest([1, 2, 3, 4, 5, 6, 7, 8, 9], 8), { id: d, length: 8 });
  // The sequence's next block: the same checkpoint moves on, the prompt's stays.
  assert.equal(cps.reserveDecode(7, 12), d);
  cps.settle(d, [1, 2, 3, 4, 5, 6, 7, 8, 5, 5, 5, 5]);
  assert.equal(cps.longest([1, 2, 3, 4, 5, 6, 7, 8, 9], 8)?.id, p);
  assert.equal(cps.longest([1, 2, 3, 4, 5, 6, 7, 8, 5, 5, 5, 5, 0], 12)?.id, d);
  // Once the sequence has ended, its checkpoint is one like any other: a new one takes the least recently used.
  cps.disown(7);
  const e = cps.reserveDecode(7, 4)!;
  assert.equal(e, p);
  // Every checkpoint pending (both written in the step being planned): no room, nothing shared.
  assert.equal(cps.reserveDecode(8, 4), d, "the written one goes");
  assert.equal(cps.reserveDecode(9, 4), undefined);
  assert.equal(cps.reserve([6, 6, 6, 6]), undefined);
  // A settled decode checkpoint whose tokens another holds already goes.
  cps.settle(e, [3, 3, 3, 3]);
  cps.settle(d, [3, 3, 3, 3]);
  assert.equal(cps.size, 1);
  assert.throws(() => cps.reserveDecode(3, 6), /A state checkpoint needs whole blocks of 4 tokens, got 6/);
});

test("createEngine() sizes a Gated DeltaNet model's KV blocks after its state, and refuses a budget the state would mostly take", () => {
  const perSlot = stateBytesPerSlot(model.config);
  const perBlock = kvBytesPerBlock(model.config, 16, "f32");
  // 4 running slots and 4 checkpoints, then 100 blocks.
  const e = createEngine(backend, model, { kvMemoryBytes: 8 * perSlot + 100 * perBlock, kvCacheDtype: "f32", scheduler: { maxRunning: 4 } });
  assert.equal(e.pool.numBlocks, 100);
  void e.stop();
  assert.throws(
    () => createEngine(backend, model, { kvMemoryBytes: 12 * perSlot, kvCacheDtype: "f32", scheduler: { maxRunning: 4 } }),
    /The recurrent state of 4 sequences and 4 checkpoints \(.* GiB\) takes more than half the KV memory budget/,
  );
});

test("generate() runs a Gated DeltaNet model's prompts together in chunks, each in its own state slot", async () => {
  const results = await generate(uploadModel(backend, model), backend, PROMPTS, { maxTokens: MAX_TOKENS, blockSize: 4, prefillChunk: 3, stopAtEos: false, schedulerSteps: 3 });
  assert.deepEqual(results.map((r) => r.ids), alone);
});

test("StateCheckpoints makes room by worth first (a session waiting on a tool keeps its checkpoint), then by last use", () => {
  const worth = new Map<string, number>([["waiting-tool", 0.9], ["answered", 0.1]]);
  const cps = new StateCheckpoints(2, 4, (s) => (s === undefined ? 0 : worth.get(s) ?? 0));
  const a = cps.reserve([1, 1, 1, 1], "waiting-tool")!;
  const b = cps.reserve([2, 2, 2, 2], "answered")!;
  cps.settle(a);
  cps.settle(b);
  cps.touch(b); // b used last: LRU alone would evict a
  const c = cps.reserve([3, 3, 3, 3], "answered")!;
  assert.equal(c, b, "the answered session's checkpoint goes, though used more recently");
  cps.settle(c);
  assert.deepEqual(cps.longest([1, 1, 1, 1, 5], 4), { id: a, length: 4 });
  // Equal worth: the least recently used goes; a pending one only when nothing else can.
  worth.set("waiting-tool", 0.1);
  assert.equal(cps.reserve([4, 4, 4, 4], "answered"), a);
  assert.equal(cps.reserve([5, 5, 5, 5]), c, "the written checkpoint before the one still pending");
});

test("Engine with Gated DeltaNet layers keeps the checkpoint of a session waiting on a tool over one that answered (agent-aware retention)", async () => {
  const prompts = [PROMPTS[0], PROMPTS[2], [...PROMPTS[2].slice(0, 3), ...PROMPTS[0].slice(3)]];
  const run = async (kvRetention: "agent" | "lru") => {
    // Each turn keeps two checkpoints (its prompt's and its answer's) in a room of three.
    const e = createEngine(backend, model, { numBlocks: 64, blockSize: 4, stateCheckpoints: 3, scheduler: { maxRunning: 2 }, kvRetention });
    try {
      const turn = (prompt: number[], sessionId: string) => e.submit({ prompt, maxTokens: 4, temperature: 0, ignoreEos: true, sessionId }).result;
      const first = await turn(prompts[0], "s1");
      e.markToolWait("s1", "grep"); // s1's turn ended in a tool call: it will be back
      await turn(prompts[1], "s2"); // s2 answered
      await turn(prompts[2], "s3"); // a third session: two of the others' checkpoints go
      const next = await turn([...prompts[0], ...first.tokenIds, 7, 8, 9], "s1");
      return next.cachedTokens;
    } finally {
      await e.stop();
    }
  };
  assert.equal(await run("agent"), 24, "s1's checkpoint was kept: its next turn resumes after its answer's 24 tokens");
  assert.equal(await run("lru"), 0, "least recently used, s1's checkpoint went first");
});

test("Engine with Gated DeltaNet layers keeps state checkpoints apart by adapter: a LoRA request never resumes from the base model's state", async () => {
  const dir2 = mkdtempSync(`${tmpdir()}/recurrent-lora-`);
  try {
    // An adapter on the first DeltaNet layer's projections and the attention layer's q and o.
    const lora = `${dir2}/a.gguf`;
    writeFileSync(lora, loraGgufBytes(model.config, {
      seed: 9, rank: 4, alpha: 8, magnitude: 0.4,
      targets: [{ layer: 0, target: "ssmQkv" }, { layer: 0, target: "ssmZ" }, { layer: 0, target: "ssmOut" }, { layer: 3, target: "wq" }, { layer: 3, target: "wo" }],
    }));
    const adapter = await loadLoraAdapter(lora, model.config);
    const e = createEngine(backend, model, { numBlocks: 64, blockSize: 4 });
    const fresh = createEngine(backend, model, { numBlocks: 64, blockSize: 4, stateCheckpoints: 0 });
    try {
      e.loadAdapter("a", adapter);
      fresh.loadAdapter("a", adapter);
      const ask = (engine: typeof e, prompt: number[], a?: string) => engine.submit({ prompt, maxTokens: 6, temperature: 0, ignoreEos: true, ...(a ? { adapter: a } : {}) }).result;
      const turn1 = PROMPTS[0];
      const turn2 = [...turn1, 150, 151, 152, 153, 154, 155, 156];
      await ask(e, turn1); // the base model's checkpoints
      await ask(e, turn1, "a"); // the adapter's blocks (and, kept apart, its checkpoints)
      const got = await ask(e, turn2, "a");
      const want = await ask(fresh, turn2, "a");
      assert.ok(got.cachedTokens > 0, "the adapter's own checkpoint is used");
      assert.deepEqual(got.tokenIds, want.tokenIds, "the adapter's tokens, not the base state's");
      assert.notDeepEqual((await ask(fresh, turn2)).tokenIds, want.tokenIds, "the adapter changes the tokens");
    } finally {
      await e.stop();
      await fresh.stop();
    }
  } finally {
    rmSync(dir2, { recursive: true, force: true });
  }
});

/**
 * Models of short convolution layers (LFM2, LFM2-MoE with experts) and of Mamba-2 layers: Granite
 * 4.0-H's layers (each with a feed-forward), Nemotron-H's (one block each, B and C in groups;
 * Nemotron 3's with experts) and Falcon-H1's (attention beside the scan in every layer).
 */
const RECURRENT_MODELS: { name: string; kind: string; spec: ModelFileSpec; check(m: LoadedModel): void }[] = [
  {
    name: "LFM2",
    kind: "short convolution layers",
    spec: {
      architecture: "lfm2", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 302,
      shortConv: { kernel: 3, attention: [1, 3] },
    },
    check(lfm2) {
      assert.deepEqual(lfm2.config.shortConv, { layers: [true, false, true, false], kernel: 3 });
    },
  },
  {
    name: "LFM2-MoE",
    kind: "short convolution layers",
    spec: {
      architecture: "lfm2moe", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 8, ffn: 32, vocab: 300, tied: false, dtype: "f32", seed: 303,
      shortConv: { kernel: 3, attention: [2] }, experts: { count: 4, used: 2, denseLayers: 1 },
    },
    check(lfm2) {
      assert.deepEqual([lfm2.config.moe?.numExperts, lfm2.config.moe?.denseLayers], [4, 1]);
    },
  },
  {
    name: "Granite 4.0-H",
    kind: "Mamba-2 layers",
    spec: {
      architecture: "granitehybrid", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 304,
      mamba2: { attention: [2], heads: 4, stateSize: 16, conv: 4 }, granite: { embedding: 2, attention: 0.2, residual: 0.5, logit: 3 },
    },
    check(granite) {
      assert.deepEqual(granite.config.mamba2, { layers: [true, true, false, true], innerSize: 64, stateSize: 16, heads: 4, groups: 1, convKernel: 4 });
      assert.deepEqual(granite.config.nopeLayers, [true, true, true, true]);
      // Per sequence: 3 convolution states of 3 × 96 and 3 scan states of 4 heads × 16 × 16, f32.
      assert.equal(stateBytesPerSlot(granite.config), 4 * 3 * (3 * 96 + 4 * 16 * 16));
    },
  },
  {
    name: "Nemotron-H",
    kind: "Mamba-2 layers",
    spec: {
      architecture: "nemotron_h", hidden: 32, layers: 5, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 305,
      nemotronH: { pattern: "M*-M-", heads: 4, headDim: 16, stateSize: 8, groups: 2, conv: 4 },
    },
    check(nemotron) {
      assert.deepEqual(nemotron.config.mamba2, { layers: [true, false, false, true, false], innerSize: 64, stateSize: 8, heads: 4, groups: 2, convKernel: 4 });
      assert.deepEqual(nemotron.config.layerBlocks, ["mixer", "mixer", "ffn", "mixer", "ffn"]);
      // Per sequence: 2 convolution states of 3 × (64 + 2·2·8) and 2 scan states of 4 heads × 16 × 8, f32.
      assert.equal(stateBytesPerSlot(nemotron.config), 4 * 2 * (3 * 96 + 4 * 16 * 8));
    },
  },
  {
    name: "Nemotron 3, with experts",
    kind: "Mamba-2 layers",
    spec: {
      architecture: "nemotron_h_moe", hidden: 32, layers: 5, heads: 4, kvHeads: 2, headDim: 8, ffn: 32, vocab: 300, tied: false, dtype: "f32", seed: 306,
      experts: { count: 4, used: 2, sharedFfn: 48, scale: 2.5 }, nemotronH: { pattern: "ME*ME", heads: 4, headDim: 16, stateSize: 8, groups: 2, conv: 4 },
    },
    check(nemotron) {
      assert.deepEqual([nemotron.config.moe?.numExperts, nemotron.config.layerBlocks], [4, ["mixer", "ffn", "mixer", "mixer", "ffn"]]);
    },
  },
  {
    name: "Falcon-H1, attention beside every scan",
    kind: "Mamba-2 layers",
    spec: {
      architecture: "falcon-h1", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 307,
      falconH1: { heads: 4, headDim: 12, stateSize: 8, groups: 2, conv: 4, normed: true },
    },
    check(falcon) {
      assert.deepEqual(falcon.config.mamba2, { layers: [true, true, true], innerSize: 48, stateSize: 8, heads: 4, groups: 2, convKernel: 4, parallelAttention: true });
      // Every layer attends (a KV cache each) and scans (a state each): 3 convolution states of 3 × (48 + 2·2·8), 3 scan states of 4 heads × 12 × 8.
      assert.deepEqual(attentionLayers(falcon.config), [0, 1, 2]);
      assert.equal(stateBytesPerSlot(falcon.config), 4 * 3 * (3 * 80 + 4 * 12 * 8));
    },
  },
];

for (const { name, kind, spec, check } of RECURRENT_MODELS) {
  test(`Engine with ${kind} (${name}): chunked prefills, multi-step decoding, a next turn from a checkpoint, a checkpoint moved to another engine and speculative decoding give the lone greedy tokens`, async () => {
    const dir4 = mkdtempSync(`${tmpdir()}/recurrent-model-`);
    try {
      const m = await loadModel(await writeTestGguf(dir4, spec.architecture, spec));
      check(m);
      const lone = (prompt: number[]) => loneGreedy(prompt, m);
      const want = await Promise.all(PROMPTS.map(lone));
      const e = createEngine(backend, m, { numBlocks: 64, blockSize: 4, schedulerSteps: 3, scheduler: { maxBatchTokens: 5, maxRunning: 3 } });
      const peer = createEngine(backend, m, { numBlocks: 64, blockSize: 4 });
      try {
        const ask = (prompt: number[]) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
        assert.deepEqual((await Promise.all(PROMPTS.map(ask))).map((r) => r.tokenIds), want);
        // The first prompt's next turn resumes after its answer's last whole block (28 of its 31 tokens).
        const turn2 = [...PROMPTS[0], ...want[0], 150, 151, 152, 153, 154];
        const r = await ask(turn2);
        assert.equal(r.cachedTokens, 28);
        const want2 = await lone(turn2);
        assert.deepEqual(r.tokenIds, want2);
        // The same turn on another engine, from the blocks and the scan and convolution states moved there.
        const moved = await e.exportPrefix(turn2);
        assert.equal(moved?.state?.tokens, 28);
        peer.importPrefix(moved!);
        const p = await peer.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
        assert.equal(p.cachedTokens, 28);
        assert.deepEqual(p.tokenIds, want2);
      } finally {
        await e.stop();
        await peer.stop();
      }
      // Suffix drafts of the second round (taken) and n-gram drafts (mostly not): the state goes back for each one not all taken.
      let [taken, verified] = [0, 0];
      for (const speculative of [SUFFIX, { method: "ngram", numTokens: 3, maxN: 2, minN: 1 } as const]) {
        const drafted = await twoRounds(m, { numBlocks: 64, blockSize: 4, speculative, scheduler: { maxBatchTokens: 6, maxRunning: 3 } });
        assert.deepEqual(drafted.outputs, [...want, ...want], speculative.method);
        taken += drafted.stats.specAcceptedTokens;
        verified += drafted.stats.specDraftTokens;
      }
      assert.ok(taken > 0 && taken < verified, `drafts taken and not (${taken} of ${verified})`);
    } finally {
      rmSync(dir4, { recursive: true, force: true });
    }
  });
}

test("Engine with Gated DeltaNet layers keeps a checkpoint where a prompt leaves a shared prefix no checkpoint reaches, and the next prompt sharing it resumes there", async () => {
  const system = Array.from({ length: 22 }, (_, i) => (i * 13 + 7) % 290 + 5);
  const prompts = [[...system, 31, 32, 33, 34, 35, 36], [...system, 41, 42, 43], [...system, 51, 52, 53, 54, 55]];
  const want = await Promise.all(prompts.map(async (prompt) => {
    const kv = allocatePagedKv(backend, model.config, 4, 16);
    return (await greedySteps(backend, uploadModel(backend, model), kv, prompt, MAX_TOKENS, [0, 1, 2, 3])).tokens;
  }));
  const e = createEngine(backend, model, { numBlocks: 64, blockSize: 4 });
  try {
    const rs = [];
    for (const prompt of prompts) rs.push(await e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result);
    assert.deepEqual(rs.map((r) => r.tokenIds), want);
    assert.deepEqual(rs.map((r) => r.cachedTokens), [0, 0, 20]);
  } finally {
    await e.stop();
  }
});

test("Engine with Gated DeltaNet layers and a host KV tier: a session's blocks evicted to host memory come back to its checkpoint, so its next turn resumes there", async () => {
  const first = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99, 23, 45, 67];
  const fillers = [0, 1, 2, 3].map((i) => Array.from({ length: 30 }, (_, j) => ((i + 1) * 31 + j * 7) % 290 + 5));
  const run = async (kvOffloadBlocks: number) => {
    // 12 blocks of 4: each filler's 34 tokens push the session's blocks out of the device cache.
    const e = createEngine(backend, model, { numBlocks: 12, blockSize: 4, kvOffloadBlocks, stateCheckpoints: 16, scheduler: { maxRunning: 2 } });
    try {
      const a = await e.submit({ prompt: first, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
      for (const f of fillers) await e.submit({ prompt: f, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
      const turn2 = [...first, ...a.tokenIds, 150, 151, 152];
      const b = await e.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
      return { turn2, b, stats: e.stats() };
    } finally {
      await e.stop();
    }
  };
  const without = await run(0);
  assert.equal(without.b.cachedTokens, 0, "without a host tier the evicted blocks are gone, and the checkpoint with them");
  const withHost = await run(64);
  assert.ok(withHost.stats.kvRestoredBlocks > 0, "blocks came back from host memory");
  // The first turn's answer ends at 28 tokens: its checkpoint after 24 (whole blocks of 4, before the last token's).
  assert.equal(withHost.b.cachedTokens, 24);
  const lone = (await greedySteps(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, 16, 4), withHost.turn2, MAX_TOKENS, Array.from({ length: 16 }, (_, i) => i))).tokens;
  assert.deepEqual(withHost.b.tokenIds, lone);
  assert.deepEqual(without.b.tokenIds, lone);
});

test("Engine with Gated DeltaNet layers and host state checkpoints: a session's checkpoint taken for others' goes to host memory and comes back for its next turn", async () => {
  const first = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99, 23, 45, 67];
  const others = [0, 1].map((i) => Array.from({ length: 30 }, (_, j) => ((i + 1) * 31 + j * 7) % 290 + 5));
  const run = async (hostStateCheckpoints: number) => {
    // One device checkpoint: each other prompt's takes the session's place.
    const e = createEngine(backend, model, { numBlocks: 64, blockSize: 4, stateCheckpoints: 1, hostStateCheckpoints });
    try {
      const a = await e.submit({ prompt: first, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
      for (const o of others) await e.submit({ prompt: o, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
      const turn2 = [...first, ...a.tokenIds, 150, 151, 152];
      const b = await e.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
      return { turn2, b, host: e.recurrentState()?.host, stats: e.stats() };
    } finally {
      await e.stop();
    }
  };
  const without = await run(0);
  assert.equal(without.b.cachedTokens, 0, "without a host tier the session's checkpoint is gone");
  assert.equal(without.host, undefined);
  const withHost = await run(4);
  assert.equal(withHost.b.cachedTokens, 24, "resumed from the checkpoint brought back from host memory");
  assert.ok(withHost.host && withHost.host.offloaded >= 2 && withHost.host.restored === 1, JSON.stringify(withHost.host));
  // The same in stats() (and so in /metrics): one resume, from the state host memory wrote back.
  const st = withHost.stats;
  assert.deepEqual([st.stateCheckpointCapacity, st.stateCheckpoints, st.hostStateCapacity, st.hostStatesOffloaded, st.hostStatesRestored, st.stateCheckpointResumes], [1, 1, 4, withHost.host.offloaded, 1, 1]);
  assert.ok(st.stateCheckpointsWritten >= 3, `a checkpoint written for each prompt (${st.stateCheckpointsWritten})`);
  assert.deepEqual([without.stats.hostStateCapacity, without.stats.stateCheckpointResumes], [0, 0]);
  const lone = (await greedySteps(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, 16, 4), withHost.turn2, MAX_TOKENS, Array.from({ length: 16 }, (_, i) => i))).tokens;
  assert.deepEqual(withHost.b.tokenIds, lone);
  assert.deepEqual(without.b.tokenIds, lone);
});

test("Engine.exportPrefix() sends a state from the host tier when it reaches further than any device checkpoint, and a peer resumes from it", async () => {
  const first = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99, 23, 45, 67];
  const other = Array.from({ length: 30 }, (_, j) => (31 + j * 7) % 290 + 5);
  const e = createEngine(backend, model, { numBlocks: 64, blockSize: 4, stateCheckpoints: 1, hostStateCheckpoints: 4 });
  const peer = createEngine(backend, model, { numBlocks: 64, blockSize: 4 });
  try {
    const a = await e.submit({ prompt: first, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
    // Another session's turn takes the one device checkpoint: the first's state is in host memory only.
    await e.submit({ prompt: other, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
    const turn2 = [...first, ...a.tokenIds, 150, 151, 152];
    const moved = await e.exportPrefix(turn2);
    assert.equal(moved?.state?.tokens, 24, "the host tier's state went with the blocks");
    peer.importPrefix(moved!);
    const r = await peer.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.equal(r.cachedTokens, 24);
    const lone = (await greedySteps(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, 16, 4), turn2, MAX_TOKENS, Array.from({ length: 16 }, (_, i) => i))).tokens;
    assert.deepEqual(r.tokenIds, lone);
  } finally {
    await e.stop();
    await peer.stop();
  }
});
