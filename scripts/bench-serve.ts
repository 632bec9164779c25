/**
 * Load generator for any OpenAI-compatible server (ours, vLLM, SGLang, Dynamo): replays a Mooncake
 * JSONL or Azure CSV trace, or synthetic multi-turn agent sessions, streams every request, and
 * reports TTFT, ITL, TPOT and end-to-end latency (mean/P50/P95/P99), throughput and goodput.
 *
 *   npx tsx scripts/bench-serve.ts --url http://127.0.0.1:8000 --trace synthetic --length-scale 0.05
 *   npx deno run -A scripts/bench-serve.ts --trace mooncake:../shared/traces/mooncake_synthetic_trace.jsonl \
 *       --length-scale 0.005 --time-scale 0.01 --max-requests 50 --json out.json
 */
import { BenchArgsError, parseBenchArgs, USAGE } from "./bench-serve/args.ts";
import { firstModel } from "./bench-serve/client.ts";
import { runSessions } from "./bench-serve/driver.ts";
import { reportTable, summarize } from "./bench-serve/report.ts";
import { azureSessions, mooncakeSessions, type Session, syntheticSessions } from "./bench-serve/workload.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { readTextFile, writeFile } from "../src/runtime/fs.ts";

async function main(): Promise<void> {
  const argv = cliArgs();
  if (argv.includes("--help") || argv.includes("-h")) {
    console.log(USAGE);
    return;
  }
  const o = parseBenchArgs(argv);
  let sessions: Session[];
  if (o.trace === "synthetic") sessions = syntheticSessions(o);
  else {
    const text = await readTextFile(o.tracePath!).catch(() => {
      throw new BenchArgsError(`Cannot read trace file "${o.tracePath}"`);
    });
    sessions = o.trace === "mooncake" ? mooncakeSessions(text, o) : azureSessions(text, o);
  }
  const model = o.model || (await firstModel(o.url, o.apiKey));
  const turns = sessions.reduce((a, s) => a + s.turns.length, 0);
  console.error(`bench-serve: ${turns} requests in ${sessions.length} sessions → ${o.url} (${model}, ${o.endpoint})`);
  const { results, durationMs } = await runSessions(sessions, o, model, (s) => {
    (globalThis as unknown as { process?: { stderr: { write(s: string): void } } }).process?.stderr.write(s);
  });
  const report = summarize(results, durationMs, { ttftMs: o.sloTtftMs, itlMs: o.sloItlMs, e2eMs: o.sloE2eMs });
  console.log(reportTable(report));
  const json = JSON.stringify({ options: { ...o, apiKey: o.apiKey ? "***" : undefined }, model, report }, null, 2);
  if (o.jsonPath) await writeFile(o.jsonPath, json + "\n");
  else console.log("\n" + json);
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? `${e.name === "Error" ? "Error" : e.name}: ${e.message}` : String(e));
  exitProcess(1);
});
