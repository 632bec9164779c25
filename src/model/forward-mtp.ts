/**
 * A multi-token-prediction block's forward (DeepSeek V3's MTP module, GLM-4.5's NextN, Qwen3.5's MTP
 * layer; ModelConfig.mtp): at each row, from the model's hidden state after its output norm at that
 * position and the embedding of the token after it, the logits of the token after that. The block's
 * input is eh_proj([enorm(embedding); hnorm(hidden)]), then one whole layer of the model's kind, then
 * its head's norm and head (the model's where it has none of its own).
 *
 * Its KV cache is the last of PagedKv's (kv-cache.ts `cachedLayers`) and shares the model's block
 * tables: row p writes the block's K/V at position p, as the model's row p does, so prefix hits, swaps
 * and transfers carry it with the model's. It is a cache in the plain sense: a draft read from a stale
 * one is only a worse guess, as the model verifies every draft token.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import { isMoeLayer } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import { headIndices, mlaAttentionBlock } from "./attention-mla.ts";
import { type ForwardEntry, ForwardInputError, uploadBatch } from "./forward-batch.ts";
import { attentionBlock, mlpBlock, moeBlock, projector, Scratch } from "./forward-layers.ts";
import { layerCaches, type PagedKv, planStep } from "./forward.ts";
import { eagleForward } from "./forward-eagle.ts";

/** One pass of the block over a step's rows. */
export interface MtpStep {
  /**
   * The rows, as ForwardEntry: each entry's positions and block table are the model's step's, and its
   * tokens are the token after each position (the one the model's row was fed next, or sampled).
   */
  entries: readonly ForwardEntry[];
  /**
   * f32 [rows, hidden]: the model's hidden state after its output norm at each row (forwardWithHidden's
   * `allHidden`), or, for a draft chained after the first, the block's own from the pass before.
   */
  hidden: Tensor;
  /** Flat rows (in entry order) whose logits and hidden states are returned. */
  rows: readonly number[];
  /**
   * The rows' token ids already on the device, i32 [rows] (the entries' own `tokens` are then
   * placeholders): the block's own picks, so an EAGLE-3 head with a vocabulary of its own
   * (EagleHeadConfig.draftToTarget) reads them as its ids.
   */
  tokenIds?: Tensor;
  /** The rows' token embeddings already on the device, f32 [rows, hidden] (instead of `tokenIds` or the entries' `tokens`). */
  embedded?: Tensor;
}

/**
 * Runs the block over `step`'s rows, writing its K/V, and returns for `step.rows` f32 logits
 * [rows, vocab] and the hidden states they came from after the head's norm [rows, hidden] (what a
 * chained pass takes as `hidden`); undefined without rows (the pass only writes the block's cache).
 * The caller owns (and frees) both.
 */
export function mtpForward(backend: Backend, model: DeviceModel, kv: PagedKv, step: MtpStep): { logits: Tensor; hidden: Tensor } | undefined {
  const c = model.config;
  const w = model.weights;
  const m = w.mtp;
  if (!c.mtp || !m) throw new ForwardInputError("The model has no multi-token-prediction block loaded (load it with the mtp option)");
  if (c.mtp.eagle) return eagleForward(backend, model, kv, step, c.mtp.eagle);
  if (!m.enorm || !m.hnorm) throw new ForwardInputError("The multi-token-prediction block lacks its enorm or hnorm weight");
  const at = c.mtp.layer;
  const cache = layerCaches(c, kv).get(at)!;
  const flat = planStep(model, kv, { entries: step.entries });
  const n = flat.ids.length;
  if (step.hidden.shape[0] !== n || step.hidden.shape[1] !== c.hiddenSize) {
    throw new ForwardInputError(`The block's input hidden states are [${step.hidden.shape}]; its step has ${n} rows of ${c.hiddenSize}`);
  }
  if (step.embedded && (step.embedded.shape[0] !== n || step.embedded.shape[1] !== c.hiddenSize)) {
    throw new ForwardInputError(`The block's input embeddings are [${step.embedded.shape}]; its step has ${n} rows of ${c.hiddenSize}`);
  }
  if (step.tokenIds && step.tokenIds.shape[0] !== n) throw new ForwardInputError(`The step's device token ids hold ${step.tokenIds.shape[0]} rows, its entries ${n}`);
  const bad = step.rows.find((r) => !Number.isInteger(r) || r < 0 || r >= n);
  if (bad !== undefined) throw new ForwardInputError(`Row ${bad} is outside the step's ${n} rows`);
  const tensors = uploadBatch(backend, flat, c.attnTemperature);
  const s = new Scratch(backend);
  try {
    const eps = c.rmsNormEps;
    const embedded = step.embedded ?? s.keep(backend.embedding(m.embedding ?? w.tokenEmbedding, step.tokenIds ?? tensors.ids));
    const joined = s.keep(backend.concatColumns(s.keep(backend.rmsnorm(embedded, m.enorm, eps)), s.keep(backend.rmsnorm(step.hidden, m.hnorm!, eps))));
    const x = s.keep(backend.matmul(joined, m.ehProj));
    const l = m.layer;
    const project = projector(backend, undefined, undefined, at, s);
    const afterAttn = s.keep(
      c.mla
        ? mlaAttentionBlock(backend, model, l, x, tensors, cache.k, cache.v, s.keep(headIndices(backend, n, c.numHeads)), (t) => s.keep(t))
        : attentionBlock(backend, model, l, x, tensors, cache.k, cache.v, undefined, true, s, project, at),
    );
    const out = s.keep(isMoeLayer(c, at) ? moeBlock(backend, model, l, afterAttn, s) : mlpBlock(backend, model, l, afterAttn, s, project));
    if (step.rows.length === 0) return undefined;
    const idx = s.keep(backend.upload(Int32Array.from(step.rows), [step.rows.length]));
    const hidden = backend.rmsnorm(s.keep(backend.gatherRows(out, idx)), m.headNorm ?? w.outputNorm, eps);
    try {
      return { logits: backend.matmul(hidden, m.head ?? w.output ?? w.tokenEmbedding), hidden };
    } catch (e) {
      backend.free(hidden);
      throw e;
    }
  } finally {
    s.release();
    tensors.free();
  }
}
