/**
 * What `slidingWindowKv: "window"` (sliding layers keeping each sequence's window only) gives and costs.
 *
 * Memory: for published shapes of models with sliding layers (gpt-oss-20b and -120b, Gemma 2 9B,
 * Gemma 3 12B and 27B: layers, which slide, window, KV heads and head size as their config.json
 * states them), the tokens a KV budget (`--budget-gib`, f16) holds with paged sliding layers and with
 * windowed ones, as createEngine's own sizing (kvBlockCount) counts them, `--max-num-seqs` sequences
 * and as many checkpoints taken from the budget first, rings sized for steps of `--max-batch-tokens`
 * (or `--long-prefill-token-threshold` below it: one sequence's most a step). Measured: an engine of a random gpt-oss-shaped
 * model on `--backend` given the budget reports the blocks it allocated (`stats().kvTotalBlocks`).
 *
 * Time: one agent session of `--turns` turns on that model (each prompt the last prompt, its answer
 * and a tool result), paged and windowed alternating over `--rounds`; per turn the median time to first
 * token, the prompt tokens computed, and the median time per output token (a windowed decode copies its
 * windows into its checkpoint each time it ends a block). Figures: docs/bench-engine.md "Sliding-window KV".
 *
 *   npx deno run -A --no-check scripts/bench-window-kv.ts [--backend webgpu] [--budget-gib 40] [--max-num-seqs 64]
 *     [--max-batch-tokens 512] [--long-prefill-token-threshold N] [--memory-only]
 *     [--turns 4] [--prompt 512] [--answer 32] [--tool 96] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "../src/cli/args.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine, type CreateEngineOptions, kvBlockCount } from "../src/engine/engine-factory.ts";
import type { LoadedModel, ModelConfig } from "../src/model/config.ts";
import { windowBlocksFor, windowBytesPerSlot, windowCheckpointBlocks } from "../src/engine/kv-cache.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { median, timeAgentSession } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  "budget-gib": { kind: "number", min: 0.01, help: "KV budget for the published shapes, GiB (default 40)" },
  "max-num-seqs": { kind: "int", min: 1, help: "running sequences (and checkpoints) the windows are kept for (default 64)" },
  "max-batch-tokens": { kind: "int", min: 1, help: "step budget the rings are sized for (default 512)" },
  "long-prefill-token-threshold": { kind: "int", min: 1, help: "one sequence's most tokens a step (default: the step budget)" },
  "memory-only": { kind: "boolean", help: "count memory only: no engine, no timed session" },
  turns: { kind: "int", min: 2, help: "turns of the session (default 4)" },
  prompt: { kind: "int", min: 16, help: "the first prompt's tokens (default 512)" },
  answer: { kind: "int", min: 1, help: "tokens each turn generates (default 32)" },
  tool: { kind: "int", min: 1, help: "tokens of each tool result (default 96)" },
  rounds: { kind: "int", min: 1, help: "rounds over the two settings (default 3)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const budget = (f["budget-gib"] ?? 40) * 2 ** 30;
const maxRunning = f["max-num-seqs"] ?? 64;
const maxBatchTokens = f["max-batch-tokens"] ?? 512;
const threshold = f["long-prefill-token-threshold"];
const stepTokens = Math.min(maxBatchTokens, threshold ?? maxBatchTokens);
const [turns, promptLen, answer, tool, rounds] = [f.turns ?? 4, f.prompt ?? 512, f.answer ?? 32, f.tool ?? 96, f.rounds ?? 3];

const dir = mkdtempSync(`${tmpdir()}/bench-window-kv-`);
const model = await loadModel(await writeTestGguf(dir, "gpt-oss", {
  architecture: "gpt-oss", hidden: 256, layers: 8, heads: 4, kvHeads: 2, headDim: 64, ffn: 256, vocab: 2048, tied: false, dtype: "f16", seed: 6,
  ropeTheta: 150000, slidingWindow: 128, experts: { count: 4, used: 2 }, contextLength: 8192,
}));
rmSync(dir, { recursive: true, force: true });

/** A published shape: layers, which slide (every `period`-th layer is global, 2: alternate), window, KV heads, head size. */
interface Shape {
  name: string;
  layers: number;
  period: number;
  window: number;
  kvHeads: number;
  headDim: number;
}
const SHAPES: Shape[] = [
  { name: "gpt-oss-20b", layers: 24, period: 2, window: 128, kvHeads: 8, headDim: 64 },
  { name: "gpt-oss-120b", layers: 36, period: 2, window: 128, kvHeads: 8, headDim: 64 },
  { name: "gemma-2-9b", layers: 42, period: 2, window: 4096, kvHeads: 8, headDim: 256 },
  { name: "gemma-3-12b", layers: 48, period: 6, window: 1024, kvHeads: 8, headDim: 256 },
  { name: "gemma-3-27b", layers: 62, period: 6, window: 1024, kvHeads: 16, headDim: 128 },
];

/** The random model's config with a published shape's attention (all that KV sizing reads). */
function shaped(s: Shape): LoadedModel {
  const config: ModelConfig = {
    ...model.config, numLayers: s.layers, numKvHeads: s.kvHeads, headDim: s.headDim,
    slidingWindow: { size: s.window, layers: Array.from({ length: s.layers }, (_, i) => i % s.period < s.period - 1) },
  };
  return { ...model, config };
}

console.log(`# ${runtimeName()}; KV budget ${(budget / 2 ** 30).toFixed(1)} GiB f16, ${maxRunning} sequences + ${maxRunning} checkpoints, steps of ${maxBatchTokens} tokens${threshold !== undefined ? ` (${threshold} a sequence)` : ""}, blocks of 16`);
console.log("model  sliding/layers  window  tokens(paged)  tokens(window)  ratio  windows_gib");
const sizing: CreateEngineOptions = { kvMemoryBytes: budget, scheduler: { maxRunning, maxBatchTokens, ...(threshold !== undefined ? { longPrefillTokenThreshold: threshold } : {}) } };
for (const s of SHAPES) {
  const m = shaped(s);
  const paged = kvBlockCount(m, sizing, "f16") * 16;
  const sliding = m.config.slidingWindow!.layers.filter(Boolean).length;
  // What the windows take out of the budget first: a ring per running sequence, a smaller one per checkpoint.
  const windows = maxRunning * (windowBytesPerSlot(m.config, 16, "f16", windowBlocksFor(m.config, 16, stepTokens)) +
    windowBytesPerSlot(m.config, 16, "f16", windowCheckpointBlocks(s.window, 16)));
  let windowed: number | undefined;
  try {
    windowed = kvBlockCount(m, { ...sizing, slidingWindowKv: "window" }, "f16") * 16;
  } catch (e) {
    // The windows would take more than half the budget: createEngine refuses it so.
    if (!(e instanceof RangeError)) throw e;
  }
  const ratio = windowed === undefined ? "refused" : (windowed / paged).toFixed(2);
  console.log(`${s.name}  ${sliding}/${s.layers}  ${s.window}  ${paged}  ${windowed ?? "-"}  ${ratio}  ${(windows / 2 ** 30).toFixed(2)}`);
}
if (f["memory-only"]) exitProcess(0);

const { backend, reason } = await selectBackend(backendName as BackendChoice);
const small = 64 * 2 ** 20;
const engineOptions = (windowed: boolean): CreateEngineOptions => ({
  kvMemoryBytes: small, kvCacheDtype: "f16", scheduler: { maxRunning: 4, maxBatchTokens: 512 }, ...(windowed ? { slidingWindowKv: "window" } : {}),
});
for (const windowed of [false, true]) {
  const e = createEngine(backend, model, engineOptions(windowed));
  console.log(`# ${backend.info.name}: the random model (8 layers, 4 sliding, 2 KV heads of 64, window 128) in 64 MiB f16, ${windowed ? "windowed" : "paged"}: ${e.stats().kvTotalBlocks} blocks`);
  await e.stop();
}

/** One session, the sliding layers paged or windowed. */
const session = (windowed: boolean) => timeAgentSession(createEngine(backend, model, { ...engineOptions(windowed), numBlocks: 512 }), { turns, prompt: promptLen, answer, tool });

const runs = { paged: [] as Awaited<ReturnType<typeof session>>[], windowed: [] as Awaited<ReturnType<typeof session>>[] };
await session(true); // warm-up: compiles what both settings run
for (let r = 0; r < rounds; r++) {
  runs.paged.push(await session(false));
  runs.windowed.push(await session(true));
}
console.log(`# ${runtimeName()}, ${backend.info.name} (${reason}); ${turns} turns: prompt ${promptLen}, +${answer} answer +${tool} tool each; medians of ${rounds}`);
console.log("turn  prompt  computed(paged)  computed(window)  ttft_ms(paged)  ttft_ms(window)  tpot_ms(paged)  tpot_ms(window)");
for (let t = 0; t < turns; t++) {
  const m = (k: "paged" | "windowed", x: "ttft" | "tpot") => median(runs[k].map((s) => s[x][t])) * 1000;
  const len = promptLen + t * (answer + tool);
  console.log(`${t + 1}  ${len}  ${runs.paged[0].computed[t]}  ${runs.windowed[0].computed[t]}  ${m("paged", "ttft").toFixed(0)}  ${m("windowed", "ttft").toFixed(0)}  ${m("paged", "tpot").toFixed(1)}  ${m("windowed", "tpot").toFixed(1)}`);
}
exitProcess(0);
