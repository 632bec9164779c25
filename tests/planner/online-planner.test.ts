import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { type MetricsSnapshot, OnlinePlanner, type Role, type WorkerSnapshot } from "../../planner/index.ts";

const N = 16;

/** A cluster snapshot: `roles` per worker, prefill backlog and decode load per the arguments. */
function snap(now: number, roles: Role[], o: { uncachedPerS: number; outputPerS: number; backlog: number; seqs: number }): MetricsSnapshot {
  const pre = roles.filter((r) => r === "prefill").length;
  const dec = roles.length - pre;
  const workers: WorkerSnapshot[] = roles.map((role, i) => ({
    id: `w${i}`, role, state: "serving", waitingPrefillTokens: role === "prefill" ? o.backlog / pre : 0, queueDelayS: 0,
    decodeBatch: role === "decode" ? o.seqs / dec : 0, waitingDecodes: 0,
    // Prefill workers run at 50k tokens/s when busy; decode steps cost 10 ms + 40 µs per sequence.
    prefillTokens: role === "prefill" ? 50_000 * 0.8 : 0, prefillBusyS: role === "prefill" ? 0.8 : 0,
    decodeTokens: 0, decodeBusyS: role === "decode" ? 1 : 0,
    decodeStepS: role === "decode" ? 0.01 + 0.00004 * (o.seqs / dec) * (0.9 + 0.2 * (i % 2)) : 0,
    meanDecodeBatch: role === "decode" ? (o.seqs / dec) * (0.9 + 0.2 * (i % 2)) : 0, kvUsage: 0.3,
  }));
  return {
    now, windowS: 1, workers, arrivals: 100, arrivedPromptTokens: 100 * 20_000, arrivedUncachedTokens: o.uncachedPerS,
    arrivedOutputTokens: o.outputPerS, completions: [],
  };
}

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

test("OnlinePlanner.tick() flips toward prefill within a few ticks of a prefill burst", () => {
  const planner = new OnlinePlanner();
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  for (let t = 1; t <= 30; t++) apply(roles, planner.tick(snap(t, roles, steady)));
  const before = roles.filter((r) => r === "prefill").length;
  const burst = { uncachedPerS: 600_000, outputPerS: 20_000, backlog: 1_500_000, seqs: 800 };
  let firstFlip = -1;
  for (let t = 31; t <= 40; t++) {
    const acts = planner.tick(snap(t, roles, burst));
    if (apply(roles, acts) > 0 && firstFlip < 0) firstFlip = t - 30;
  }
  const after = roles.filter((r) => r === "prefill").length;
  assert.ok(firstFlip >= 1 && firstFlip <= 3, `first flip after ${firstFlip} ticks`);
  assert.ok(after > before, `prefill workers ${before} → ${after}`);
  assert.ok(roles.some((r) => r === "decode"), "decode is never emptied");
});

test("OnlinePlanner.predict() charges decode overload when too few decode workers remain", () => {
  const planner = new OnlinePlanner({ maxDecodeBatch: 100 });
  const roles: Role[] = Array.from({ length: N }, (_, i) => (i < 4 ? "prefill" : "decode"));
  for (let t = 1; t <= 5; t++) planner.tick(snap(t, roles, steady));
  const [, itlFew] = planner.predict(15, N, 0, 800, 1000);
  const [, itlMany] = planner.predict(4, N, 0, 800, 1000);
  assert.ok(itlFew > 4 * itlMany, `itl with 1 decode worker ${itlFew}, with 12 ${itlMany}`);
});
