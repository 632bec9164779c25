/**
 * What draft-model speculation buys: greedy decoding of `--requests` concurrent requests (`--tokens`
 * each, ignore_eos) with no speculation and with a draft model proposing k = 2 and 4 tokens a step
 * (`num_speculative_tokens_schedule` "constant"), up to 4 under the default "heuristic" schedule, and
 * up to 4 and 8 under the "cost" schedule (draft-schedule.ts).
 *
 * A real target/draft pair (a 70B model and its 1B sibling) cannot be had here, so the pair is built
 * to have the two things that decide the gain, both printed: the draft costs a fraction of the target
 * and agrees with it often. The draft is stories260K itself; the target is stories260K followed by
 * `--extra` copies of its layers whose output projections (attention output and feed-forward down)
 * are scaled by `--epsilon`: each adds a small change to the residual stream, so the target costs
 * about (5 + extra) / 5 times the draft and its greedy tokens drift from the draft's as epsilon grows.
 * Prints the median over `--repeats` rounds (modes take turns within a round) of the wall time,
 * tokens per second, the ratio to no speculation, the target's steps, the share of the wall time
 * outside the target's steps (the draft model's forwards, mostly) and the acceptance rate. Figures:
 * docs/results/bench-draft-model.md.
 *
 *   ./node_modules/.bin/deno run -A --no-check scripts/bench-draft-model.ts [--backend webgpu] [--extra 35] [--epsilon 0.3]
 */
import { parseArgs } from "../src/cli/args.ts";
import { type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { decodeToF32, encodeFromF32 } from "../src/backend/dtype-codec.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { DraftModelSpeculation } from "../src/engine/draft-model.ts";
import type { GenerateRequest } from "../src/engine/engine-types.ts";
import type { HostTensor, LoadedModel } from "../src/model/config.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs } from "../src/runtime/env.ts";

const FLAGS = {
  backend: { kind: "string", help: "reference|webgpu|cuda|auto (default auto)" },
  requests: { kind: "int", min: 1, help: "concurrent requests (default 1)" },
  tokens: { kind: "int", min: 1, help: "tokens each generates (default 64)" },
  extra: { kind: "int", min: 1, help: "scaled layer copies added to the target (default 35)" },
  epsilon: { kind: "number", min: 0, help: "scale of the copies' output projections (default 0.3)" },
  repeats: { kind: "int", min: 1, help: "runs per mode, median reported (default 3)" },
} as const;
const f = parseArgs(cliArgs(), FLAGS);
const requests = f.requests ?? 1, tokens = f.tokens ?? 64, extra = f.extra ?? 35, epsilon = f.epsilon ?? 0.3, repeats = f.repeats ?? 3;
const { backend, reason } = await selectBackend((f.backend ?? "auto") as BackendChoice);
const path = new URL("../models/stories260K.gguf", import.meta.url).pathname;
const draft = await loadModel(path);

function scaled(t: HostTensor, by: number): HostTensor {
  const v = decodeToF32(t.data, t.dtype, t.shape.reduce((a: number, b: number) => a * b, 1)).map((x) => x * by);
  return { ...t, dtype: "f32", data: encodeFromF32(v, "f32") };
}
const n = draft.config.numLayers;
const copies = Array.from({ length: extra }, (_, i) => {
  const l = draft.weights.layers[i % n];
  return { ...l, wo: scaled(l.wo as HostTensor, epsilon), wDown: scaled(l.wDown as HostTensor, epsilon) };
});
const target: LoadedModel = {
  ...draft, source: `${path} + ${extra} layers at ${epsilon}`,
  config: { ...draft.config, numLayers: n + extra }, weights: { ...draft.weights, layers: [...draft.weights.layers, ...copies] },
};
console.log(`backend ${backend.info.name} (${reason}); target stories260K + ${extra} copies at epsilon ${epsilon} (${n + extra} layers), draft stories260K (${n} layers); ${requests} request(s) × ${tokens} tokens, median of ${repeats}`);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const prompt = target.tokenizer.encode("Once upon a time, there was a little girl named Lily. She loved to", { addBos: true });
const modes: [string, DraftModelSpeculation | undefined][] = [
  ["no speculation", undefined],
  ["k = 2 constant", { method: "draft_model", model: path, numTokens: 2, schedule: "constant" }],
  ["k = 4 constant", { method: "draft_model", model: path, numTokens: 4, schedule: "constant" }],
  ["k ≤ 4 heuristic", { method: "draft_model", model: path, numTokens: 4 }],
  ["k ≤ 4 cost", { method: "draft_model", model: path, numTokens: 4, schedule: "cost" }],
  ["k ≤ 8 cost", { method: "draft_model", model: path, numTokens: 8, schedule: "cost" }],
];
const walls: number[][] = modes.map(() => []);
const outside: number[][] = modes.map(() => []);
const acceptance: number[] = modes.map(() => 0);
const steps: number[] = modes.map(() => 0);
let reference: number[][] | undefined;
for (let r = 0; r < repeats + 1; r++) {
  for (const [m, [, speculative]] of modes.entries()) {
    let stepS = 0, stepCount = 0;
    const onStep = (s: { seconds: number }) => {
      stepS += s.seconds;
      stepCount++;
    };
    const engine = createEngine(backend, target, { numBlocks: 256, onStep, ...(speculative ? { speculative } : {}) }, speculative ? draft : undefined);
    const reqs: GenerateRequest[] = Array.from({ length: requests }, (_, i) => ({ prompt: [...prompt, 1 + i], maxTokens: tokens, temperature: 0, ignoreEos: true }));
    const t0 = performance.now();
    const out = await Promise.all(reqs.map((q) => engine.submit(q).result));
    const wall = (performance.now() - t0) / 1000;
    if (r > 0) walls[m].push(wall); // the first round warms the pipelines up
    if (r > 0) outside[m].push(1 - stepS / wall);
    steps[m] = stepCount;
    const ids = out.map((o) => o.tokenIds);
    // Speculation must not change a token: checked against the plain run, every round.
    if (!speculative) reference = ids;
    else if (JSON.stringify(ids) !== JSON.stringify(reference)) throw new Error(`${modes[m][0]} changed the greedy tokens`);
    acceptance[m] = engine.metrics.specAcceptedTokens / Math.max(1, engine.metrics.specDraftTokens);
    await engine.stop();
  }
}
const baseS = median(walls[0]);
for (const [m, [label, speculative]] of modes.entries()) {
  const wall = median(walls[m]);
  const acc = speculative ? `  accepted ${(100 * acceptance[m]).toFixed(0).padStart(3)}% of draft tokens` : "";
  const out = `${(100 * median(outside[m])).toFixed(0).padStart(3)}% outside target steps`;
  console.log(`  ${label.padEnd(16)} wall ${wall.toFixed(3)} s  ${(requests * tokens / wall).toFixed(1).padStart(7)} tok/s  ×${(baseS / wall).toFixed(2)} speed  ${String(steps[m]).padStart(3)} target steps  ${out}${acc}`);
}
backend.destroy();
