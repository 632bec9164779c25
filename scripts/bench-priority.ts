/**
 * What request priorities buy an interactive request on a saturated engine: `--background` long
 * generations (ignore_eos, `--background-tokens` each) keep every one of `--max-num-seqs` slots busy,
 * replaced as they end, while `--urgent` short requests (`--urgent-tokens`) arrive one every
 * `--gap-ms`. Run twice on the same engine settings: with every priority 0 (first come, first served),
 * and with the short ones at priority -1. Prints the short requests' time to first token and
 * end-to-end latency (median, p95, in ms), the background's generated tokens per second, and the
 * preemptions. Reference backend, stories260K. Figures: docs/results/bench-priority.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-priority.ts [--urgent 24] [--gap-ms 60]
 */
import { parseArgs } from "../src/cli/args.ts";
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { GenerateRequest, GenerateResult } from "../src/engine/engine-types.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";

const FLAGS = {
  urgent: { kind: "int", min: 1, help: "short requests (default 24)" },
  "gap-ms": { kind: "int", min: 1, help: "ms between short requests (default 60)" },
  "urgent-tokens": { kind: "int", min: 1, help: "tokens each short request generates (default 16)" },
  "background-tokens": { kind: "int", min: 1, help: "tokens each background request generates (default 200)" },
  "max-num-seqs": { kind: "int", min: 1, help: "running slots (default 4)" },
} as const;

const f = parseArgs(cliArgs(), FLAGS);
const urgentCount = f.urgent ?? 24;
const gapMs = f["gap-ms"] ?? 60;
const urgentTokens = f["urgent-tokens"] ?? 16;
const backgroundTokens = f["background-tokens"] ?? 200;
const slots = f["max-num-seqs"] ?? 4;
const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
const encode = (text: string) => model.tokenizer.encode(text, { addBos: true });
const STORIES = ["Once upon a time", "Tom had a red ball", "The sun was hot and", "Lily saw a big dog", "One day a cat", "Sam liked to run"];

const pct = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

async function run(urgentPriority: number) {
  const engine = createEngine(createReferenceBackend(), model, { numBlocks: 512, scheduler: { maxRunning: slots, maxBatchTokens: 256 } });
  let stop = false;
  let backgroundOut = 0;
  const t0 = performance.now();
  // Closed loop: `slots` background streams, each replaced as it ends, until the short ones are done.
  const background = Array.from({ length: slots }, async (_, i) => {
    for (let k = 0; !stop; k++) {
      const req: GenerateRequest = { prompt: encode(STORIES[(i + k) % STORIES.length]), maxTokens: backgroundTokens, temperature: 0, ignoreEos: true };
      const r = await engine.submit(req).result;
      backgroundOut += r.completionTokens;
    }
  });
  await new Promise((r) => setTimeout(r, 200)); // the background fills every slot first
  const urgent: Promise<GenerateResult>[] = [];
  for (let i = 0; i < urgentCount; i++) {
    urgent.push(engine.submit({ prompt: encode(STORIES[i % STORIES.length] + " and"), maxTokens: urgentTokens, temperature: 0, priority: urgentPriority }).result);
    await new Promise((r) => setTimeout(r, gapMs));
  }
  const results = await Promise.all(urgent);
  stop = true;
  const wallS = (performance.now() - t0) / 1000;
  await Promise.all(background);
  const stats = engine.stats();
  await engine.stop();
  const ttft = results.map((r) => r.firstTokenS! * 1000);
  const e2e = results.map((r) => r.lastTokenS! * 1000);
  return { ttft, e2e, backgroundTps: backgroundOut / wallS, preemptions: stats.preemptions, priorityPreemptions: stats.priorityPreemptions };
}

const rows: string[] = [];
rows.push(`| short requests at | TTFT p50 (ms) | TTFT p95 (ms) | E2E p50 (ms) | E2E p95 (ms) | background tokens/s | preemptions (for priority) |`);
rows.push(`|---|---|---|---|---|---|---|`);
const runs: Record<string, Awaited<ReturnType<typeof run>>> = {};
for (const [label, p] of [["priority 0 (fcfs)", 0], ["priority -1", -1]] as const) {
  const r = await run(p);
  runs[label] = r;
  const f1 = (x: number) => x.toFixed(0);
  rows.push(`| ${label} | ${f1(pct(r.ttft, 0.5))} | ${f1(pct(r.ttft, 0.95))} | ${f1(pct(r.e2e, 0.5))} | ${f1(pct(r.e2e, 0.95))} | ${r.backgroundTps.toFixed(0)} | ${r.preemptions} (${r.priorityPreemptions}) |`);
}
const a = runs["priority 0 (fcfs)"];
const b = runs["priority -1"];
console.log(`${urgentCount} short requests (${urgentTokens} tokens) one every ${gapMs} ms beside ${slots} background streams of ${backgroundTokens} tokens; ${slots} running slots; reference backend, stories260K`);
console.log(rows.join("\n"));
console.log(`ratios fcfs/priority: TTFT p50 ${(pct(a.ttft, 0.5) / pct(b.ttft, 0.5)).toFixed(1)}×, TTFT p95 ${(pct(a.ttft, 0.95) / pct(b.ttft, 0.95)).toFixed(1)}×, E2E p50 ${(pct(a.e2e, 0.5) / pct(b.e2e, 0.5)).toFixed(1)}×; background tokens/s ${(b.backgroundTps / a.backgroundTps).toFixed(2)}× of fcfs`);
exitProcess(0);
