/**
 * One mixture-of-experts feed-forward on a backend, at Qwen3-30B-A3B's shape (hidden 2048, 128
 * experts of width 768, 8 per token): route, gate/up/down expert matmuls, combine. Times decode
 * (1 token) and prefill (TOKENS tokens) with WebGPU's two expert kernels forced in turn (the GEMV
 * per routed row, and rows grouped by expert into register-blocked tiles), plus, for scale, the
 * dense FFN of the same active width (8 × 768) on the same tokens; each as separate gate and up
 * matmuls and SiLU product, and fused (matmulExpertsGlu, matmulGlu). Medians of REPEATS runs.
 *
 *   ./node_modules/.bin/deno run -A scripts/bench-moe.ts [--dtype q4_k|q8_0|f16] [--tokens 64] [--experts 128]
 */
import { encodeFromF32 } from "../src/backend/dtype-codec.ts";
import type { Backend, Tensor, WeightDType } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { exitProcess } from "../src/runtime/env.ts";
import { parseArgs } from "node:util";

const { values: opts } = parseArgs({
  options: { dtype: { type: "string", default: "q4_k" }, tokens: { type: "string", default: "64" }, experts: { type: "string", default: "128" }, repeats: { type: "string", default: "5" } },
});
const dtype = opts.dtype as WeightDType;
const [hidden, ff, used] = [2048, 768, 8];
const experts = Number(opts.experts);
const tokens = Number(opts.tokens);
const repeats = Number(opts.repeats);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** One expert's matrix, encoded once and repeated for every expert (the bytes do not change the time). */
function stacked(out: number, inner: number, count: number, seed: number): Uint8Array {
  const one = encodeFromF32(Float32Array.from({ length: out * inner }, (_, i) => Math.sin(i * 0.37 + seed) * 0.05), dtype);
  const all = new Uint8Array(one.length * count);
  for (let e = 0; e < count; e++) all.set(one, e * one.length);
  return all;
}

async function time(b: Backend, run: () => Tensor[]): Promise<number> {
  for (const t of run()) b.free(t); // warm-up: pipelines compiled
  await b.flush();
  const ms: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    const outs = run();
    await b.download(outs[outs.length - 1]);
    ms.push(performance.now() - t0);
    for (const t of outs) b.free(t);
  }
  return median(ms);
}

async function measure(gemvMaxRows: number, n: number): Promise<{ moe: number; moeFused: number; dense: number; denseFused: number }> {
  const b = await createWebGpuBackend({ gemvMaxRows });
  try {
    const router = b.upload(Float32Array.from({ length: experts * hidden }, (_, i) => Math.sin(i * 1.3) * 0.1), [experts, hidden]);
    const gate = b.uploadWeight(stacked(ff, hidden, experts, 1), [experts, ff, hidden], dtype);
    const up = b.uploadWeight(stacked(ff, hidden, experts, 2), [experts, ff, hidden], dtype);
    const down = b.uploadWeight(stacked(hidden, ff, experts, 3), [experts, hidden, ff], dtype);
    const x = b.upload(Float32Array.from({ length: n * hidden }, (_, i) => Math.cos(i * 0.11)), [n, hidden]);
    const moe = await time(b, () => {
      const logits = b.matmul(x, router);
      const { ids, weights } = b.moeRoute(logits, used, { normalize: true });
      const g = b.matmulExperts(x, gate, ids);
      const u = b.matmulExperts(x, up, ids);
      const a = b.siluMul(g, u);
      const d = b.matmulExperts(a, down, ids);
      return [logits, ids, weights, g, u, a, d, b.moeCombine(d, weights)];
    });
    const moeFused = await time(b, () => {
      const logits = b.matmul(x, router);
      const { ids, weights } = b.moeRoute(logits, used, { normalize: true });
      const a = b.matmulExpertsGlu(x, gate, up, ids, "silu");
      const d = b.matmulExperts(a, down, ids);
      return [logits, ids, weights, a, d, b.moeCombine(d, weights)];
    });
    for (const t of [router, gate, up, down]) b.free(t);
    const dGate = b.uploadWeight(stacked(ff * used, hidden, 1, 1), [ff * used, hidden], dtype);
    const dUp = b.uploadWeight(stacked(ff * used, hidden, 1, 2), [ff * used, hidden], dtype);
    const dDown = b.uploadWeight(stacked(hidden, ff * used, 1, 3), [hidden, ff * used], dtype);
    const dense = await time(b, () => {
      const g = b.matmul(x, dGate);
      const u = b.matmul(x, dUp);
      const a = b.siluMul(g, u);
      return [g, u, a, b.matmul(a, dDown)];
    });
    const denseFused = await time(b, () => {
      const a = b.matmulGlu(x, dGate, dUp, "silu");
      return [a, b.matmul(a, dDown)];
    });
    for (const t of [dGate, dUp, dDown, x]) b.free(t);
    return { moe, moeFused, dense, denseFused };
  } finally {
    b.destroy();
  }
}

console.log(`MoE FFN: hidden ${hidden}, ${experts} experts × ${ff}, ${used} per token, ${dtype}; median of ${repeats} (ms)`);
console.log("tokens | kernel                 | MoE FFN | fused | dense FFN, same active width | fused");
for (const n of [1, tokens]) {
  for (const [name, gemvMaxRows] of [["GEMV per routed row", 1 << 20], ["grouped tiles", 0]] as const) {
    const r = await measure(gemvMaxRows, n);
    console.log(`${String(n).padStart(6)} | ${name.padEnd(22)} | ${r.moe.toFixed(0).padStart(7)} | ${r.moeFused.toFixed(0).padStart(5)} | ${r.dense.toFixed(0).padStart(28)} | ${r.denseFused.toFixed(0).padStart(5)}`);
  }
}
exitProcess(0);
