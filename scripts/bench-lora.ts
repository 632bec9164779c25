/**
 * What serving LoRA adapters costs: `--requests` concurrent greedy requests (`--tokens` each, ignore_eos)
 * on one engine, with every request on the base model, all on one adapter, spread over `--adapters`
 * adapters, and half on the base, half on one adapter (a batch mixing them). The adapters change every
 * q/k/v/o and gate/up/down projection at `--rank`. Prints the median over `--repeats` rounds (the modes
 * take turns within a round) of the wall time and generated tokens per second, and each mode's ratio
 * to the base-only run. Models:
 * stories260K, and a random Llama of `--hidden` width (f16, 4 layers) where the projections weigh
 * more against the per-op overheads. Figures: docs/results/bench-lora.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-lora.ts [--backend webgpu] [--rank 16]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "../src/cli/args.ts";
import { type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { GenerateRequest } from "../src/engine/engine-types.ts";
import type { LoadedModel } from "../src/model/config.ts";
import { loadModel } from "../src/model/load.ts";
import { loadLoraAdapter } from "../src/model/lora-load.ts";
import type { LoraAdapter } from "../src/model/lora.ts";
import { cliArgs } from "../src/runtime/env.ts";
import { writeFile } from "../src/runtime/fs.ts";
import { loraGgufBytes } from "../tests/model/lora-files.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "../tests/model/model-files.ts";

const FLAGS = {
  backend: { kind: "string", help: "reference|webgpu|cuda|auto (default auto)" },
  requests: { kind: "int", min: 1, help: "concurrent requests (default 8)" },
  tokens: { kind: "int", min: 1, help: "tokens each generates (default 32)" },
  adapters: { kind: "int", min: 2, help: "adapters in the spread mode (default 4)" },
  rank: { kind: "int", min: 1, help: "adapter rank (default 16)" },
  hidden: { kind: "int", min: 64, help: "width of the random Llama (default 512)" },
  repeats: { kind: "int", min: 1, help: "runs per mode, median reported (default 3)" },
} as const;
const f = parseArgs(cliArgs(), FLAGS);
const requests = f.requests ?? 8, tokens = f.tokens ?? 32, spread = f.adapters ?? 4, rank = f.rank ?? 16, repeats = f.repeats ?? 3;
const { backend, reason } = await selectBackend((f.backend ?? "auto") as BackendChoice);
console.log(`backend ${backend.info.name} (${reason}); ${requests} requests × ${tokens} tokens, rank ${rank}, median of ${repeats}`);

const dir = mkdtempSync(`${tmpdir()}/bench-lora-`);
const hidden = f.hidden ?? 512;
const spec: ModelFileSpec = { architecture: "llama", hidden, layers: 4, heads: hidden / 64, kvHeads: hidden / 128, headDim: 64, ffn: hidden * 3, vocab: 2048, tied: false, dtype: "f16", seed: 5 };
await writeFile(`${dir}/medium.gguf`, ggufBytes(spec, randomHfWeights(spec)));
const models: [string, LoadedModel][] = [
  ["stories260K", await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname)],
  [`random llama ${hidden}×4 f16`, await loadModel(`${dir}/medium.gguf`)],
];

async function adaptersFor(model: LoadedModel): Promise<LoraAdapter[]> {
  const c = model.config;
  const targets = Array.from({ length: c.numLayers }, (_, layer) => (["wq", "wk", "wv", "wo", "wGate", "wUp", "wDown"] as const).map((target) => ({ layer, target }))).flat();
  const out: LoraAdapter[] = [];
  for (let i = 0; i < spread; i++) {
    await writeFile(`${dir}/a${i}.gguf`, loraGgufBytes(c, { seed: 100 + i, rank, alpha: 2 * rank, targets, magnitude: 0.05 }));
    out.push(await loadLoraAdapter(`${dir}/a${i}.gguf`, c));
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

for (const [name, model] of models) {
  const adapters = await adaptersFor(model);
  const prompt = Array.from({ length: 32 }, (_, i) => 1 + ((i * 37) % (model.config.vocabSize - 1)));
  const modes: [string, (i: number) => string | undefined][] = [
    ["base only", () => undefined],
    ["one adapter", () => "a0"],
    [`${spread} adapters`, (i) => `a${i % spread}`],
    ["half base, half adapter", (i) => (i % 2 === 0 ? undefined : "a0")],
  ];
  console.log(`\n${name}`);
  // Modes take turns within each round, so the machine's drift spreads over all of them alike.
  const walls: number[][] = modes.map(() => []);
  for (let r = 0; r < repeats + 1; r++) {
    for (const [m, [, pick]] of modes.entries()) {
      const engine = createEngine(backend, model, { numBlocks: 256 });
      adapters.forEach((a, i) => engine.loadAdapter(`a${i}`, a));
      const t0 = performance.now();
      // Distinct first tokens: no request reuses another's prefix.
      const reqs: GenerateRequest[] = Array.from({ length: requests }, (_, i) => ({ prompt: [1 + i, ...prompt], maxTokens: tokens, temperature: 0, ignoreEos: true, ...(pick(i) ? { adapter: pick(i) } : {}) }));
      await Promise.all(reqs.map((q) => engine.submit(q).result));
      if (r > 0) walls[m].push((performance.now() - t0) / 1000); // the first round warms the pipelines up
      await engine.stop();
    }
  }
  const baseS = median(walls[0]);
  for (const [m, [label]] of modes.entries()) {
    const wall = median(walls[m]);
    console.log(`  ${label.padEnd(24)} wall ${wall.toFixed(3)} s  ${(requests * tokens / wall).toFixed(1).padStart(7)} tok/s  ×${(wall / baseS).toFixed(2)} of base`);
  }
}
rmSync(dir, { recursive: true, force: true });
backend.destroy();
