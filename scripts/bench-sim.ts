/**
 * Simulator speed: one simulated hour of coding-256 (256 GB300 GPUs, Kimi-K2.6-like) per system,
 * wall time and events/s. Usage: npx tsx scripts/bench-sim.ts [--load X] [--duration S] [--systems a,b] [--fingerprint]
 * --fingerprint adds a SHA-256 of every request outcome, sample and the event count per system, so
 * scripts/sim-identity.sh can check a speed change kept the results byte-identical.
 */
import { createHash } from "node:crypto";
import { cliArgs } from "../src/runtime/env.ts";
import { initialSplit } from "../src/sim/compare.ts";
import { CostModel } from "../src/sim/cost-model.ts";
import { profileSweep } from "../src/sim/profiler.ts";
import { GB300, gpusPerWorker, KIMI_K2_6 } from "../src/sim/profiles.ts";
import { buildScenario } from "../src/sim/scenarios.ts";
import { ClusterSim } from "../src/sim/simulator.ts";
import * as S from "../src/sim/systems.ts";

const args = cliArgs();
const opt = (name: string, dflt: string) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : dflt; };
const load = Number(opt("--load", "1"));
const durationS = Number(opt("--duration", "3600"));
const systems = opt("--systems", "evolving,dynamo-disagg-sla").split(",");
const fingerprint = args.includes("--fingerprint");
const makers: Record<string, (c: S.SystemContext) => S.SystemSpec> = {
  evolving: S.evolving, "dynamo-disagg-sla": S.baselineDisaggSla, "dynamo-disagg-load": S.baselineDisaggLoad, "dynamo-agg": S.baselineAgg, "dynamo-agg-tuned": S.baselineAggTuned, "dynamo-agg-shed": S.baselineAggShed,
};
/** Process CPU seconds (user + system), NaN where the runtime has no process.cpuUsage. */
function cpuSeconds(): number {
  const p = (globalThis as { process?: { cpuUsage?: () => { user: number; system: number } } }).process;
  const u = p?.cpuUsage?.();
  return u === undefined ? NaN : (u.user + u.system) / 1e6;
}
const t0 = performance.now();
const w = buildScenario("coding-256", { gpus: 256, load, seed: 1, durationS, maxContext: KIMI_K2_6.maxContext });
const gpw = gpusPerWorker(KIMI_K2_6, GB300);
const profile = profileSweep(new CostModel(KIMI_K2_6, GB300, gpw));
const workers = 256 / gpw;
const ctx: S.SystemContext = { workers, profile, initialSplit: initialSplit(w, profile, workers), ttftTargetS: 0.5, itlTargetS: 0.05, startupS: 60 };
console.log(`coding-256 load ${load}, ${durationS} s simulated, ${w.sessions.length} sessions; workload built in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
for (const name of systems) {
  const start = performance.now();
  const cpu0 = cpuSeconds();
  const run = new ClusterSim(w, makers[name](ctx), {
    model: KIMI_K2_6, hw: GB300, gpus: 256, gpusPerWorker: gpw, drainS: 300, maxQueueS: 120, sampleS: 10, slo: { ttftS: 1, itlS: 0.05 },
  }).run();
  const wall = (performance.now() - start) / 1000;
  const cpu = cpuSeconds() - cpu0;
  console.log(`${name.padEnd(20)} requests ${run.outcomes.length}  events ${run.events}  wall ${wall.toFixed(1)} s  ${Math.round(run.events / wall)} events/s  ${Math.round(run.outcomes.length / wall)} requests/s  cpu ${cpu.toFixed(1)} s`);
  if (fingerprint) {
    const h = createHash("sha256").update(JSON.stringify([run.outcomes, run.samples, run.events, run.gpuSeconds, run.simulatedS]));
    console.log(`${name.padEnd(20)} fingerprint ${h.digest("hex")}`);
  }
}
