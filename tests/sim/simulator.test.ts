import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { compare } from "../../src/sim/compare.ts";
import { GB300, KIMI_K2_6 } from "../../src/sim/profiles.ts";
import { buildScenario } from "../../src/sim/scenarios.ts";

const small = (seed: number, name = "coding-256") =>
  buildScenario(name, { gpus: 32, load: 2, seed, durationS: 60, maxContext: KIMI_K2_6.maxContext });

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
