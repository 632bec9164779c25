/**
 * One decode-shaped WebGPU matmul ([1, k] · [m, k]ᵀ) per weight format, the formats taken in turn
 * for several rounds (so a busy machine slows them alike), each figure the median of 5 timings of
 * 10 calls completed by one flush. The weights are the same values encoded in each format. Isolates
 * the weight decode from a model's other kernels (scripts/bench-engine.ts times whole steps).
 * Figures: docs/bench-engine.md.
 *
 *   npx deno run -A scripts/bench-weight-formats.ts [--dtypes iq1_s,iq1_m,iq2_xxs,q8_0] [--k 2048] [--m 2048] [--rounds 3]
 */
import { ArgsError, parseArgs } from "../src/cli/args.ts";
import { cliArgs, exitProcess } from "../src/runtime/env.ts";
import { selectBackend } from "../src/backend/select.ts";
import { blockValues, encodeFromF32 } from "../src/backend/dtype-codec.ts";
import { type Tensor, WEIGHT_DTYPES, type WeightDType } from "../src/backend/types.ts";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const f = parseArgs(cliArgs(), {
    dtypes: { kind: "string", help: "comma list of weight formats (default iq1_s,iq1_m,iq2_xxs,q8_0)" },
    k: { kind: "int", min: 1, help: "inner dimension (default 2048)" },
    m: { kind: "int", min: 1, help: "output rows (default 2048)" },
    rounds: { kind: "int", min: 1, help: "rounds over the formats (default 3)" },
  });
  const k = f.k ?? 2048;
  const m = f.m ?? 2048;
  const dtypes = (f.dtypes ?? "iq1_s,iq1_m,iq2_xxs,q8_0").split(",");
  for (const d of dtypes) {
    if (!(WEIGHT_DTYPES as readonly string[]).includes(d)) throw new ArgsError(`Unknown weight format "${d}"; choose from ${WEIGHT_DTYPES.join(", ")}`);
    if (k % blockValues(d as WeightDType) !== 0) throw new ArgsError(`--k ${k} is not a whole number of ${d} blocks (${blockValues(d as WeightDType)} values)`);
  }
  const { backend: b } = await selectBackend("webgpu");
  // Trained-weight-like values: a smooth spread in [-0.5, 0.5], the same for every format.
  const values = Float32Array.from({ length: m * k }, (_, i) => Math.sin(i * 12.9898) * 0.5);
  const x = b.upload(Float32Array.from({ length: k }, (_, i) => Math.cos(i * 0.37)), [1, k]);
  const weights = new Map(dtypes.map((d) => [d, b.uploadWeight(encodeFromF32(values, d as WeightDType), [m, k], d as WeightDType)]));
  const figures = new Map<string, number[]>(dtypes.map((d) => [d, []]));
  for (let round = 0; round <= (f.rounds ?? 3); round++) {
    for (const d of dtypes) {
      const ms: number[] = [];
      for (let r = 0; r < 5; r++) {
        const t0 = performance.now();
        const outs: Tensor[] = [];
        for (let i = 0; i < 10; i++) outs.push(b.matmul(x, weights.get(d)!));
        await b.flush();
        for (const o of outs) b.free(o);
        ms.push((performance.now() - t0) / 10);
      }
      if (round > 0) figures.get(d)!.push(median(ms)); // round 0 warms pipelines and buffers
    }
  }
  console.log(`device: ${b.info.device}; matmul [1, ${k}] · [${m}, ${k}]ᵀ, ms per call (median of 5 × 10 calls, per round)`);
  for (const d of dtypes) console.log(`${d.padEnd(8)} ${figures.get(d)!.map((x) => x.toFixed(2)).join(" / ")}`);
  b.destroy();
}

main().then(() => exitProcess(0), (e) => {
  console.error(e instanceof Error ? e.message : String(e));
  exitProcess(e instanceof ArgsError ? 2 : 1);
});
