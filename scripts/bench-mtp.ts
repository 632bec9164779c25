/**
 * Speculative decoding with the model's own multi-token-prediction block (`{"method": "mtp"}`), on and
 * off, for a random GLM-4.5-like GGUF (8 MoE layers and a NextN block, f16, written here): decode
 * steps, draft tokens verified and taken, wall time, medians of `--rounds` runs alternating; drafts
 * of a constant length (vLLM's way) and under the default "heuristic" schedule.
 *
 * Two versions of the model: "random block", as written, whose block rarely guesses the model's
 * token (what the block's pass after every step costs when its drafts are lost); and "exact block",
 * where the model's first layer alone decides (its attention's output projection is zeros, the other
 * seven layers add zeros yet are computed as usual) and the block is that layer fed the next token
 * (eh_proj takes the embedding alone; rows of RMS 1): every draft is the model's own token (the most
 * the method can give at this depth: a one-layer block drafting for an eight-layer model). Outputs are
 * checked equal to speculation off.
 *
 *   npx deno run -A --no-check scripts/bench-mtp.ts [--backend webgpu] [--requests 1] [--tokens 64] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { encodeFromF32 } from "../src/backend/dtype-codec.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { parseArgs } from "../src/cli/args.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { Speculation } from "../src/engine/ngram-draft.ts";
import type { HostTensor, LayerWeights, LoadedModel } from "../src/model/config.ts";
import { loadModel } from "../src/model/load.ts";
import { toF32 } from "../src/model/weights.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { median, sessionIds } from "./agent-session-timing.ts";

const f = parseArgs(cliArgs(), {
  backend: { kind: "string", help: "webgpu|reference|cuda|auto (default webgpu)" },
  requests: { kind: "int", min: 1, help: "requests at once (default 1)" },
  tokens: { kind: "int", min: 4, help: "tokens each request generates (default 64)" },
  rounds: { kind: "int", min: 1, help: "rounds over the settings (default 3)" },
});
const backendName = f.backend ?? "webgpu";
if (!(BACKEND_NAMES as readonly string[]).includes(backendName)) throw new Error(`Unknown backend "${backendName}"; choose ${BACKEND_NAMES.join(", ")}`);
const { backend, reason } = await selectBackend(backendName as BackendChoice);
const [requests, tokens, rounds] = [f.requests ?? 1, f.tokens ?? 64, f.rounds ?? 3];
const HIDDEN = 256;
const dir = mkdtempSync(`${tmpdir()}/bench-mtp-`);
const model = await loadModel(await writeTestGguf(dir, "glm", {
  architecture: "glm4moe", hidden: HIDDEN, layers: 8, heads: 4, kvHeads: 2, headDim: 64, rotaryDim: 32, ffn: 256, vocab: 2048, tied: false, dtype: "f16", seed: 11,
  contextLength: 8192, nextn: 1, experts: { count: 8, used: 2, sharedFfn: 256, denseLayers: 0, scale: 2.5 },
}), { mtp: true });
rmSync(dir, { recursive: true, force: true });

/** The same tensor with every value 0 (all-zero bytes are 0 in f16 and f32 alike). */
const zeros = (t: HostTensor): HostTensor => ({ ...t, data: new Uint8Array(t.data.length) });

/** See the module comment: the first layer decides, the block is that layer, so every draft is right. */
function exactBlock(m: LoadedModel): LoadedModel {
  const w = m.weights;
  const silent = (l: LayerWeights<HostTensor>): LayerWeights<HostTensor> => ({ ...l, wo: zeros(l.wo!) });
  const first = silent(w.layers[0]);
  const rest = w.layers.slice(1).map((l) => ({ ...silent(l), wDown: zeros(l.wDown!), wDownShared: zeros(l.wDownShared!) }));
  const emb = new Float32Array(toF32(w.tokenEmbedding).data.buffer.slice(0));
  for (let t = 0; t < m.config.vocabSize; t++) {
    const row = emb.subarray(t * HIDDEN, (t + 1) * HIDDEN);
    const rms = Math.sqrt(row.reduce((a, v) => a + v * v, 0) / HIDDEN);
    for (let i = 0; i < HIDDEN; i++) row[i] /= rms;
  }
  const eh = new Float32Array(HIDDEN * 2 * HIDDEN);
  for (let i = 0; i < HIDDEN; i++) eh[i * 2 * HIDDEN + i] = 1;
  const f32 = (name: string, shape: number[], v: Float32Array): HostTensor => ({ name, shape, dtype: "f32", data: new Uint8Array(v.buffer) });
  return {
    ...m,
    weights: {
      ...w,
      tokenEmbedding: { ...w.tokenEmbedding, data: encodeFromF32(emb, w.tokenEmbedding.dtype) },
      layers: [first, ...rest],
      mtp: { ...w.mtp!, layer: first, ehProj: { ...w.mtp!.ehProj, data: encodeFromF32(eh, w.mtp!.ehProj.dtype) }, enorm: f32("enorm", [HIDDEN], new Float32Array(HIDDEN).fill(1)), headNorm: w.outputNorm },
    },
  };
}

const MODELS: Record<string, LoadedModel> = { "random block": model, "exact block": exactBlock(model) };
// Drafts run one step a read; "off" takes the backend's multi-step decoding (4 on WebGPU), "off, 1 step" not.
const SETTINGS: Record<string, Speculation | "one step" | undefined> = {
  off: undefined,
  "off, 1 step": "one step",
  "mtp 1": { method: "mtp", numTokens: 1, schedule: "constant" },
  "mtp 2": { method: "mtp", numTokens: 2, schedule: "constant" },
  "mtp 3": { method: "mtp", numTokens: 3, schedule: "constant" },
  // The default schedule: shorter drafts after misses, pauses after one-token drafts rejected outright.
  "mtp 1 heuristic": { method: "mtp", numTokens: 1 },
  "mtp 3 heuristic": { method: "mtp", numTokens: 3 },
};

interface Run {
  outputs: number[][];
  steps: number;
  drafted: number;
  taken: number;
  seconds: number;
}

async function run(m: LoadedModel, setting: Speculation | "one step" | undefined): Promise<Run> {
  const extra = setting === "one step" ? { schedulerSteps: 1 } : setting ? { speculative: setting } : {};
  const e = createEngine(backend, m, { numBlocks: 256, ...extra, scheduler: { maxRunning: 8, maxBatchTokens: 512 } });
  try {
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: requests }, (_, i) => e.submit({ prompt: sessionIds(128, i + 3), maxTokens: tokens, temperature: 0, ignoreEos: true }).result));
    const seconds = (performance.now() - t0) / 1000;
    const s = e.stats();
    return { outputs: rs.map((r) => r.tokenIds), steps: s.steps, drafted: s.specDraftTokens, taken: s.specAcceptedTokens, seconds };
  } finally {
    await e.stop();
  }
}

for (const m of Object.values(MODELS)) await run(m, SETTINGS["mtp 3"]); // warm-up: compiles what every setting runs
console.log(`# ${runtimeName()}, ${backend.info.name} (${reason}); a random GLM-4.5-like model (8 MoE layers, hidden ${HIDDEN}, f16) with a NextN block; ${requests} request(s) of ${tokens} tokens at once after 128 prompt tokens; medians of ${rounds}`);
console.log("model  setting  steps  drafted  taken  seconds  vs_off  vs_off_1_step");
for (const [name, m] of Object.entries(MODELS)) {
  const runs: Record<string, Run[]> = Object.fromEntries(Object.keys(SETTINGS).map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) for (const [setting, spec] of Object.entries(SETTINGS)) runs[setting].push(await run(m, spec));
  const off = median(runs.off.map((x) => x.seconds));
  const oneStep = median(runs["off, 1 step"].map((x) => x.seconds));
  for (const [setting, rs] of Object.entries(runs)) {
    if (JSON.stringify(rs[0].outputs) !== JSON.stringify(runs.off[0].outputs)) throw new Error(`${name}, ${setting}: outputs differ from speculation off`);
    const x = rs[0];
    const s = median(rs.map((y) => y.seconds));
    console.log(`${name}  ${setting}  ${x.steps}  ${x.drafted}  ${x.taken}  ${s.toFixed(2)}  ${(off / s).toFixed(2)}x  ${(oneStep / s).toFixed(2)}x`);
  }
}
exitProcess(0);
