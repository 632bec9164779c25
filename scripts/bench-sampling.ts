/**
 * What the sampling extras cost a step: for `--rows` rows of a Qwen-sized vocabulary (151936), the
 * time from logits on the device to sampled ids on the host for plain seeded sampling (temperature
 * 0.7, top-p 0.9), with min-p 0.05, and with a repetition penalty over `--seen` distinct tokens
 * (`penalizeRepeats`, its bits uploaded each step as the engine does) before it; on the reference
 * backend and on WebGPU (lavapipe on a GPU-less machine). Medians of `--repeats` steps after one
 * warm-up. Figures: docs/results/bench-sampling.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-sampling.ts [--rows 1,8] [--seen 2000] [--repeats 9]
 */
import { parseArgs } from "../src/cli/args.ts";
import { createReferenceBackend } from "../src/backend/reference/index.ts";
import type { Backend, SamplingRow } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { penalizeRepeatRows } from "../src/engine/engine-runner.ts";
import { TokenMask } from "../src/engine/output-constraint.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";

const VOCAB = 151936;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** A step's sampling on `be`: upload-free logits already on the device, then `extras`, then sample and download. */
async function step(be: Backend, logits: Float32Array, rows: number, extras: "plain" | "min-p" | "repetition", seen: TokenMask): Promise<number> {
  const x = be.upload(logits, [rows, VOCAB]);
  await be.download(be.upload(new Int32Array([0]), [1])); // the upload is done
  const t = performance.now();
  const row: SamplingRow = { temperature: 0.7, topK: 0, topP: 0.9, uniform: 0.42, ...(extras === "min-p" ? { minP: 0.05 } : {}) };
  if (extras === "repetition") penalizeRepeatRows(be, x, Array.from({ length: rows }, () => ({ seen, factor: 1.1 })));
  const ids = be.sample(x, Array.from({ length: rows }, () => row));
  await be.download(ids);
  const ms = performance.now() - t;
  be.free(ids);
  be.free(x);
  return ms;
}

async function bench(be: Backend, label: string, rowCounts: number[], seenCount: number, repeats: number): Promise<string[]> {
  const lines: string[] = [];
  const seen = new TokenMask(VOCAB);
  for (let i = 0; i < seenCount; i++) seen.set((i * 7919) % VOCAB);
  for (const rows of rowCounts) {
    // Logits spread like a model's: a few strong candidates over a long flat tail.
    const logits = Float32Array.from({ length: rows * VOCAB }, (_, i) => ((i * 2654435761) % 1000) / 100 - 5);
    const kinds = ["plain", "min-p", "repetition"] as const;
    const times: number[][] = kinds.map(() => []);
    for (const extras of kinds) await step(be, logits, rows, extras, seen);
    // Round-robin, so that drift on a shared machine falls on every case alike.
    for (let r = 0; r < repeats; r++) for (const [k, extras] of kinds.entries()) times[k].push(await step(be, logits, rows, extras, seen));
    const plain = median(times[0]);
    const cells = kinds.map((extras, k) => `${extras} ${median(times[k]).toFixed(2)} ms${k === 0 ? "" : ` (${(median(times[k]) / plain).toFixed(2)}×)`}`);
    lines.push(`${label.padEnd(10)} rows ${String(rows).padStart(2)}  ${cells.join("  |  ")}`);
  }
  return lines;
}

const flags = parseArgs(cliArgs(), {
  rows: { kind: "string", help: "row counts, comma-separated (default 1,8)" },
  seen: { kind: "number", help: "distinct tokens the repetition penalty covers (default 2000)" },
  repeats: { kind: "number", help: "timed steps per case (default 9)" },
});
const rowCounts = (flags.rows ?? "1,8").split(",").map(Number);
const seenCount = flags.seen ?? 2000;
const repeats = flags.repeats ?? 9;
const out = [`vocab ${VOCAB}, repetition penalty over ${seenCount} tokens, medians of ${repeats} steps (logits on the device → ids on the host)`];
out.push(...await bench(createReferenceBackend(), "reference", rowCounts, seenCount, repeats));
try {
  const gpu = await createWebGpuBackend();
  out.push(...await bench(gpu, "webgpu", rowCounts, seenCount, repeats));
  gpu.destroy();
} catch (e) {
  out.push(`webgpu: unavailable (${e instanceof Error ? e.message : String(e)})`);
}
console.log(out.join("\n"));
exitProcess(0);
