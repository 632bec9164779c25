/**
 * `deno task sim` / `npx tsx src/cli/sim.ts`: runs the Dynamo-like baselines and ours on the same
 * workload and seed in the cluster simulator and prints a table, JSON (--json), a load sweep
 * (--sweep) or writes a report folder with tables and SVG plots (--report DIR).
 */
import { access, constants, mkdir, writeFile } from "node:fs/promises";
import { cliArgs, exitProcess } from "../runtime/env.ts";
import { readTextFile } from "../runtime/fs.ts";
import { parseStepLog, StepLogError } from "../sim/calibration.ts";
import { parseSimArgs, SimHelp, SimUsageError } from "../sim/cli-options.ts";
import { hitRateOverTime, splitOverTime, ttftCdf } from "../sim/report.ts";
import { jsonView, markdownView, runOnce, textView, workloadFor } from "../sim/run.ts";
import { TraceFormatError } from "../sim/traces.ts";
import type { Comparison } from "../sim/compare.ts";

async function main(): Promise<void> {
  const argv = cliArgs();
  const o = parseSimArgs(argv);
  const traceText = o.trace === null ? null : await readInput("trace file", o.trace);
  const stepLog = o.calibrate === null ? null : await readInput("step log", o.calibrate);
  const loads = o.sweep ?? [o.load];
  // Inputs are checked whole before any run: a sweep should not fail at its last load after the
  // others ran (the smallest load stretches a trace the most, so it is the one that can be too long).
  try { if (o.trace !== null) workloadFor(o, Math.min(...loads), traceText); } catch (e) {
    if (e instanceof TraceFormatError) throw new SimUsageError(`Cannot replay trace "${o.trace}": ${e.message}`);
    throw e;
  }
  if (stepLog !== null) parseStepLog(stepLog);
  // A sweep gives a list (and a load-X folder per load) even of one load, so scripts can rely on it.
  const swept = o.sweep !== null;
  const dirOf = (load: number) => (swept ? `${o.report}/load-${load}` : o.report!);
  if (o.report !== null) {
    // Before the run, not after it: a bad folder (or a file where a sweep's load-X folder goes)
    // should not cost a whole simulation.
    for (const dir of [o.report, ...loads.map(dirOf)]) {
      try { await mkdir(dir, { recursive: true }); await access(dir, constants.W_OK); } catch (e) {
        throw new SimUsageError(`Cannot write report folder "${dir}" (${(e as { code?: string }).code ?? String(e)})`);
      }
    }
  }
  const clock = () => performance.now() / 1000;
  const views: Record<string, unknown>[] = [];
  const sections: string[] = [];
  const command = `deno task sim ${argv.join(" ")}`;
  for (const load of loads) {
    let c: Comparison;
    try { c = runOnce(o, load, traceText, clock, stepLog); } catch (e) {
      if (e instanceof TraceFormatError) throw new SimUsageError(`Cannot replay trace "${o.trace}": ${e.message}`);
      throw e;
    }
    warnIfNothingCompleted(c, load);
    views.push(jsonView(c, load));
    if (!o.json) console.log(textView(c, load) + "\n");
    sections.push(markdownView(c, load, command));
    if (o.report !== null) {
      const dir = dirOf(load);
      await mkdir(dir, { recursive: true });
      await writeFile(`${dir}/ttft-cdf.svg`, ttftCdf(c));
      await writeFile(`${dir}/prefill-decode-split.svg`, splitOverTime(c));
      await writeFile(`${dir}/kv-hit-rate.svg`, hitRateOverTime(c));
      await writeFile(`${dir}/result.json`, JSON.stringify(jsonView(c, load), null, 2));
    }
  }
  if (o.report !== null) {
    await mkdir(o.report, { recursive: true });
    await writeFile(`${o.report}/README.md`, `# Simulator report\n\n${sections.join("\n\n")}\n`);
  }
  if (o.json) console.log(JSON.stringify(swept ? views : views[0], null, 2));
}

/** Why a file could not be read, in words for the common cases. */
const READ_ERRORS: Record<string, string> = { ENOENT: "no such file", EISDIR: "it is a directory", EACCES: "permission denied" };

/** A whole input file as text; a usage error (exit 2) naming the file and why it cannot be read. */
async function readInput(what: string, path: string): Promise<string> {
  try { return await readTextFile(path); } catch (e) {
    const code = (e as { code?: string }).code ?? "";
    throw new SimUsageError(`Cannot read ${what} "${path}" (${READ_ERRORS[code] ?? (code || String(e))})`);
  }
}

/** A system that completed no request has no latency figures: say so on stderr rather than only print n/a. */
function warnIfNothingCompleted(c: Comparison, load: number): void {
  const none = [...Object.entries(c.baseline_variants), ["evolving", c.systems.evolving] as const].filter(([, s]) => s.completed === 0);
  if (none.length > 0) {
    console.error(`Warning: at load ${load}, ${none.map(([name, s]) => `${name} (offered ${s.offered})`).join(", ")} completed no requests; their latencies and the ratios are n/a (null in --json)`);
  }
}

main().catch((e: unknown) => {
  if (e instanceof SimHelp) {
    console.log(e.message);
    exitProcess(0);
  }
  if (e instanceof SimUsageError || e instanceof StepLogError) {
    console.error(e.message);
    exitProcess(2);
  }
  console.error(e instanceof Error ? `${e.name}: ${e.message}` : String(e));
  exitProcess(1);
});
