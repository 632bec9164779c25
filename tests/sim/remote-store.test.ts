import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { compare } from "../../src/sim/compare.ts";
import { GB300, type HardwareProfile, KIMI_K2_6, type ModelProfile } from "../../src/sim/profiles.ts";
import { buildScenario } from "../../src/sim/scenarios.ts";

// KV so large (35 MB per token, 72 GB per 2048-token block) and host memory so small that a worker
// holds 64 blocks on device and 5 on host: sessions spill past both tiers within two minutes.
const HUGE_KV: ModelProfile = { ...KIMI_K2_6, name: "huge-kv", kvBytesPerToken: 35e6 };
const SMALL_HOST: HardwareProfile = { ...GB300, name: "gb300-small-host", hostBytes: 50e9 };
let tick = 0;
const clock = () => tick++;

test("compare() with a remote store serves spilled prefixes from it and says so in the report", () => {
  const w = buildScenario("coding-256", { gpus: 32, load: 2, seed: 2, durationS: 120, maxContext: HUGE_KV.maxContext });
  const opts = { model: HUGE_KV, hw: SMALL_HOST, gpus: 32, drainS: 120, baselines: ["dynamo-agg" as const], ablation: true };
  const without = compare(w, opts, clock);
  const withStore = compare(w, { ...opts, remoteStoreBytes: 500e12 }, clock);
  // Ours' KV path without its planner: this model's decode steps are past the ITL target, so the
  // planner's admission would turn most new sessions away and few would spill.
  const a = without.ablations!["evolving-static"], b = withStore.ablations!["evolving-static"];
  // Same sessions; in the closed loop a faster turn can bring its session's next turn inside the window.
  assert.ok(Math.abs(a.offered - b.offered) <= 0.02 * a.offered, `offered without ${a.offered}, with the store ${b.offered}`);
  assert.ok(b.kv_hit_rate > a.kv_hit_rate + 0.03, `hit rate without ${a.kv_hit_rate}, with the store ${b.kv_hit_rate}`);
  assert.ok(withStore.baseline_variants["dynamo-agg"].kv_hit_rate >= without.baseline_variants["dynamo-agg"].kv_hit_rate, "the baseline gets the store too");
  assert.match(withStore.assumptions[0], /remote KV store of 500\.0 TB/);
  assert.ok(!without.assumptions.some((x) => /remote KV store/.test(x)));
});
