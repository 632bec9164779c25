import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { applyAction } from "../../src/sim/actions.ts";
import { buildRequest, startPlacement } from "../../src/sim/admission.ts";
import { compare } from "../../src/sim/compare.ts";
import { CostModel } from "../../src/sim/cost-model.ts";
import { profileSweep } from "../../src/sim/profiler.ts";
import { GB300, gpusPerWorker, type HardwareProfile, KIMI_K2_6 } from "../../src/sim/profiles.ts";
import { buildScenario } from "../../src/sim/scenarios.ts";
import { ClusterSim } from "../../src/sim/simulator.ts";
import { baselineDisaggSla, evolvingStatic, type SystemContext } from "../../src/sim/systems.ts";
import { parseMooncake } from "../../src/sim/traces.ts";
import type { Planner } from "../../planner/index.ts";

const small = (seed: number, name = "coding-256") =>
  buildScenario(name, { gpus: 32, load: 2, seed, durationS: 60, maxContext: KIMI_K2_6.maxContext });

/** The shared settings of a system on `workers` Kimi-K2.6-like workers of `hw`, all decoding (mixed for ours). */
function workersContext(workers: number, hw: HardwareProfile): SystemContext {
  const gpw = gpusPerWorker(KIMI_K2_6, hw);
  return {
    workers, profile: profileSweep(new CostModel(KIMI_K2_6, hw, gpw)), initialSplit: { prefill: 0, decode: workers },
    ttftTargetS: 0.5, itlTargetS: 0.05, startupS: 0,
  };
}

let tick = 0;
const fakeClock = () => tick++;

test("compare() gives identical results for the same seed", () => {
  const a = compare(small(7), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 120 }, fakeClock);
  const b = compare(small(7), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 120 }, fakeClock);
  assert.deepEqual(a.systems, b.systems);
  assert.deepEqual(a.series, b.series);
  assert.deepEqual(a.ttft_samples, b.ttft_samples);
  const c = compare(small(8), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 120 }, fakeClock);
  assert.notDeepEqual(a.ttft_samples.evolving, c.ttft_samples.evolving, "another seed gives another run");
});

test("compare() accounts for every offered request as completed or rejected with a reason", () => {
  const r = compare(small(3, "mixed-shift-256"), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 60, maxQueueS: 5 }, fakeClock);
  for (const [name, s] of [...Object.entries(r.baseline_variants), ["evolving", r.systems.evolving] as const]) {
    assert.ok(s.offered > 20, `${name} offered ${s.offered}`);
    assert.equal(s.completed + s.rejected, s.offered, name);
    const reasons = Object.values(s.rejected_reasons).reduce((x, y) => x + y, 0);
    assert.equal(reasons, s.rejected, `${name}: every rejection has a reason`);
    assert.ok(s.ttft.p50 > 0 && s.ttft.p95 >= s.ttft.p50 && s.e2e.mean > s.ttft.mean, name);
  }
  assert.ok(Number.isFinite(r.ratios.p95_ttft) && Number.isFinite(r.ratios.goodput));
  assert.equal(r.systems.baseline.variant in r.baseline_variants, true);
});

test("compare() shows prefix reuse: agent sessions hit the KV cache", () => {
  const r = compare(small(5), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 120 }, fakeClock);
  assert.ok(r.systems.evolving.kv_hit_rate > 0.5, `hit rate ${r.systems.evolving.kv_hit_rate}`);
  assert.ok(r.systems.baseline.kv_hit_rate > 0.3, `hit rate ${r.systems.baseline.kv_hit_rate}`);
});

test("compare() with ablation runs ours without the planner apart from the baselines", () => {
  const r = compare(small(4), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 120, baselines: ["dynamo-agg"], ablation: true }, fakeClock);
  const st = r.ablations?.["evolving-static"];
  assert.ok(st !== undefined, "ablations.evolving-static is reported");
  assert.equal(st.offered, r.systems.evolving.offered, "same workload");
  assert.equal(st.completed + st.rejected, st.offered);
  assert.deepEqual(Object.keys(r.baseline_variants), ["dynamo-agg"], "an ablation is never a baseline variant");
  assert.match(String(r.params["evolving-static"].planner), /none/);
  // Without the planner no worker ever leaves the mixed role.
  assert.ok(r.series["evolving-static"].every((s) => s.mixedWorkers === s.prefillWorkers + s.decodeWorkers + s.mixedWorkers));
});

test("compare() runs the tuned aggregated baseline (overlap_weight 64), which keeps more sessions on their KV than the default", () => {
  const r = compare(small(6), { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 120, baselines: ["dynamo-agg", "dynamo-agg-tuned"] }, fakeClock);
  const def = r.baseline_variants["dynamo-agg"], tuned = r.baseline_variants["dynamo-agg-tuned"];
  assert.ok(tuned.kv_hit_rate > def.kv_hit_rate, `hit rate default ${def.kv_hit_rate}, tuned ${tuned.kv_hit_rate}`);
  assert.match(String(r.params["dynamo-agg-tuned"].router), /overlap_weight=64/);
});

test("compare() with replicated KV gives each worker a GPU's share of KV memory and says so", () => {
  const opts = { model: KIMI_K2_6, hw: GB300, gpus: 32, drainS: 60, baselines: ["dynamo-agg" as const] };
  const split = compare(small(9), opts, fakeClock);
  const repl = compare(small(9), { ...opts, kvReplicated: true }, fakeClock);
  assert.match(repl.assumptions[0], /Tensor-parallel attention: each of a worker's 8 GPUs holds and reads the whole MLA latent KV/);
  assert.ok(repl.systems.evolving.itl.mean > split.systems.evolving.itl.mean, "every decode step reads 8× the KV bytes");
});

test("a simulated worker spends its chunk budget short-first when the system orders prefills so", () => {
  // One worker; a cold 200k-token prompt arrives first, a 1k-token one 1 ms later.
  const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const trace = [
    { timestamp: 0, input_length: 200 * 1024, output_length: 2, hash_ids: ids(0, 400) },
    { timestamp: 1, input_length: 1024, output_length: 2, hash_ids: ids(1000, 2) },
  ].map((r) => JSON.stringify(r)).join("\n");
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const ctx = workersContext(1, GB300);
  const shortTtft = (fcfs: boolean) => {
    const base = evolvingStatic(ctx);
    const spec = fcfs ? { ...base, prefillOrder: undefined } : base;
    const run = new ClusterSim(parseMooncake(trace), spec, {
      model: KIMI_K2_6, hw: GB300, gpus: gpw, gpusPerWorker: gpw, drainS: 60, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    }).run();
    const short = run.outcomes.find((o) => o.prompt === 1024)!;
    assert.equal(short.rejected, null);
    return short.ttft;
  };
  const fcfs = shortTtft(true), shortFirst = shortTtft(false);
  // FCFS: the short prompt waits for most of the long one's chunks; short-first: it goes next.
  assert.ok(fcfs > 5 * shortFirst, `short prompt TTFT ${fcfs} s FCFS vs ${shortFirst} s short-first`);
});

test("a simulated worker that separates prefill and decode steps skips the mixed-step cost and keeps decoding between chunks", () => {
  // One worker with mixed steps 100 ms dearer: a sequence decodes 3000 tokens while a cold 100k-token prompt prefills.
  const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const trace = [
    { timestamp: 0, input_length: 1024, output_length: 3000, hash_ids: ids(0, 2) },
    { timestamp: 100, input_length: 100 * 1024, output_length: 2, hash_ids: ids(1000, 200) },
  ].map((r) => JSON.stringify(r)).join("\n");
  const hw = { ...GB300, mixedStepOverheadS: 0.1 };
  const gpw = gpusPerWorker(KIMI_K2_6, hw);
  const ctx = workersContext(1, hw);
  const run = (stepMixing: "mixed" | "split") => {
    const r = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(ctx), stepMixing }, {
      model: KIMI_K2_6, hw, gpus: gpw, gpusPerWorker: gpw, drainS: 120, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    }).run();
    const decoding = r.outcomes.find((o) => o.output === 3000)!, cold = r.outcomes.find((o) => o.prompt === 100 * 1024)!;
    assert.equal(decoding.rejected, null);
    assert.equal(cold.rejected, null);
    return { decodeE2e: decoding.e2e, coldTtft: cold.ttft };
  };
  const mixed = run("mixed"), split = run("split");
  // 13 chunks of 8k: mixed, each pays 100 ms; split, each is followed by one decode step (~10 ms).
  assert.ok(split.coldTtft < mixed.coldTtft - 0.5, `cold prompt TTFT mixed ${mixed.coldTtft} s, split ${split.coldTtft} s`);
  assert.ok(split.decodeE2e < mixed.decodeE2e - 0.5, `decoding sequence E2E mixed ${mixed.decodeE2e} s, split ${split.decodeE2e} s`);
  // The decodes are not starved: 3000 tokens at no more than about one chunk step each while the prompt prefills.
  assert.ok(split.decodeE2e < 3000 * 0.05, `decoding sequence E2E ${split.decodeE2e} s`);
});

test("startPlacement() counts a prefix sent to the prefill worker before a remote prefill apart from a peer pull", () => {
  const trace = JSON.stringify({ timestamp: 0, input_length: 4096, output_length: 2, hash_ids: [0, 1, 2, 3, 4, 5, 6, 7] });
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const sim = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(workersContext(2, GB300)), initialPrefill: 1, initialDecode: 1, initialRole: "decode" }, {
    model: KIMI_K2_6, hw: GB300, gpus: 2 * gpw, gpusPerWorker: gpw, drainS: 10, maxQueueS: 10, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
  });
  const [pre, dec] = sim.workers;
  const plan = sim.workload.sessions[0];
  startPlacement(sim, buildRequest(sim, plan, 0, 0), { prefill: pre, decode: dec, prefixTransferBlocks: 0 });
  assert.deepEqual([sim.prefixesToPrefill, sim.peerTransfers], [0, 0], "nothing sent");
  startPlacement(sim, buildRequest(sim, plan, 0, 0), { prefill: pre, decode: dec, prefixTransferBlocks: 3 });
  assert.deepEqual([sim.prefixesToPrefill, sim.peerTransfers], [1, 0], "the decode worker's prefix sent to the prefill worker");
  startPlacement(sim, buildRequest(sim, plan, 0, 0), { prefill: null, decode: dec, prefixTransferBlocks: 3, prefixSource: pre });
  assert.deepEqual([sim.prefixesToPrefill, sim.peerTransfers], [1, 1], "a peer pull");
});

test("a simulated turn whose KV holder is busy pulls its prefix from it over the link instead of recomputing it elsewhere", () => {
  // Two workers. A leaves a 100k-token prefix on one; B extends it by 140k cold tokens (it goes where
  // the prefix is and keeps that worker busy for seconds); C extends it by 1k tokens just after.
  const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const trace = [
    { timestamp: 0, input_length: 100 * 1024, output_length: 2, hash_ids: ids(0, 200) },
    { timestamp: 30_000, input_length: 240 * 1024, output_length: 2, hash_ids: ids(0, 480) },
    { timestamp: 30_010, input_length: 101 * 1024, output_length: 2, hash_ids: [...ids(0, 200), ...ids(5000, 2)] },
  ].map((r) => JSON.stringify(r)).join("\n");
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const ctx = workersContext(2, GB300);
  const run = (peerTransfer: boolean) => {
    const sim = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(ctx), peerTransfer, peerMoveS: 0.1 }, {
      model: KIMI_K2_6, hw: GB300, gpus: 2 * gpw, gpusPerWorker: gpw, drainS: 60, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    });
    const out = sim.run().outcomes;
    for (const o of out) assert.equal(o.rejected, null);
    const c = out.find((o) => o.prompt === 101 * 1024)!;
    return { ttft: c.ttft, cached: c.cached, transfers: sim.peerTransfers };
  };
  const pulled = run(true), without = run(false);
  assert.equal(pulled.transfers, 1, "only C moves");
  assert.equal(without.transfers, 0);
  assert.ok(pulled.cached >= 100 * 1024, `C reuses the pulled prefix (${pulled.cached} cached tokens)`);
  // Without the pull C waits behind B's 140k tokens or recomputes 100k on the idle worker.
  assert.ok(pulled.ttft < without.ttft / 3, `C's TTFT ${pulled.ttft} s pulling the prefix, ${without.ttft} s without`);
});

test("a simulated turn whose busy holder offloaded part of its prefix pulls the host-held blocks too (peerHostBlocks)", () => {
  // Two workers of 555 blocks (512 tokens each). A leaves a 100k-token prefix (200 blocks) on one; D,
  // sharing A's first block, goes there too and pushes some of A's blocks into host memory; E extends
  // D (busy for seconds there, pushing out more of A); C extends A's prefix just after.
  const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const trace = [
    { timestamp: 0, input_length: 100 * 1024, output_length: 2, hash_ids: ids(0, 200) },
    { timestamp: 10_000, input_length: 200 * 1024, output_length: 2, hash_ids: [0, ...ids(10_000, 399)] },
    { timestamp: 30_000, input_length: 240 * 1024, output_length: 2, hash_ids: [0, ...ids(10_000, 399), ...ids(20_000, 80)] },
    { timestamp: 30_010, input_length: 101 * 1024, output_length: 2, hash_ids: [...ids(0, 200), ...ids(5000, 2)] },
  ].map((r) => JSON.stringify(r)).join("\n");
  // Workers of 8 GPUs with 150 GB each (not GB300's 288) and KV replicated 4 ways: 555 blocks.
  const hw = { ...GB300, hbmBytes: 150e9 };
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const run = (peerHostBlocks: boolean) => {
    const sim = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(workersContext(2, GB300)), peerTransfer: true, peerMoveS: 0.1, memoryFullS: 0, peerHostBlocks }, {
      model: KIMI_K2_6, hw, gpus: 2 * gpw, gpusPerWorker: gpw, drainS: 60, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 }, kvReplication: 4,
    });
    const out = sim.run().outcomes;
    for (const o of out) assert.equal(o.rejected, null);
    const c = out.find((o) => o.prompt === 101 * 1024)!;
    return { ttft: c.ttft, cached: c.cached, transfers: sim.peerTransfers, fromHost: sim.peerHostBlocks };
  };
  const pulled = run(true), deviceOnly = run(false);
  assert.equal(pulled.transfers, 1, "C moves");
  assert.ok(pulled.fromHost > 0 && pulled.fromHost < 200, `with the blocks its holder keeps in host memory (${pulled.fromHost} of 200)`);
  assert.equal(pulled.cached, 100 * 1024, "C reuses the whole pulled prefix");
  assert.equal(deviceOnly.fromHost, 0);
  // Counting device blocks only, moving means recomputing what is on host: C waits behind E's prefill instead.
  assert.ok(pulled.ttft < deviceOnly.ttft / 3, `C's TTFT ${pulled.ttft} s pulling host blocks too, ${deviceOnly.ttft} s without`);
});

test("a simulated session held at the front door starts when admission opens or its longest hold is up, its wait counted in its first turn's TTFT", () => {
  // A scripted planner holds new sessions from its tick at 1 s and admits them again at its tick at 6 s.
  const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const trace = [0, 2_000, 3_000, 8_000]
    .map((t, i) => JSON.stringify({ timestamp: t, input_length: 4096, output_length: 4, hash_ids: ids(100 * i, 8) })).join("\n");
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const ctx = workersContext(1, GB300);
  const run = (maxHoldS: number) => {
    const planner: Planner = {
      name: "scripted", intervalS: 1,
      tick: (s) => (s.now === 1 ? [{ kind: "admission", holdNewSessions: true, maxHoldS }] : s.now === 6 ? [{ kind: "admission", holdNewSessions: false, maxHoldS }] : []),
    };
    const sim = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(ctx), planner }, {
      model: KIMI_K2_6, hw: GB300, gpus: gpw, gpusPerWorker: gpw, drainS: 60, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    });
    const out = sim.run().outcomes;
    assert.equal(out.length, 4);
    for (const o of out) assert.equal(o.rejected, null);
    assert.equal(sim.sessionsHeld, 2, "the sessions arriving at 2 s and 3 s");
    const byArrival = [...out].sort((a, b) => a.arrival - b.arrival);
    assert.deepEqual(byArrival.map((o) => o.arrival), [0, 2, 3, 8], "arrival stays when the session first knocked");
    assert.ok(byArrival[0].ttft < 0.5 && byArrival[3].ttft < 0.5, "not held before the hold or after it");
    return [byArrival[1].ttft, byArrival[2].ttft];
  };
  const [a, b] = run(60);
  assert.ok(a >= 4 && a < 4.5, `held from 2 s to 6 s: TTFT ${a}`);
  assert.ok(b >= 3 && b < 3.5, `held from 3 s to 6 s: TTFT ${b}`);
  // Held at most 2 s: the first enters at the tick at 4 s although the hold lasts until 6 s; the
  // second enters as that one leaves (one enters as one leaves), before its own 2 s are up.
  const [c, d] = run(2);
  assert.ok(c >= 2 && c < 2.5, `held from 2 s to 4 s: TTFT ${c}`);
  assert.ok(d >= 1 && d < 1.5, `held from 3 s until the session let in at 4 s ends: TTFT ${d}`);
});

test("compare() lets the tuned baseline's offline profile choose separate steps only when mixed steps are dearer", () => {
  for (const [mixedS, want] of [[0, /mixed with decodes/], [0.1, /separate prefill and decode steps/]] as const) {
    const r = compare(small(3), { model: KIMI_K2_6, hw: { ...GB300, mixedStepOverheadS: mixedS }, gpus: 32, drainS: 60, baselines: ["dynamo-agg-tuned"] }, fakeClock);
    assert.match(String(r.params["dynamo-agg-tuned"].step_mixing), want);
  }
});

test("a simulated hand-off's first token comes from the decode worker's first step with it, after the step it is running", () => {
  // A prefill and a decode worker, every step 0.5 s dearer. B's 20k-token prompt is prefilled on the
  // prefill worker; A, when present, keeps the decode worker stepping when B's KV lands there.
  const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
  const a = { timestamp: 0, input_length: 512, output_length: 400, hash_ids: ids(0, 1) };
  const b = { timestamp: 1000, input_length: 20 * 1024, output_length: 2, hash_ids: ids(1000, 40) };
  const hw = { ...GB300, stepOverheadS: 0.5 };
  const gpw = gpusPerWorker(KIMI_K2_6, hw);
  const ctx = { ...workersContext(2, hw), initialSplit: { prefill: 1, decode: 1 } };
  const runB = (trace: object[]) => {
    const out = new ClusterSim(parseMooncake(trace.map((r) => JSON.stringify(r)).join("\n")), { ...baselineDisaggSla(ctx), planner: null }, {
      model: KIMI_K2_6, hw, gpus: 2 * gpw, gpusPerWorker: gpw, drainS: 600, maxQueueS: 600, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    }).run().outcomes;
    for (const o of out) assert.equal(o.rejected, null);
    const ob = out.find((o) => o.prompt === 20 * 1024)!;
    assert.ok(ob.remotePrefill, "B was prefilled on the prefill worker");
    return ob;
  };
  const idle = runB([b]), busy = runB([a, b]);
  // Its second token is one decode step after its first (the first step with it sampled the first).
  for (const o of [idle, busy]) assert.ok(o.itl >= 0.5 && o.itl < 0.6, `B's second token ${o.itl} s after its first`);
  // The prefill worker is idle either way; on a busy decode worker B waits for the step in progress.
  assert.ok(busy.ttft > idle.ttft + 0.01, `B's TTFT ${busy.ttft} s with the decode worker busy, ${idle.ttft} s idle`);
  assert.ok(busy.ttft < idle.ttft + 0.6, `B waits at most one step more (${busy.ttft} s, ${idle.ttft} s)`);
});

test("applyAction() counts and lists role flips and step-mixing switches that change something", () => {
  const trace = JSON.stringify({ timestamp: 0, input_length: 1024, output_length: 2, hash_ids: [0, 1] });
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const sim = new ClusterSim(parseMooncake(trace), evolvingStatic(workersContext(2, GB300)), {
    model: KIMI_K2_6, hw: GB300, gpus: 2 * gpw, gpusPerWorker: gpw, drainS: 10, maxQueueS: 10, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
  });
  const id = sim.workers[1].id;
  applyAction(sim, { kind: "flip", workerId: id, to: "prefill" });
  applyAction(sim, { kind: "flip", workerId: id, to: "prefill" });
  applyAction(sim, { kind: "step-mixing", split: false });
  applyAction(sim, { kind: "step-mixing", split: true });
  assert.equal(sim.workers[1].role, "prefill");
  assert.deepEqual([sim.roleFlips, sim.mixingChanges], [1, 1]);
  assert.deepEqual(sim.changes, [
    { t: 0, action: { kind: "flip", workerId: id, to: "prefill" }, from: "mixed" },
    { t: 0, action: { kind: "step-mixing", split: true } },
  ]);
});

test("a simulated worker's step budget (stepTokens) sets its prefill chunk size", () => {
  // One mixed worker, one 16k-token prompt: four chunks of 4096 (plus the decode's slot) against two of 8192.
  const trace = JSON.stringify({ timestamp: 0, input_length: 16 * 1024, output_length: 2, hash_ids: Array.from({ length: 32 }, (_, i) => i) });
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const ttft = (stepTokens?: { mixed: number; prefill: number }) => {
    const out = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(workersContext(1, GB300)), ...(stepTokens ? { stepTokens } : {}) }, {
      model: KIMI_K2_6, hw: GB300, gpus: gpw, gpusPerWorker: gpw, drainS: 60, maxQueueS: 60, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    }).run().outcomes;
    assert.equal(out[0].rejected, null);
    return out[0].ttft;
  };
  const small = ttft({ mixed: 4096, prefill: 4096 }), dflt = ttft();
  // Each step pays the fixed step overhead: more, smaller chunks take longer in all.
  assert.ok(small > dflt + GB300.stepOverheadS, `TTFT ${small} s in 4096-token chunks, ${dflt} s in 8192`);
});
