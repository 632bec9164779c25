/**
 * A random GLM-4.5 GGUF with a multi-token-prediction block (NextN) for the mtp tests, and models
 * built from its weights.
 */
import assert from "node:assert/strict";
import type { Backend } from "../../src/backend/types.ts";
import { createEngine, type CreateEngineOptions } from "../../src/engine/engine-factory.ts";
import type { HostTensor, LoadedModel } from "../../src/model/config.ts";
import { toF32 } from "../../src/model/weights.ts";
import type { ModelFileSpec } from "../model/model-files.ts";

export const MTP_SPEC: ModelFileSpec = {
  architecture: "glm4moe", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 601,
  nextn: 1, experts: { count: 4, used: 2, sharedFfn: 64, denseLayers: 1, scale: 2.5 },
};

/** DeepSeek V3's layout (latent attention, grouped routing) with one MTP block. */
export const DEEPSEEK_MTP_SPEC: ModelFileSpec = {
  architecture: "deepseek2", hidden: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 610, ropeTheta: 10000,
  tokenizer: "deepseek-v3", mla: { qLora: 24, kvLora: 32, nope: 16, rope: 8, v: 16 }, nextn: 1,
  experts: { count: 16, used: 4, sharedFfn: 64, denseLayers: 1, scale: 2.5, groups: { count: 4, used: 2 } },
};

/** Qwen3.5 (Gated DeltaNet layers, gated attention, zero-centred norms in its checkpoints) with its MTP block. */
export const QWEN35_MTP_SPEC: ModelFileSpec = {
  architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 620,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 }, nextn: 1,
};

/** Qwen3-Next (Gated DeltaNet layers, gated attention, sparse experts with a gated shared one) with its MTP block. */
export const QWEN3NEXT_MTP_SPEC: ModelFileSpec = {
  architecture: "qwen3next", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 32, vocab: 300, tied: false, dtype: "f32", seed: 630,
  deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 2 }, experts: { count: 4, used: 2, sharedFfn: 32 }, nextn: 1,
};

/** A host tensor's values as f32. */
export const values = (t: HostTensor) => new Float32Array(toF32(t).data.buffer.slice(0));
/** An f32 host tensor of `v`. */
export const tensor = (name: string, shape: number[], v: Float32Array): HostTensor => ({ name, shape, dtype: "f32", data: new Uint8Array(v.buffer.slice(0)) });

/** x / rms(x) · weight, as the backends' rmsnorm. */
export function rmsnorm(x: Float32Array, weight: Float32Array, eps: number): Float32Array {
  const ms = x.reduce((a, v) => a + v * v, 0) / x.length;
  const r = 1 / Math.sqrt(ms + eps);
  return x.map((v, i) => v * r * weight[i]);
}

/**
 * A one-layer target whose attention adds nothing (its output projection is zeros), so it predicts
 * from the last token alone, and a block that is that layer fed the next token's embedding (rows of
 * RMS 1, so enorm keeps them): the block predicts the target's token after the next, exactly, and
 * chained drafts too.
 */
export function exactMtpModel(model: LoadedModel): LoadedModel {
  const c = model.config;
  const emb = values(model.weights.tokenEmbedding);
  for (let t = 0; t < c.vocabSize; t++) {
    const row = emb.subarray(t * 32, t * 32 + 32);
    const r = Math.sqrt(row.reduce((a, v) => a + v * v, 0) / 32);
    for (let i = 0; i < 32; i++) row[i] /= r;
  }
  const layer = { ...model.weights.mtp!.layer, wo: tensor("wo", model.weights.mtp!.layer.wo!.shape, new Float32Array(32 * 64)) };
  const eh = new Float32Array(32 * 64);
  for (let i = 0; i < 32; i++) eh[i * 64 + i] = 1;
  return {
    ...model,
    config: { ...c, numLayers: 1, moe: { ...c.moe!, denseLayers: 0 }, mtp: { layer: 1 } },
    weights: {
      ...model.weights,
      tokenEmbedding: tensor("embd", [c.vocabSize, 32], emb),
      layers: [layer],
      mtp: { ...model.weights.mtp!, layer, ehProj: tensor("eh", [32, 64], eh), enorm: tensor("en", [32], new Float32Array(32).fill(1)), headNorm: model.weights.outputNorm },
    },
  };
}

/** Prompts of the draft-block tests: several lengths, batched together. */
export const DRAFT_PROMPTS = [[5, 9, 44, 120, 7, 3, 88, 19, 250, 6, 61, 2, 17, 33], [7, 7, 1, 254], [13, 42, 2, 5, 77, 160, 31, 9, 12, 290, 6, 48, 3, 8, 8, 100, 21, 4]];

/** An engine's greedy tokens for {@link DRAFT_PROMPTS} at once (each must run to `maxTokens`), and its draft tokens verified and taken. */
export async function draftedOutputs(backend: Backend, m: LoadedModel, o: CreateEngineOptions, maxTokens = 20): Promise<{ tokens: number[][]; drafted: number; accepted: number }> {
  const e = createEngine(backend, m, o);
  try {
    const rs = await Promise.all(DRAFT_PROMPTS.map((prompt) => e.submit({ prompt, maxTokens, temperature: 0, ignoreEos: true }).result));
    for (const r of rs) assert.equal(r.finishReason, "length", r.error);
    const s = e.stats();
    return { tokens: rs.map((r) => r.tokenIds), drafted: s.specDraftTokens, accepted: s.specAcceptedTokens };
  } finally {
    await e.stop();
  }
}
