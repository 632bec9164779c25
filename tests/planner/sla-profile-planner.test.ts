import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { LoadPlanner, type MetricsSnapshot, type OfflineProfile, SlaProfilePlanner, type WorkerSnapshot } from "../../planner/index.ts";

const profile: OfflineProfile = {
  profiledIsl: 3000, profiledOsl: 150,
  prefill: [{ isl: 1000, tokensPerS: 10_000, ttftS: 0.1 }, { isl: 3000, tokensPerS: 12_000, ttftS: 0.25 }],
  decode: [
    { context: 1000, batch: 8, itlS: 0.02, tokensPerS: 400 }, { context: 1000, batch: 32, itlS: 0.04, tokensPerS: 800 },
    { context: 1000, batch: 64, itlS: 0.08, tokensPerS: 800 },
  ],
};

function snapshot(now: number, windowS: number, n: number, isl: number, osl: number, ttft: number, itl: number): MetricsSnapshot {
  return {
    now, windowS, workers: [], arrivals: n, arrivedPromptTokens: n * isl, arrivedUncachedTokens: n * isl, arrivedOutputTokens: n * osl,
    completions: Array.from({ length: n }, () => ({ isl, osl, ttftS: ttft, itlS: itl })),
  };
}

test("SlaProfilePlanner.tick() applies Dynamo's replica formulas with correction factors", () => {
  const p = new SlaProfilePlanner({ profile, maxWorkers: 100, startupDelayS: 0 });
  // 1800 requests in 180 s at ISL 1000 / OSL 100: prefill 10 req/s × 1000 = 10k tok/s; decode 1000 tok/s.
  // Observed TTFT 0.05 vs expected 0.1 → correction 0.5 → prefill demand 5k tok/s → 1 replica.
  // Observed ITL 0.04 vs expected 0.04 (batch 32 meets 50 ms) → decode 1000 / 800 → 2 replicas.
  const acts = p.tick(snapshot(180, 180, 1800, 1000, 100, 0.05, 0.04));
  assert.deepEqual(acts, [{ kind: "replicas", prefill: 1, decode: 2 }]);
  assert.ok(Math.abs(p.ttftCorrection - 0.5) < 1e-9, `correction ${p.ttftCorrection}`);
  // Twice the load, TTFT twice the profile: min(1, 2) keeps the raw demand 20k tok/s → 2; decode 2000 / 800 → 3.
  const acts2 = p.tick(snapshot(360, 180, 3600, 1000, 100, 0.2, 0.04));
  assert.deepEqual(acts2, [{ kind: "replicas", prefill: 2, decode: 3 }]);
  assert.equal(p.intervalS, 180);
});

test("SlaProfilePlanner.tick() counts demand from completedRequests where the snapshot lists only the latest completions", () => {
  const p = new SlaProfilePlanner({ profile, maxWorkers: 100, startupDelayS: 0 });
  // 3600 finished, 1800 listed (a real cluster's list is bounded): demand as in the test above at twice the load.
  const acts = p.tick({ ...snapshot(180, 180, 1800, 1000, 100, 0.2, 0.04), completedRequests: 3600 });
  assert.deepEqual(acts, [{ kind: "replicas", prefill: 2, decode: 3 }]);
  const listed = new SlaProfilePlanner({ profile, maxWorkers: 100, startupDelayS: 0 });
  assert.deepEqual(listed.tick(snapshot(180, 180, 1800, 1000, 100, 0.2, 0.04)), [{ kind: "replicas", prefill: 1, decode: 2 }], "without the count, the list is the demand");
});

test("SlaProfilePlanner.tick() waits out its start-up delay and caps at the budget", () => {
  const p = new SlaProfilePlanner({ profile, maxWorkers: 4, startupDelayS: 30 });
  assert.deepEqual(p.tick(snapshot(10, 180, 10, 1000, 100, 0.1, 0.04)), []);
  const acts = p.tick(snapshot(200, 180, 18_000, 1000, 100, 0.1, 0.04));
  const r = acts[0];
  assert.ok(r.kind === "replicas" && r.prefill + r.decode <= 4, JSON.stringify(acts));
});

test("LoadPlanner.tick() adds a decode replica when sequences queue and removes one only under the guard", () => {
  const worker = (id: string, role: "prefill" | "decode", waiting: number, step: number): WorkerSnapshot => ({
    id, role, state: "serving", waitingPrefillTokens: 0, queueDelayS: 0, decodeBatch: 10, waitingDecodes: waiting,
    prefillTokens: 0, prefillBusyS: 0, decodeTokens: 0, decodeBusyS: 1, decodeStepS: step, meanDecodeBatch: 10, kvUsage: 0.5,
  });
  const lp = new LoadPlanner({ profile, maxWorkers: 10, isl: 1000 });
  const base = snapshot(5, 5, 10, 1000, 100, 0.1, 0.04);
  const up = lp.tick({ ...base, workers: [worker("p", "prefill", 0, 0), worker("a", "decode", 5, 0.03), worker("b", "decode", 5, 0.03)] });
  assert.deepEqual(up, [{ kind: "replicas", prefill: 1, decode: 3 }]);
  const down = lp.tick({ ...base, workers: [worker("p", "prefill", 0, 0), worker("a", "decode", 0, 0.01), worker("b", "decode", 0, 0.01)] });
  assert.deepEqual(down, [{ kind: "replicas", prefill: 1, decode: 1 }]);
  const hold = lp.tick({ ...base, workers: [worker("p", "prefill", 0, 0), worker("a", "decode", 0, 0.03), worker("b", "decode", 0, 0.01)] });
  assert.deepEqual(hold, []);
});

test("SlaProfilePlanner.tick() with maxWorkers \"present\" plans for the workers the snapshot lists, draining ones aside", () => {
  const worker = (id: string, state: WorkerSnapshot["state"]): WorkerSnapshot => ({
    id, role: "mixed", state, waitingPrefillTokens: 0, queueDelayS: 0, decodeBatch: 0, waitingDecodes: 0,
    prefillTokens: 0, prefillBusyS: 0, decodeTokens: 0, decodeBusyS: 0, decodeStepS: 0, meanDecodeBatch: 0, kvUsage: 0,
  });
  const p = new SlaProfilePlanner({ profile, maxWorkers: "present", startupDelayS: 0 });
  // The demand of the first test at ten times the load wants 10 prefill and 13 decode replicas; four
  // workers are present (one parked, "off", counts: the planner may take it back), one more is leaving.
  const load = snapshot(180, 180, 18_000, 1000, 100, 0.1, 0.04);
  const four = ["a", "b", "c"].map((id) => worker(id, "serving")).concat(worker("d", "off"), worker("e", "draining"));
  const acts = p.tick({ ...load, workers: four });
  assert.deepEqual(acts, [{ kind: "replicas", prefill: 1, decode: 3 }]);
  // One worker present: no prefill and decode pool to make, so no decision until more join.
  assert.deepEqual(p.tick({ ...snapshot(360, 180, 18_000, 1000, 100, 0.1, 0.04), workers: [worker("a", "serving")] }), []);
  assert.throws(() => new SlaProfilePlanner({ profile, maxWorkers: 1 }), /Worker budget must be at least 2, got 1/);
});

test("LoadPlanner.tick() with maxWorkers \"present\" starts a prefill and a decode pool out of mixed workers that joined, within those present", () => {
  const worker = (id: string): WorkerSnapshot => ({
    id, role: "mixed", state: "serving", waitingPrefillTokens: 0, queueDelayS: 0, decodeBatch: 0, waitingDecodes: 0,
    prefillTokens: 0, prefillBusyS: 0, decodeTokens: 0, decodeBusyS: 0, decodeStepS: 0, meanDecodeBatch: 0, kvUsage: 0,
  });
  const lp = new LoadPlanner({ profile, maxWorkers: "present", isl: 1000 });
  const base = snapshot(5, 5, 10, 1000, 100, 0.1, 0.04);
  assert.deepEqual(lp.tick({ ...base, workers: [worker("a"), worker("b"), worker("c")] }), [{ kind: "replicas", prefill: 1, decode: 1 }]);
  // One worker present: the decode pool first, as the budget allows.
  assert.deepEqual(lp.tick({ ...base, workers: [worker("a")] }), [{ kind: "replicas", prefill: 0, decode: 1 }]);
});

test("SlaProfilePlanner.rebudget() cuts the last decision's pools to the workers present now, and only for a budget of those present", () => {
  const worker = (id: string, state: WorkerSnapshot["state"] = "serving"): WorkerSnapshot => ({
    id, role: "mixed", state, waitingPrefillTokens: 0, queueDelayS: 0, decodeBatch: 0, waitingDecodes: 0,
    prefillTokens: 0, prefillBusyS: 0, decodeTokens: 0, decodeBusyS: 0, decodeStepS: 0, meanDecodeBatch: 0, kvUsage: 0,
  });
  const present = (n: number) => Array.from({ length: n }, (_, i) => worker(`w${i}`));
  const p = new SlaProfilePlanner({ profile, maxWorkers: "present", startupDelayS: 0 });
  assert.deepEqual(p.rebudget(present(4)), [], "no decision yet: nothing to place by");
  // 10 prefill and 13 decode wanted (the load of the "present" test above), cut to the four present.
  const load = snapshot(180, 180, 18_000, 1000, 100, 0.1, 0.04);
  assert.deepEqual(p.tick({ ...load, workers: present(4) }), [{ kind: "replicas", prefill: 1, decode: 3 }]);
  assert.deepEqual(p.rebudget(present(9)), [{ kind: "replicas", prefill: 3, decode: 6 }], "9 / 23 of each, prefill rounded down");
  assert.deepEqual(p.rebudget([...present(9), worker("x", "draining")]), [{ kind: "replicas", prefill: 3, decode: 6 }], "a leaving worker is no budget");
  assert.deepEqual(p.rebudget(present(30)), [{ kind: "replicas", prefill: 10, decode: 13 }], "room for all it wanted");
  assert.deepEqual(p.rebudget(present(1)), [], "too few for both pools");
  const fixed = new SlaProfilePlanner({ profile, maxWorkers: 4, startupDelayS: 0 });
  fixed.tick({ ...load, workers: present(4) });
  assert.deepEqual(fixed.rebudget(present(9)), [], "a fixed budget did not change");
});

test("LoadPlanner.rebudget() holds the pool sizes its last tick settled on, and only for a budget of the workers present", () => {
  const worker = (id: string, role: WorkerSnapshot["role"]): WorkerSnapshot => ({
    id, role, state: "serving", waitingPrefillTokens: 0, queueDelayS: 0, decodeBatch: 0, waitingDecodes: 0,
    prefillTokens: 0, prefillBusyS: 0, decodeTokens: 0, decodeBusyS: 0, decodeStepS: 0.01, meanDecodeBatch: 0, kvUsage: 0,
  });
  const lp = new LoadPlanner({ profile, maxWorkers: "present", isl: 1000 });
  const base = snapshot(5, 5, 10, 1000, 100, 0.1, 0.04);
  const three = [worker("p", "prefill"), worker("d", "decode"), worker("e", "decode")];
  assert.deepEqual(lp.rebudget(three), [], "no tick yet");
  // Nothing queued, decode steps fast: two decode workers are more than needed, one is let go.
  assert.deepEqual(lp.tick({ ...base, workers: three }), [{ kind: "replicas", prefill: 1, decode: 1 }]);
  assert.deepEqual(lp.rebudget([...three, worker("j", "mixed")]), [{ kind: "replicas", prefill: 1, decode: 1 }], "a joiner is placed by the sizes held");
  // A tick that changes nothing still settles the sizes it kept.
  const kept = [worker("p", "prefill"), worker("d", "decode")];
  assert.deepEqual(lp.tick({ ...base, workers: kept }), []);
  assert.deepEqual(lp.rebudget(kept), [{ kind: "replicas", prefill: 1, decode: 1 }]);
  const fixed = new LoadPlanner({ profile, maxWorkers: 10, isl: 1000 });
  fixed.tick({ ...base, workers: three });
  assert.deepEqual(fixed.rebudget(three), [], "a fixed budget did not change");
});
