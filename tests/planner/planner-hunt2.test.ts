/**
 * Planners and routers fed degenerate measurements, as a real cluster can produce them: NaN,
 * infinite or negative readings, a zero-length window, a clock that is not a number, workers that
 * come and go. None may yield a NaN decision or poison an estimate for good.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import {
  LoadPlanner, type MetricsSnapshot, type OfflineProfile, OnlinePlanner, type Role, type RouteCandidate, routeSession,
  SlaProfilePlanner, StepPricing, StepWindow, type WorkerSnapshot,
} from "../../planner/index.ts";
import { mixedWorkerSteps, snap } from "./snapshots.ts";

const steady = { uncachedPerS: 150_000, outputPerS: 20_000, backlog: 20_000, seqs: 800 };
const roles = (): Role[] => Array.from({ length: 8 }, (_, i) => (i < 2 ? "prefill" : "decode"));

function allFinite(o: Record<string, number>): boolean {
  return Object.values(o).every((v) => Number.isFinite(v));
}

test("OnlinePlanner.tick() keeps its estimates finite after a tick of NaN, infinite and negative readings", () => {
  const planner = new OnlinePlanner({ stepModel: false });
  const r = roles();
  for (let t = 1; t <= 5; t++) planner.tick(snap(t, r, steady));
  const bad = snap(6, r, steady);
  const w0 = bad.workers[0], w3 = bad.workers[3];
  bad.workers[0] = { ...w0, prefillBusyS: NaN, prefillTokens: Infinity };
  bad.workers[3] = { ...w3, decodeStepS: NaN, meanDecodeBatch: -4, decodeBusyS: Infinity, decodeBatch: NaN, waitingPrefillTokens: -1 };
  const acts = planner.tick({ ...bad, arrivedUncachedTokens: NaN, arrivedOutputTokens: Infinity, windowS: NaN, now: NaN });
  for (const a of acts) assert.ok(Object.values(a).every((v) => typeof v !== "number" || !Number.isNaN(v)), JSON.stringify(a));
  for (let t = 7; t <= 10; t++) planner.tick(snap(t, r, steady));
  assert.ok(allFinite(planner.estimates()), JSON.stringify(planner.estimates()));
});

test("OnlinePlanner.tick() does not read a zero-length window's arrivals as a thousandfold burst", () => {
  const planner = new OnlinePlanner({ stepModel: false });
  const r = roles();
  for (let t = 1; t <= 20; t++) planner.tick(snap(t, r, steady));
  const before = planner.estimates().demand;
  // Two ticks in the same instant (the cluster clamps such a window to 1 ms): some tokens arrived in it.
  planner.tick({ ...snap(20, r, steady), windowS: 0, arrivedUncachedTokens: 5_000 });
  planner.tick({ ...snap(20.001, r, steady), windowS: 1e-3, arrivedUncachedTokens: 5_000 });
  const after = planner.estimates().demand;
  assert.ok(after < 2 * before, `demand ${before} → ${after} tokens/s`);
});

test("OnlinePlanner.tick() forgets the flip cooldowns of workers that left", () => {
  const planner = new OnlinePlanner({ stepModel: false, cooldownS: 5, confirmTicks: 1 });
  const burst = { uncachedPerS: 600_000, outputPerS: 20_000, backlog: 1_500_000, seqs: 800 };
  let flipped = 0;
  for (let gen = 0; gen < 20; gen++) {
    // A fresh fleet under new names every 10 s (workers replaced), each pushed to flip.
    const r: Role[] = Array.from({ length: 8 }, () => "decode");
    r[0] = "prefill";
    for (let t = 0; t < 10; t++) {
      const s = snap(gen * 10 + t, r, burst);
      s.workers = s.workers.map((w) => ({ ...w, id: `g${gen}-${w.id}` }));
      for (const a of planner.tick(s)) if (a.kind === "flip") { r[Number(a.workerId.split("-w")[1])] = a.to; flipped++; }
    }
  }
  assert.ok(flipped > 20, `${flipped} flips`);
  const kept = (planner as unknown as { lastFlip: Map<string, number> }).lastFlip.size;
  assert.ok(kept <= 8, `${kept} cooldowns kept after ${flipped} flips`);
});

test("StepPricing fits its model after a step of infinite time or NaN shape", () => {
  const p = new StepPricing();
  const bad = { prefillTokens: 100, prefillAttnPairs: NaN, decodeSeqs: 4, decodeAttnTokens: 400, seconds: Infinity };
  p.learnSteps([[bad, { ...bad, prefillAttnPairs: 10, seconds: 0.01, decodeAttnTokens: -1 }]]);
  for (let i = 0; i < 4; i++) p.learnSteps([mixedWorkerSteps(0.01, 200, 7 + i)]);
  assert.ok(p.ready, "the model has a fit");
  const c = p.contexts(true, 5);
  assert.ok(Number.isFinite(c.prefill) && Number.isFinite(c.decode), JSON.stringify(c));
  assert.ok(Number.isFinite(p.decodeStep(8)), `decode step ${p.decodeStep(8)}`);
});

test("StepWindow ignores a step of NaN or negative time instead of keeping NaN speeds", () => {
  const w = new StepWindow(50_000);
  w.observe({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 8, decodeAttnTokens: 800, seconds: NaN });
  w.observe({ prefillTokens: 512, prefillAttnPairs: 1e5, decodeSeqs: 0, decodeAttnTokens: 0, seconds: -0.2 });
  w.observe({ prefillTokens: 0, prefillAttnPairs: 0, decodeSeqs: 8, decodeAttnTokens: 800, seconds: 0.02 });
  assert.ok(Number.isFinite(w.decodeStepS) && w.decodeStepS > 0, `decode step ${w.decodeStepS}`);
  assert.equal(w.prefillRate, 50_000);
  const f = w.take();
  assert.equal(f.decodeStepS, 0.02);
  assert.equal(f.prefillBusyS, 0);
});

test("routeSession() still routes when one worker's speed estimates are NaN", () => {
  const cand = (id: string, o: Partial<RouteCandidate> = {}): RouteCandidate => ({
    id, role: "decode", overlapDevice: 0, overlapHost: 0, queuedPrefillTokens: 0, activeBlocks: 0, decodeBatch: 0,
    prefillRate: 100_000, decodeStepS: 0.02, rack: 0, ...o,
  });
  const links = { bandwidth: () => 1e12, latency: () => 1e-5, hostBandwidth: 4e11 };
  const req = { promptTokens: 4_000, blockTokens: 512, bytesPerBlock: 18e6 };
  const o = { localPrefillThreshold: 100_000, itlTargetS: 0.05 };
  const r = routeSession(req, [cand("a", { prefillRate: NaN }), cand("b")], [], links, o);
  assert.ok(r !== undefined && Number.isFinite(r.predictedTtftS), JSON.stringify(r));
  assert.equal(routeSession(req, [cand("a", { decodeStepS: NaN })], [], links, o)?.decodeWorker, "a");
});

const profile: OfflineProfile = {
  profiledIsl: 3000, profiledOsl: 150,
  prefill: [{ isl: 1000, tokensPerS: 10_000, ttftS: 0.1 }, { isl: 3000, tokensPerS: 12_000, ttftS: 0.25 }],
  decode: [
    { context: 1000, batch: 8, itlS: 0.02, tokensPerS: 400 }, { context: 1000, batch: 32, itlS: 0.04, tokensPerS: 800 },
  ],
};

function window(now: number, n: number, ttft: number, itl: number): MetricsSnapshot {
  return {
    now, windowS: 180, workers: [], arrivals: n, arrivedPromptTokens: n * 1000, arrivedUncachedTokens: n * 1000, arrivedOutputTokens: n * 100,
    completions: Array.from({ length: n }, () => ({ isl: 1000, osl: 100, ttftS: ttft, itlS: itl })),
  };
}

test("SlaProfilePlanner.tick() never asks for NaN replicas and keeps a bounded history", () => {
  const p = new SlaProfilePlanner({ profile, maxWorkers: 100, startupDelayS: 0, predictor: "moving-average" });
  const w = window(180, 1800, 0.05, 0.04);
  w.completions.push({ isl: 1000, osl: 100, ttftS: NaN, itlS: Infinity });
  const acts = p.tick(w);
  assert.deepEqual(acts, [{ kind: "replicas", prefill: 1, decode: 2 }]);
  for (let i = 2; i < 50; i++) p.tick(window(180 * i, 1800, 0.05, 0.04));
  assert.ok((p as unknown as { history: unknown[] }).history.length <= 3);
  assert.deepEqual(p.tick({ ...window(180 * 50, 1800, 0.05, 0.04), windowS: 0 }).map((a) => a.kind === "replicas" && Number.isFinite(a.prefill)), [true]);
});

test("LoadPlanner.tick() still scales prefill up after a tick with a NaN prompt count", () => {
  const lp = new LoadPlanner({ profile, maxWorkers: 10, isl: 1000 });
  const worker = (id: string, role: "prefill" | "decode", queued: number): WorkerSnapshot => ({
    id, role, state: "serving", waitingPrefillTokens: queued, queueDelayS: 0, decodeBatch: 10, waitingDecodes: 0,
    prefillTokens: 0, prefillBusyS: 0, decodeTokens: 0, decodeBusyS: 1, decodeStepS: 0.02, meanDecodeBatch: 10, kvUsage: 0.5,
  });
  const base = { ...window(5, 10, 0.1, 0.04), windowS: 5 };
  lp.tick({ ...base, arrivedPromptTokens: NaN, workers: [worker("p", "prefill", 0), worker("d", "decode", 0)] });
  const acts = lp.tick({ ...base, now: 10, workers: [worker("p", "prefill", 200_000), worker("d", "decode", 0)] });
  assert.deepEqual(acts, [{ kind: "replicas", prefill: 2, decode: 1 }]);
});
