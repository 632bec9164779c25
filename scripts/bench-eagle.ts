/**
 * Speculative decoding with an EAGLE head (`{"method": "eagle3" | "eagle", "model": HEAD}`), on and
 * off, for a random Llama GGUF (8 layers, hidden 256, f16, written here) and heads written as their
 * checkpoints are: decode steps, draft tokens verified and taken, wall time, medians of `--rounds`
 * runs alternating; drafts of a constant length (vLLM's way) and under the default "heuristic" schedule.
 *
 * Two heads: "random EAGLE-3" (a vocabulary of 1024 of the model's 2048 ids, d2t), which rarely
 * guesses the model's token (what its pass after every step costs when its drafts are lost); and
 * "exact EAGLE", where the model's first layer alone decides (its attention's output projection is
 * zeros; the other seven layers add zeros yet are computed as usual) and the head is that layer's
 * feed-forward fed the next token's embedding (fc takes the embedding alone, the head's attention
 * adds zeros, its lm_head the model's scaled by the output norm): every draft is the model's own token.
 * Outputs are checked equal to speculation off.
 *
 *   npx deno run -A --no-check scripts/bench-eagle.ts [--backend webgpu] [--requests 1] [--tokens 64] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { encodeFromF32 } from "../src/backend/dtype-codec.ts";
import { BACKEND_NAMES, type BackendChoice, selectBackend } from "../src/backend/select.ts";
import { parseArgs } from "../src/cli/args.ts";
import { createEngine } from "../src/engine/engine-factory.ts";
import type { Speculation } from "../src/engine/ngram-draft.ts";
import type { HostTensor, LayerWeights, LoadedModel } from "../src/model/config.ts";
import { attachEagleHead } from "../src/model/eagle-head.ts";
import { loadModel } from "../src/model/load.ts";
import { toF32 } from "../src/model/weights.ts";
import { cliArgs, exitProcess, runtimeName } from "../src/runtime/env.ts";
import { writeTestGguf } from "../tests/model/model-files.ts";
import { writeEagleHead } from "../tests/engine/eagle-files.ts";
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
const HIDDEN = 256, VOCAB = 2048;
const dir = mkdtempSync(`${tmpdir()}/bench-eagle-`);
const target = await writeTestGguf(dir, "llama", {
  architecture: "llama", hidden: HIDDEN, layers: 8, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, vocab: VOCAB, tied: false, dtype: "f16", seed: 13, contextLength: 8192,
});
const head = { hidden: HIDDEN, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, vocab: VOCAB };
writeEagleHead(`${dir}/eagle3`, { method: "eagle3", ...head, seed: 14, draftVocab: 1024, d2t: Array.from({ length: 1024 }, (_, d) => d) });
writeEagleHead(`${dir}/eagle`, { method: "eagle", ...head, seed: 15 });
const plain = await loadModel(target);
const random3 = await loadModel(target, { eagle: { method: "eagle3", path: `${dir}/eagle3` } });

/** The same tensor with every value 0 (all-zero bytes are 0 in f16 and f32 alike). */
const zeros = (t: HostTensor): HostTensor => ({ ...t, data: new Uint8Array(t.data.length) });

/** See the module comment: the first layer decides, the head is its feed-forward, so every draft is right. */
async function exactEagle(m: LoadedModel): Promise<{ target: LoadedModel; drafting: LoadedModel }> {
  const w = m.weights;
  const silent = (l: LayerWeights<HostTensor>): LayerWeights<HostTensor> => ({ ...l, wo: zeros(l.wo!) });
  const first = silent(w.layers[0]);
  const exact: LoadedModel = { ...m, weights: { ...w, layers: [first, ...w.layers.slice(1).map((l) => ({ ...silent(l), wDown: zeros(l.wDown!) }))] } };
  const drafting: LoadedModel = { ...exact, config: { ...exact.config }, weights: { ...exact.weights } };
  await attachEagleHead(drafting, "eagle", `${dir}/eagle`);
  const h = drafting.weights.mtp!;
  const fc = new Float32Array(HIDDEN * 2 * HIDDEN);
  for (let i = 0; i < HIDDEN; i++) fc[i * 2 * HIDDEN + i] = 1;
  const out = new Float32Array(toF32(w.output!).data.buffer.slice(0)), norm = new Float32Array(toF32(w.outputNorm).data.buffer.slice(0));
  const scaled = out.map((v, k) => v * norm[k % HIDDEN]);
  drafting.weights.mtp = {
    ...h,
    ehProj: { ...h.ehProj, data: encodeFromF32(fc, h.ehProj.dtype) },
    layer: { ...h.layer, wo: zeros(h.layer.wo!), ffnNorm: first.ffnNorm, wGate: first.wGate, wUp: first.wUp, wDown: first.wDown },
    head: { ...w.output!, data: encodeFromF32(scaled, w.output!.dtype) },
  };
  return { target: exact, drafting };
}

const exact = await exactEagle(plain);
rmSync(dir, { recursive: true, force: true });
// Drafts run one step a read; "off" takes the backend's multi-step decoding (4 on WebGPU), "off, 1 step" not.
const CASES: Record<string, { off: LoadedModel; on: LoadedModel; method: "eagle" | "eagle3" }> = {
  "random EAGLE-3": { off: plain, on: random3, method: "eagle3" },
  "exact EAGLE": { off: exact.target, on: exact.drafting, method: "eagle" },
};
const settings = (method: "eagle" | "eagle3"): Record<string, Speculation | "one step" | undefined> => ({
  off: undefined,
  "off, 1 step": "one step",
  [`${method} 1`]: { method, model: "in memory", numTokens: 1, schedule: "constant" },
  [`${method} 3`]: { method, model: "in memory", numTokens: 3, schedule: "constant" },
  // The default schedule: shorter drafts after misses, pauses after one-token drafts rejected outright.
  [`${method} 1 heuristic`]: { method, model: "in memory", numTokens: 1 },
  [`${method} 3 heuristic`]: { method, model: "in memory", numTokens: 3 },
});

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
    const rs = await Promise.all(Array.from({ length: requests }, (_, i) => e.submit({ prompt: sessionIds(128, i + 3).map((t) => t % VOCAB), maxTokens: tokens, temperature: 0, ignoreEos: true }).result));
    const seconds = (performance.now() - t0) / 1000;
    const s = e.stats();
    return { outputs: rs.map((r) => r.tokenIds), steps: s.steps, drafted: s.specDraftTokens, taken: s.specAcceptedTokens, seconds };
  } finally {
    await e.stop();
  }
}

for (const c of Object.values(CASES)) await run(c.on, { method: c.method, model: "in memory", numTokens: 3 }); // warm-up: compiles what every setting runs
console.log(`# ${runtimeName()}, ${backend.info.name} (${reason}); a random Llama (8 layers, hidden ${HIDDEN}, f16) with an EAGLE head; ${requests} request(s) of ${tokens} tokens at once after 128 prompt tokens; medians of ${rounds}`);
console.log("head  setting  steps  drafted  taken  seconds  vs_off  vs_off_1_step");
for (const [name, c] of Object.entries(CASES)) {
  const s = settings(c.method);
  const runs: Record<string, Run[]> = Object.fromEntries(Object.keys(s).map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) for (const [setting, spec] of Object.entries(s)) runs[setting].push(await run(spec === undefined || spec === "one step" ? c.off : c.on, spec));
  const off = median(runs.off.map((x) => x.seconds));
  const oneStep = median(runs["off, 1 step"].map((x) => x.seconds));
  for (const [setting, rs] of Object.entries(runs)) {
    if (JSON.stringify(rs[0].outputs) !== JSON.stringify(runs.off[0].outputs)) throw new Error(`${name}, ${setting}: outputs differ from speculation off`);
    const x = rs[0];
    const sec = median(rs.map((y) => y.seconds));
    console.log(`${name}  ${setting}  ${x.steps}  ${x.drafted}  ${x.taken}  ${sec.toFixed(2)}  ${(off / sec).toFixed(2)}x  ${(oneStep / sec).toFixed(2)}x`);
  }
}
exitProcess(0);
