/**
 * An EAGLE draft head's forward (model/eagle-head.ts; vLLM's speculative methods "eagle3" and
 * "eagle"), run where a multi-token-prediction block runs (forward-mtp.ts `mtpForward`): at each row,
 * from the model's state at that position and the embedding of the token after it, the logits of the
 * token after that, and the state a chained pass takes.
 *
 * EAGLE-3: `fc` fuses the states entering three of the model's layers ([rows, 3·hidden]; a chained
 * pass takes the head's own state instead, [rows, hidden], and skips it); the layer's attention reads
 * [input_layernorm(embedding); hidden_norm(fused)] (2·hidden wide) and adds to the fused state; its
 * feed-forward is a Llama one (a Qwen3-style head norms its queries and keys per head); `norm` and `lm_head` (over the head's own vocabulary, mapped to the
 * model's ids by the caller) give the logits; the state before `norm` is what chains. EAGLE:
 * fc([embedding; the model's normed state]) into a Llama layer without an input norm, whose output
 * goes to the head without a norm, and chains.
 *
 * Its KV cache is the model's block cache's extra layer (ModelConfig.mtp), as a block's: the head's
 * key/value heads have the model's geometry (the loader refuses others). Its RoPE is the half-split
 * one of Hugging Face checkpoints, whatever the model's own layout.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { EagleHeadConfig } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import { ForwardInputError, uploadBatch } from "./forward-batch.ts";
import { Scratch, swiglu } from "./forward-layers.ts";
import { layerCaches, type PagedKv, planStep } from "./forward.ts";
import type { MtpStep } from "./forward-mtp.ts";

/** An EAGLE-3 head's fused input [rows, 3·hidden] as fc takes it: RMS-normed whole or each third (EagleHeadConfig.fcInputNorm), or as it is. */
function fcInput(backend: Backend, x: Tensor, e: EagleHeadConfig, weight: Tensor | undefined, s: Scratch): Tensor {
  if (!e.fcInputNorm) return x;
  if (!weight) throw new ForwardInputError("The EAGLE-3 head lacks the weight of its norm before fc");
  if (e.fcInputNorm === "whole") return s.keep(backend.rmsnorm(x, weight, e.rmsNormEps));
  const [n, width] = x.shape;
  const thirds = s.keep(backend.rmsnorm(backend.reshape(x, [3 * n, width / 3]), weight, e.rmsNormEps));
  return backend.reshape(thirds, [n, width]);
}

/** Runs the head over `step`'s rows (see forward-mtp.ts `mtpForward`, whose contract it keeps). */
export function eagleForward(backend: Backend, model: DeviceModel, kv: PagedKv, step: MtpStep, e: EagleHeadConfig): { logits: Tensor; hidden: Tensor } | undefined {
  const c = model.config;
  const w = model.weights;
  const m = w.mtp!;
  const l = m.layer;
  if (!l.wq || !l.wk || !l.wv || !l.wo || !l.ffnNorm || !l.wGate || !l.wUp || !l.wDown) throw new ForwardInputError("The EAGLE head lacks an attention or feed-forward weight");
  const cache = layerCaches(c, kv).get(c.mtp!.layer)!;
  const flat = planStep(model, kv, { entries: step.entries });
  const n = flat.ids.length;
  const h = c.hiddenSize;
  const fusedWidth = e.method === "eagle3" ? m.ehProj.shape[1] : h;
  if (step.hidden.shape[0] !== n || (step.hidden.shape[1] !== h && step.hidden.shape[1] !== fusedWidth)) {
    throw new ForwardInputError(`The EAGLE head's input states are [${step.hidden.shape}]; its step has ${n} rows of ${h}${fusedWidth !== h ? ` or ${fusedWidth}` : ""}`);
  }
  if (step.embedded && (step.embedded.shape[0] !== n || step.embedded.shape[1] !== h)) {
    throw new ForwardInputError(`The EAGLE head's input embeddings are [${step.embedded.shape}]; its step has ${n} rows of ${h}`);
  }
  if (step.tokenIds && step.tokenIds.shape[0] !== n) throw new ForwardInputError(`The step's device token ids hold ${step.tokenIds.shape[0]} rows, its entries ${n}`);
  const bad = step.rows.find((r) => !Number.isInteger(r) || r < 0 || r >= n);
  if (bad !== undefined) throw new ForwardInputError(`Row ${bad} is outside the step's ${n} rows`);
  const tensors = uploadBatch(backend, flat);
  const s = new Scratch(backend);
  try {
    const eps = e.rmsNormEps;
    // Ids on the device are the head's own picks: its vocabulary's rows where it has one.
    const table = step.tokenIds ? m.draftEmbedding ?? m.embedding ?? w.tokenEmbedding : m.embedding ?? w.tokenEmbedding;
    const embedded = step.embedded ?? s.keep(backend.embedding(table, step.tokenIds ?? tensors.ids));
    let attnIn: Tensor, residual: Tensor;
    if (e.method === "eagle3") {
      if (!m.enorm || !m.hnorm) throw new ForwardInputError("The EAGLE-3 head lacks its input_layernorm or hidden_norm weight");
      const fused = step.hidden.shape[1] === h ? step.hidden : s.keep(backend.matmul(fcInput(backend, step.hidden, e, m.fcInNorm, s), m.ehProj));
      const normed = s.keep(backend.rmsnorm(fused, m.hnorm, eps));
      residual = e.normBeforeResidual ? normed : fused;
      attnIn = s.keep(backend.concatColumns(s.keep(backend.rmsnorm(embedded, m.enorm, eps)), normed));
    } else {
      attnIn = residual = s.keep(backend.matmul(s.keep(backend.concatColumns(embedded, step.hidden)), m.ehProj, m.ehBias));
    }
    let q = backend.reshape(s.keep(backend.matmul(attnIn, l.wq, l.bq)), [n, e.numHeads, e.headDim]);
    let k = backend.reshape(s.keep(backend.matmul(attnIn, l.wk, l.bk)), [n, c.numKvHeads, e.headDim]);
    // A Qwen3-style head norms each head's query and key before turning them.
    if (l.qNorm && l.kNorm) [q, k] = [s.keep(backend.rmsnorm(q, l.qNorm, eps)), s.keep(backend.rmsnorm(k, l.kNorm, eps))];
    const v = backend.reshape(s.keep(backend.matmul(attnIn, l.wv, l.bv)), [n, c.numKvHeads, e.headDim]);
    const qr = s.keep(backend.rope(q, tensors.positions, e.ropeTheta, "neox", undefined, m.ropeFreqFactors));
    const kr = s.keep(backend.rope(k, tensors.positions, e.ropeTheta, "neox", undefined, m.ropeFreqFactors));
    backend.kvWrite(kr, v, cache.k, cache.v, tensors.slots);
    const att = s.keep(backend.pagedAttention(qr, cache.k, cache.v, tensors.attention, e.attentionScale ?? 1 / Math.sqrt(e.headDim), e.window !== undefined ? { window: e.window } : {}));
    const afterAttn = s.keep(backend.add(s.keep(backend.matmul(backend.reshape(att, [n, e.numHeads * e.headDim]), l.wo, l.bo)), residual));
    const out = s.keep(swiglu(backend, s.keep(backend.rmsnorm(afterAttn, l.ffnNorm, eps)), l.wGate, l.wUp, l.wDown, s, undefined, false, afterAttn));
    if (step.rows.length === 0) return undefined;
    const idx = s.keep(backend.upload(Int32Array.from(step.rows), [step.rows.length]));
    const rows = backend.gatherRows(out, idx);
    // EAGLE-3's `norm` before its head; a chained pass takes the state before it, or after (`norm_output`).
    const normed = e.method === "eagle3" && m.headNorm ? backend.rmsnorm(rows, m.headNorm, eps) : undefined;
    const hidden = e.normOutput && normed ? normed : rows;
    // The one not returned is scratch.
    if (hidden !== rows) s.keep(rows);
    if (normed && normed !== hidden) s.keep(normed);
    try {
      return { logits: backend.matmul(normed ?? hidden, m.head ?? w.output ?? w.tokenEmbedding), hidden };
    } catch (err) {
      backend.free(hidden);
      throw err;
    }
  } finally {
    s.release();
    tensors.free();
  }
}
