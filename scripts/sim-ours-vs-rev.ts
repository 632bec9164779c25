/**
 * Ours in the committed reports against ours in the same reports at an older commit (read with
 * `git show`): goodput, requests completed, sessions turned away, P95 TTFT and mean E2E, per run.
 * It shows what a change to ours did across every report run, including the requests that were
 * never offered because a session turned away at its first turn made no later turns.
 * Usage: npx tsx scripts/sim-ours-vs-rev.ts REV [DIR]   (DIR default docs/results)
 */
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { cliArgs } from "../src/runtime/env.ts";

interface Sys { ttft: { p95: number }; e2e: { mean: number }; goodput: number; completed: number; offered: number; rejected_reasons: Record<string, number> }
interface Result { load: number; workload: string; model: string; systems: { evolving: Sys } }

const [rev, dir = "docs/results"] = cliArgs();
if (rev === undefined) throw new Error("Usage: npx tsx scripts/sim-ours-vs-rev.ts REV [DIR]");
console.log(`| run | load | goodput/s, ${rev} → now | completed, ${rev} → now | sessions turned away | P95 TTFT s, ${rev} → now | mean E2E s, ${rev} → now |`);
console.log("|---|---|---|---|---|---|---|");
for (const run of readdirSync(dir).sort()) {
  const p = join(dir, run);
  if (!statSync(p).isDirectory()) continue;
  const files = existsSync(join(p, "result.json")) ? [join(p, "result.json")] : readdirSync(p).filter((d) => d.startsWith("load-")).map((d) => join(p, d, "result.json"));
  for (const f of files) {
    if (!existsSync(f)) continue;
    let old: Result;
    try {
      old = JSON.parse(execFileSync("git", ["show", `${rev}:${f}`], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as Result;
    } catch {
      continue; // not in that commit
    }
    const now = JSON.parse(readFileSync(f, "utf8")) as Result;
    const a = old.systems.evolving, b = now.systems.evolving;
    const turned = b.rejected_reasons.overloaded ?? 0;
    console.log(`| ${run} | ${now.load} | ${a.goodput.toFixed(1)} → ${b.goodput.toFixed(1)} (${(b.goodput / a.goodput).toFixed(2)}×) | ${a.completed} → ${b.completed} (${(b.completed / a.completed).toFixed(2)}×) | ${turned} | ${a.ttft.p95.toFixed(3)} → ${b.ttft.p95.toFixed(3)} | ${a.e2e.mean.toFixed(2)} → ${b.e2e.mean.toFixed(2)} |`);
  }
}
