/**
 * The engine under KV pressure and failure: seeded outputs amid a busy, preempting batch; a failing
 * step; stop() with requests in every phase; prompts at the pool's edge; prefix hits after eviction
 * and host write-back; hand-off blocks of cancelled requests.
 */
import assert from "node:assert/strict";
import { eventually } from "../eventually.ts";
import { test } from "../harness.ts";
import { ContextLengthError, EngineOverloadedError, type GenerateRequest } from "../../src/engine/engine-types.ts";
import type { NgramSpeculation } from "../../src/engine/ngram-draft.ts";
import { assertNoLeak, drain, gate, hookedEngine, type HookedOptions, model, within } from "./concurrency-fixtures.ts";
import { STORY } from "../cluster/fixtures.ts";

const NGRAM: NgramSpeculation = { method: "ngram", numTokens: 4, maxN: 3, minN: 1 };
const STARTS = ["Once upon a time", "Tom had a red ball", "The sun was hot and", "Lily saw a big dog", "One day a bird", "The cat sat"];
const prompts = STARTS.map((s) => [1, ...model.tokenizer.encode(s)]);
/** Seeded requests, one greedy. */
const reqs: GenerateRequest[] = prompts.map((prompt, i) => ({ prompt, maxTokens: 30, temperature: i === 0 ? 0 : 0.8, seed: 100 + i, ignoreEos: true }));
const filler = (i: number) => model.tokenizer.encode(`The dog number ${i} ran to the big red ball and the cat sat on the mat all day long. `.repeat(3), { addBos: true });

async function soloOutputs(o: HookedOptions = {}): Promise<number[][]> {
  const out: number[][] = [];
  for (const req of reqs) {
    const e = hookedEngine({ numBlocks: 64, ...o });
    out.push((await drain(e, req)).streamed);
    await e.stop();
  }
  return out;
}
const SOLO = await soloOutputs();

test("Engine seeded and greedy outputs amid a busy batch equal each request alone: plain, speculative, recompute and swap preemption", async () => {
  assert.deepEqual(await soloOutputs({ speculative: NGRAM }), SOLO, "speculation alone changes nothing");
  const cases: [string, HookedOptions][] = [
    ["plain", {}],
    ["speculative", { speculative: NGRAM }],
    ["recompute", { numBlocks: 8, scheduler: { maxBatchTokens: 48, preemption: "recompute" } }],
    ["swap", { numBlocks: 8, scheduler: { maxBatchTokens: 48, preemption: "swap" } }],
    ["swap + speculative", { numBlocks: 8, speculative: NGRAM, scheduler: { maxBatchTokens: 48, preemption: "swap" } }],
  ];
  for (const [label, o] of cases) {
    const e = hookedEngine({ numBlocks: 64, ...o });
    const outs = await within(Promise.all(reqs.map((r) => drain(e, r))), 60_000, label);
    outs.forEach((r, i) => assert.deepEqual(r.streamed, SOLO[i], `${label}: request ${i}`));
    if (o.numBlocks === 8) assert.ok(e.stats().preemptions > 0, `${label}: the pool forced preemption`);
    assertNoLeak(e, label);
    await e.stop();
  }
});

test("Engine whose step throws ends that step's requests with the error, holds no block, and serves on", async () => {
  let fail = -1;
  const e = hookedEngine({ numBlocks: 64, scheduler: { maxBatchTokens: 16 } }, {
    beforeRun: (entries) => {
      if (entries.some((x) => x.seqId === fail && x.prefill && x.startPos > 0)) throw new Error("device lost");
    },
  });
  const victim = e.submit({ prompt: filler(1), maxTokens: 8, temperature: 0 });
  fail = victim.id;
  const r = await within(victim.result, 60_000, "the failed request");
  assert.equal(r.finishReason, "abort");
  assert.match(r.error ?? "", /device lost/);
  assertNoLeak(e, "after the failed step");
  assert.equal(e.metrics.stepErrors, 1);
  const outs = await Promise.all(reqs.map((q) => drain(e, q)));
  outs.forEach((o, i) => assert.deepEqual(o.streamed, SOLO[i], `request ${i} after the failure`));
  assertNoLeak(e, "after the batch");
  await e.stop();
});

test("Engine.stop() with requests queued, prefilling, decoding, speculating and paused mid-step settles every stream and result", async () => {
  const hold = gate();
  let paused = false;
  const e = hookedEngine({ numBlocks: 24, speculative: NGRAM, scheduler: { maxBatchTokens: 32, maxRunning: 4 } }, {
    beforeRun: async (entries) => {
      if (!paused && entries.some((x) => !x.prefill && x.startPos > 20)) {
        paused = true;
        await hold.promise;
      }
    },
  });
  const hs = [...reqs, { prompt: filler(2), maxTokens: 40, temperature: 0 }].map((r) => e.submit({ ...r, maxTokens: 200 }));
  const streams = hs.map(async (h) => {
    for await (const _ of h.stream) { /* drain */ }
  });
  // (A deadline only against a hang, generous for a loaded CI machine.)
  assert.ok(await eventually(() => paused, (p) => p, 60_000, 1), "the engine reached its paused step");
  const stopped = e.stop();
  assert.throws(() => e.submit(reqs[0]), EngineOverloadedError);
  hold.open();
  await within(stopped, 60_000, "stop()");
  const results = await within(Promise.all(hs.map((h) => h.result)), 60_000, "the results");
  await within(Promise.all(streams), 60_000, "the streams");
  for (const r of results) assert.equal(r.finishReason, "abort");
  assertNoLeak(e, "stopped");
});

test("Engine takes a prompt that exactly fills the KV pool and refuses one a token past it at submit", async () => {
  // 8 blocks of 16, one the watermark: 112 tokens of context.
  const e = hookedEngine({ numBlocks: 8 });
  assert.equal(e.maxModelLen, 112);
  const text = [...filler(3), ...filler(4).slice(1)];
  assert.ok(text.length > 113);
  const long = text.slice(0, 111);
  const busy = drain(e, { prompt: STORY, maxTokens: 60, temperature: 0, ignoreEos: true });
  const full = await within(drain(e, { prompt: long, maxTokens: 1, temperature: 0, ignoreEos: true }), 60_000, "the full prompt");
  assert.equal(full.result.finishReason, "length");
  assert.equal(full.streamed.length, 1);
  assert.equal((await busy).result.finishReason, "length");
  assert.throws(() => e.submit({ prompt: text.slice(0, 112), maxTokens: 1 }), ContextLengthError);
  assert.throws(() => e.submit({ prompt: long, maxTokens: 2 }), ContextLengthError);
  // An embedding generates nothing: the whole context is its.
  const emb = await within(e.submit({ prompt: text.slice(0, 112), embed: true }).result, 60_000, "the embedding");
  assert.equal(emb.finishReason, "stop");
  assert.throws(() => e.submit({ prompt: text.slice(0, 113), embed: true }), ContextLengthError);
  assertNoLeak(e, "the pool's edge");
  await e.stop();
});

test("Engine cancelled while its blocks go to and come back from the host tier holds no block; returns give the cold tokens", async () => {
  const hold = gate();
  let held = true;
  let victim = -1;
  const e: ReturnType<typeof hookedEngine> = hookedEngine({ numBlocks: 12, kvOffloadBlocks: 64 }, {
    beforeRead: () => (held ? hold.promise : Promise.resolve()),
    beforeRun: (entries) => {
      if (entries.some((x) => x.seqId === victim)) e.cancel(victim);
    },
  });
  const seeded: GenerateRequest = { prompt: STORY, maxTokens: 10, temperature: 0.9, seed: 21, ignoreEos: true };
  const cold = await drain(e, seeded);
  // The fillers' allocations evict STORY's blocks; their copies are held on the way to the host.
  for (let i = 0; i < 3; i++) await drain(e, { prompt: filler(i), maxTokens: 4, temperature: 0, ignoreEos: true });
  // A filler cancelled in the step whose allocation evicted blocks (their copies still on the way).
  const v = e.submit({ prompt: filler(7), maxTokens: 4, temperature: 0 });
  victim = v.id;
  assert.equal((await within(v.result, 60_000, "the cancelled filler")).finishReason, "abort");
  victim = -1;
  assertNoLeak(e, "cancelled while copies were on their way");
  const pending = await within(drain(e, seeded), 60_000, "the return before the copies arrived");
  assert.deepEqual(pending.streamed, cold.streamed, "a return before the copies arrive computes the same tokens");
  held = false;
  hold.open();
  await new Promise((r) => setTimeout(r, 0));
  for (let i = 3; i < 6; i++) await drain(e, { prompt: filler(i), maxTokens: 4, temperature: 0, ignoreEos: true });
  const restoredBefore = e.stats().kvRestoredBlocks;
  // Cancelled in its first step, right after its blocks came back from the host.
  const r = e.submit(seeded);
  victim = r.id;
  assert.equal((await within(r.result, 60_000, "the cancelled return")).finishReason, "abort");
  victim = -1;
  assert.ok(e.stats().kvRestoredBlocks > restoredBefore, "its blocks were written back from the host");
  assertNoLeak(e, "cancelled after a write-back");
  const warm = await drain(e, seeded);
  assert.deepEqual(warm.streamed, cold.streamed, "a hit on written-back blocks gives the cold tokens");
  assert.ok(warm.result.cachedTokens > 0);
  assertNoLeak(e, "after the returns");
  await e.stop();
});

test("Engine lets go of a hand-off's block when its prefill is cancelled, and when its waiting decode is cancelled", async () => {
  let victim = -1;
  const pre: ReturnType<typeof hookedEngine> = hookedEngine({ numBlocks: 32, scheduler: { maxBatchTokens: 16 } }, {
    beforeRun: (entries) => {
      if (entries.some((x) => x.seqId === victim && x.startPos > 0)) pre.cancel(victim);
    },
  });
  const handoff: GenerateRequest = { prompt: STORY, maxTokens: 1, temperature: 0, prefillOnly: true };
  const v = pre.submit(handoff);
  victim = v.id;
  assert.equal((await v.result).finishReason, "abort");
  assertNoLeak(pre, "a hand-off cancelled mid-prefill keeps no block");
  victim = -1;
  assert.equal((await drain(pre, handoff)).result.finishReason, "prefill_done");
  assertNoLeak(pre, "the finished prefill keeps its last block", 1);
  const prefix = await pre.exportPrefix(STORY, true);
  assert.ok(prefix !== null && prefix.tail === true);
  assertNoLeak(pre, "exported", 0);
  await pre.stop();
  const dec = hookedEngine({ numBlocks: 32, scheduler: { maxRunning: 1 } });
  const busy = drain(dec, { prompt: filler(1), maxTokens: 20, temperature: 0, ignoreEos: true });
  dec.importPrefix(prefix);
  const waiting = dec.submit({ prompt: STORY, maxTokens: 8, temperature: 0, ignoreEos: true });
  assert.equal(dec.scheduler.get(waiting.id)?.status, "waiting");
  waiting.cancel();
  assert.equal((await waiting.result).finishReason, "abort");
  await busy;
  assertNoLeak(dec, "the cancelled decode's hand-off block went back");
  await dec.stop();
});
