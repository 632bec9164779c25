/**
 * Speculative decoding for a model with recurrent layers (a random-weight Qwen3.5: Gated DeltaNet
 * layers, written here), on and off: decode steps, drafts verified and taken, states put back
 * (`specStateRollbacks`: a draft not all taken puts the sequence's state back, and its next step feeds
 * the taken tokens again) and wall time, medians of `--rounds` runs alternating.
 *
 * Workloads: "repeated, in turn" sends one greedy request `--requests` times one after another (an agent
 * resending a turn), where suffix drafts copy the earlier answers whole (and a random model's greedy
 * answer soon repeats itself, which n-gram drafts copy); "sampled, in turn" sends as many different
 * prompts sampled at temperature 1 (seeded), where drafts are often wrong: the cost of verifying and
 * putting back. The outputs are checked equal to speculation off (greedy and seeded alike).
 *
 *   npx deno run -A --no-check scripts/bench-spec-recurrent.ts [--backend webgpu] [--requests 6] [--tokens 64] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "../src/cli/args.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { Speculation } from "../src/engine/ngram-draft.ts";
import { loadModel } from "../src/model/load.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { median, sessionIds } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  requests: { kind: "int", min: 2, help: "requests of each workload, one after another (default 6)" },
  tokens: { kind: "int", min: 4, help: "tokens each request generates (default 64)" },
  rounds: { kind: "int", min: 1, help: "rounds over the settings (default 3)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const [requests, tokens, rounds] = [f.requests ?? 6, f.tokens ?? 64, f.rounds ?? 3];
const dir = mkdtempSync(`${tmpdir()}/bench-spec-recurrent-`);
const model = await loadModel(await writeTestGguf(dir, "qwen35", {
  architecture: "qwen35", hidden: 256, layers: 8, heads: 4, kvHeads: 2, headDim: 64, rotaryDim: 16, ffn: 768, vocab: 2048,
  tied: false, dtype: "f16", seed: 7, contextLength: 8192, deltaNet: { kHeads: 4, vHeads: 8, dim: 32, conv: 4, interval: 4 },
}));
rmSync(dir, { recursive: true, force: true });

const WORKLOADS: Record<string, { prompt: number[]; temperature: number; seed?: number }[]> = {
  "repeated, in turn": Array.from({ length: requests }, () => ({ prompt: sessionIds(128, 3), temperature: 0 })),
  "repeated sampled, in turn": Array.from({ length: requests }, (_, i) => ({ prompt: sessionIds(128, 3), temperature: 0.7, seed: i + 1 })),
};
// Speculation runs one step a read; "off" takes the backend's multi-step decoding (4 on WebGPU), "off, 1 step" not.
const SETTINGS: Record<string, Speculation | "one step" | undefined> = {
  off: undefined,
  "off, 1 step": "one step",
  suffix: { method: "suffix", numTokens: 8, maxDepth: 24, maxCachedRequests: 1000, maxSpecFactor: 1, minTokenProb: 0.1 },
  // Matching a single token: drafts whenever the last token came before, on a random model mostly wrong.
  "ngram 1-2": { method: "ngram", numTokens: 4, maxN: 2, minN: 1 },
};

interface Run {
  outputs: number[][];
  steps: number;
  drafted: number;
  taken: number;
  rollbacks: number;
  refed: number;
  seconds: number;
}

async function run(prompts: { prompt: number[]; temperature: number; seed?: number }[], setting: Speculation | "one step" | undefined): Promise<Run> {
  const extra = setting === "one step" ? { schedulerSteps: 1 } : setting ? { speculative: setting } : {};
  const e = createEngine(backend, model, { numBlocks: 1024, ...extra, scheduler: { maxRunning: 4, maxBatchTokens: 512 } });
  try {
    const t0 = performance.now();
    const outputs: number[][] = [];
    for (const req of prompts) outputs.push((await e.submit({ ...req, maxTokens: tokens, ignoreEos: true }).result).tokenIds);
    const seconds = (performance.now() - t0) / 1000;
    const s = e.stats();
    return { outputs, steps: s.steps, drafted: s.specDraftTokens, taken: s.specAcceptedTokens, rollbacks: s.specStateRollbacks, refed: s.specRefedTokens, seconds };
  } finally {
    await e.stop();
  }
}

await run([WORKLOADS["repeated sampled, in turn"][0]], SETTINGS.suffix); // warm-up: compiles what every setting runs
console.log(`# ${runtimeName()}, ${backend.info.name} (${reason}); a random Qwen3.5 (8 layers, 6 Gated DeltaNet, f16); ${requests} requests of ${tokens} tokens in turn; medians of ${rounds}`);
console.log("workload  setting  steps  drafted  taken  rollbacks  refed  seconds  vs_off  vs_off_1_step");
for (const [workload, prompts] of Object.entries(WORKLOADS)) {
  const runs: Record<string, Run[]> = Object.fromEntries(Object.keys(SETTINGS).map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) for (const [name, spec] of Object.entries(SETTINGS)) runs[name].push(await run(prompts, spec));
  const off = median(runs.off.map((x) => x.seconds));
  const oneStep = median(runs["off, 1 step"].map((x) => x.seconds));
  for (const [name, rs] of Object.entries(runs)) {
    if (JSON.stringify(rs[0].outputs) !== JSON.stringify(runs.off[0].outputs)) throw new Error(`${workload}, ${name}: outputs differ from speculation off`);
    const x = rs[0];
    const s = median(rs.map((y) => y.seconds));
    console.log(`${workload}  ${name}  ${x.steps}  ${x.drafted}  ${x.taken}  ${x.rollbacks}  ${x.refed}  ${s.toFixed(2)}  ${(off / s).toFixed(2)}x  ${(oneStep / s).toFixed(2)}x`);
  }
}
exitProcess(0);
