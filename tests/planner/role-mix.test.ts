import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { chooseFlips, countRoles, type RoleMix } from "../../planner/role-mix.ts";
import type { PlannerAction, Role, WorkerSnapshot } from "../../planner/types.ts";

/** Workers with the given roles; worker i holds `batch(i)` decodes (prefill workers none). */
function workers(roles: readonly Role[], batch: (i: number) => number = () => 100): WorkerSnapshot[] {
  return roles.map((role, i) => ({
    id: `w${String(i).padStart(2, "0")}`, role, state: "serving", waitingPrefillTokens: role === "decode" ? 0 : 1000 * i, queueDelayS: 0,
    decodeBatch: role === "prefill" ? 0 : batch(i), waitingDecodes: 0, prefillTokens: 0, prefillBusyS: 0, prefillSteps: 0,
    decodeTokens: 0, decodeBusyS: 0, decodeStepS: 0, meanDecodeBatch: 0, kvUsage: 0.3,
  }));
}

function apply(live: WorkerSnapshot[], flips: readonly PlannerAction[]): WorkerSnapshot[] {
  const to = new Map(flips.flatMap((f) => (f.kind === "flip" ? [[f.workerId, f.to] as const] : [])));
  return live.map((w) => (to.has(w.id) ? { ...w, role: to.get(w.id)!, decodeBatch: to.get(w.id) === "prefill" ? 0 : w.decodeBatch } : w));
}

/** The mixes a move passes through, `budget` flips a tick, every worker eligible. */
function path(roles: readonly Role[], target: RoleMix, budget: number): RoleMix[] {
  let live = workers(roles);
  const out: RoleMix[] = [];
  for (let tick = 0; tick < 100; tick++) {
    const flips = chooseFlips(live, target, budget, () => true);
    if (flips.length === 0) break;
    assert.ok(flips.length <= budget, `tick ${tick} flipped ${flips.length} workers with a budget of ${budget}`);
    live = apply(live, flips);
    out.push(countRoles(live));
  }
  return out;
}

test("chooseFlips() never leaves prefill workers without a decode worker on the way from all-mixed to a split", () => {
  const target = { prefill: 17, decode: 9, mixed: 6 };
  for (const budget of [1, 2, 3]) {
    const seen = path(Array(32).fill("mixed"), target, budget);
    assert.deepEqual(seen.at(-1), target, `budget ${budget} ends at the target`);
    for (const m of seen) {
      assert.ok(!(m.prefill > 0 && m.decode === 0), `budget ${budget} passed through ${JSON.stringify(m)}`);
      // Shaped like the target: prefill workers per decode worker within one of its ratio (17/9).
      if (m.prefill + m.decode >= 4) assert.ok(Math.abs(m.prefill / m.decode - 17 / 9) <= 1, `budget ${budget} passed through ${JSON.stringify(m)}`);
    }
  }
});

test("chooseFlips() gives each flip to the role with the least of its target filled", () => {
  // From 3 prefill and 29 decode workers to 5 / 13 / 14 mixed: prefill (3 of 5 filled) gets its two
  // once mixed has more than 3/5 of its 14; with one flip a tick the path is the same.
  for (const budget of [1, 4]) {
    const seen = path([...Array(3).fill("prefill"), ...Array(29).fill("decode")], { prefill: 5, decode: 13, mixed: 14 }, budget);
    const firstPrefill = seen.findIndex((m) => m.prefill === 4);
    assert.equal(seen.slice(0, firstPrefill + 1).reduce((k, m) => Math.max(k, m.mixed), 0), budget === 1 ? 9 : 11);
    assert.deepEqual(seen.at(-1), { prefill: 5, decode: 13, mixed: 14 });
  }
});

test("chooseFlips() flips the decode worker with the fewest decodes into prefill, and keeps to eligible workers", () => {
  const live = workers(["prefill", "decode", "decode", "decode", "decode"], (i) => [0, 300, 40, 200, 10][i]);
  const target = { prefill: 3, decode: 2, mixed: 0 };
  assert.deepEqual(chooseFlips(live, target, 2, () => true), [
    { kind: "flip", workerId: "w04", to: "prefill" },
    { kind: "flip", workerId: "w02", to: "prefill" },
  ]);
  assert.deepEqual(chooseFlips(live, target, 2, (w) => w.id !== "w04"), [
    { kind: "flip", workerId: "w02", to: "prefill" },
    { kind: "flip", workerId: "w03", to: "prefill" },
  ]);
  // No eligible worker: nothing, and no endless search.
  assert.deepEqual(chooseFlips(live, target, 2, () => false), []);
});

test("chooseFlips() keeps the last decode worker while a prefill worker it feeds cannot flip yet", () => {
  // Back to all-mixed from one prefill and one decode worker: the prefill worker first; while it is
  // in its cooldown the decode worker stays (alone it would leave the prefill worker nothing to do).
  const live = workers(["prefill", "decode"]);
  const allMixed = { prefill: 0, decode: 0, mixed: 2 };
  assert.deepEqual(chooseFlips(live, allMixed, 2, () => true), [
    { kind: "flip", workerId: "w00", to: "mixed" },
    { kind: "flip", workerId: "w01", to: "mixed" },
  ]);
  assert.deepEqual(chooseFlips(live, allMixed, 2, (w) => w.role !== "prefill"), []);
  assert.deepEqual(chooseFlips(live, allMixed, 1, () => true), [{ kind: "flip", workerId: "w00", to: "mixed" }]);
});
