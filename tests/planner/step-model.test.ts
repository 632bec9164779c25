import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "../harness.ts";
import { OnlineStepModel } from "../../planner/step-model.ts";
import { StepPricing } from "../../planner/step-pricing.ts";
import { mixedWorkerSteps, snap, stepTime } from "./snapshots.ts";
import { SeededRng } from "../../kv/rng.ts";
import type { StepSample } from "../../planner/types.ts";

const truth = stepTime;
const mixedPool = (mixedS: number, n = 3000, seed = 7) => mixedWorkerSteps(mixedS, n, seed);

test("OnlineStepModel recovers a mixed-step overhead from an all-mixed pool and prices a prefill-only step without it", () => {
  for (const mixedS of [0, 0.03, 0.1]) {
    const m = new OnlineStepModel();
    m.add(mixedPool(mixedS));
    const c = m.fit();
    assert.ok(c !== null);
    assert.ok(Math.abs(c.m - mixedS) < 0.01, `mixed overhead ${mixedS}: fitted ${c.m}`);
    // Never seen: a prefill worker's 16k-token step, and a decode worker with twice the usual batch.
    const prefill = { prefillTokens: 16384, prefillAttnPairs: 16384 * 30000, decodeSeqs: 0, decodeAttnTokens: 0 };
    const decode = { prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 200, decodeAttnTokens: 200 * 40000 };
    for (const shape of [prefill, decode]) {
      const want = truth(shape, mixedS);
      assert.ok(Math.abs(m.predict(shape) - want) / want < 0.1, `mixed ${mixedS}: predicted ${m.predict(shape)} for ${JSON.stringify(shape)}, true ${want}`);
    }
  }
});

test("OnlineStepModel sees decode context: a decode step reading 4x the KV costs more", () => {
  const m = new OnlineStepModel();
  m.add(mixedPool(0));
  m.fit();
  const at = (ctx: number) => m.predict({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 64, decodeAttnTokens: 64 * ctx });
  assert.ok(at(80000) - at(20000) > 0.5 * (truth({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 64, decodeAttnTokens: 64 * 80000 }, 0) -
    truth({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 64, decodeAttnTokens: 64 * 20000 }, 0)));
});

test("OnlineStepModel waits for both kinds of step before fitting, and keeps only recent samples", () => {
  const m = new OnlineStepModel();
  m.add(mixedPool(0).filter((s) => s.prefillTokens === 0));
  assert.equal(m.fit(), null, "decode-only steps cannot price prefill");
  assert.ok(Number.isNaN(m.predict({ prefillTokens: 1, prefillAttnPairs: 1, decodeSeqs: 0, decodeAttnTokens: 0 })));
  m.add(mixedPool(0.1, 5000, 9));
  assert.ok(m.size <= 4096);
  assert.ok(Math.abs(m.fit()!.m - 0.1) < 0.01, "the old, decode-only samples have rolled out");
  m.add([{ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 0, decodeAttnTokens: 0, seconds: 1 }, { prefillTokens: 5, prefillAttnPairs: 5, decodeSeqs: 0, decodeAttnTokens: 0, seconds: 0 }]);
  assert.ok(m.size <= 4096, "empty and zero-time samples are ignored");
});

test("StepPricing.preferSplit() separates steps when the fit prices a mixed step above its two halves, with hysteresis", () => {
  const priced = (mixedS: number) => {
    const p = new StepPricing();
    const workers = snap(1, ["mixed", "mixed", "mixed"], { uncachedPerS: 100_000, outputPerS: 10_000, backlog: 0, seqs: 200 }).workers;
    p.learn(workers.map((w, i) => ({ ...w, steps: mixedWorkerSteps(mixedS, 400, 40 + i) })));
    return p;
  };
  const dear = priced(0.1), free = priced(0);
  assert.equal(dear.preferSplit(64, 8192, false), true, "100 ms per mixed step against a ~25 ms decode step");
  assert.equal(free.preferSplit(64, 8192, false), false);
  // Small chunks: a separate decode step doubles the steps, so even a worker already separating them goes back.
  assert.equal(free.preferSplit(64, 1024, true), false);
  assert.ok(dear.splitChunkStep(64, 8192) < dear.chunkStep(64, 8192));
  assert.equal(new StepPricing().preferSplit(64, 8192, true), true, "no fit yet: keep the current choice");
});

test("OnlineStepModel refuses an implausible refit of large-batch steps and prices prefill from a sound one", () => {
  // 256 steps an all-mixed worker measured in a simulated mixed-shift run at load 3 (decode batches of
  // 147–249, chunks up to 8k tokens; no mixed-step overhead in that cost model). At τ = 32 their
  // saturation column is 0.99–1.0, all but collinear with the overhead and weight columns: least
  // squares there cancels an overhead of about −31 s against a saturation term of +31 s, and priced a
  // prefill-only step at nothing, which made the planner separate prefill and decode steps for good.
  const rows: number[][] = JSON.parse(readFileSync(new URL("./fixtures/steps-large-batches.json", import.meta.url), "utf8"));
  const measured: StepSample[] = rows.map(([p, pp, b, da, s]) => ({ prefillTokens: p, prefillAttnPairs: pp, decodeSeqs: b, decodeAttnTokens: da, seconds: s }));
  const m = new OnlineStepModel();
  // An earlier fit at small batches leaves τ = 32 as the scale to refit at (the model searches all
  // scales only every tenth fit).
  m.add(smallBatchSteps32());
  assert.equal(m.fit()?.tau, 32, "the small-batch steps pick tau 32");
  assert.equal(m.fit()?.tau, 32, "and again (the first refit still searches every scale)");
  for (let i = 0; i < 8; i++) m.add(measured); // fills the ring: only the measured steps remain
  const c = m.fit();
  assert.ok(c !== null);
  const longest = Math.max(...measured.map((x) => x.seconds));
  assert.ok(Math.abs(c.o) <= longest && c.e <= longest, `coefficients must be physical, got ${JSON.stringify(c)}`);
  // Large chunks priced within 25% of what they measured (median), and a chunk's own step is not free.
  const big = measured.filter((x) => x.prefillTokens > 4000);
  const errors = big.map((x) => Math.abs(m.predict(x) - x.seconds) / x.seconds).sort((a, b) => a - b);
  assert.ok(errors[Math.floor(errors.length / 2)] < 0.25, `median relative error ${errors[Math.floor(errors.length / 2)]}`);
  const prefillOnly = m.predict({ prefillTokens: 8000, prefillAttnPairs: 8000 * 60000, decodeSeqs: 0, decodeAttnTokens: 0 });
  assert.ok(prefillOnly > 0.05, `an 8k-token prefill-only step priced at ${prefillOnly} s`);
});

/** Mixed-worker steps from a cost model with an MoE weight term saturating at 32 tokens, batches of 1–40. */
function smallBatchSteps32(): StepSample[] {
  const rng = new SeededRng(5);
  const out: StepSample[] = [];
  for (let i = 0; i < 2048; i++) {
    const b = 1 + Math.floor(rng.next() * 40);
    const p = rng.next() < 0.5 ? 0 : Math.floor(1 + rng.next() * 300);
    const s = { prefillTokens: p, prefillAttnPairs: p * 4000, decodeSeqs: b, decodeAttnTokens: b * 20000 };
    out.push({ ...s, seconds: stepTime(s, 0) + 0.02 * (1 - Math.exp(-(p + b) / 32)) });
  }
  return out;
}

test("StepPricing.contexts(true) holds the highest recent contexts and lets them decay over minutes", () => {
  // One step a tick: 100 prompt tokens attending to `ctx` each, 10 sequences reading `2 × ctx` each.
  const tick = (p: StepPricing, ctx: number) =>
    p.learnSteps([[{ prefillTokens: 100, prefillAttnPairs: 100 * ctx, decodeSeqs: 10, decodeAttnTokens: 10 * 2 * ctx, seconds: 0.05 }]]);
  const p = new StepPricing();
  for (let t = 0; t < 100; t++) tick(p, 50_000);
  for (let t = 0; t < 100; t++) tick(p, 5_000);
  const now = p.contexts(), peak = p.contexts(true);
  assert.ok(Math.abs(now.prefill - 5_000) < 5 && Math.abs(now.decode - 10_000) < 10, `today's means follow the young sessions: ${JSON.stringify(now)}`);
  // 100 ticks after the old sessions left, the peak has decayed by e^(−100/600) ≈ 0.85 only.
  assert.ok(Math.abs(peak.prefill / 50_000 - Math.exp(-100 / 600)) < 0.01, `prefill peak ${peak.prefill}`);
  assert.ok(Math.abs(peak.decode / 100_000 - Math.exp(-100 / 600)) < 0.01, `decode peak ${peak.decode}`);
  // Long after, the peak is back at today's contexts (never below them).
  for (let t = 0; t < 3000; t++) tick(p, 5_000);
  assert.deepEqual(p.contexts(true), p.contexts());
});

test("StepPricing.contexts(true, aheadTicks) carries rising contexts along their trend and leaves falling or flat ones at the peaks", () => {
  const tick = (p: StepPricing, ctx: number) =>
    p.learnSteps([[{ prefillTokens: 100, prefillAttnPairs: 100 * ctx, decodeSeqs: 10, decodeAttnTokens: 10 * 2 * ctx, seconds: 0.05 }]]);
  // Sessions aging: contexts rise 200 tokens a tick (the EWMAs trail by a few ticks but rise as fast).
  const rising = new StepPricing();
  for (let t = 0; t < 60; t++) tick(rising, 10_000 + 200 * t);
  const now = rising.contexts(), held = rising.contexts(true), ahead = rising.contexts(true, 60);
  assert.deepEqual(held, now, "rising: the peaks are today's");
  assert.ok(Math.abs(ahead.prefill - (now.prefill + 60 * 200)) < 100, `prefill a minute ahead ${ahead.prefill} from ${now.prefill}`);
  assert.ok(Math.abs(ahead.decode - (now.decode + 60 * 400)) < 200, `decode a minute ahead ${ahead.decode} from ${now.decode}`);
  assert.deepEqual(rising.contexts(true, 0), held, "no lookahead: the peaks");
  // Old sessions gone: contexts fall; the held peaks price them, the trend adds nothing.
  const falling = new StepPricing();
  for (let t = 0; t < 60; t++) tick(falling, 50_000 - 500 * t);
  assert.deepEqual(falling.contexts(true, 60), falling.contexts(true));
  assert.ok(falling.contexts(true).prefill > falling.contexts().prefill);
  // Flat: nothing to carry.
  const flat = new StepPricing();
  for (let t = 0; t < 60; t++) tick(flat, 20_000);
  assert.deepEqual(flat.contexts(true, 60), flat.contexts());
  // One tick learned: no trend yet.
  const fresh = new StepPricing();
  tick(fresh, 20_000);
  assert.deepEqual(fresh.contexts(true, 60), fresh.contexts());
});

test("StepPricing.chunkTokens averages the prompt tokens of prefill-carrying steps, tick over tick", () => {
  const p = new StepPricing();
  assert.equal(p.chunkTokens, 0, "none seen yet");
  const step = (prefillTokens: number, decodeSeqs: number, count?: number): StepSample => ({
    prefillTokens, prefillAttnPairs: prefillTokens * 100, decodeSeqs, decodeAttnTokens: decodeSeqs * 1000, seconds: 0.01, ...(count ? { count } : {}),
  });
  // Decode-only steps do not count; merged steps count as many times as they ran.
  p.learnSteps([[step(300, 4), step(0, 8, 50)], [step(100, 0, 3)], undefined]);
  assert.equal(p.chunkTokens, 600 / 4);
  p.learnSteps([[step(0, 8)]]);
  assert.equal(p.chunkTokens, 150, "a tick without prefill keeps the average");
  p.learnSteps([[step(1150, 2)]]);
  assert.ok(Math.abs(p.chunkTokens - (0.9 * 150 + 0.1 * 1150)) < 1e-9, String(p.chunkTokens));
});
