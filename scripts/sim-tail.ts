/**
 * Where the P95 TTFT tail comes from: for the tuned aggregated baseline and ours on one scenario
 * (600 s, seed 1, Kimi-K2.6-like on 256 GB300), the slowest 5% of first tokens against the time their
 * uncached prefill alone would take on an idle worker, and how many of them were mostly uncached.
 *   npx tsx scripts/sim-tail.ts [SCENARIO] [LOAD]
 */
import { simulationSetup } from "../src/sim/compare.ts";
import { CostModel } from "../src/sim/cost-model.ts";
import { GB300, KIMI_K2_6 } from "../src/sim/profiles.ts";
import { buildScenario } from "../src/sim/scenarios.ts";
import { ClusterSim } from "../src/sim/simulator.ts";
import { baselineAggTuned, evolving } from "../src/sim/systems.ts";

const scen = process.argv[2] ?? "computer-use-256", load = Number(process.argv[3] ?? 2);
const w = buildScenario(scen, { gpus: 256, load, seed: 1, durationS: 600, maxContext: KIMI_K2_6.maxContext });
const { ctx, cfg } = simulationSetup(w, { model: KIMI_K2_6, hw: GB300, gpus: 256 });
const cost = new CostModel(KIMI_K2_6, GB300, cfg.gpusPerWorker);
for (const [name, spec] of [["tuned", baselineAggTuned(ctx)], ["ours", evolving(ctx)]] as const) {
  const run = new ClusterSim(w, spec, cfg).run();
  const ok = run.outcomes.filter((o) => o.rejected === null).sort((a, b) => a.ttft - b.ttft);
  const n = ok.length, p95 = ok[Math.floor(n * 0.95)].ttft;
  const svc = (o: typeof ok[0]) => { const u = Math.max(1, o.prompt - o.cached); return cost.stepTime({ prefillTokens: u, prefillAttnPairs: cost.prefillPairs(o.cached, u), decodeSeqs: 0, decodeAttnTokens: 0 }); };
  const top = ok.slice(Math.floor(n * 0.95));
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const unc = top.map((o) => o.prompt - o.cached);
  const cold = top.filter((o) => o.cached < 0.5 * o.prompt).length / top.length;
  const coldAll = ok.filter((o) => o.cached < 0.5 * o.prompt).length / n;
  console.log(`${name}: n ${n} p95 ${p95.toFixed(3)} | top5%: mean ttft ${mean(top.map((o) => o.ttft)).toFixed(2)} mean ideal service ${mean(top.map(svc)).toFixed(2)} median uncached ${unc.sort((a, b) => a - b)[Math.floor(unc.length / 2)]} cold(<50% cached) ${(100 * cold).toFixed(0)}% | all: cold ${(100 * coldAll).toFixed(1)}% mean uncached ${mean(ok.map((o) => o.prompt - o.cached)).toFixed(0)} mean ideal ${mean(ok.map(svc)).toFixed(3)}`);
}
