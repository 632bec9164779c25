/**
 * CUDA timing table for scripts/device-check.sh (an NVIDIA GPU is required):
 * - copy bandwidth (copy kernel, read + write), the ceiling for memory-bound kernels;
 * - decode attention GB/s (f32 KV bytes read ÷ device time) at long contexts vs that bandwidth;
 * - matmul TFLOP/s with bf16 weights at 4096-class shapes vs torch.matmul (from --torch JSON);
 * - one decode step of a random-weight Llama-3.1-8B-shaped bf16 model vs its bandwidth floor.
 * Usage: deno run -A scripts/device-bench-cuda.ts [--torch torch.json] [--out dir]
 */
import { writeFileSync, readFileSync, existsSync } from "node:fs";
import { createCudaBackend, type CudaBackend } from "../src/backend/cuda/index.ts";
import { cliArgs } from "../src/runtime/env.ts";
import { decodeStepMs, LLAMA_8B, stepBytes } from "./device-llama-step.ts";

const args = cliArgs();
const flag = (name: string) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const torchPath = flag("--torch");
const outDir = flag("--out") ?? ".";

interface TorchResults { matmul: { n: number; k: number; out: number; tflops: number }[]; copyGBps?: number; device?: string }
const torch: TorchResults | undefined = torchPath && existsSync(torchPath)
  ? JSON.parse(readFileSync(torchPath, "utf8")) as TorchResults : undefined;

const be: CudaBackend = createCudaBackend();
console.log(`device: ${be.info.device}; reported peak ${be.info.peakGBps?.toFixed(0) ?? "?"} GB/s`);

// --- copy bandwidth ---------------------------------------------------------------------------
const copyGBps = Math.max(...[0, 1, 2].map(() => be.copyBandwidthGBps(1 << 30, 20)));
console.log(`copy kernel: ${copyGBps.toFixed(0)} GB/s (torch copy: ${torch?.copyGBps?.toFixed(0) ?? "n/a"} GB/s)`);

// --- decode attention -------------------------------------------------------------------------
interface AttnResult { batch: number; context: number; gbps: number; ms: number }
function attentionCase(batch: number, context: number): AttnResult {
  const [heads, kvHeads, headDim, blockSize] = [32, 8, 128, 16];
  const blocksPer = Math.ceil(context / blockSize);
  const numBlocks = batch * blocksPer;
  const kc = be.randomWeight([numBlocks, blockSize, kvHeads, headDim], "f32", 1, 1);
  const vc = be.randomWeight([numBlocks, blockSize, kvHeads, headDim], "f32", 2, 1);
  const tables = new Int32Array(numBlocks);
  for (let i = 0; i < numBlocks; i++) tables[i] = (i * 7919) % numBlocks; // scattered blocks (gcd 1 with 7919 prime)
  const batchT = {
    tokenSeq: be.upload(Int32Array.from({ length: batch }, (_, i) => i), [batch]),
    tokenPos: be.upload(new Int32Array(batch).fill(context - 1), [batch]),
    blockTables: be.upload(tables, [batch, blocksPer]),
    maxContext: context,
  };
  const q = be.upload(new Float32Array(batch * heads * headDim).fill(0.01), [batch, heads, headDim]);
  const run = () => be.free(be.pagedAttention(q, kc, vc, batchT, 1 / Math.sqrt(headDim)));
  run();
  const iters = 20;
  const ms = be.timeMs(() => { for (let i = 0; i < iters; i++) run(); }) / iters;
  const bytes = batch * context * kvHeads * headDim * 4 * 2;
  for (const t of [kc, vc, q, batchT.tokenSeq, batchT.tokenPos, batchT.blockTables]) be.free(t);
  return { batch, context, ms, gbps: bytes / (ms / 1e3) / 1e9 };
}
const attention = [[1, 4096], [1, 32768], [8, 8192], [8, 32768], [32, 4096]].map(([b, c]) => attentionCase(b, c));
for (const a of attention) console.log(`attention b=${a.batch} ctx=${a.context}: ${a.ms.toFixed(3)} ms, ${a.gbps.toFixed(0)} GB/s`);

// --- matmul ------------------------------------------------------------------------------------
// "fast" rounds activations to bf16 once (what torch.matmul on bf16 tensors computes); "exact"
// (the backend default) splits them into two bf16 terms and so runs twice the MMAs.
const fastBe: CudaBackend = createCudaBackend({ matmulPrecision: "fast" });
interface MatmulResult {
  n: number; k: number; out: number; tflops: number; exactTflops: number; torchTflops?: number; path: string;
}
function matmulTflops(b: CudaBackend, n: number, k: number, out: number): number {
  const w = b.randomWeight([out, k], "bf16", 3, 0.05);
  const x = b.randomWeight([n, k], "f32", 4, 1);
  const run = () => b.free(b.matmul(x, w));
  run();
  const iters = 10;
  const ms = b.timeMs(() => { for (let i = 0; i < iters; i++) run(); }) / iters;
  b.free(w); b.free(x);
  return (2 * n * k * out) / (ms / 1e3) / 1e12;
}
function matmulCase(n: number, k: number, out: number): MatmulResult {
  const t = torch?.matmul.find((m) => m.n === n && m.k === k && m.out === out);
  return {
    n, k, out, tflops: matmulTflops(fastBe, n, k, out), exactTflops: matmulTflops(be, n, k, out),
    torchTflops: t?.tflops, path: be.matmulPath("bf16", n, k, out),
  };
}
const MATMUL_SHAPES = [[4096, 4096, 4096], [4096, 4096, 14336], [4096, 14336, 4096], [2048, 4096, 6144]];
const matmul = MATMUL_SHAPES.map(([n, k, o]) => matmulCase(n, k, o));
for (const m of matmul) {
  console.log(`matmul [${m.n}x${m.k}]·[${m.out}x${m.k}]ᵀ ${m.path}: fast ${m.tflops.toFixed(1)}, exact ${m.exactTflops.toFixed(1)} TFLOP/s (torch ${m.torchTflops?.toFixed(1) ?? "n/a"})`);
}
fastBe.destroy();

// --- 8B decode step ----------------------------------------------------------------------------
const context = 1024;
const step = decodeStepMs(be, LLAMA_8B, context);
const bytes = stepBytes(LLAMA_8B, context);
const floorMs = bytes / (copyGBps * 1e9) * 1e3;
console.log(`8B decode step (ctx ${context}): device ${step.deviceMs.toFixed(3)} ms, wall ${step.wallMs.toFixed(3)} ms; ` +
  `${(bytes / 1e9).toFixed(2)} GB read, floor ${floorMs.toFixed(3)} ms`);

const opSum = Object.values(step.perOpMs).reduce((a, b) => a + b, 0);
for (const [name, ms] of Object.entries(step.perOpMs).sort((a, b) => b[1] - a[1])) {
  console.log(`  ${name.padEnd(16)} ${ms.toFixed(3)} ms per step (${(ms / opSum * 100).toFixed(0)}%)`);
}
console.log(`  ops timed alone sum to ${opSum.toFixed(3)} ms (each with one launch latency)`);

// --- table -------------------------------------------------------------------------------------
const longest = attention.filter((a) => a.context >= 32768);
const attnBest = Math.max(...longest.map((a) => a.gbps));
const mm = matmul[0];
const rows: [string, string, string, string, string, boolean][] = [
  ["decode attention, ctx 32k (best of b=1,8)", `${attnBest.toFixed(0)} GB/s`, `copy ${copyGBps.toFixed(0)} GB/s`,
    `${(attnBest / copyGBps * 100).toFixed(0)}%`, "≥ 80%", attnBest / copyGBps >= 0.8],
  ["matmul bf16 4096³ (fast; exact " + mm.exactTflops.toFixed(0) + ")", `${mm.tflops.toFixed(0)} TFLOP/s`, `torch ${mm.torchTflops?.toFixed(0) ?? "n/a"} TFLOP/s`,
    mm.torchTflops ? `${(mm.tflops / mm.torchTflops * 100).toFixed(0)}%` : "n/a", "≥ 70%",
    mm.torchTflops !== undefined && mm.tflops / mm.torchTflops >= 0.7],
  ["Llama-3.1-8B bf16 decode step (b=1)", `${step.wallMs.toFixed(2)} ms`, `floor ${floorMs.toFixed(2)} ms`,
    `${(step.wallMs / floorMs).toFixed(2)}×`, "≤ 1.3×", step.wallMs / floorMs <= 1.3],
];
const table = [
  `CUDA device check — ${be.info.device}`,
  "| metric | ours | ceiling | ratio | target | met |",
  "|---|---|---|---|---|---|",
  ...rows.map((r) => `| ${r.slice(0, 5).join(" | ")} | ${r[5] ? "yes" : "NO"} |`),
].join("\n");
writeFileSync(`${outDir}/cuda-bench.json`, JSON.stringify({ device: be.info.device, copyGBps, attention, matmul, step: { ...step, bytes, floorMs, context }, torch }, null, 2));
writeFileSync(`${outDir}/cuda-table.md`, table + "\n");
be.destroy();
console.log("\n" + table);
