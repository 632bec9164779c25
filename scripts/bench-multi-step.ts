/**
 * Multi-step decoding (EngineOptions.schedulerSteps, `serve --num-scheduler-steps`): an engine on a
 * backend decodes `--requests` requests of `--tokens` tokens each, submitted together, at each
 * number of scheduler steps in turn (alternating over `--rounds`); prints each setting's median
 * decode rate (generated tokens over the time from the last first token to the last token) and
 * whole-run time; `--penalties` gives every request a repetition penalty of 1.1 and a frequency
 * penalty of 0.25 (applied to a group's own tokens on the device). Run under Deno and under Node: Deno's WebGPU answers a read on a 10 ms poll.
 * Figures: docs/bench-engine.md "Multi-step decoding".
 *
 *   npx deno run -A --no-check scripts/bench-multi-step.ts [--model models/stories260K.gguf] [--backend webgpu]
 *     [--steps 1,2,4,8] [--requests 1] [--tokens 128] [--rounds 3] [--window-ms 50] [--penalties] [--max-running N]
 *   npx tsx scripts/bench-multi-step.ts ...
 */
import { parseArgs } from "../src/cli/args.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";

const f = parseArgs(cliArgs(), {
  model: { kind: "string", help: "GGUF file (default models/stories260K.gguf)" },
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  steps: { kind: "string", help: "scheduler steps to compare (default 1,2,4,8)" },
  requests: { kind: "int", min: 1, help: "requests decoding together (default 1)" },
  tokens: { kind: "int", min: 2, help: "tokens each generates (default 128)" },
  rounds: { kind: "int", min: 1, help: "rounds over the settings (default 3)" },
  "window-ms": { kind: "number", min: 0, help: "EngineOptions.multiStepWindowMs (default the engine's)" },
  penalties: { kind: "boolean", help: "requests with repetition_penalty 1.1 and frequency_penalty 0.25" },
  "max-running": { kind: "int", min: 1, help: "the scheduler's running slots (default the engine's): fewer than --requests keeps some waiting" },
});
const steps = (f.steps ?? "1,2,4,8").split(",").map(Number);
const requests = f.requests ?? 1;
const tokens = f.tokens ?? 128;
const model = await loadModel(f.model ?? "models/stories260K.gguf");
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const prompt = model.tokenizer.encode("Once upon a time, there was a little girl named Lily.", { addBos: true });
const penalties = f.penalties ? { repetitionPenalty: 1.1, frequencyPenalty: 0.25 } : {};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** One run: decode tokens per second after the last request's first token, and the whole run's seconds. */
async function once(schedulerSteps: number): Promise<{ rate: number; seconds: number }> {
  const engine = createEngine(backend, model, { numBlocks: Math.max(64, requests * Math.ceil((prompt.length + tokens) / 16) + 4), schedulerSteps, ...(f["window-ms"] !== undefined ? { multiStepWindowMs: f["window-ms"] } : {}),
    ...(f["max-running"] !== undefined ? { scheduler: { maxRunning: f["max-running"] } } : {}),
  });
  try {
    const t0 = performance.now();
    const results = await Promise.all(Array.from({ length: requests }, (_, i) =>
      engine.submit({ prompt, maxTokens: tokens, temperature: 0.8, seed: i + 1, ignoreEos: true, ...penalties }).result));
    const seconds = (performance.now() - t0) / 1000;
    const firstDone = Math.max(...results.map((r) => r.firstTokenS!));
    const end = Math.max(...results.map((r) => r.lastTokenS!));
    const decoded = results.reduce((a, r) => a + r.completionTokens - 1, 0);
    return { rate: decoded / (end - firstDone), seconds };
  } finally {
    await engine.stop();
  }
}

console.log(`${runtimeName()}; ${reason}; ${requests} request(s) × ${tokens} tokens${f.penalties ? "; repetition 1.1, frequency 0.25" : ""}`);
await once(1); // warm-up: pipelines compiled
const runs = new Map<number, { rate: number; seconds: number }[]>(steps.map((s) => [s, []]));
for (let r = 0; r < (f.rounds ?? 3); r++) for (const s of steps) runs.get(s)!.push(await once(s));
const base = median(runs.get(steps[0])!.map((x) => x.rate));
console.log("steps | decode tok/s (median) | vs first | run s (median) | all rates");
for (const s of steps) {
  const rs = runs.get(s)!;
  const rate = median(rs.map((x) => x.rate));
  console.log(`${s} | ${rate.toFixed(1)} | ${(rate / base).toFixed(2)}× | ${median(rs.map((x) => x.seconds)).toFixed(2)} | ${rs.map((x) => x.rate.toFixed(0)).join(" ")}`);
}
backend.destroy();
exitProcess(0);
