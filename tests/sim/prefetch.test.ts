import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { CostModel } from "../../src/sim/cost-model.ts";
import { profileSweep } from "../../src/sim/profiler.ts";
import { GB300, gpusPerWorker, type HardwareProfile, KIMI_K2_6, type ModelProfile } from "../../src/sim/profiles.ts";
import { ClusterSim } from "../../src/sim/simulator.ts";
import { evolvingStatic, type SystemContext } from "../../src/sim/systems.ts";
import type { SessionPlan, Workload } from "../../src/sim/workload-types.ts";

// KV so large (72 GB per 2048-token block) that one worker holds 64 blocks on device; host memory
// for hundreds. Moving 27 blocks from host takes about 0.54 s at the worker's 3.6 TB/s.
const HUGE_KV: ModelProfile = { ...KIMI_K2_6, name: "huge-kv", kvBytesPerToken: 35e6 };
const BIG_HOST: HardwareProfile = { ...GB300, name: "gb300-big-host", hostBytes: 2e12 };
const GPW = gpusPerWorker(HUGE_KV, BIG_HOST);
const CTX: SystemContext = {
  workers: 1, profile: profileSweep(new CostModel(HUGE_KV, BIG_HOST, GPW)), initialSplit: { prefill: 0, decode: 1 },
  ttftTargetS: 0.5, itlTargetS: 0.05, startupS: 0,
};

/**
 * One worker. Session A prefills 30 blocks and calls a tool for `gapS` seconds (the tracker's prior
 * predicts 3 s); session B arrives at 0.1 s with 60 blocks, evicts 27 of A's to host while it runs
 * (to 5.6 s) and ends with a final answer (idle: its blocks are worth less than A's). A's second turn
 * adds 1000 tokens.
 */
function run(gapS: number, prefetchLeadS: number | undefined) {
  const turn = (blocks: number, tool: string | null, gap: number) => ({ newTokens: blocks, outputTokens: 4, reasoningTokens: 0, tool, gapS: gap });
  const a: SessionPlan = {
    idx: 0, id: "A", kind: "coding", start: 0, sharedChunks: [], sharedTokens: 0, chunkBase: 1000,
    turns: [turn(30 * 2048, "pytest", gapS), turn(1000, null, 0)],
  };
  const b: SessionPlan = { idx: 1, id: "B", kind: "coding", start: 0.1, sharedChunks: [], sharedTokens: 0, chunkBase: 5000, turns: [turn(60 * 2048, null, 0)] };
  const workload: Workload = { name: "prefetch", durationS: 30, sessions: [a, b], blockTokens: 2048, assumptions: [] };
  const sim = new ClusterSim(workload, { ...evolvingStatic(CTX), prefetchLeadS }, {
    model: HUGE_KV, hw: BIG_HOST, gpus: GPW, gpusPerWorker: GPW, drainS: 30, maxQueueS: 120, sampleS: 1, slo: { ttftS: 1, itlS: 0.05 },
  });
  const out = sim.run().outcomes;
  assert.equal(out.length, 3);
  for (const o of out) assert.equal(o.rejected, null);
  const back = out.find((o) => o.prompt > 30 * 2048 && o.prompt < 31 * 2048)!;
  assert.equal(back.cached, 30 * 2048, "A's whole context is reused, from host or prefetched");
  return { ttft: back.ttft, prefetched: sim.prefetchedBlocks, outcomes: out };
}

test("a simulated session whose KV went to host during a long tool call returns to it on device when ours prefetches", () => {
  const fetch = run(8, undefined), pf = run(8, 1);
  assert.equal(fetch.prefetched, 0);
  assert.equal(pf.prefetched, 27, "the 27 blocks B pushed to host come back once B's idle blocks rank below them");
  // Without prefetch the returning turn pays the host fetch (0.54 s) before its prefill; with it, only the prefill.
  assert.ok(fetch.ttft > 0.5, `TTFT fetching on arrival ${fetch.ttft} s`);
  assert.ok(pf.ttft < 0.1, `TTFT with prefetch ${pf.ttft} s`);
  assert.deepEqual(run(8, 1).outcomes, pf.outcomes, "same run, same result");
});

test("a simulated turn that returns while its prefetch is copying waits only for the rest of the copy", () => {
  // While B runs its blocks are in use: the prefetch waits (retrying each second) and starts once B
  // is done; A's turn arrives during the copy: it waits less than a full fetch, more than none.
  const fetch = run(4.8, undefined), during = run(4.8, 1), landed = run(8, 1);
  assert.equal(during.prefetched, 27);
  assert.ok(during.ttft < fetch.ttft - 0.2, `TTFT ${during.ttft} s returning mid-copy, ${fetch.ttft} s fetching on arrival`);
  assert.ok(during.ttft > landed.ttft + 0.1, `TTFT ${during.ttft} s returning mid-copy, ${landed.ttft} s after it landed`);
  // A prediction that came too late changes nothing: A returns at 4.3 s, before the first look.
  const early = run(3, 1);
  assert.equal(early.prefetched, 0);
  assert.equal(early.ttft, run(3, undefined).ttft);
});
