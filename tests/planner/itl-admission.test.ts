import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { ItlAdmission, OnlinePlanner, type CompletedRequest, type ItlAdmissionOptions, type PlannerAction, type StepSample } from "../../planner/index.ts";
import { SeededRng } from "../../kv/rng.ts";
import { mixedWorkerSteps, snap, stepTime } from "./snapshots.ts";

/** A model ITL of 10.5 ms plus 11 µs per extra decoding sequence. */
const linear = (extra: number) => 0.0105 + 1.1e-5 * extra;
const done = (itlS: number, n: number): CompletedRequest[] => Array.from({ length: n }, () => ({ isl: 1000, osl: 500, ttftS: 0.1, itlS }));

test("ItlAdmission.budget() is the most extra sequences whose model ITL stays below aim × target", () => {
  const a = new ItlAdmission({ aim: 0.8 });
  // 0.8 × 50 ms = 40 ms: 10.5 ms + 11 µs × x < 40 ms for x < 2681.8.
  assert.equal(a.budget(linear, null, 0.05, 8), 2681);
  assert.equal(a.budget((x) => linear(x + 5000), null, 0.05, 8), 0, "already past the aim: nobody enters");
  assert.equal(a.budget(() => 0.01, null, 0.05, 8), Infinity, "a pool the model never fills takes everyone");
});

test("ItlAdmission.budget() scales the model to the measured ITL", () => {
  const a = new ItlAdmission({ aim: 0.8 });
  // The pool measures twice what the model says (21 ms against 10.5 ms): the scale converges to 2,
  // 2 × (10.5 ms + 11 µs × x) < 40 ms for x < 863.6.
  let b = 0;
  for (let t = 0; t < 60; t++) b = a.budget(linear, { itlS: 0.021, tokens: 100_000 }, 0.05, 8);
  assert.ok(Math.abs(a.itlScale - 2) < 1e-9, `scale ${a.itlScale}`);
  assert.equal(b, 863);
});

test("ItlAdmission.budget() gives a light window's measurement weight in proportion to its tokens", () => {
  const a = new ItlAdmission({ aim: 0.8 });
  for (let t = 0; t < 20; t++) a.budget(linear, { itlS: 0.0105, tokens: 100_000 }, 0.05, 8);
  assert.ok(Math.abs(a.itlScale - 1) < 1e-9);
  // Light load: one window catches three sequences at the tick after 11 tokens (273 ms a token, 26×
  // the model), the next none after 275 tokens; together 3 sequence-seconds over 286 tokens is the
  // model's 10.5 ms. Averaging the windows' ratios would say 13×; weighted by tokens it is 1×.
  for (let t = 0; t < 40; t++) {
    a.budget(linear, { itlS: 3 / 11, tokens: 11 }, 0.05, 8);
    a.budget(linear, { itlS: 0, tokens: 275 }, 0.05, 8);
  }
  assert.ok(Math.abs(a.itlScale - 1) < 0.1, `scale ${a.itlScale}`);
  assert.ok(a.budget(linear, null, 0.05, 8) > 2000, "the door stays open");
});

test("ItlAdmission.aim() is the recent requests' mean ITL over their 90th percentile, within its bounds", () => {
  const a = new ItlAdmission({ keep: 100 });
  assert.equal(a.aim(), 1, "nothing measured: aim at the target");
  a.observe([...done(0.02, 85), ...done(0.04, 15)]);
  // Mean 23 ms, 90th percentile 40 ms.
  assert.ok(Math.abs(a.aim() - 0.023 / 0.04) < 1e-12, `aim ${a.aim()}`);
  a.observe(done(0.03, 100));
  assert.ok(Math.abs(a.aim() - 1) < 1e-12, "the oldest are forgotten: all requests alike, aim at the target");
  a.observe([...done(0.001, 85), ...done(1, 15)]);
  assert.equal(a.aim(), 0.5, "a wild spread is bounded below");
  a.observe([{ isl: 10, osl: 1, ttftS: 0.1, itlS: 0 }]);
  assert.equal(a.aim(), 0.5, "single-token outputs have no ITL and are not read");
});

test("ItlAdmission rejects impossible knobs, quoting them", () => {
  assert.throws(() => new ItlAdmission({ aim: 0 }), /aim must be positive, "measured" or "fitted"; got 0/);
  assert.throws(() => new ItlAdmission({ fitFloor: 2 }), /fitFloor must be in \[0, 1\]; got 2/);
  assert.throws(() => new ItlAdmission({ percentile: 1.5 }), /percentile must be in \(0, 1\]; got 1.5/);
  assert.throws(() => new ItlAdmission({ minAim: 0.9, maxAim: 0.8 }), /0 < minAim <= maxAim; got 0.9 and 0.8/);
  assert.throws(() => new ItlAdmission({ keep: 3 }), /keep must be an integer of at least 16; got 3/);
  assert.throws(() => new ItlAdmission({ maxWaitS: -1 }), /maxWaitS must be at least 0; got -1/);
  assert.throws(() => new ItlAdmission({ lookaheadS: -5 }), /lookaheadS must be a finite number of at least 0; got -5/);
  assert.throws(() => new ItlAdmission({ lookaheadS: Infinity }), /lookaheadS must be a finite number of at least 0; got Infinity/);
  assert.throws(() => new ItlAdmission({ lookaheadFrom: -1 }), /lookaheadFrom must be at least 0; got -1/);
});

test("OnlinePlanner with itlAdmission budgets new sessions once its step model has fits: fewer as the pool fills, none past the aim", () => {
  const planner = new OnlinePlanner({ itlAdmission: { aim: 0.8 } });
  const admission = (t: number, seqs: number): Extract<PlannerAction, { kind: "admission" }> | undefined => {
    const s = snap(t, Array(8).fill("mixed"), { uncachedPerS: 20_000, outputPerS: 2_000, backlog: 0, seqs });
    s.workers = s.workers.map((w, i) => ({ ...w, steps: mixedWorkerSteps(0, 200, 8 * t + i) }));
    return planner.tick(s).find((a) => a.kind === "admission") as Extract<PlannerAction, { kind: "admission" }> | undefined;
  };
  const early = admission(1, 80);
  assert.equal(early, undefined, "no fit yet: no budget");
  let t = 2;
  for (; planner.stepModelCoefficients() === null || t < 40; t++) admission(t, 80);
  const light = admission(t++, 80)!;
  const fuller = admission(t++, 240)!;
  const full = admission(t++, 4000)!;
  assert.ok(light.newSessions! > fuller.newSessions!, `room shrinks as the pool fills: ${light.newSessions} then ${fuller.newSessions}`);
  assert.ok(fuller.newSessions! > 0);
  assert.equal(full.newSessions, 0, "past the aim nobody enters");
  assert.equal(full.rejectAfterHold, true, "those who find no room by the next tick are turned away");
  assert.equal(full.holdNewSessions, false);
  assert.equal(new OnlinePlanner().tick(snap(1, Array(8).fill("mixed"), { uncachedPerS: 20_000, outputPerS: 2_000, backlog: 0, seqs: 4000 })).some((a) => a.kind === "admission"), false, "off by default");
});

/** Steps of an all-mixed worker whose contexts are `scale` × those of {@link mixedWorkerSteps}. */
function stepsAtContext(scale: number, n: number, seed: number): StepSample[] {
  const rng = new SeededRng(seed);
  return Array.from({ length: n }, () => {
    const b = 1 + Math.floor(rng.next() * 120);
    const r = rng.next();
    const p = r < 0.4 ? 0 : r < 0.7 ? Math.floor(50 + rng.next() * 1500) : 8192 - b;
    const s = { prefillTokens: p, prefillAttnPairs: p * scale * (2000 + rng.next() * 60000), decodeSeqs: b, decodeAttnTokens: b * scale * (5000 + rng.next() * 80000) };
    return { ...s, seconds: stepTime(s, 0) };
  });
}

/**
 * The new-session budget of a planner with ITL admission `opts` (aim 0.8 unless given) that has seen
 * `history` (the context scale of each tick's steps on 8 mixed workers holding 80 sequences), asked at
 * 300 held sequences.
 */
function budgetAfter(opts: ItlAdmissionOptions, history: number[]): number {
  const planner = new OnlinePlanner({ itlAdmission: { aim: 0.8, ...opts } });
  let last: Extract<PlannerAction, { kind: "admission" }> | undefined;
  history.forEach((scale, t) => {
    const s = snap(t + 1, Array(8).fill("mixed"), { uncachedPerS: 20_000, outputPerS: 2_000, backlog: 0, seqs: t + 1 === history.length ? 300 : 80 });
    s.workers = s.workers.map((w, i) => ({ ...w, steps: stepsAtContext(scale, 200, 8 * t + i) }));
    last = planner.tick(s).find((a) => a.kind === "admission") as typeof last;
  });
  return last!.newSessions!;
}

test("OnlinePlanner's ITL admission prices the pool as its sessions will be: at the highest recent contexts, extra sessions bringing prefill", () => {
  const budget = (agedPricing: boolean, history: number[]) => budgetAfter({ agedPricing }, history);
  // Young sessions now (contexts a fifth of the earlier ones), after ten minutes of old ones.
  const agedHistory = [...Array(60).fill(1), ...Array(60).fill(0.2)];
  const youngOnly = Array(120).fill(0.2);
  const plainAfterOld = budget(false, agedHistory), agedAfterOld = budget(true, agedHistory);
  const plainYoung = budget(false, youngOnly), agedYoung = budget(true, youngOnly);
  assert.ok(plainAfterOld > 0 && plainYoung > 0, `the door is open: ${plainAfterOld}, ${plainYoung}`);
  // Without aged pricing only today's contexts count: the history makes no difference.
  assert.ok(Math.abs(plainAfterOld - plainYoung) <= 0.05 * plainYoung, `today's pricing: ${plainAfterOld} vs ${plainYoung}`);
  // With it, the contexts sessions reached a minute ago price today's: fewer get in.
  assert.ok(agedAfterOld < 0.8 * agedYoung, `aged pricing after old sessions ${agedAfterOld} vs ${agedYoung} without them`);
  // And each extra session brings the prefill a held one brings: fewer than decoding alone.
  assert.ok(agedYoung < plainYoung, `extra sessions' prefill: ${agedYoung} vs ${plainYoung}`);
});

test("OnlinePlanner's ITL admission prices rising contexts where their trend takes them (lookaheadS), and flat ones as they are", () => {
  const budget = (lookaheadS: number, history: number[], lookaheadFrom = 0) => budgetAfter({ lookaheadS, lookaheadFrom }, history);
  // A first wave: contexts grow sixfold over two minutes (a minute ahead they are 40% above today's,
  // four minutes ahead 2.7 times).
  const young = Array.from({ length: 120 }, (_, t) => 0.05 + (0.25 * t) / 119);
  const flat = Array(120).fill(0.2);
  const atPeak = budget(0, young), minute = budget(60, young), four = budget(240, young);
  assert.ok(atPeak > 0, `the door is open: ${atPeak}`);
  assert.ok(minute < atPeak && four < 0.9 * minute, `budgets at today's peak ${atPeak}, a minute ahead ${minute}, four ${four}`);
  // Flat contexts have no trend: the lookahead changes nothing.
  assert.equal(budget(60, flat), budget(0, flat));
  // Nor does it while the measured ITL is below lookaheadFrom × the aim (here never reached).
  assert.equal(budget(240, young, 10), atPeak);
});

test("OnlinePlanner's ITL admission lets one new session into an idle pool even when the target is out of its reach", () => {
  // A 5 ms target the pool cannot meet with a single sequence (its steps take 21.5 ms and more).
  const planner = new OnlinePlanner({ itlAdmission: { aim: 0.8 }, itlTargetS: 0.005 });
  const budget = (t: number, seqs: number, backlog: number) => {
    const s = snap(t, Array(8).fill("mixed"), { uncachedPerS: 20_000, outputPerS: 2_000, backlog, seqs });
    s.workers = s.workers.map((w, i) => ({ ...w, steps: mixedWorkerSteps(0, 200, 8 * t + i) }));
    return (planner.tick(s).find((a) => a.kind === "admission") as Extract<PlannerAction, { kind: "admission" }> | undefined)?.newSessions;
  };
  let t = 1;
  for (; planner.stepModelCoefficients() === null || t < 40; t++) budget(t, 80, 0);
  assert.equal(budget(t++, 80, 0), 0, "a busy pool past the target takes nobody new");
  assert.equal(budget(t++, 0, 5000), 0, "nor does one with prompts still waiting to prefill");
  // Nothing decoding and nothing waiting: one more session hurts nobody, and it is the only way the pool
  // measures again (a door shut on an idle pool would stay shut for good).
  assert.equal(budget(t++, 0, 0), 1);
});
