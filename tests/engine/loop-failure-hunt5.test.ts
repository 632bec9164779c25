/**
 * Failures in the engine's loop outside a step's forward: a host-tier write-back that throws, and one
 * request's host-side work (its grammar's mask, its text) that throws. Neither may crash the loop
 * (an unhandled rejection, every other request hanging), poison the batch, or leave a block held.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { Engine } from "../../src/engine/engine.ts";
import { modelStepRunner, type StepRunner } from "../../src/engine/engine-runner.ts";
import type { GenerateRequest } from "../../src/engine/engine-types.ts";
import { allocatePagedKv } from "../../src/engine/kv-cache.ts";
import { OutputConstraint } from "../../src/engine/output-constraint.ts";
import type { Tokenizer } from "../../src/model/config.ts";
import { uploadModel } from "../../src/model/device-weights.ts";
import { model, STORY } from "../cluster/fixtures.ts";
import { assertNoLeak, drain, within } from "./concurrency-fixtures.ts";

const filler = (i: number) => model.tokenizer.encode(`The dog number ${i} ran to the big red ball and the cat sat on the mat all day long. `.repeat(3), { addBos: true });
const greedy = (prompt: number[], maxTokens = 12): GenerateRequest => ({ prompt, maxTokens, temperature: 0, ignoreEos: true });
const OTHERS = [greedy(STORY, 20), { ...greedy(filler(9), 20), temperature: 0.8, seed: 4 }];

/** An engine on the reference backend with `runner` and `tokenizer` changed as given. */
function engine(o: { numBlocks?: number; kvOffloadBlocks?: number; tokenizer?: Tokenizer; wrap?: (r: StepRunner) => StepRunner } = {}): Engine {
  const backend = createReferenceBackend();
  const base = modelStepRunner(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, o.numBlocks ?? 64, 16, "f32"));
  const runner = o.wrap ? o.wrap(base) : base;
  return new Engine({ runner, config: model.config, tokenizer: o.tokenizer ?? model.tokenizer, ...(o.kvOffloadBlocks ? { kvOffloadBlocks: o.kvOffloadBlocks } : {}) });
}

async function alone(req: GenerateRequest): Promise<number[]> {
  const e = engine();
  const out = (await drain(e, req)).streamed;
  await e.stop();
  return out;
}

test("Engine whose host-tier write-back throws recomputes the prompt: same tokens, no block held, the loop alive", async () => {
  let broken = false;
  const e = engine({
    numBlocks: 12, kvOffloadBlocks: 64,
    wrap: (base) => ({ ...base, writeBlocks: (ids, kv, from) => {
      if (broken) throw new Error("device lost while writing KV back");
      base.writeBlocks!(ids, kv, from);
    } }),
  });
  const first = await drain(e, greedy(STORY, 8));
  for (let i = 0; i < 4; i++) await drain(e, greedy(filler(i), 4));
  broken = true;
  const again = await within(drain(e, greedy(STORY, 8)), 60_000, "the returning prompt");
  assert.deepEqual(again.streamed, first.streamed);
  assert.equal(again.result.finishReason, "length");
  assert.ok(e.metrics.stepErrors > 0, "the failed write-back is counted");
  assertNoLeak(e, "after the failed write-back");
  await e.stop();
});

test("Engine whose one request's grammar throws ends that request with the error; the batch beside it is unchanged", async () => {
  const solo = await Promise.all(OTHERS.map(alone));
  const e = engine();
  const next = OutputConstraint.prototype.next;
  let calls = 0;
  OutputConstraint.prototype.next = function (this: OutputConstraint, tokens, start) {
    if (++calls === 3) throw new RangeError("grammar state lost");
    return next.call(this, tokens, start);
  };
  try {
    const others = OTHERS.map((r) => drain(e, r));
    const bad = e.submit({ ...greedy(filler(5), 20), grammar: { kind: "regex", pattern: "[a-z ]+" } });
    const r = await within(bad.result, 60_000, "the failing request");
    assert.equal(r.finishReason, "abort");
    assert.match(r.error ?? "", /grammar state lost/);
    (await within(Promise.all(others), 60_000, "the batch")).forEach((o, i) => assert.deepEqual(o.streamed, solo[i], `request ${i}`));
  } finally {
    OutputConstraint.prototype.next = next;
  }
  assertNoLeak(e, "after the grammar failure");
  assert.deepEqual((await drain(e, OTHERS[0])).streamed, solo[0], "the engine serves on");
  await e.stop();
});

test("Engine whose one request's text cannot be decoded ends that request with the error; the batch beside it is unchanged", async () => {
  const solo = await Promise.all(OTHERS.map(alone));
  // Token 300 is forced on the failing request only, and its text cannot be decoded.
  const tokenizer: Tokenizer = Object.create(model.tokenizer, {
    decode: { value: (ids: readonly number[], o?: { special?: boolean }) => {
      if (ids.includes(300)) throw new Error("bad token 300");
      return model.tokenizer.decode(ids, o);
    } },
  });
  const e = engine({ tokenizer });
  const others = OTHERS.map((r) => drain(e, r));
  const bad = e.submit({ ...greedy(filler(5), 20), logitBias: [[300, 100]] });
  const r = await within(bad.result, 60_000, "the failing request");
  assert.equal(r.finishReason, "abort");
  assert.match(r.error ?? "", /bad token 300/);
  (await within(Promise.all(others), 60_000, "the batch")).forEach((o, i) => assert.deepEqual(o.streamed, solo[i], `request ${i}`));
  assertNoLeak(e, "after the decode failure");
  assert.deepEqual((await drain(e, OTHERS[0])).streamed, solo[0], "the engine serves on");
  await e.stop();
});

test("Engine whose step-record hook throws keeps serving: the outputs as without the hook, no block held", async () => {
  const solo = await Promise.all(OTHERS.map(alone));
  const backend = createReferenceBackend();
  const runner = modelStepRunner(backend, uploadModel(backend, model), allocatePagedKv(backend, model.config, 64, 16, "f32"));
  const e = new Engine({ runner, config: model.config, tokenizer: model.tokenizer, onStep: () => { throw new Error("step log disk full"); } });
  const outs = await within(Promise.all(OTHERS.map((r) => drain(e, r))), 60_000, "the batch");
  outs.forEach((o, i) => {
    assert.deepEqual(o.streamed, solo[i], `request ${i}`);
    assert.equal(o.result.error, undefined);
  });
  assert.ok(e.metrics.stepErrors > 0, "the hook's failures are counted");
  assertNoLeak(e, "after the hook's failures");
  await e.stop();
});

test("Engine whose loop fails outside a forward (a runner's short output) ends every request with the error and serves on", async () => {
  const solo = await Promise.all(OTHERS.map(alone));
  let broken = false;
  const e = engine({
    wrap: (base) => ({ ...base, run: async (entries, rows, extras) => {
      const out = await base.run(entries, rows, extras);
      if (!broken || !entries.some((x) => !x.prefill)) return out;
      broken = false;
      return { ...out, ids: out.ids.slice(0, 0) };
    } }),
  });
  broken = true;
  const hs = OTHERS.map((r) => e.submit(r));
  const rs = await within(Promise.all(hs.map((h) => h.result)), 60_000, "the results");
  for (const r of rs) {
    assert.equal(r.finishReason, "abort");
    assert.match(r.error ?? "", /no sampled token/);
  }
  await within(Promise.all(hs.map(async (h) => {
    for await (const _ of h.stream) { /* drain */ }
  })), 60_000, "the streams");
  assertNoLeak(e, "after the loop's failure");
  const again = await within(Promise.all(OTHERS.map((r) => drain(e, r))), 60_000, "the next batch");
  again.forEach((o, i) => assert.deepEqual(o.streamed, solo[i], `request ${i}`));
  await e.stop();
});
