/**
 * Independent oracle for LoRA adapters: random-weight base GGUFs (a llama, a qwen2 with qkv biases
 * and tied embeddings, a Qwen3-MoE, a Phi-3 whose adapter changes its fused matrices whole, Qwen3.5 and
 * Qwen3-Next, on their attention and their Gated DeltaNet projections, an LFM2 on its short
 * convolutions' projections, a Falcon-H1 on its attention beside its scan) and
 * random GGUF adapters for them, both written by our own writers, are run through llama.cpp
 * (node-llama-cpp 3.21.1's context `lora` option, CPU, offline, in a Node child process) and through our loader + forward() with the adapter in slot 1 of a
 * device set, on every available backend. Per case: next-token log-probabilities after the prompt
 * and at each of 16 greedy steps, and the 16 greedy tokens. llama.cpp's run of the base model alone
 * must differ, so the adapters are seen to matter.
 * ORACLE_BACKENDS (comma list, default "reference,webgpu") narrows the backends for local runs.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import process from "node:process";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import type { LoadedModel, ModelConfig } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { loadModel } from "../../src/model/load.ts";
import { freeLoraSet, uploadLoraSet } from "../../src/model/lora-set.ts";
import { loadLoraAdapter } from "../../src/model/lora-load.ts";
import type { LoraTarget } from "../../src/model/lora.ts";
import { envVar } from "../../src/runtime/env.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { projectRoot, test } from "../harness.ts";
import { type LoraFileSpec, loraGgufBytes } from "../model/lora-files.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "../model/model-files.ts";
import { poisonedWebGpu } from "../webgpu-fixture.ts";
import { greedySteps, type LlamaCppResult, maxLogProbError, runLlamaCpp } from "./oracle-compare.ts";

const STEPS = 16;
const PROMPT = [1, 17, 120, 255, 3, 42, 299, 64];
const BASE = { hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32" } as const;
/** Max |Δ log-prob| allowed, relative to the spread of llama.cpp's log-probs (f32 weights and KV cache). */
const TOL = 1e-4;

const ATTENTION: readonly LoraTarget[] = ["wq", "wk", "wv", "wo"];
const EVERY: readonly LoraTarget[] = [...ATTENTION, "wGate", "wUp", "wDown"];
const eachLayer = (config: ModelConfig, targets: readonly LoraTarget[]) =>
  Array.from({ length: config.numLayers }, (_, layer) => targets.map((target) => ({ layer, target }))).flat();
const deltaNetLayers = (config: ModelConfig) => config.deltaNet!.layers.flatMap((linear, layer) => (linear ? [layer] : []));

interface LoraCase {
  name: string;
  spec: ModelFileSpec;
  /** The adapter, given the base model's config. */
  adapter: (config: ModelConfig) => LoraFileSpec;
  /** Scale on both sides: llama.cpp's adapter scale and our loader's. */
  scale: number;
}

// Magnitudes: an entry of s·B·A has a standard deviation of s·√rank·m²/3 for values uniform in ±m,
// against ~0.1 for the base's projections (uniform in ±1/√32): 0.12, 0.10 and 0.17 here. That moves
// llama.cpp's log-probs after the prompt by 1.2 to 4.3 and changes 14 to 16 of the 16 greedy tokens,
// while the spread of the log-probs stays under ~20 (the base's own).
const CASES: LoraCase[] = [
  {
    name: "llama untied, f32: rank 4, alpha 8, on every projection of every layer and the output",
    spec: { ...BASE, architecture: "llama", seed: 201 },
    adapter: (config) => ({ seed: 301, rank: 4, alpha: 8, magnitude: 0.3, targets: [...eachLayer(config, EVERY), { layer: -1, target: "output" }] }),
    scale: 1,
  },
  {
    name: "qwen2 qkv bias, tied, f32: rank 3, alpha 0, scale 0.5, on q and v of layer 0, k, o and down of layer 1",
    spec: { ...BASE, architecture: "qwen2", tied: true, seed: 202 },
    adapter: () => ({
      seed: 302, rank: 3, alpha: 0, magnitude: 0.6,
      targets: [{ layer: 0, target: "wq" }, { layer: 0, target: "wv" }, { layer: 1, target: "wk" }, { layer: 1, target: "wo" }, { layer: 1, target: "wDown" }],
    }),
    scale: 0.5,
  },
  {
    name: "qwen3moe 8 experts / 2 used, f32: rank 4, alpha 4, on the attention projections",
    spec: { ...BASE, architecture: "qwen3moe", experts: { count: 8, used: 2 }, seed: 203 },
    adapter: (config) => ({ seed: 303, rank: 4, alpha: 4, magnitude: 0.5, targets: eachLayer(config, ATTENTION) }),
    scale: 1,
  },
  {
    name: "phi3 fused, f32: rank 4, alpha 8, on attn_qkv and the fused ffn_up (gate and up) of every layer, and o",
    spec: { ...BASE, architecture: "phi3", seed: 204, ropeTheta: 10000 },
    adapter: (config) => ({
      seed: 304, rank: 4, alpha: 8, magnitude: 0.3, targets: eachLayer(config, ["wo"]),
      fused: Array.from({ length: config.numLayers }, (_, layer) => [
        { layer, stem: "attn_qkv" as const, rows: (config.numHeads + 2 * config.numKvHeads) * config.headDim },
        { layer, stem: "ffn_up" as const, rows: 2 * config.intermediateSize },
      ]).flat(),
    }),
    scale: 1,
  },
  {
    // Qwen3.5's gated attention: the query projection's adapter spans each head's query and its gate.
    name: "qwen35 Gated DeltaNet and gated attention, f32: rank 4, alpha 8, on the attention layers' projections and every feed-forward",
    spec: { ...BASE, architecture: "qwen35", layers: 4, headDim: 16, rotaryDim: 4, seed: 205, deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 } },
    adapter: (config) => ({
      seed: 305, rank: 4, alpha: 8, magnitude: 0.3,
      targets: [...[1, 3].flatMap((layer) => ATTENTION.map((target) => ({ layer, target }))), ...eachLayer(config, ["wGate", "wUp", "wDown"])],
    }),
    scale: 1,
  },
  {
    // Value heads tiled in the GGUF, as in the adapter: 2 per key head, so a wrong order would show.
    name: "qwen35 f32: rank 4, alpha 8, on every Gated DeltaNet projection (q/k/v, z, beta, alpha, out)",
    spec: { ...BASE, architecture: "qwen35", layers: 4, headDim: 16, rotaryDim: 4, seed: 206, deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 } },
    adapter: (config) => ({
      seed: 306, rank: 4, alpha: 8, magnitude: 0.3,
      targets: deltaNetLayers(config).flatMap((layer) => (["ssmQkv", "ssmZ", "ssmBeta", "ssmAlpha", "ssmOut"] as const).map((target) => ({ layer, target }))),
    }),
    scale: 1,
  },
  {
    // Qwen3-Next's adapter holds beta and alpha fused per key head (ssm_ba), as its base does.
    name: "qwen3next f32: rank 4, alpha 8, on attn_qkv, attn_gate, ssm_out and the fused ssm_ba of every Gated DeltaNet layer",
    spec: {
      ...BASE, architecture: "qwen3next", layers: 4, headDim: 16, rotaryDim: 4, seed: 207, deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 },
      experts: { count: 4, used: 2, sharedFfn: 48 },
    },
    adapter: (config) => ({
      seed: 307, rank: 4, alpha: 8, magnitude: 0.3,
      targets: deltaNetLayers(config).flatMap((layer) => (["ssmQkv", "ssmZ", "ssmOut"] as const).map((target) => ({ layer, target }))),
      fused: deltaNetLayers(config).map((layer) => ({ layer, stem: "ssm_ba" as const, rows: 2 * config.deltaNet!.numVHeads })),
    }),
    scale: 1,
  },
  {
    name: "lfm2 f32: rank 4, alpha 8, on the short convolutions' in and out projections, the attention layer's q and o, and every feed-forward",
    spec: { ...BASE, architecture: "lfm2", layers: 3, seed: 208, shortConv: { kernel: 3, attention: [1] } },
    adapter: (config) => ({
      seed: 308, rank: 4, alpha: 8, magnitude: 0.3,
      targets: [
        ...[0, 2].flatMap((layer) => (["convIn", "convOut"] as const).map((target) => ({ layer, target }))),
        { layer: 1, target: "wq" }, { layer: 1, target: "wo" }, ...eachLayer(config, ["wGate", "wUp", "wDown"]),
      ],
    }),
    scale: 1,
  },
  {
    name: "falcon-h1 f32 (multipliers folded into the base): rank 4, alpha 8, on each layer's q, k and o beside its scan's in and out projections, and the feed-forward's gate and down",
    spec: {
      ...BASE, architecture: "falcon-h1", layers: 2, seed: 216,
      falconH1: {
        heads: 4, headDim: 12, stateSize: 8, groups: 2, conv: 4, normed: true,
        multipliers: { embedding: 1.5, lmHead: 0.7, attentionIn: 1.2, attentionOut: 0.8, key: 0.6, ssmIn: 1.1, ssmOut: 0.9, ssm: [1.2, 0.9, 1.1, 0.8, 1.3], mlp: [1.2, 0.8] },
      },
    },
    adapter: (config) => ({
      seed: 311, rank: 4, alpha: 8, magnitude: 0.6,
      targets: eachLayer(config, ["wq", "wk", "wo", "ssmIn", "ssmOut", "wGate", "wDown"]),
    }),
    scale: 1,
  },
  {
    name: "nemotron_h f32: rank 4, alpha 8, on the Mamba-2 layers' in and out projections (2 groups), the attention layer's q and o, and the ReLU² feed-forward's up and down",
    spec: { ...BASE, architecture: "nemotron_h", layers: 4, seed: 210, nemotronH: { pattern: "M*-M", heads: 4, headDim: 16, stateSize: 8, groups: 2, conv: 4 } },
    adapter: () => ({
      // As Granite's: the Mamba-2 layers' norm after the scan damps what the in-projection's delta moves.
      seed: 310, rank: 4, alpha: 8, magnitude: 0.6,
      targets: [
        ...[0, 3].flatMap((layer) => (["ssmIn", "ssmOut"] as const).map((target) => ({ layer, target }))),
        { layer: 1, target: "wq" }, { layer: 1, target: "wo" }, { layer: 2, target: "wUp" }, { layer: 2, target: "wDown" },
      ],
    }),
    scale: 1,
  },
  {
    name: "granitehybrid f32: rank 4, alpha 8, on the Mamba-2 layers' in and out projections, the attention layer's q and o, and every feed-forward",
    spec: {
      ...BASE, architecture: "granitehybrid", layers: 3, seed: 209, mamba2: { attention: [1], heads: 4, stateSize: 16, conv: 4 },
      granite: { embedding: 2, attention: 0.2, residual: 0.5, logit: 3 },
    },
    adapter: (config) => ({
      // Larger than the others': the Mamba-2 layers' norm after the scan damps what the in-projection's delta moves.
      seed: 309, rank: 4, alpha: 8, magnitude: 0.6,
      targets: [
        ...[0, 2].flatMap((layer) => (["ssmIn", "ssmOut"] as const).map((target) => ({ layer, target }))),
        { layer: 1, target: "wq" }, { layer: 1, target: "wo" }, ...eachLayer(config, ["wGate", "wUp", "wDown"]),
      ],
    }),
    scale: 1,
  },
];

const dir = mkdtempSync(`${tmpdir()}/oracle-lora-`);
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const hosts: LoadedModel[] = [];
const jobModels = [];
for (const c of CASES) {
  const base = `${dir}/${c.spec.seed}.gguf`;
  const lora = `${dir}/${c.spec.seed}-lora.gguf`;
  await writeFile(base, ggufBytes(c.spec, randomHfWeights(c.spec)));
  const host = await loadModel(base);
  hosts.push(host);
  await writeFile(lora, loraGgufBytes(host.config, c.adapter(host.config)));
  // With the adapter, then the base alone (the adapter must change what llama.cpp computes).
  jobModels.push({ path: base, prompt: PROMPT, steps: STEPS, lora: [{ path: lora, scale: c.scale }] });
  jobModels.push({ path: base, prompt: PROMPT, steps: STEPS });
}
/** llama.cpp run once for every case; a failure is kept and reported by each test. */
const oracle = await runLlamaCpp(dir, jobModels, projectRoot);

const wanted = (envVar("ORACLE_BACKENDS") ?? "reference,webgpu").split(",").map((s) => s.trim());
const backends: { name: string; backend?: Backend; why: string; skip: boolean }[] = [];
if (wanted.includes("reference")) backends.push({ name: "reference", backend: createReferenceBackend(), why: "", skip: false });
if (wanted.includes("webgpu")) {
  const webgpu = await poisonedWebGpu("the llama.cpp LoRA oracle on WebGPU");
  backends.push({ name: "webgpu", backend: webgpu.gpu, why: webgpu.why, skip: webgpu.skip });
}

/** Our greedy run with the adapter in slot 1: log-probs after the prompt and after each generated token, and the tokens. */
async function ourRun(backend: Backend, host: LoadedModel, c: LoraCase): Promise<{ logProbs: Float64Array[]; tokens: number[] }> {
  const adapter = await loadLoraAdapter(`${dir}/${c.spec.seed}-lora.gguf`, host.config, { scale: c.scale });
  const model = uploadModel(backend, host);
  const set = uploadLoraSet(backend, host.config, [adapter], !host.config.tiedEmbeddings);
  const kv = allocatePagedKv(backend, host.config, 3, 16, "f32");
  try {
    return await greedySteps(backend, model, kv, PROMPT, STEPS, [2, 0], { set, slots: [1] });
  } finally {
    freePagedKv(backend, kv);
    freeLoraSet(backend, set);
    freeDeviceModel(backend, model);
  }
}

CASES.forEach((c, i) => {
  for (const b of backends) {
    test(`forward() on ${b.name} with a LoRA adapter matches llama.cpp for ${c.name}: logits and ${STEPS} greedy tokens`, async () => {
      assert.ok(oracle.results, oracle.error);
      assert.ok(b.backend, `${b.name} is unavailable: ${b.why}`);
      const theirs = oracle.results[2 * i];
      assert.equal(theirs.steps.length, STEPS);
      const ours = await ourRun(b.backend, hosts[i], c);
      let max = 0;
      for (let step = 0; step < STEPS; step++) {
        const ref = theirs.steps[step];
        const { error, spread } = maxLogProbError(ours.logProbs[step], ref.probs);
        max = Math.max(max, error / spread);
        assert.ok(error <= TOL * spread, `step ${step}: log-prob error ${error.toExponential(2)} > ${TOL} × spread ${spread.toFixed(2)}`);
      }
      assert.deepEqual(ours.tokens, theirs.steps.map((s) => s.token), "greedy tokens");
      if (envVar("ORACLE_VERBOSE")) console.error(`${b.name} ${c.name}: max error / spread ${max.toExponential(2)}`);
    }, { ignore: b.skip });
  }
});

test("the LoRA oracle's adapters change llama.cpp's greedy tokens, within sane logits (the check is not vacuous)", () => {
  assert.ok(oracle.results, oracle.error);
  CASES.forEach((c, i) => {
    const [adapted, base] = [oracle.results![2 * i], oracle.results![2 * i + 1]];
    const tokens = (r: LlamaCppResult) => r.steps.map((s) => s.token);
    const changed = tokens(adapted).filter((t, k) => t !== tokens(base)[k]).length;
    assert.ok(changed >= STEPS / 2, `${c.name}: the adapter changed only ${changed} greedy tokens: ${tokens(adapted)} vs ${tokens(base)}`);
    // Already after the prompt, before the two runs' contexts part, the log-probs move by far more than noise.
    const lp = (p: number) => (p > 0 ? Math.log(p) : NaN);
    let moved = 0;
    adapted.steps[0].probs.forEach((p, t) => {
      const d = Math.abs(lp(p) - lp(base.steps[0].probs[t]));
      if (Number.isFinite(d)) moved = Math.max(moved, d);
    });
    assert.ok(moved > 0.5, `${c.name}: the adapter moved the first log-probs by only ${moved}`);
    // Varied greedy tokens, and sane logits: no probability underflowing, a spread of log-probs under 40.
    assert.ok(new Set(tokens(adapted)).size >= 3, `${c.name}: ${tokens(adapted)}`);
    for (const s of adapted.steps) {
      assert.ok(s.probs.every((p) => p > 0), `${c.name}: a probability underflowed to 0`);
      const logs = s.probs.map(Math.log);
      assert.ok(Math.max(...logs) - Math.min(...logs) < 40, `${c.name}: log-probs spread over ${Math.max(...logs) - Math.min(...logs)}`);
    }
  });
});
