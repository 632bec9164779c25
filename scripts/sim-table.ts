/**
 * Prints the ratio table of docs/sim.md from the committed reports (docs/results/<run>/load-<x>/result.json),
 * so the table is generated from the figures rather than copied by hand.
 * Usage: npx tsx scripts/sim-table.ts [DIR] [--without VARIANT[,VARIANT...]] [--sustaining F]
 *   --without: the best baseline among the other variants;
 *   --sustaining: among the variants that complete at least F of the requests offered to them (issue 4's
 *   "loads the baseline still sustains" is F = 0.95); a run where none does prints "none sustains".
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { cliArgs } from "../src/runtime/env.ts";
import { bestBaselineAmong, type SimResult as Result, type SystemFigures as Sys } from "./sim-results.ts";

const args = cliArgs();
const wi = args.indexOf("--without");
const without = new Set(wi >= 0 ? (args[wi + 1] ?? "").split(",") : []);
const si = args.indexOf("--sustaining");
const sustaining = si >= 0 ? Number(args[si + 1]) : 0;
if (!(sustaining >= 0 && sustaining <= 1)) throw new RangeError(`--sustaining must be a fraction in [0, 1]; got "${args[si + 1]}"`);
const dir = args.filter((a, i) => !a.startsWith("--") && (wi < 0 || i !== wi + 1) && (si < 0 || i !== si + 1))[0] ?? "docs/results";
const rows: Result[] = [];
for (const run of readdirSync(dir).sort()) {
  const p = join(dir, run);
  if (!statSync(p).isDirectory()) continue;
  const loads = existsSync(join(p, "result.json")) ? [p] : readdirSync(p).filter((d) => d.startsWith("load-")).map((d) => join(p, d));
  for (const l of loads) if (existsSync(join(l, "result.json"))) rows.push(JSON.parse(readFileSync(join(l, "result.json"), "utf8")) as Result);
}
const mixedMs = (r: Result) => Number(/^Mixed prefill\+decode steps cost ([\d.]+) ms/.exec(r.assumptions.find((a) => a.startsWith("Mixed prefill")) ?? "")?.[1] ?? 0);
// Sensitivity runs after the main ones: replicated KV, then each mixed-step overhead.
const group = (r: Result) => (r.assumptions.some((a) => a.startsWith("Tensor-parallel")) ? 1 : 0) + 2 * mixedMs(r);
rows.sort((a, b) => group(a) - group(b) || a.workload.localeCompare(b.workload) || a.model.localeCompare(b.model) || a.load - b.load);
const tagOf = (r: Result) => (r.assumptions.some((a) => a.startsWith("Tensor-parallel attention")) ? " (KV replicated)" : "") +
  (mixedMs(r) > 0 ? ` (mixed steps +${mixedMs(r)} ms)` : "");
const x = (v: number) => `${v.toFixed(2)}×`;
const s3 = (v: number) => v.toFixed(3);
const pct = (v: number) => `${(100 * v).toFixed(1)}%`;
console.log("| scenario | model | load | best baseline | done (best / ours) | P95 TTFT s, best / ours | mean E2E s, best / ours | goodput/s, best / ours | **vs best: P95 TTFT / mean E2E / goodput** | vs disagg-SLA: P95 TTFT / mean E2E / goodput | done (SLA) |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows) {
  const b = bestBaselineAmong(r, (k, v) => !without.has(k) && v.completed_fraction >= sustaining);
  if (b === null) {
    console.log(`| ${r.workload}${tagOf(r)} | ${r.model} | ${r.load} | none sustains | | | | | | | |`);
    continue;
  }
  const o = r.systems.evolving, sla = r.baseline_variants["dynamo-disagg-sla"];
  const vs = (y: Sys) => `${x(y.ttft.p95 / o.ttft.p95)} / ${x(y.e2e.mean / o.e2e.mean)} / ${x(o.goodput / y.goodput)}`;
  console.log(`| ${r.workload}${tagOf(r)} | ${r.model} | ${r.load} | ${b.variant} | ${pct(b.completed_fraction)} / ${pct(o.completed_fraction)} | ${s3(b.ttft.p95)} / ${s3(o.ttft.p95)} | ${b.e2e.mean.toFixed(2)} / ${o.e2e.mean.toFixed(2)} | ${b.goodput.toFixed(1)} / ${o.goodput.toFixed(1)} | **${vs(b)}** | ${sla ? vs(sla) : "–"} | ${sla ? pct(sla.completed_fraction) : "–"} |`);
}
