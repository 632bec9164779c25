/**
 * The engine under concurrency, cancellation and KV pressure, as the server drives it: a request
 * cancelled in every phase leaves no block held and the others' outputs unchanged; seeded outputs
 * alone and amid a busy batch agree; a failing step or request does not poison the engine.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import type { Engine } from "../../src/engine/engine.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import type { StepEntry } from "../../src/engine/scheduler-types.ts";
import type { NgramSpeculation } from "../../src/engine/ngram-draft.ts";
import { assertNoLeak, drain, hookedEngine, type HookedOptions, model, within } from "./concurrency-fixtures.ts";
import { STORY } from "../cluster/fixtures.ts";

const OTHER = model.tokenizer.encode("The dog ran to the big red ball and the cat sat on the mat all day long.", { addBos: true });
/** 110 tokens: several prefill chunks at a 32-token budget. */
const LONG = model.tokenizer.encode("The dog number 7 ran to the big red ball and the cat sat on the mat all day long. ".repeat(3), { addBos: true });
const NGRAM: NgramSpeculation = { method: "ngram", numTokens: 4, maxN: 3, minN: 1 };
/** The busy batch: one greedy and one seeded request. */
const BACKGROUND: GenerateRequest[] = [
  { prompt: STORY, maxTokens: 24, temperature: 0, ignoreEos: true },
  { prompt: OTHER, maxTokens: 24, temperature: 0.9, topP: 0.95, seed: 11, ignoreEos: true },
];
const VICTIM: GenerateRequest = { prompt: LONG, maxTokens: 40, temperature: 0.7, seed: 5, ignoreEos: true };

/** Each background request's tokens run alone on a fresh engine. */
async function alone(o: HookedOptions = {}): Promise<number[][]> {
  const out: number[][] = [];
  for (const req of BACKGROUND) {
    const e = hookedEngine({ numBlocks: 64, ...o });
    out.push((await drain(e, req)).streamed);
    assertNoLeak(e, "alone");
    await e.stop();
  }
  return out;
}
const SOLO = await alone();

/**
 * Runs the background batch with the victim beside it, cancelling the victim from inside the step
 * (in flight) where `when` first matches its entry; checks the others, the victim and the pool.
 */
async function cancelWhen(label: string, when: (entry: StepEntry) => boolean, o: HookedOptions = {}): Promise<Engine> {
  let victim = -1;
  let hit = false;
  const e: Engine = hookedEngine({ numBlocks: 64, scheduler: { maxBatchTokens: 32 }, ...o }, {
    beforeRun: (entries) => {
      const entry = entries.find((x) => x.seqId === victim);
      if (!hit && entry && when(entry)) {
        hit = true;
        e.cancel(victim);
      }
    },
  });
  const bg = BACKGROUND.map((req) => drain(e, req));
  const v = e.submit(VICTIM);
  victim = v.id;
  const rv = await within(v.result, 60_000, `${label}: the victim's result`);
  const outs = await within(Promise.all(bg), 60_000, `${label}: the batch`);
  assert.ok(hit, `${label}: the victim was cancelled in that phase`);
  assert.equal(rv.finishReason, "abort", label);
  outs.forEach((r, i) => assert.deepEqual(r.streamed, SOLO[i], `${label}: request ${i} as alone`));
  assertNoLeak(e, label);
  return e;
}

test("Engine cancelled in its first prefill chunk, mid chunked prefill, or decoding: no block held, the batch unchanged", async () => {
  await (await cancelWhen("first chunk", (x) => x.prefill && x.startPos === 0)).stop();
  await (await cancelWhen("mid prefill", (x) => x.prefill && x.startPos > 0)).stop();
  await (await cancelWhen("last prefill chunk", (x) => x.prefill && x.sample)).stop();
  await (await cancelWhen("decoding", (x) => !x.prefill && x.startPos >= LONG.length + 3)).stop();
});

test("Engine cancelled during a speculative step verifying its draft: no block held, the batch unchanged", async () => {
  const e = await cancelWhen("speculative", (x) => (x.draft ?? 0) > 0, { speculative: NGRAM });
  assert.ok(e.stats().specDrafts > 0, "drafts were verified");
  await e.stop();
});

test("Engine cancelled while queued, between steps, and after its last token: no block held, the batch unchanged", async () => {
  const e = hookedEngine({ numBlocks: 64, scheduler: { maxRunning: 2 } });
  const bg = BACKGROUND.map((req) => drain(e, req));
  const queued = e.submit(VICTIM);
  assert.equal(e.scheduler.get(queued.id)?.status, "waiting", "the victim waits for a running slot");
  queued.cancel();
  assert.equal((await queued.result).finishReason, "abort");
  (await Promise.all(bg)).forEach((r, i) => assert.deepEqual(r.streamed, SOLO[i], `request ${i}`));
  assertNoLeak(e, "queued");
  // Between steps: the client leaves after two deltas (the loop is between steps while it reads).
  const bg2 = BACKGROUND.map((req) => drain(e, req));
  const h = e.submit(VICTIM);
  let n = 0;
  for await (const _ of h.stream) if (++n === 2) break;
  assert.equal((await h.result).finishReason, "abort");
  (await Promise.all(bg2)).forEach((r, i) => assert.deepEqual(r.streamed, SOLO[i], `request ${i}`));
  assertNoLeak(e, "between steps");
  // After its last token, before its result is read: a late cancel changes nothing.
  const done = e.submit({ ...VICTIM, maxTokens: 3 });
  for await (const _ of done.stream) { /* drain */ }
  done.cancel();
  const r = await done.result;
  assert.equal(r.finishReason, "length");
  assert.equal(r.tokenIds.length, 3);
  assertNoLeak(e, "after the last token");
  await e.stop();
});

test("Engine cancelled while preempted (swapped out to host memory, or waiting to recompute): no block or swap slot held", async () => {
  for (const preemption of ["swap", "recompute"] as const) {
    let victim = -1;
    let hit = false;
    const e: Engine = hookedEngine({ numBlocks: 8, scheduler: { maxBatchTokens: 48, preemption } }, {
      beforeRun: () => {
        const seq = e.scheduler.get(victim);
        if (!hit && seq && seq.status === "waiting" && seq.preemptions > 0) {
          hit = true;
          e.cancel(victim);
        }
      },
    });
    const bg = BACKGROUND.map((req) => drain(e, { ...req, maxTokens: 40 }));
    const v = e.submit({ ...VICTIM, prompt: VICTIM.prompt.slice(0, 20) });
    victim = v.id;
    assert.equal((await within(v.result, 60_000, `${preemption}: the victim`)).finishReason, "abort");
    await within(Promise.all(bg), 60_000, `${preemption}: the batch`);
    assert.ok(hit, `${preemption}: the victim was cancelled while preempted`);
    if (preemption === "swap") assert.ok(e.stats().swapOuts > 0);
    assertNoLeak(e, preemption);
    await e.stop();
  }
});
