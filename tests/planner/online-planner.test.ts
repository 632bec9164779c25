import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { OnlinePlanner, type Role } from "../../planner/index.ts";
import { mixedWorkerSteps, snap } from "./snapshots.ts";
import { SeededRng } from "../../kv/rng.ts";
import type { StepSample } from "../../planner/types.ts";

const N = 16;

function apply(roles: Role[], acts: ReturnType<OnlinePlanner["tick"]>): number {
  let flips = 0;
  for (const a of acts) if (a.kind === "flip") { roles[Number(a.workerId.slice(1))] = a.to; flips++; }
  return flips;
}

const steady = { uncachedPerS: 150_000, outputPerS: 20_000, backlog: 20_000, seqs: 800 };

test("OnlinePlanner.tick() does not flap under steady load", () => {
  const planner = new OnlinePlanner();
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  let flips = 0;
  for (let t = 1; t <= 20; t++) flips += apply(roles, planner.tick(snap(t, roles, steady)));
  const settled = roles.slice();
  let later = 0;
  for (let t = 21; t <= 120; t++) later += apply(roles, planner.tick(snap(t, roles, steady)));
  assert.equal(later, 0, `flipped ${later} times after settling (first 20 s: ${flips})`);
  assert.deepEqual(roles, settled);
});

for (const allowMixed of [true, false]) {
  const label = allowMixed ? "into roles that prefill (prefill or mixed)" : "into prefill when mixed workers are off";
  test(`OnlinePlanner.tick() flips workers ${label} within a few ticks of a prefill burst`, () => {
    const planner = new OnlinePlanner({ allowMixed });
    const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
    for (let t = 1; t <= 30; t++) apply(roles, planner.tick(snap(t, roles, steady)));
    const prefilling = () => roles.filter((r) => r === "prefill" || r === "mixed").length;
    const before = prefilling();
    const burst = { uncachedPerS: 600_000, outputPerS: 20_000, backlog: 1_500_000, seqs: 800 };
    let firstFlip = -1;
    for (let t = 31; t <= 40; t++) {
      const acts = planner.tick(snap(t, roles, burst));
      if (apply(roles, acts) > 0 && firstFlip < 0) firstFlip = t - 30;
    }
    const after = prefilling();
    assert.ok(firstFlip >= 1 && firstFlip <= 3, `first flip after ${firstFlip} ticks`);
    assert.ok(after > before, `workers that prefill ${before} → ${after}`);
    if (!allowMixed) assert.ok(!roles.includes("mixed"));
    assert.ok(roles.some((r) => r === "decode" || r === "mixed"), "decode is never emptied");
  });
}

test("OnlinePlanner.predict() charges decode overload when too few decode workers remain", () => {
  const planner = new OnlinePlanner({ maxDecodeBatch: 100 });
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  for (let t = 1; t <= 5; t++) planner.tick(snap(t, roles, steady));
  const [, itlFew] = planner.predict(15, N, 0, 800, 1000);
  const [, itlMany] = planner.predict(4, N, 0, 800, 1000);
  assert.ok(itlFew > 4 * itlMany, `itl with 1 decode worker ${itlFew}, with 12 ${itlMany}`);
});

test("OnlinePlanner.tick() moves idle prefill workers to decoding roles under light decode-heavy load and stays there", () => {
  const planner = new OnlinePlanner();
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  // Decode-bound steps (4 ms + 0.4 ms per sequence, as MoE expert reads grow with the batch): spreading
  // decodes over the prefill workers too lowers ITL, and prefill is light enough to share steps.
  const light = { uncachedPerS: 20_000, outputPerS: 24_000, backlog: 0, seqs: 240, stepA: 0.004, stepB: 0.0004 };
  for (let t = 1; t <= 60; t++) apply(roles, planner.tick(snap(t, roles, light)));
  const prefill = roles.filter((r) => r === "prefill").length;
  // Idle prefill capacity becomes decode or mixed workers (4 prefill workers at the start).
  assert.ok(prefill <= 1, `after 60 s: ${roles.join(",")}`);
  const settled = roles.slice();
  let later = 0;
  for (let t = 61; t <= 180; t++) later += apply(roles, planner.tick(snap(t, roles, light)));
  assert.equal(later, 0, `flipped ${later} times after settling at ${settled.join(",")}`);
});

test("OnlinePlanner.predictMix() puts prefill interference into mixed workers' ITL", () => {
  const planner = new OnlinePlanner();
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  for (let t = 1; t <= 5; t++) planner.tick(snap(t, roles, steady));
  const allMixed = { prefill: 0, decode: 0, mixed: N };
  const [, itlLight] = planner.predictMix(allMixed, 0, 800, 1000);
  planner.tick(snap(6, roles, { ...steady, uncachedPerS: 600_000 }));
  const [, itlHeavy] = planner.predictMix(allMixed, 0, 800, 1000);
  const [, itlSplit] = planner.predictMix({ prefill: 4, decode: N - 4, mixed: 0 }, 0, 800, 1000);
  assert.ok(itlHeavy > 1.2 * itlLight, `mixed ITL at 150k prefill tok/s ${itlLight}, at 600k ${itlHeavy}`);
  assert.ok(itlSplit < itlHeavy, `split ITL ${itlSplit} should beat all-mixed ${itlHeavy} under heavy prefill`);
});

test("OnlinePlanner.tick() with fixed step mixing splits off prefill workers when measured mixed steps cost extra, and stays all mixed when they do not", () => {
  const counts: Record<string, number> = {};
  for (const mixedS of [0, 0.1]) {
    const planner = new OnlinePlanner({ adaptStepMixing: false });
    const roles: Role[] = Array.from({ length: N }, () => "mixed");
    for (let t = 1; t <= 40; t++) {
      const s = snap(t, roles, { ...steady, uncachedPerS: 300_000 });
      // Each worker reports a sample of its window's steps, as the engine's step log would.
      s.workers.forEach((w, i) => (w.steps = mixedWorkerSteps(mixedS, 48, t * 100 + i)));
      apply(roles, planner.tick(s));
    }
    counts[mixedS] = roles.filter((r) => r === "prefill").length;
    assert.ok(Math.abs(planner.stepModelCoefficients()!.m - mixedS) < 0.015, `fitted mixed-step cost ${planner.stepModelCoefficients()!.m}, true ${mixedS}`);
  }
  assert.equal(counts[0], 0, "no split without a mixed-step cost");
  assert.ok(counts[0.1] >= 2, `prefill workers with 100 ms mixed steps: ${counts[0.1]}`);
});

test("OnlinePlanner.tick() separates prefill and decode steps once two fits price mixed steps dearer, and never when they are not", () => {
  for (const mixedS of [0, 0.1]) {
    const planner = new OnlinePlanner();
    const roles: Role[] = Array.from({ length: N }, () => "mixed");
    const decisions: { t: number; split: boolean }[] = [];
    for (let t = 1; t <= 30; t++) {
      const s = snap(t, roles, { ...steady, uncachedPerS: 300_000 });
      s.workers.forEach((w, i) => (w.steps = mixedWorkerSteps(mixedS, 48, t * 100 + i)));
      const acts = planner.tick(s);
      for (const a of acts) if (a.kind === "step-mixing") decisions.push({ t, split: a.split });
      apply(roles, acts);
    }
    // Separating steps removes the mixed-step cost, so no worker needs to leave the mixed role for it.
    assert.equal(roles.filter((r) => r !== "mixed").length, 0, roles.join(","));
    if (mixedS === 0) assert.deepEqual(decisions, [], "mixing is free: keep mixed steps");
    else {
      assert.equal(decisions.length, 1, JSON.stringify(decisions));
      assert.equal(decisions[0].split, true);
      assert.ok(decisions[0].t >= 2, "one fit is not enough");
    }
  }
});

test("OnlinePlanner.tick() starts from the step mixing workers run (initialSplitSteps): switches back to mixed steps when they are free, and prices fixed separate steps as such", () => {
  const run = (o: { initialSplitSteps: boolean; adaptStepMixing?: boolean }, mixedS: number) => {
    const planner = new OnlinePlanner(o);
    const roles: Role[] = Array.from({ length: N }, () => "mixed");
    const splits: boolean[] = [];
    for (let t = 1; t <= 40; t++) {
      const s = snap(t, roles, { ...steady, uncachedPerS: 300_000 });
      s.workers.forEach((w, i) => (w.steps = mixedWorkerSteps(mixedS, 48, t * 100 + i)));
      const acts = planner.tick(s);
      for (const a of acts) if (a.kind === "step-mixing") splits.push(a.split);
      apply(roles, acts);
    }
    return { splits, prefill: roles.filter((r) => r === "prefill").length };
  };
  // Workers that start with separate steps go back to mixed ones when mixing costs nothing extra...
  assert.deepEqual(run({ initialSplitSteps: true }, 0).splits, [false]);
  // ...and stay separate (no action) when mixed steps are dear.
  assert.deepEqual(run({ initialSplitSteps: true }, 0.1).splits, []);
  // Step mixing fixed: separate steps do not pay the 100 ms a mixed step costs, so no worker needs to
  // leave for prefill, where fixed mixed steps make the planner split off prefill workers.
  const fixedSplit = run({ initialSplitSteps: true, adaptStepMixing: false }, 0.1);
  const fixedMixed = run({ initialSplitSteps: false, adaptStepMixing: false }, 0.1);
  assert.deepEqual(fixedSplit.splits, []);
  assert.equal(fixedSplit.prefill, 0, "fixed separate steps priced as mixed ones");
  assert.ok(fixedMixed.prefill >= 2, `prefill workers with fixed mixed steps: ${fixedMixed.prefill}`);
});

test("OnlinePlanner.tick() flips no role before its step model is trusted, also on ticks whose windows carry no steps", () => {
  const planner = new OnlinePlanner();
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  const burst = { uncachedPerS: 600_000, outputPerS: 20_000, backlog: 1_500_000, seqs: 800 };
  // One tick of measured steps (a first fit), then quiet ticks whose windows carry no step, under a prefill burst.
  const first = snap(1, roles, burst);
  first.workers.forEach((w, i) => (w.steps = mixedWorkerSteps(0, 48, 100 + i)));
  const flipsAt: number[] = [];
  for (let t = 1; t <= 30; t++) if (apply(roles, planner.tick(t === 1 ? first : snap(t, roles, burst))) > 0) flipsAt.push(t);
  // Step mixing waits for a second fit (10 ticks after the first), and so do flips; then workers move into prefill.
  assert.ok(flipsAt.length > 0, "workers move into prefill once the model is trusted");
  assert.ok(flipsAt[0] >= 10, `first flip at tick ${flipsAt[0]}, before the second fit`);
});

test("OnlinePlanner.tick() prices step mixing at the chunks workers run: small chunks make a mixed-step cost dear that a full budget would hide", () => {
  // A CPU-like worker (time grows with every token: a full 8192-token chunk takes 0.8 s) whose prompts
  // are short (100–400 tokens a chunk, as tool results and replies are): 35 ms more per mixed step is
  // a few percent of a full chunk's step and more than half of a 250-token one's.
  const shortChunks = (mixedS: number, seed: number): StepSample[] => {
    const rng = new SeededRng(seed);
    return Array.from({ length: 48 }, () => {
      const b = 1 + Math.floor(rng.next() * 120), ctx = 5000 + rng.next() * 80000;
      const p = rng.next() < 0.4 ? 0 : Math.floor(100 + rng.next() * 300);
      const s = { prefillTokens: p, prefillAttnPairs: p * (2000 + rng.next() * 60000), decodeSeqs: b, decodeAttnTokens: b * ctx };
      const seconds = 0.001 + 1e-4 * p + 1e-9 * s.prefillAttnPairs + 2e-4 * b + 1e-9 * s.decodeAttnTokens + (p > 0 ? mixedS : 0);
      return { ...s, seconds };
    });
  };
  for (const mixedS of [0, 0.035]) {
    const planner = new OnlinePlanner();
    const roles: Role[] = Array.from({ length: N }, () => "mixed");
    const splits: boolean[] = [];
    for (let t = 1; t <= 30; t++) {
      const s = snap(t, roles, { ...steady, uncachedPerS: 100_000 });
      s.workers.forEach((w, i) => (w.steps = shortChunks(mixedS, t * 100 + i)));
      for (const a of planner.tick(s)) if (a.kind === "step-mixing") splits.push(a.split);
    }
    assert.deepEqual(splits, mixedS === 0 ? [] : [true], `mixed-step cost ${mixedS} s`);
  }
});
