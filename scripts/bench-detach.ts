/**
 * What one detached ArrayBuffer costs the reference backend's kernels. V8 keeps an
 * "ArrayBufferDetaching" protector per isolate: while no buffer has ever been detached there, its
 * optimized code may treat a typed array's length as fixed; the first detach (a `postMessage` or
 * `structuredClone` with a transfer list, a byte stream's enqueue, a WebAssembly memory's growth)
 * invalidates it for the isolate's whole life, and every typed-array loop is compiled with the
 * checks put back. This times `pagedAttention` (one decode row over `--context` positions, the
 * bench-agent-kv model's shape by default: 6 query heads of 64 over one KV head), a 64×384×384 `matmul` and an
 * expert matmul (16 tokens, two of eight 512×256 experts each) in
 * one isolate, before and after detaching one 16-byte buffer, and prints medians and their ratios.
 * Why a worker thread never transfers what it sends (src/cluster/worker-host.ts). Figures:
 * docs/results/bench-detach.md.
 *
 *   npx tsx scripts/bench-detach.ts [--context 1000] [--repeats 15] [--heads 6 --kv-heads 1] [--rows 1]
 */
import { ArgsError, parseArgs } from "../src/cli/args.ts";
import { pagedAttention } from "../src/backend/reference/attention.ts";
import { matmul } from "../src/backend/reference/linear.ts";
import { matmulExperts } from "../src/backend/reference/experts.ts";
import { f32Tensor, i32Tensor, type RefTensor } from "../src/backend/reference/storage.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";

const BLOCK = 16;
const HEAD_DIM = 64;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const random = (n: number, seed: number) => {
  // A fixed LCG: the same values on every run, and no Math.random state to share.
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) - 0.5);
};

/** Median ms of one call of `fn`, over `repeats` timings of `inner` calls each. */
function time(fn: () => RefTensor, repeats: number, inner: number): number {
  const ms: number[] = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    for (let i = 0; i < inner; i++) fn();
    ms.push((performance.now() - t0) / inner);
  }
  return median(ms);
}

function main(): void {
  const f = parseArgs(cliArgs(), {
    context: { kind: "int", min: 1, help: "positions the decode row attends to (default 1000)" },
    repeats: { kind: "int", min: 1, help: "timings per figure (default 15)" },
    heads: { kind: "int", min: 1, help: "query heads (default 6)" },
    "kv-heads": { kind: "int", min: 1, help: "KV heads, dividing --heads (default 1)" },
    rows: { kind: "int", min: 1, help: "query rows: a prefill chunk of this many tokens ending at --context (default 1: one decode row)" },
  });
  const context = f.context ?? 1000;
  const HEADS = f.heads ?? 6;
  const KV_HEADS = f["kv-heads"] ?? 1;
  if (HEADS % KV_HEADS !== 0) throw new ArgsError(`--kv-heads ${KV_HEADS} does not divide --heads ${HEADS}`);
  const repeats = f.repeats ?? 15;
  const rows = f.rows ?? 1;
  if (rows > context) throw new ArgsError(`--rows ${rows} is more than --context ${context}`);
  const blocks = Math.ceil(context / BLOCK);
  const kCache = f32Tensor(random(blocks * BLOCK * KV_HEADS * HEAD_DIM, 1), [blocks, BLOCK, KV_HEADS, HEAD_DIM]);
  const vCache = f32Tensor(random(blocks * BLOCK * KV_HEADS * HEAD_DIM, 2), [blocks, BLOCK, KV_HEADS, HEAD_DIM]);
  const q = f32Tensor(random(rows * HEADS * HEAD_DIM, 3), [rows, HEADS, HEAD_DIM]);
  const batch = {
    tokenSeq: i32Tensor(new Int32Array(rows), [rows]),
    tokenPos: i32Tensor(Int32Array.from({ length: rows }, (_, i) => context - rows + i), [rows]),
    blockTables: i32Tensor(Int32Array.from({ length: blocks }, (_, i) => i), [1, blocks]),
    maxContext: context,
  };
  const x = f32Tensor(random(64 * 384, 4), [64, 384]);
  const w = f32Tensor(random(384 * 384, 5), [384, 384]);
  const attention = () => pagedAttention(q, kCache, vCache, batch, 0.125);
  const project = () => matmul(x, w);
  // A mixture-of-experts projection: 16 tokens, two of eight experts each, 512×256 expert matrices.
  const ex = f32Tensor(random(16 * 256, 6), [16, 256]);
  const ew = f32Tensor(random(8 * 512 * 256, 7), [8, 512, 256]);
  const ids = i32Tensor(Int32Array.from({ length: 32 }, (_, i) => (i * 5) % 8), [16, 2]);
  const experts = () => matmulExperts(ex, ew, ids);
  const measure = () => ({
    attention: time(attention, repeats, Math.max(1, Math.round(30 / rows))), matmul: time(project, repeats, 5), experts: time(experts, repeats, 5),
  });
  measure(); // warm-up: both kernels optimized before the first figure
  const before = measure();
  const buffer = new ArrayBuffer(16);
  structuredClone(buffer, { transfer: [buffer] });
  if (buffer.byteLength !== 0) throw new Error("The buffer was not detached");
  measure(); // the kernels' code deoptimized by the detach is optimized again
  const after = measure();
  console.log(`bench-detach: ${context} positions, ${HEADS} heads of ${HEAD_DIM} over ${KV_HEADS} KV heads; medians of ${repeats}`);
  console.log("| kernel | before a detach (ms) | after (ms) | after / before |");
  console.log("|---|---|---|---|");
  for (const k of ["attention", "matmul", "experts"] as const) {
    const label = k === "attention" ? `pagedAttention, ${rows} row${rows === 1 ? "" : "s"} × ${context}` : k === "matmul" ? "matmul 64×384×384" : "matmulExperts 16 tokens × 2 of 8, 512×256";
    console.log(`| ${label} | ${before[k].toFixed(3)} | ${after[k].toFixed(3)} | ${(after[k] / before[k]).toFixed(2)} |`);
  }
}

try {
  main();
} catch (e) {
  console.error(e instanceof Error ? e.message : String(e));
  exitProcess(2);
}
