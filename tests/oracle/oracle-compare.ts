/** Comparing our logits with llama.cpp's next-token probabilities. */
import { execFile } from "node:child_process";
import { selectBackend } from "../../src/backend/select.ts";
import type { Backend } from "../../src/backend/types.ts";
import { envVar } from "../../src/runtime/env.ts";
import { inCi } from "../webgpu-fixture.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import type { DeviceModel } from "../../src/model/device-weights.ts";
import { forward, type PagedKv, type StepLora } from "../../src/model/forward.ts";

/** What the llama.cpp runner reports per model. */
export interface LlamaCppResult {
  path: string;
  /** One entry per greedy step: llama.cpp's choice and its full softmax over the vocab. */
  steps: { token: number; probs: number[] }[];
  /** llama.cpp's tokenization (no BOS, no special-token parsing) of the job's texts. */
  tokenized: number[][];
}

/** log(softmax(logits)) in f64. */
export function logSoftmax(logits: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(logits, (v) => v - lse);
}

/**
 * Largest |our log-prob − log(llama.cpp prob)| over the vocab, and the spread (max − min) of
 * llama.cpp's log-probs, which scales the tolerance. Probabilities that underflowed to 0 in
 * llama.cpp's f32 softmax carry no log to compare and are skipped.
 */
export function maxLogProbError(ours: Float64Array, probs: readonly number[]): { error: number; spread: number } {
  if (probs.length !== ours.length) throw new Error(`vocab sizes differ: ours ${ours.length}, llama.cpp ${probs.length}`);
  let error = 0;
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < ours.length; i++) {
    const p = probs[i];
    if (!(p > 0)) continue;
    const lp = Math.log(p);
    lo = Math.min(lo, lp);
    hi = Math.max(hi, lp);
    error = Math.max(error, Math.abs(ours[i] - lp));
  }
  return { error, spread: hi - lo };
}

/**
 * Our greedy run as the oracle compares it: the prompt, then `steps` greedy tokens one at a time
 * (each step's log-probabilities and chosen token), in block table `table` of `kv`, with `lora`'s
 * adapters when given.
 */
export async function greedySteps(
  backend: Backend, model: DeviceModel, kv: PagedKv, prompt: readonly number[], steps: number, table: readonly number[], lora?: StepLora,
): Promise<{ logProbs: Float64Array[]; tokens: number[] }> {
  const logProbs: Float64Array[] = [];
  const tokens: number[] = [];
  let entry = { tokens: prompt, startPos: 0, blockTable: table, stateSlot: 0 };
  for (let step = 0; step < steps; step++) {
    const out = forward(backend, model, kv, { entries: [entry], ...(lora ? { lora } : {}) });
    const logits = (await backend.download(out)) as Float32Array;
    backend.free(out);
    const lp = logSoftmax(logits);
    let best = 0;
    for (let i = 1; i < lp.length; i++) if (lp[i] > lp[best]) best = i;
    logProbs.push(lp);
    tokens.push(best);
    entry = { tokens: [best], startPos: prompt.length + step, blockTable: table, stateSlot: 0 };
  }
  return { logProbs, tokens };
}

/**
 * Runs llama.cpp (tests/oracle/llama-cpp-runner.mjs, in a Node child process) once over every model
 * job, written to `dir`/job.json; a failure is kept (`error`) and reported by each test that needs it.
 */
export async function runLlamaCpp(dir: string, models: readonly Record<string, unknown>[], root: string): Promise<{ results?: LlamaCppResult[]; error?: string }> {
  await writeFile(`${dir}/job.json`, JSON.stringify({ models }));
  return await new Promise((resolve) => {
    const runner = `${root}/tests/oracle/llama-cpp-runner.mjs`;
    execFile("node", [runner, `${dir}/job.json`], { maxBuffer: 256 << 20, cwd: root }, (err, stdout, stderr) => {
      if (err) resolve({ error: `node ${runner} failed: ${(stderr || err.message).trim().split("\n").slice(-3).join(" | ")}` });
      else resolve({ results: (JSON.parse(stdout) as { results: LlamaCppResult[] }).results });
    });
  });
}

/** A backend the oracle files compare on, or why it could not start (`required`: a failure, not a skip). */
export interface OracleBackend {
  name: string;
  backend?: Backend;
  why: string;
  required: boolean;
}

/**
 * The backends named by ORACLE_BACKENDS (default "reference,webgpu"), each started or with why it could
 * not be: the reference is always required, WebGPU in CI.
 */
export async function oracleBackends(): Promise<OracleBackend[]> {
  const backends: OracleBackend[] = [];
  const wanted = (envVar("ORACLE_BACKENDS") ?? "reference,webgpu").split(",").map((s) => s.trim());
  for (const name of (["reference", "webgpu"] as const).filter((n) => wanted.includes(n))) {
    try {
      const { backend, reason } = await selectBackend(name);
      backends.push({ name, backend, why: reason, required: true });
    } catch (e) {
      backends.push({ name, why: e instanceof Error ? e.message : String(e), required: name === "reference" || inCi });
    }
  }
  return backends;
}
