/**
 * `slidingWindowKv: "window"`: the sliding layers keep each sequence's last window in a ring per state
 * slot instead of paged blocks (forward.ts WindowKv). On the reference backend and WebGPU, for
 * GPT-OSS's layout (every other layer slides) and Gemma 4 E2B/E4B's (sliding layers of their own width,
 * layers reading another's ring): chunked prefills that wrap the ring, multi-step decoding, recompute
 * preemption, a next turn from a state checkpoint and a prefix moved to another engine with its windows
 * all give the tokens a lone forward over paged caches gives; a block of the pool holds the other
 * layers alone; what cannot carry the windows is refused.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { createCluster, startThreadCluster } from "../../src/cluster/create-cluster.ts";
import { createEngine, type CreateEngineOptions, kvBlockCount, movedKvBytes, windowBlocksOf } from "../../src/engine/engine-factory.ts";
import { allocatePagedKv, freePagedKv, kvBytesPerBlock, windowBlocksFor, windowBytesPerSlot, windowCheckpointBlocks } from "../../src/engine/kv-cache.ts";
import { PrefixTransferError } from "../../src/engine/prefix-transfer.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { forward } from "../../src/model/forward.ts";
import { ForwardInputError } from "../../src/model/forward-batch.ts";
import { type LoadedModel, windowedLayers } from "../../src/model/config.ts";
import { loadModel } from "../../src/model/load.ts";
import { greedySteps } from "../oracle/oracle-compare.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { type ModelFileSpec, writeTestGguf } from "../model/model-files.ts";

const dir = mkdtempSync(`${tmpdir()}/sliding-window-kv-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const GPT_OSS: ModelFileSpec = {
  hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", architecture: "gpt-oss",
  ropeTheta: 10000, seed: 811, slidingWindow: 5, experts: { count: 4, used: 2 },
};
/** E2B/E4B's layout: sliding layers 2 heads of 8, full ones 2 of 16, the last 2 of 5 layers reading the caches of the two before them. */
const GEMMA4: ModelFileSpec = {
  architecture: "gemma4", hidden: 32, layers: 5, heads: 4, kvHeads: 2, headDim: 16, ffn: 48, vocab: 300, tied: true, dtype: "f32", seed: 812,
  gemma4: { pattern: [true, true, false, true, false], window: 6, swaHeadDim: 8, swaKvHeads: 2, swaTheta: 10000, partialFull: 0.25, keyAsValue: true, softcap: 25, ple: 4, sharedKv: 2, doubleWide: true },
};
const gptOssPath = await writeTestGguf(dir, "gpt-oss", GPT_OSS);
const gptOss = await loadModel(gptOssPath);
const gemma4 = await loadModel(await writeTestGguf(dir, "gemma4", GEMMA4));
const llama = await loadModel(await writeTestGguf(dir, "llama", { ...GPT_OSS, architecture: "llama", slidingWindow: undefined, experts: undefined }));
const PROMPTS = [[5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99], [7, 7, 1, 254], [13, 42, 2, 5, 77, 160, 31, 9, 12, 290, 6, 48, 3]];
const MAX_TOKENS = 10;
const webgpu = await poisonedWebGpu("the sliding-window KV test on WebGPU");
const backends: [string, Backend | undefined, boolean][] = [["reference", createReferenceBackend(), false], ["webgpu", webgpu.gpu, webgpu.skip]];
const WINDOWED: CreateEngineOptions = { slidingWindowKv: "window", blockSize: 4, scheduler: { maxBatchTokens: 5, maxRunning: 3 } };

/** Each prompt's greedy tokens from a lone forward over paged caches (every position kept). */
function loneTokens(b: Backend, model: LoadedModel): (prompt: number[]) => Promise<number[]> {
  const device = uploadModel(b, model);
  return async (prompt) => {
    const kv = allocatePagedKv(b, model.config, 24, 4);
    try {
      return (await greedySteps(b, device, kv, prompt, MAX_TOKENS, Array.from({ length: 24 }, (_, i) => i))).tokens;
    } finally {
      freePagedKv(b, kv);
    }
  };
}

for (const [name, backend, skip] of backends) for (const [layout, model] of [["GPT-OSS's", gptOss], ["Gemma 4 E2B/E4B's", gemma4]] as const) {
  test(`Engine on ${name} with slidingWindowKv "window" (${layout} layout): ring-wrapping chunks, multi-step decoding, a next turn from a checkpoint and a moved prefix give the paged greedy tokens`, async () => {
    const b = backend!;
    const lone = loneTokens(b, model);
    const want = await Promise.all(PROMPTS.map(lone));
    // A window of 5 or 6 and chunks of 5 in rings of 3 blocks of 4: every prompt wraps its ring.
    assert.equal(windowBlocksOf(model.config, WINDOWED), 3);
    const e = createEngine(b, model, { ...WINDOWED, numBlocks: 64, schedulerSteps: 3 });
    const peer = createEngine(b, model, { ...WINDOWED, numBlocks: 64 });
    try {
      const ask = (engine: typeof e, prompt: number[]) => engine.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
      assert.deepEqual((await Promise.all(PROMPTS.map((p) => ask(e, p)))).map((r) => r.tokenIds), want);
      const turn2 = [...PROMPTS[0], ...want[0], 150, 151, 152];
      const want2 = await lone(turn2);
      const r = await ask(e, turn2);
      // The first turn's answer ends at 30 tokens: its checkpoint after 28 (whole blocks of 4).
      assert.equal(r.cachedTokens, 28);
      assert.deepEqual(r.tokenIds, want2);
      // The prefix moves with its checkpoint's windows: the blocks hold the full layers only.
      const moved = await e.exportPrefix(turn2);
      assert.ok(moved?.state?.values.window, "the windows went with the prefix");
      assert.equal(moved.kv.k.length, 1);
      assert.equal(moved.state.values.window.length, 2 * windowedLayers(model.config).length);
      peer.importPrefix(moved);
      const p = await ask(peer, turn2);
      // The second turn left a checkpoint after its prompt's 32 tokens (whole blocks of its 34).
      assert.equal(p.cachedTokens, 32);
      assert.deepEqual(p.tokenIds, want2);
    } finally {
      await e.stop();
      await peer.stop();
    }
  }, { ignore: skip });
}

test(`Engine with slidingWindowKv "window": recompute preemption and many sequences through few slots give the paged greedy tokens`, async () => {
  const b = createReferenceBackend();
  const lone = loneTokens(b, gptOss);
  const want = await Promise.all(PROMPTS.map(lone));
  // 18 blocks of 4 for the three sequences' 31, 14 and 23 tokens; a pool of 10 preempts.
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 10, scheduler: { maxBatchTokens: 8, maxRunning: 3, preemption: "recompute" } });
  try {
    const rs = await Promise.all([...PROMPTS, ...PROMPTS].map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result));
    assert.deepEqual(rs.map((r) => r.tokenIds), [...want, ...want]);
    assert.ok(e.stats().preemptions > 0, "the small pool forced preemption");
    assert.equal(e.recurrentState()?.slots, 3);
  } finally {
    await e.stop();
  }
});

test(`Engine with slidingWindowKv "window": swap preemption takes each sequence's ring to host memory with its blocks and back`, async () => {
  const b = createReferenceBackend();
  const want = await Promise.all(PROMPTS.map(loneTokens(b, gptOss)));
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 10, scheduler: { maxBatchTokens: 8, maxRunning: 3, preemption: "swap" } });
  try {
    const rs = await Promise.all(PROMPTS.map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result));
    assert.deepEqual(rs.map((r) => r.tokenIds), want);
    const st = e.stats();
    assert.ok(st.swapOuts > 0 && st.swappedInBlocks > 0, `sequences went out and came back (${st.swapOuts} swap-outs)`);
  } finally {
    await e.stop();
  }
});

test(`Engine with slidingWindowKv "window" and longPrefillTokenThreshold: rings sized by one sequence's step, not the step's budget, and drafts held to it`, async () => {
  const b = createReferenceBackend();
  const lone = loneTokens(b, gptOss);
  const want = await Promise.all(PROMPTS.map(lone));
  const wide: CreateEngineOptions = { ...WINDOWED, scheduler: { maxBatchTokens: 16, maxRunning: 5 } };
  const capped: CreateEngineOptions = { ...WINDOWED, scheduler: { maxBatchTokens: 16, maxRunning: 5, longPrefillTokenThreshold: 4 } };
  // Window 5 in blocks of 4: ⌈(16 + 4) / 4⌉ = 5 blocks a ring at the budget, ⌈(4 + 4) / 4⌉ = 2 at the threshold.
  assert.equal(windowBlocksOf(gptOss.config, wide), 5);
  assert.equal(windowBlocksOf(gptOss.config, capped), 2);
  // Suffix drafts from the first round's answers (up to 7 in the second): 7 would make a decode of 8
  // tokens, 12 rows with the window's 4 before it, past a ring's 8. They are cut to 3.
  const suffix = { method: "suffix", numTokens: 8, maxDepth: 24, maxCachedRequests: 100, maxSpecFactor: 4, minTokenProb: 0.1 } as const;
  const e = createEngine(b, gptOss, { ...capped, numBlocks: 64, speculative: suffix });
  try {
    const ask = (prompt: number[]) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.deepEqual((await Promise.all(PROMPTS.map(ask))).map((r) => r.tokenIds), want);
    for (const [i, prompt] of PROMPTS.entries()) assert.deepEqual((await ask(prompt)).tokenIds, want[i]);
    const st = e.stats();
    assert.ok(st.specAcceptedTokens > 0, "drafts were taken");
  } finally {
    await e.stop();
  }
});

test("kvBlockCount() gives the pool what the windows leave of a budget, and a block the full layers' bytes only", () => {
  const c = gptOss.config;
  // GPT-OSS's layers 0 and 2 slide: a block holds layer 1 alone.
  assert.equal(kvBytesPerBlock(c, 16, "f16", true) * 3, kvBytesPerBlock(c, 16, "f16"));
  const budget = 64 * 2 ** 20;
  const o: CreateEngineOptions = { kvMemoryBytes: budget, kvCacheDtype: "f16", scheduler: { maxRunning: 8 } };
  const paged = kvBlockCount(gptOss, o, "f16");
  const ring = windowBlocksFor(c, 16, 512);
  assert.equal(ring, Math.ceil((512 + 5 - 1) / 16));
  // A running sequence's ring holds a step and its window; a checkpoint's the 4 positions before its end, in 1 block.
  assert.equal(windowCheckpointBlocks(5, 16), 1);
  const states = 8 * windowBytesPerSlot(c, 16, "f16", ring) + 8 * windowBytesPerSlot(c, 16, "f16", 1);
  const windowed = kvBlockCount(gptOss, { ...o, slidingWindowKv: "window" }, "f16");
  assert.equal(windowed, Math.floor((budget - states) / kvBytesPerBlock(c, 16, "f16", true)));
  assert.ok(windowed > 2.5 * paged, `${windowed} blocks windowed, ${paged} paged`);
});

test(`createEngine() refuses sliding-window KV "window" for a model without sliding layers and an unknown mode, naming each`, () => {
  const b = createReferenceBackend();
  const refused: [LoadedModel, CreateEngineOptions, RegExp][] = [
    [llama, {}, /Sliding window KV "window" needs sliding-window layers; model llama has none/],
    [gptOss, { slidingWindowKv: "ring" as "window" }, /Unknown sliding window KV mode "ring"; use paged or window/],
  ];
  for (const [model, o, pattern] of refused) assert.throws(() => createEngine(b, model, { numBlocks: 8, slidingWindowKv: "window", ...o }), pattern);
});

test("forward() refuses a step whose tokens overrun a sliding layer's ring, or an entry without a state slot", () => {
  const b = createReferenceBackend();
  const device = uploadModel(b, gptOss);
  // Rings of 2 blocks of 4 with a window of 5: at most 4 tokens a step.
  const kv = allocatePagedKv(b, gptOss.config, 8, 4, "f32", 2, 0, 2);
  try {
    const table = [0, 1];
    assert.throws(() => forward(b, device, kv, { entries: [{ tokens: [1, 2, 3, 4, 5], startPos: 0, blockTable: table, stateSlot: 0 }] }), (e: unknown) =>
      e instanceof ForwardInputError && /Entry 0 has 5 tokens; a sliding window of 5 in a ring of 2 blocks of 4 takes at most 4 a step/.test(e.message));
    assert.throws(() => forward(b, device, kv, { entries: [{ tokens: [1, 2], startPos: 0, blockTable: table }] }), /Entry 0 has state slot undefined, outside the 2 slots/);
    b.free(forward(b, device, kv, { entries: [{ tokens: [1, 2, 3, 4], startPos: 0, blockTable: table, stateSlot: 1 }] }));
  } finally {
    freePagedKv(b, kv);
  }
});

test("Engine.importPrefix() takes windows from an engine of other step sizes, and refuses, importing nothing, windows that do not fit", async () => {
  const b = createReferenceBackend();
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 64 });
  // Steps of 9 tokens need rings of 4 blocks, where e's are 3: a checkpoint's ring (1 block) is the same.
  const other = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 64, scheduler: { maxBatchTokens: 9, maxRunning: 3 } });
  try {
    const prompt = PROMPTS[0];
    const first = await e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    const turn2 = [...prompt, ...first.tokenIds, 150, 151];
    const moved = await e.exportPrefix(turn2);
    assert.ok(moved?.state?.values.window);
    // 2 sliding layers' keys and values, each a ring of 1 block of 4 positions of 2 heads of 8.
    assert.deepEqual(moved.state.values.window.map((a) => a.length), [64, 64, 64, 64]);
    const { window, ...noWindows } = moved.state.values;
    const refused = [{ ...moved.state.values, window: window.map((a) => a.subarray(1)) }, noWindows];
    for (const values of refused) {
      assert.throws(() => other.importPrefix({ ...moved, state: { tokens: moved.state!.tokens, values } }), (err: unknown) =>
        err instanceof PrefixTransferError && /The sliding layers' windows sent do not fit this model's: rings of \[64, 64, 64, 64\] values expected/.test(err.message));
    }
    assert.equal(await other.exportPrefix(turn2), null, "no block of a refused prefix was written");
    other.importPrefix(moved);
    const r = await other.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.equal(r.cachedTokens, moved.state.tokens);
    assert.deepEqual(r.tokenIds, await loneTokens(b, gptOss)(turn2));
  } finally {
    await e.stop();
    await other.stop();
  }
});

test("Cluster hands a prompt from its prefill worker to its decode worker with its windows, in-process and between threads, answering as paged caches do", async () => {
  const b = createReferenceBackend();
  const prompt = Array.from({ length: 37 }, (_, i) => (i * 37 + 11) % 290 + 5);
  const want = await loneTokens(b, gptOss)(prompt);
  const engine: CreateEngineOptions = { ...WINDOWED, numBlocks: 64 };
  const o = { workers: 2, roles: ["prefill", "decode"] as ("prefill" | "decode")[], planner: "none" as const, router: "kv-aware" as const, routerOptions: { localPrefillThreshold: 0 }, engine };
  const inProcess = createCluster(b, gptOss, o);
  try {
    // A hand-off resumes before the prompt's last token: from the checkpoint after 36 (whole blocks of 4).
    const r = await inProcess.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.deepEqual(r.tokenIds, want);
    assert.equal(inProcess.counters.prefillHandoffs, 1);
    assert.equal(inProcess.workers[1].engine.stats().prefixHitTokens, 36);
  } finally {
    await inProcess.stop();
  }
  const threads = await startThreadCluster(gptOss, gptOssPath, "reference", o);
  try {
    const r = await threads.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.deepEqual(r.tokenIds, want);
    assert.equal(threads.workers[1].engine.stats().prefixHitTokens, 36, "the decode thread resumed from the windows sent");
  } finally {
    await threads.stop();
  }
  // Routers price a move by the full layer's blocks and the windows' f32 host copy.
  const moved = movedKvBytes(gptOss.config, engine, "f16");
  assert.deepEqual(moved, { bytesPerBlock: 2 * 4 * 16 * 2, stateBytes: 2 * 2 * 1 * 4 * 16 * 4 });
});

test("Engine with slidingWindowKv \"window\": a prompt leaving a shared prefix no checkpoint reaches keeps one where it branches, and the next prompt sharing it resumes there", async () => {
  const b = createReferenceBackend();
  const lone = loneTokens(b, gptOss);
  // A system prompt of 22 tokens (5 whole blocks of 4) that three sessions share, then their own turns.
  const system = Array.from({ length: 22 }, (_, i) => (i * 13 + 7) % 290 + 5);
  const prompts = [[...system, 31, 32, 33, 34, 35, 36], [...system, 41, 42, 43], [...system, 51, 52, 53, 54, 55]];
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 64 });
  try {
    const rs = [];
    for (const prompt of prompts) rs.push(await e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result);
    assert.deepEqual(rs.map((r) => r.tokenIds), await Promise.all(prompts.map(lone)));
    // The first computes all (nothing cached); the second finds 5 cached blocks but no checkpoint in
    // them, so computes all and keeps one after 20 tokens; the third resumes from it.
    assert.deepEqual(rs.map((r) => r.cachedTokens), [0, 0, 20]);
  } finally {
    await e.stop();
  }
});

test("Engine with slidingWindowKv \"window\" and n-gram speculation: rejected drafts' rows in the ring are written over before they are read, so outputs are the paged greedy tokens", async () => {
  const b = createReferenceBackend();
  const lone = loneTokens(b, gptOss);
  // Repeating prompts, so drafts are proposed from the first decode on.
  const prompts = [[5, 9, 44, 120, 7, 5, 9, 44, 120, 7, 5, 9, 44], [13, 42, 2, 13, 42, 2, 13, 42, 2, 13, 42]];
  const want = await Promise.all(prompts.map(lone));
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 64, speculative: { method: "ngram", numTokens: 3, maxN: 3, minN: 1 } });
  try {
    const rs = await Promise.all(prompts.map((prompt) => e.submit({ prompt, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result));
    assert.deepEqual(rs.map((r) => r.tokenIds), want);
    const st = e.stats();
    assert.ok(st.specDraftTokens > 0, "drafts were verified");
    assert.ok(st.specAcceptedTokens > 0 && st.specAcceptedTokens < st.specDraftTokens, `some drafts were taken, some rejected (${st.specAcceptedTokens} of ${st.specDraftTokens})`);
    // Windows need nothing put back: their rejected rows are written over.
    assert.equal(st.specStateRollbacks, 0);
  } finally {
    await e.stop();
  }
});

test("Engine with slidingWindowKv \"window\" and a host KV tier: a session's blocks evicted to host memory come back to its checkpoint, windows and all", async () => {
  const b = createReferenceBackend();
  const first = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99, 23, 45, 67];
  const fillers = [0, 1, 2, 3].map((i) => Array.from({ length: 30 }, (_, j) => ((i + 1) * 31 + j * 7) % 290 + 5));
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 12, kvOffloadBlocks: 64, stateCheckpoints: 16 });
  try {
    const a = await e.submit({ prompt: first, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
    for (const f of fillers) await e.submit({ prompt: f, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
    const turn2 = [...first, ...a.tokenIds, 150, 151, 152];
    const r = await e.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.ok(e.stats().kvRestoredBlocks > 0, "blocks came back from host memory");
    assert.equal(r.cachedTokens, 24);
    assert.deepEqual(r.tokenIds, await loneTokens(b, gptOss)(turn2));
  } finally {
    await e.stop();
  }
});

test("Engine with slidingWindowKv \"window\" and host state checkpoints: a session's windows taken for others' come back from host memory for its next turn", async () => {
  const b = createReferenceBackend();
  const first = [5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33, 140, 71, 8, 200, 4, 11, 99, 23, 45, 67];
  const others = [0, 1].map((i) => Array.from({ length: 30 }, (_, j) => ((i + 1) * 31 + j * 7) % 290 + 5));
  const e = createEngine(b, gptOss, { ...WINDOWED, numBlocks: 64, stateCheckpoints: 1, hostStateCheckpoints: 4 });
  try {
    const a = await e.submit({ prompt: first, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
    for (const o of others) await e.submit({ prompt: o, maxTokens: 4, temperature: 0, ignoreEos: true }).result;
    const turn2 = [...first, ...a.tokenIds, 150, 151, 152];
    const r = await e.submit({ prompt: turn2, maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true }).result;
    assert.equal(r.cachedTokens, 24);
    assert.equal(e.recurrentState()?.host?.restored, 1);
    assert.deepEqual(r.tokenIds, await loneTokens(b, gptOss)(turn2));
  } finally {
    await e.stop();
  }
});
