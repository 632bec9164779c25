/**
 * Multi-head latent attention (DeepSeek V2/V3, Kimi K2) in its absorbed form, as llama.cpp runs
 * files with `attn_k_b` / `attn_v_b`: each token caches one latent (kvLoraRank, RMS-normed) and one
 * RoPE key (ropeDim) shared by all heads; each head's non-RoPE query is taken into the latent space
 * by W_kb, so the scores are q_latent · latent + q_rope · k_rope over a single 576-wide KV head
 * (DeepSeek V3's sizes), and the heads' outputs — weighted sums of latents — are expanded by W_vb.
 * The per-head products are expert matmuls with one "expert" per head.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { LayerWeights } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import { ForwardInputError, type StepTensors } from "./forward-batch.ts";

/** Registers a temporary for release at the end of the layer (reshape views are not registered). */
export type KeepTemp = <T extends Tensor>(t: T) => T;

/** i32 [n, heads] holding each head's index: routes row t·heads + h of a per-head matmul to head h. */
export function headIndices(backend: Backend, n: number, heads: number): Tensor {
  const ids = new Int32Array(n * heads);
  for (let i = 0; i < ids.length; i++) ids[i] = i % heads;
  return backend.upload(ids, [n, heads]);
}

/**
 * The attention sub-block of an MLA layer: x + wo(attention(x)). Writes the token's latent and RoPE
 * key, side by side, into the cache; the value is the latent part of the key, so `vCache` is
 * normally `kCache` (see PagedKv; two caches holding the same rows work too).
 */
export function mlaAttentionBlock(
  backend: Backend,
  model: DeviceModel,
  l: LayerWeights<Tensor>,
  x: Tensor,
  step: StepTensors,
  kCache: Tensor,
  vCache: Tensor,
  heads: Tensor,
  keep: KeepTemp,
): Tensor {
  const c = model.config;
  const m = c.mla!;
  if (!l.wkvA || !l.kvANorm || !l.wkB || !l.wvB || (m.qLoraRank > 0 && (!l.wqA || !l.qANorm))) {
    throw new ForwardInputError("The model config asks for multi-head latent attention but the weights lack its projections");
  }
  const n = x.shape[0];
  const h = c.numHeads;
  const eps = c.rmsNormEps;
  const rope = (t: Tensor) => backend.rope(t, step.positions, c.ropeTheta, c.ropeLayout, m.ropeDim, model.ropeFreqFactors);
  if (!l.attnNorm) throw new ForwardInputError("The model's weights lack a layer's attention norm");
  if (!l.wq || !l.wo) throw new ForwardInputError("The model's attention weights lack the query or output projection");
  const { wq, wo } = l;
  const normed = keep(backend.rmsnorm(x, l.attnNorm, eps));
  // Queries: [n·heads, nope + rope], through q's low-rank bottleneck where the model has one.
  const qIn = l.wqA ? keep(backend.rmsnorm(keep(backend.matmul(normed, l.wqA)), l.qANorm!, eps)) : normed;
  const q = backend.reshape(keep(backend.matmul(qIn, wq)), [n * h, m.nopeDim + m.ropeDim]);
  const qLatent = keep(backend.matmulExperts(keep(backend.sliceColumns(q, 0, m.nopeDim)), l.wkB, heads));
  const qRope = keep(rope(backend.reshape(keep(backend.sliceColumns(q, m.nopeDim, m.ropeDim)), [n, h, m.ropeDim])));
  const query = keep(backend.concatColumns(backend.reshape(qLatent, [n, h, m.kvLoraRank]), qRope));
  // The cached key: [n, 1, kvLoraRank + ropeDim], the normed latent then the turned RoPE key.
  const kv = keep(backend.matmul(normed, l.wkvA));
  const latent = keep(backend.rmsnorm(keep(backend.sliceColumns(kv, 0, m.kvLoraRank)), l.kvANorm, eps));
  const kRope = keep(rope(backend.reshape(keep(backend.sliceColumns(kv, m.kvLoraRank, m.ropeDim)), [n, 1, m.ropeDim])));
  const key = keep(backend.concatColumns(backend.reshape(latent, [n, 1, m.kvLoraRank]), kRope));
  backend.kvWrite(key, key, kCache, vCache, step.slots);
  const scale = c.attentionScale ?? 1 / Math.sqrt(m.nopeDim + m.ropeDim);
  const att = keep(backend.pagedAttention(query, kCache, vCache, step.attention, scale));
  // Each head's output is a weighted sum of whole keys: its first kvLoraRank dims are the latent's.
  const attLatent = keep(backend.sliceColumns(backend.reshape(att, [n * h, m.kvLoraRank + m.ropeDim]), 0, m.kvLoraRank));
  const values = keep(backend.matmulExperts(attLatent, l.wvB, heads));
  const o = keep(backend.matmul(backend.reshape(values, [n, h * m.vHeadDim]), wo));
  return backend.add(x, o);
}
