/**
 * Independent oracle for the low-bit i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S):
 * weight dtypes, kept as they are and computed with in place (WebGPU) or decoded at upload
 * (reference, CUDA; quant-blocks-iq.ts): random
 * GGUFs in llama.cpp-like IQ mixes — random blocks under sane scales, no quantizer needed
 * (tests/model/iq-blocks.ts) — are run through llama.cpp (node-llama-cpp, CPU, offline, in a Node
 * child process; llama.cpp computes with the i-quants themselves) and through our loader + forward
 * on every available backend. Per model: next-token log-probabilities after the prompt and at each
 * of 32 greedy steps, and the 32 greedy tokens. Setup as llama-cpp.test.ts.
 * ORACLE_BACKENDS (comma list, default "reference,webgpu") narrows the backends for local runs.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import type { IqDType } from "../../src/backend/quant-blocks-iq.ts";
import type { Backend, WeightDType } from "../../src/backend/types.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { projectRoot, test } from "../harness.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "../model/model-files.ts";
import { greedySteps, type LlamaCppResult, maxLogProbError, oracleBackends, runLlamaCpp } from "./oracle-compare.ts";

const STEPS = 32;
const PROMPT = [1, 17, 120, 255, 3, 42, 299, 64];
/** Rows of 256 and 512 values: every matrix holds whole i-quant super-blocks. */
const K_BASE = { hidden: 256, layers: 2, heads: 4, kvHeads: 2, headDim: 64, ffn: 512, vocab: 300, tied: false, dtype: "q4_k" } as const;

/** llama.cpp's IQ2_XXS mix, roughly: Q6_K output, Q2_K embedding, IQ3_S attn_v, IQ3_XXS ffn_down, IQ2_XS attn_k, IQ2_XXS elsewhere. */
function iq2XXS(name: string): WeightDType | IqDType {
  if (/^output\./.test(name)) return "q6_k";
  if (/token_embd/.test(name)) return "q2_k";
  if (/attn_v/.test(name)) return "iq3_s";
  if (/attn_k/.test(name)) return "iq2_xs";
  return /ffn_down/.test(name) ? "iq3_xxs" : "iq2_xxs";
}

/** An IQ1_M-like mix with an i-quant embedding (looked up, and the tied output): IQ2_S embedding and attn_v, IQ1_M ffn_down, IQ1_S elsewhere. */
function iq1M(name: string): WeightDType | IqDType {
  if (/token_embd|attn_v/.test(name)) return "iq2_s";
  return /ffn_down/.test(name) ? "iq1_m" : "iq1_s";
}

interface OracleCase {
  name: string;
  spec: ModelFileSpec;
  /** How the loaded model holds its first layer's query, key and down projections. */
  held: [WeightDType, WeightDType, WeightDType];
  /** Max |Δ log-prob| allowed, relative to the spread of llama.cpp's log-probs. */
  tol: number;
}

// llama.cpp multiplies i-quant weights by activations rounded to Q8_K; we multiply them as they
// are by f32 activations: that rounding is q8's order, so is the tolerance.
const CASES: OracleCase[] = [
  { name: "llama IQ2_XXS mix (iq2_xxs, iq2_xs, iq3_xxs, iq3_s, q2_k, q6_k), untied", spec: { ...K_BASE, architecture: "llama", ggufDtype: iq2XXS, seed: 170 }, tol: 2e-2, held: ["iq2_xxs", "iq2_xs", "iq3_xxs"] },
  { name: "qwen2 IQ1 mix (iq1_s, iq1_m, iq2_s embedding), tied", spec: { ...K_BASE, architecture: "qwen2", tied: true, ggufDtype: iq1M, seed: 171 }, tol: 2e-2, held: ["iq1_s", "iq1_s", "iq1_m"] },
];

const dir = mkdtempSync(`${tmpdir()}/oracle-iq-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const jobModels = [];
for (const c of CASES) {
  await writeFile(`${dir}/${c.spec.seed}.gguf`, ggufBytes(c.spec, randomHfWeights(c.spec)));
  jobModels.push({ path: `${dir}/${c.spec.seed}.gguf`, prompt: PROMPT, steps: STEPS, texts: [], kvType: "F32" });
}
/** llama.cpp run once for every case; a failure is kept and reported by each test. */
const oracle = await runLlamaCpp(dir, jobModels, projectRoot);

const backends = await oracleBackends();

/** Our greedy run: log-probs after the prompt and after each generated token, and the tokens. */
async function ourRun(backend: Backend, host: LoadedModel): Promise<{ logProbs: Float64Array[]; tokens: number[] }> {
  const model = uploadModel(backend, host);
  const kv = allocatePagedKv(backend, host.config, 3, 16, "f32");
  try {
    return await greedySteps(backend, model, kv, PROMPT, STEPS, [2, 0, 1]);
  } finally {
    freePagedKv(backend, kv);
    freeDeviceModel(backend, model);
  }
}

/** Compares step by step; after a token differs the contexts differ, so comparison stops there. */
function compare(ours: { logProbs: Float64Array[]; tokens: number[] }, theirs: LlamaCppResult, tol: number): void {
  for (let step = 0; step < STEPS; step++) {
    const ref = theirs.steps[step];
    const { error, spread } = maxLogProbError(ours.logProbs[step], ref.probs);
    assert.ok(error <= tol * spread, `step ${step}: log-prob error ${error.toExponential(2)} > ${tol} × spread ${spread.toFixed(2)}`);
    if (ours.tokens[step] !== ref.token) {
      const margin = ours.logProbs[step][ours.tokens[step]] - ours.logProbs[step][ref.token];
      assert.ok(margin <= 2 * tol * spread,
        `step ${step}: greedy token ${ours.tokens[step]} vs llama.cpp ${ref.token} (margin ${margin.toExponential(2)}); ours ${ours.tokens} vs ${theirs.steps.map((s) => s.token)}`);
      return;
    }
  }
}

CASES.forEach((c, i) => {
  for (const b of backends) {
    const skip = !b.backend && !b.required;
    if (skip && i === 0) console.error(`skipping llama.cpp i-quant oracle on ${b.name}: ${b.why}`);
    test(`forward() on ${b.name} matches llama.cpp for ${c.name}: logits and ${STEPS} greedy tokens`, async () => {
      assert.ok(oracle.results, oracle.error);
      assert.ok(b.backend, `${b.name} is unavailable: ${b.why}`);
      const host = await loadModel(`${dir}/${c.spec.seed}.gguf`);
      const l0 = host.weights.layers[0];
      assert.deepEqual([l0.wq!.dtype, l0.wk?.dtype, l0.wDown!.dtype], c.held, "i-quants kept as stored");
      const theirs = oracle.results[i];
      assert.equal(theirs.steps.length, STEPS);
      compare(await ourRun(b.backend, host), theirs, c.tol);
    }, { ignore: skip });
  }
});

test("the i-quant oracle's random models give llama.cpp varied greedy tokens (the check is not vacuous)", () => {
  assert.ok(oracle.results, oracle.error);
  for (const r of oracle.results) assert.ok(new Set(r.steps.map((s) => s.token)).size >= 2, `${r.path}: ${r.steps.map((s) => s.token)}`);
});
