import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { CostModel } from "../../src/sim/cost-model.ts";
import { profileSweep } from "../../src/sim/profiler.ts";
import { GB300, gpusPerWorker, KIMI_K2_6 } from "../../src/sim/profiles.ts";
import { ClusterSim } from "../../src/sim/simulator.ts";
import { baselineAggTuned, evolvingStatic, type SystemContext } from "../../src/sim/systems.ts";
import { parseMooncake } from "../../src/sim/traces.ts";
import type { Planner } from "../../planner/index.ts";

test("a simulated front door with a new-session budget lets that many in per tick, holds the rest to the next tick and turns away those still without room", () => {
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const ctx: SystemContext = {
    workers: 1, profile: profileSweep(new CostModel(KIMI_K2_6, GB300, gpw)), initialSplit: { prefill: 0, decode: 1 },
    ttftTargetS: 0.5, itlTargetS: 0.05, startupS: 0,
  };
  // Sessions knock at 0 s (before any budget), then at 1.2, 1.4 and 1.6 s; the planner's ticks at
  // 1 s and 2 s each let one new session in.
  const trace = [0, 1_200, 1_400, 1_600]
    .map((t, i) => JSON.stringify({ timestamp: t, input_length: 2048, output_length: 4, hash_ids: [10 * i, 10 * i + 1, 10 * i + 2, 10 * i + 3] })).join("\n");
  const planner: Planner = {
    name: "scripted", intervalS: 1,
    tick: (s) => (s.now <= 2 ? [{ kind: "admission", holdNewSessions: false, maxHoldS: 0, newSessions: 1, rejectAfterHold: true }] : []),
  };
  const sim = new ClusterSim(parseMooncake(trace), { ...evolvingStatic(ctx), planner }, {
    model: KIMI_K2_6, hw: GB300, gpus: gpw, gpusPerWorker: gpw, drainS: 60, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
  });
  const out = [...sim.run().outcomes].sort((a, b) => a.arrival - b.arrival);
  assert.deepEqual(out.map((o) => o.arrival), [0, 1.2, 1.4, 1.6], "every session is accounted for, at the time it first knocked");
  assert.deepEqual(out.map((o) => o.rejected), [null, null, null, "overloaded"]);
  assert.ok(out[0].ttft < 0.3 && out[1].ttft < 0.3, `no wait with room: ${out[0].ttft}, ${out[1].ttft}`);
  assert.ok(out[2].ttft >= 0.6 && out[2].ttft < 0.9, `held from 1.4 s to the tick at 2 s: TTFT ${out[2].ttft}`);
  assert.equal(sim.sessionsHeld, 2);
});

test("a simulated baseline with Dynamo's request rejection turns requests away while every worker is over its busy threshold, and only then", () => {
  const gpw = gpusPerWorker(KIMI_K2_6, GB300);
  const ctx: SystemContext = {
    workers: 1, profile: profileSweep(new CostModel(KIMI_K2_6, GB300, gpw)), initialSplit: { prefill: 0, decode: 1 },
    ttftTargetS: 0.5, itlTargetS: 0.05, startupS: 0,
  };
  // The first request decodes 2000 tokens (about a minute); the others knock while it holds its blocks.
  const trace = [0, 1_000, 2_000]
    .map((t, i) => JSON.stringify({ timestamp: t, input_length: 2048, output_length: i === 0 ? 2000 : 4, hash_ids: [10 * i, 10 * i + 1, 10 * i + 2, 10 * i + 3] })).join("\n");
  const reasons = (busyThresholds: { activeBlocks?: number; prefillTokens?: number }) => {
    const sim = new ClusterSim(parseMooncake(trace), { ...baselineAggTuned(ctx), busyThresholds }, {
      model: KIMI_K2_6, hw: GB300, gpus: gpw, gpusPerWorker: gpw, drainS: 120, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
    });
    return [...sim.run().outcomes].sort((a, b) => a.arrival - b.arrival).map((o) => o.rejected);
  };
  assert.deepEqual(reasons({ activeBlocks: 0 }), [null, "all-workers-busy", "all-workers-busy"], "any block held: busy");
  assert.deepEqual(reasons({ activeBlocks: 0.85 }), [null, null, null], "one request holds far less than 85% of the blocks");
  assert.deepEqual(reasons({ prefillTokens: 10_000 }), [null, null, null], "no prompt waits behind 10,000 tokens");
});
