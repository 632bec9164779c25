/**
 * Prints the seed table of docs/sim.md ("Seeds"): for each run of scripts/sim-seeds.sh, the ratios of ours
 * over the best baseline variant (P95 TTFT / mean E2E / goodput) on seed 1 (the committed report,
 * docs/results/<run>/load-<x>/result.json) and on seeds 2 and 3 (docs/results/seeds/), then the same
 * against Dynamo as shipped at a load it sustains: the best default-configuration variant (tuned and
 * shedding variants left out) among those that complete at least 95% of offered requests (issue 4's
 * condition). Each cell ends with the fraction of offered requests that baseline and ours completed.
 * Usage: npx tsx scripts/sim-seeds-table.ts
 */
import { existsSync, readFileSync } from "node:fs";
import { bestBaselineAmong, type SimResult as Result, type SystemFigures as Sys } from "./sim-results.ts";

const RUNS: [scenario: string, model: string, load: number][] = [
  ["coding-256", "glm-5.2", 5], ["coding-256", "kimi-k2.6", 1], ["coding-256", "kimi-k2.6", 3],
  ["computer-use-256", "kimi-k2.6", 1], ["computer-use-256", "kimi-k2.6", 2], ["computer-use-256", "kimi-k2.6", 3],
  ["math-256", "kimi-k2.6", 5], ["mixed-shift-256", "kimi-k2.6", 2], ["mixed-shift-256", "kimi-k2.6", 3],
];
const SHIPPED_ONLY = new Set(["dynamo-agg-tuned", "dynamo-agg-shed"]);
/** The "loads the baseline still sustains": it completes at least this fraction of offered requests. */
const SUSTAINED = 0.95;

function load(path: string): Result | null {
  return existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) as Result : null;
}

function resultFor(scenario: string, model: string, loadX: number, seed: number): Result | null {
  const glm = model === "glm-5.2";
  if (seed === 1) return load(`docs/results/${scenario}${glm ? "-glm" : ""}/load-${loadX}/result.json`);
  return load(`docs/results/seeds/scenario_${scenario.replaceAll("-", "")}${glm ? "_glm" : ""}_load_${loadX}_seed_${seed}.json`);
}

/** Ratios against the best variant among those `keep` accepts, and the done fractions. */
function ratios(r: Result, keep: (variant: string, s: Sys) => boolean): string {
  const b = bestBaselineAmong(r, keep), o = r.systems.evolving;
  if (b === null) return "none sustains";
  const f = (v: number) => v.toFixed(2);
  return `${f(b.ttft.p95 / o.ttft.p95)}/${f(b.e2e.mean / o.e2e.mean)}/${f(o.goodput / b.goodput)} (${(100 * b.completed_fraction).toFixed(0)}%/${(100 * o.completed_fraction).toFixed(0)}%)`;
}

console.log("| scenario | model | load | vs best variant: seed 1 · seed 2 · seed 3 | vs Dynamo as shipped, sustaining: seed 1 · seed 2 · seed 3 |");
console.log("|---|---|---|---|---|");
for (const [scenario, model, l] of RUNS) {
  const rs = [1, 2, 3].map((seed) => resultFor(scenario, model, l, seed));
  const col = (keep: (v: string, s: Sys) => boolean) => rs.map((r) => (r === null ? "–" : ratios(r, keep))).join(" · ");
  console.log(`| ${scenario} | ${model} | ${l} | ${col(() => true)} | ${col((v, s) => !SHIPPED_ONLY.has(v) && s.completed_fraction >= SUSTAINED)} |`);
}
