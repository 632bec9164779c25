/**
 * WebGPU `pagedAttention` on its own: decode rows (one new token per sequence over `--context`
 * cached positions) or one prefill chunk, in a grouped-query shape, timed as recorded calls that a
 * flush completes. Prints the median milliseconds per call and the K/V bytes a call must read at
 * least (each KV head's rows once), as GB/s, next to the device's copy bandwidth. On a machine
 * without a GPU this is Mesa's lavapipe (run it where `deno task serve` would find a GPU to see a
 * laptop's figures). Figures: docs/bench-engine.md "Attention on its own".
 *
 *   npx deno run -A scripts/bench-webgpu-attention.ts [--seqs 8] [--context 1024] [--rows 1]
 *     [--heads 32] [--kv-heads 8] [--head-dim 64] [--kv-dtype f16|f32|f8_e4m3] [--calls 5] [--repeats 7]
 */
import { ArgsError, parseArgs } from "../src/cli/args.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { selectBackend } from "../src/backend/select.ts";
import { encodeFromF32 } from "../src/backend/dtype-codec.ts";
import { measureCeilings } from "../src/backend/webgpu/ceilings.ts";
import type { WebGpuBackend } from "../src/backend/webgpu/index.ts";
import type { Tensor } from "../src/backend/types.ts";

const BLOCK = 16;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const random = (n: number, seed: number) => {
  // A fixed LCG: the same values on every run.
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32) - 0.5);
};

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), {
    seqs: { kind: "int", min: 1, help: "sequences, one decode row each (default 8; 1 with --rows > 1)" },
    context: { kind: "int", min: 1, help: "positions each row attends to (default 1024)" },
    rows: { kind: "int", min: 1, help: "a prefill chunk of this many rows of one sequence ending at --context (default 1: decode)" },
    heads: { kind: "int", min: 1, help: "query heads (default 32)" },
    "kv-heads": { kind: "int", min: 1, help: "KV heads, dividing --heads (default 8)" },
    "head-dim": { kind: "int", min: 2, help: "head dimension (default 64)" },
    "kv-dtype": { kind: "string", help: "f16 (default, the engine's), f32 or f8_e4m3 (--kv-cache-dtype fp8)" },
    calls: { kind: "int", min: 1, help: "calls per timing, completed by one flush (default 5)" },
    repeats: { kind: "int", min: 1, help: "timings per figure (default 7)" },
  });
  const rows = f.rows ?? 1;
  const seqs = rows > 1 ? 1 : f.seqs ?? 8;
  const context = f.context ?? 1024;
  const heads = f.heads ?? 32;
  const kvHeads = f["kv-heads"] ?? 8;
  const headDim = f["head-dim"] ?? 64;
  const kvDtype = f["kv-dtype"] ?? "f16";
  if (kvDtype !== "f16" && kvDtype !== "f32" && kvDtype !== "f8_e4m3") throw new ArgsError(`Unknown --kv-dtype "${kvDtype}"; use f16, f32 or f8_e4m3`);
  if (heads % kvHeads !== 0) throw new ArgsError(`--kv-heads ${kvHeads} does not divide --heads ${heads}`);
  if (rows > context) throw new ArgsError(`--rows ${rows} is more than --context ${context}`);
  const calls = f.calls ?? 5;
  const repeats = f.repeats ?? 7;

  const { backend } = await selectBackend("webgpu");
  const b = backend as WebGpuBackend;
  const blocksPerSeq = Math.ceil(context / BLOCK);
  const cacheShape = [seqs * blocksPerSeq, BLOCK, kvHeads, headDim];
  const cacheLen = cacheShape.reduce((a, x) => a * x, 1);
  const cache = (seed: number): Tensor =>
    kvDtype === "f32" ? b.upload(random(cacheLen, seed), cacheShape) : b.uploadWeight(encodeFromF32(random(cacheLen, seed), kvDtype), cacheShape, kvDtype);
  const kc = cache(1);
  const vc = cache(2);
  const n = seqs * rows;
  const seq = Int32Array.from({ length: n }, (_, i) => Math.floor(i / rows));
  const pos = Int32Array.from({ length: n }, (_, i) => context - rows + (i % rows));
  const tables = Int32Array.from({ length: seqs * blocksPerSeq }, (_, i) => i);
  const batch = {
    tokenSeq: b.upload(seq, [n]),
    tokenPos: b.upload(pos, [n]),
    blockTables: b.upload(tables, [seqs, blocksPerSeq]),
    maxContext: context,
  };
  const q = b.upload(random(n * heads * headDim, 3), [n, heads, headDim]);
  const run = async () => {
    const outs: Tensor[] = [];
    for (let i = 0; i < calls; i++) outs.push(b.pagedAttention(q, kc, vc, batch, 1 / Math.sqrt(headDim)));
    await b.flush();
    for (const o of outs) b.free(o);
  };
  await run(); // pipelines compiled, buffers touched
  const ms: number[] = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    await run();
    ms.push((performance.now() - t0) / calls);
  }
  const ceilings = await measureCeilings(b, { bytes: 32 << 20 });
  const kvBytes = 2 * seqs * context * kvHeads * headDim * (kvDtype === "f16" ? 2 : kvDtype === "f8_e4m3" ? 36 / 32 : 4);
  const med = median(ms);
  console.log(`device: ${b.info.device}`);
  console.log(
    `pagedAttention seqs=${seqs} rows=${rows} context=${context} heads=${heads}/${kvHeads} headDim=${headDim} ${kvDtype} cache: ` +
      `median ${med.toFixed(3)} ms per call (of ${repeats}: ${ms.map((x) => x.toFixed(2)).join(" ")}); ` +
      `K/V ${(kvBytes / 1e6).toFixed(1)} MB, ${(kvBytes / med / 1e6).toFixed(2)} GB/s (copy ${ceilings.copyGBps.toFixed(1)} GB/s)`,
  );
  b.destroy();
}

main().then(() => exitProcess(0), (e) => {
  console.error(e instanceof Error ? e.message : String(e));
  exitProcess(e instanceof ArgsError ? 2 : 1);
});
