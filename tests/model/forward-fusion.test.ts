/**
 * forward()'s fused ops: where the backend has them it records fewer ops for the same logits. A
 * backend seen through a proxy counts its calls, and the same model run without the fused op (the
 * proxy hides it, as a backend that lacks it) must give the same bits.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import type { Backend } from "../../src/backend/types.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { loadModel } from "../../src/model/load.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "./model-files.ts";
import { stepLogits } from "./step-logits.ts";
import { randomModel, type RandomModelSpec } from "./forward-fixtures.ts";

const SPEC: RandomModelSpec = {
  architecture: "llama", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 40, vocab: 37,
  ropeLayout: "normal", tied: false, dtype: "f32", seed: 11,
};
const ENTRIES = [{ tokens: [1, 5, 9, 30, 2, 17], startPos: 0, blockTable: [1, 0] }, { tokens: [4], startPos: 0, blockTable: [2] }];

/** `b` with each op call counted, and the ops in `hidden` absent. */
function counted(b: Backend, hidden: readonly string[] = []): { backend: Backend; calls: Map<string, number> } {
  const calls = new Map<string, number>();
  const backend = new Proxy(b, {
    get(target, key) {
      if (typeof key === "string" && hidden.includes(key)) return undefined;
      const v = Reflect.get(target, key, target);
      if (typeof v !== "function") return v;
      return (...args: unknown[]) => {
        calls.set(String(key), (calls.get(String(key)) ?? 0) + 1);
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { backend, calls };
}

async function run(model: Pick<LoadedModel, "config" | "weights">, hidden: readonly string[] = []): Promise<{ logits: Float32Array; calls: Map<string, number> }> {
  const { backend, calls } = counted(createReferenceBackend(), hidden);
  return { logits: await stepLogits(backend, model, ENTRIES), calls };
}

test("forward() adds each layer's two skip connections in the o and down projections with matmulAdd", async () => {
  const model = randomModel(SPEC);
  const fused = await run(model);
  const plain = await run(model, ["matmulAdd"]);
  assert.equal(fused.calls.get("matmulAdd"), 2 * SPEC.layers);
  assert.equal(fused.calls.get("add") ?? 0, 0, "no separate residual add");
  assert.equal(plain.calls.get("add"), 2 * SPEC.layers, "without matmulAdd, one add per skip connection");
  assert.equal(fused.calls.get("matmul")! + 2 * SPEC.layers, plain.calls.get("matmul"));
  assert.deepEqual(fused.logits, plain.logits, "the same bits either way");
});

test("forward() rotates q and k and writes the cache in one rotateAndWriteKv call a layer", async () => {
  for (const spec of [SPEC, { ...SPEC, architecture: "qwen3", ropeLayout: "neox", seed: 13 } as const]) {
    const model = randomModel(spec);
    const fused = await run(model);
    const plain = await run(model, ["rotateAndWriteKv"]);
    assert.equal(fused.calls.get("rotateAndWriteKv"), spec.layers);
    assert.equal(fused.calls.get("rope") ?? 0, 0);
    assert.equal(fused.calls.get("kvWrite") ?? 0, 0);
    assert.equal(plain.calls.get("rope"), 2 * spec.layers);
    assert.equal(plain.calls.get("kvWrite"), spec.layers);
    assert.deepEqual(fused.logits, plain.logits, `${spec.architecture}: the same bits either way`);
  }
});

test("forward() runs each gated feed-forward's two products and activation as one matmulGlu", async () => {
  for (const spec of [SPEC, { ...SPEC, dtype: "q8_0", ffn: 64, seed: 14 } as const]) {
    const model = randomModel(spec);
    const fused = await run(model);
    const plain = await run(model, ["matmulGlu"]);
    assert.equal(fused.calls.get("matmulGlu"), spec.layers);
    assert.equal(fused.calls.get("siluMul") ?? 0, 0);
    assert.equal(plain.calls.get("siluMul"), spec.layers);
    assert.equal(fused.calls.get("matmul")! + 2 * spec.layers, plain.calls.get("matmul"));
    assert.deepEqual(fused.logits, plain.logits, `${spec.dtype}: the same bits either way`);
  }
});

test("forward() runs each attention layer's q, k and v projections as one matmulQkv, except where biases tell them apart", async () => {
  const model = randomModel(SPEC);
  const fused = await run(model);
  const plain = await run(model, ["matmulQkv"]);
  assert.equal(fused.calls.get("matmulQkv"), SPEC.layers);
  assert.equal(fused.calls.get("matmul")! + 3 * SPEC.layers, plain.calls.get("matmul"));
  assert.deepEqual(fused.logits, plain.logits, "the same bits either way");
  // Qwen2's q, k and v biases: three matmuls, each with its bias.
  const biased = await run(randomModel({ ...SPEC, architecture: "qwen2", ropeLayout: "neox", seed: 15 }));
  assert.equal(biased.calls.get("matmulQkv") ?? 0, 0);
});

test("forward() runs a mixture-of-experts layer's routed gate and up experts as one matmulExpertsGlu", async () => {
  const dir = mkdtempSync(`${tmpdir()}/forward-fusion-`);
  try {
    // Qwen3-MoE (SiLU, no expert biases) fuses; GPT-OSS's clamped SwiGLU and expert biases do not.
    for (const [architecture, fused] of [["qwen3moe", true], ["gpt-oss", false]] as const) {
      const spec: ModelFileSpec = {
        architecture, hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32",
        experts: { count: 4, used: 2 }, seed: 16,
      };
      await writeFile(`${dir}/${architecture}.gguf`, ggufBytes(spec, randomHfWeights(spec)));
      const model = await loadModel(`${dir}/${architecture}.gguf`);
      const both = await run(model);
      const without = await run(model, ["matmulExpertsGlu"]);
      assert.equal(both.calls.get("matmulExpertsGlu") ?? 0, fused ? spec.layers : 0, architecture);
      assert.equal(both.calls.get("matmulExperts")! + (fused ? 2 * spec.layers : 0), without.calls.get("matmulExperts"), architecture);
      assert.deepEqual(both.logits, without.logits, `${architecture}: the same bits either way`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("forward() keeps the separate add where a post-norm comes between the projection and the skip connection", async () => {
  const base = randomModel({ ...SPEC, seed: 12 });
  // Gemma 3's sandwich norms: the o and down outputs are normed before they join the residual.
  const model: Pick<LoadedModel, "config" | "weights"> = {
    config: { ...base.config, postNorms: true },
    weights: { ...base.weights, layers: base.weights.layers.map((l) => ({ ...l, attnPostNorm: l.ffnNorm, ffnPostNorm: l.attnNorm })) },
  };
  const fused = await run(model);
  const plain = await run(model, ["matmulAdd"]);
  assert.equal(fused.calls.get("matmulAdd") ?? 0, 0);
  assert.equal(fused.calls.get("add"), 2 * SPEC.layers);
  assert.equal(fused.calls.get("rmsnorm"), 4 * SPEC.layers + 1, "the post-norms ran");
  assert.deepEqual(fused.logits, plain.logits);
});
