/**
 * One forward pass for the Llama / Qwen2 / Qwen3 family (dense, or with mixture-of-experts
 * feed-forwards: Mixtral, Qwen2-MoE, Qwen3-MoE, GLM-4.5; GPT-OSS's sliding windows, attention
 * sinks, biases and clamped SwiGLU; Gemma 3's scaled embeddings, sandwich norms, GeGLU and sliding
 * layers with their own RoPE base; or DeepSeek V3 / Kimi K2's latent attention, attention-mla.ts)
 * over a ragged batch, against the
 * Backend interface, with a paged KV cache. Everything a step needs is passed in explicitly.
 */
import type { Backend, KvDType, Tensor } from "../backend/types.ts";
import { isMoeLayer, type LayerWeights, layerWindow, type MoeConfig } from "./config.ts";
import { headIndices, type KeepTemp, mlaAttentionBlock } from "./attention-mla.ts";
import type { DeviceModel } from "./device-weights.ts";
import type { DeviceLoraSet } from "./lora-set.ts";
import { loraKey, type LoraTarget } from "./lora.ts";
import { type FlatBatch, flattenBatch, type ForwardEntry, ForwardInputError, type StepTensors, uploadBatch } from "./forward-batch.ts";

export { type ForwardEntry, ForwardInputError } from "./forward-batch.ts";

/**
 * Per-layer paged KV caches, each [numBlocks, blockSize, kvHeads, headDim] in `dtype`. A multi-head
 * latent attention model's value is part of its key: `v[i]` is `k[i]`, one cache (attention-mla.ts).
 */
export interface PagedKv {
  k: Tensor[];
  v: Tensor[];
  numBlocks: number;
  blockSize: number;
  /** f32 unless the engine chose f16 (engine/kv-cache.ts `resolveKvDtype`); absent means f32. */
  dtype?: KvDType;
}

/** One step: the entries, and whether to return logits for every position or only the last. */
export interface ForwardStep {
  entries: readonly ForwardEntry[];
  /** When true, logits cover every new token ([totalTokens, vocab]); tests use it. */
  allPositions?: boolean;
  /**
   * Rows of the flat batch (indices into the step's new tokens, in entry order) whose logits follow
   * the entries' last rows: the result is [entries + extraRows.length, vocab]. Prompt log
   * probabilities need them; ignored with `allPositions`.
   */
  extraRows?: readonly number[];
  /**
   * Rows of the result (entries' last rows, then `extraRows`) whose hidden state after the output
   * norm is returned too ({@link forwardWithHidden}; embeddings are the last prompt token's).
   */
  hiddenRows?: readonly number[];
  /** LoRA adapters: the device set and each entry's slot in it (0: the base model). Absent: none. */
  lora?: StepLora;
  /**
   * The step's token ids already on the device, one per row in entry order (the entries' own
   * `tokens` are then placeholders of the right lengths): a step fed what the one before sampled,
   * without reading it back (greedy drafting).
   */
  tokenIds?: Tensor;
}

/** {@link ForwardStep.lora}. */
export interface StepLora {
  set: DeviceLoraSet;
  /** One per entry; 0 runs the base model. */
  slots: readonly number[];
}

/**
 * A projection x · Wᵀ (+ bias) of one layer's `target`, plus each row's adapter delta where it has
 * one, plus `residual` where given (a layer's skip connection).
 */
type Project = ((x: Tensor, w: Tensor, bias: Tensor | undefined, target: LoraTarget, residual?: Tensor) => Tensor) & {
  /** True where an adapter adds a delta to `target`'s output (so the projection cannot be fused away). */
  adapts?(target: LoraTarget): boolean;
};

/**
 * Layer `layer`'s projections: plain matmuls, or where `set` adapts the projection and `ids` (each
 * row's slot, i32 [rows of x, 1]) are given, y + B[slot]·(A[slot]·x) per row through two expert
 * matmuls (slot 0's tables are zeros). Layer -1 is the output projection.
 */
function projector(backend: Backend, set: DeviceLoraSet | undefined, ids: Tensor | undefined, layer: number, s: Scratch): Project {
  const adapter = (target: LoraTarget) => (ids ? set?.weights.get(loraKey(layer, target)) : undefined);
  const project: Project = (x, w, bias, target, residual) => {
    const lw = adapter(target);
    if (!lw || !ids) return matmulPlus(backend, x, w, bias, residual, s);
    const y = s.keep(backend.matmul(x, w, bias));
    const down = s.keep(backend.matmulExperts(x, lw.a, ids));
    const delta = s.keep(backend.matmulExperts(down, lw.b, ids));
    const adapted = backend.add(y, delta);
    return residual ? backend.add(residual, s.keep(adapted)) : adapted;
  };
  project.adapts = (target) => adapter(target) !== undefined;
  return project;
}

/**
 * x · Wᵀ (+ bias) (+ residual): the residual added in the matmul's epilogue where the backend has
 * `matmulAdd` (a dispatch fewer per skip connection), else by `add`.
 */
function matmulPlus(backend: Backend, x: Tensor, w: Tensor, bias: Tensor | undefined, residual: Tensor | undefined, s: Scratch): Tensor {
  if (!residual) return backend.matmul(x, w, bias);
  if (backend.matmulAdd) return backend.matmulAdd(x, w, residual, bias);
  return backend.add(residual, s.keep(backend.matmul(x, w, bias)));
}

/** Uploads slot ids i32 [rows.length, 1]; undefined when every row runs the base model. */
function uploadSlots(backend: Backend, rows: Int32Array): Tensor | undefined {
  return rows.some((r) => r !== 0) ? backend.upload(rows, [rows.length, 1]) : undefined;
}

/** Frees tensors registered during a layer; reshape views are not registered twice. */
class Scratch {
  private readonly held: Tensor[] = [];
  constructor(private readonly backend: Backend) {}
  keep<T extends Tensor>(t: T): T {
    this.held.push(t);
    return t;
  }
  release(): void {
    for (const t of this.held.splice(0)) this.backend.free(t);
  }
}

function attentionBlock(
  backend: Backend,
  model: DeviceModel,
  l: LayerWeights<Tensor>,
  x: Tensor,
  step: StepTensors,
  kCache: Tensor,
  vCache: Tensor,
  window: number | undefined,
  s: Scratch,
  project: Project,
): Tensor {
  const c = model.config;
  const n = x.shape[0];
  if (!l.wk || !l.wv) throw new ForwardInputError("The model's attention weights lack the key and value projections");
  const h = s.keep(backend.rmsnorm(x, l.attnNorm, c.rmsNormEps));
  const { wk, wv } = l;
  // The three projections in one pass where nothing tells them apart (no biases, no adapters, one dtype).
  const oneQkv = !l.bq && !l.bk && !l.bv && !project.adapts?.("wq") && !project.adapts?.("wk") && !project.adapts?.("wv") &&
    l.wq.dtype === wk.dtype && wk.dtype === wv.dtype;
  const [qFlat, kFlat, vFlat] = backend.matmulQkv && oneQkv
    ? backend.matmulQkv(h, l.wq, wk, wv)
    : [project(h, l.wq, l.bq, "wq"), project(h, wk, l.bk, "wk"), project(h, wv, l.bv, "wv")];
  let q = backend.reshape(s.keep(qFlat), [n, c.numHeads, c.headDim]);
  let k = backend.reshape(s.keep(kFlat), [n, c.numKvHeads, c.headDim]);
  const v = backend.reshape(s.keep(vFlat), [n, c.numKvHeads, c.headDim]);
  if (c.qkNorm) {
    if (!l.qNorm || !l.kNorm) throw new ForwardInputError("The model config asks for q/k norm but the weights lack it");
    q = s.keep(backend.rmsnorm(q, l.qNorm, c.rmsNormEps));
    k = s.keep(backend.rmsnorm(k, l.kNorm, c.rmsNormEps));
  }
  // Gemma 3's sliding layers turn with their own base and unscaled; the global ones with the model's.
  const ownRope = window !== undefined ? c.slidingWindow?.ropeTheta : undefined;
  const theta = ownRope ?? c.ropeTheta;
  const f = ownRope === undefined ? model.ropeFreqFactors : undefined;
  let qr = q;
  if (backend.rotateAndWriteKv && kCache !== vCache) {
    // One dispatch for both rotations and the cache write; q (this block's own) is rotated in place.
    backend.rotateAndWriteKv(q, k, v, step.positions, { theta, layout: c.ropeLayout, rotaryDim: c.rotaryDim, freqFactors: f }, kCache, vCache, step.slots);
  } else {
    qr = s.keep(backend.rope(q, step.positions, theta, c.ropeLayout, c.rotaryDim, f));
    const kr = s.keep(backend.rope(k, step.positions, theta, c.ropeLayout, c.rotaryDim, f));
    backend.kvWrite(kr, v, kCache, vCache, step.slots);
  }
  if (c.attentionSinks && !l.sinks) throw new ForwardInputError("The model config asks for attention sinks but the weights lack them");
  const scale = c.attentionScale ?? 1 / Math.sqrt(c.headDim);
  const att = s.keep(backend.pagedAttention(qr, kCache, vCache, step.attention, scale, { window, sinks: l.sinks }));
  const attFlat = backend.reshape(att, [n, c.numHeads * c.headDim]);
  // Without a post-norm the skip connection joins the o projection (one dispatch with matmulAdd).
  if (!c.postNorms) return project(attFlat, l.wo, l.bo, "wo", x);
  const o = s.keep(project(attFlat, l.wo, l.bo, "wo"));
  return backend.add(x, postNorm(backend, model, l.attnPostNorm, o, s));
}

/** A block's output normed before the residual add where the model has sandwich norms (ModelConfig.postNorms). */
function postNorm(backend: Backend, model: DeviceModel, weight: Tensor | undefined, y: Tensor, s: Scratch): Tensor {
  if (!model.config.postNorms) return y;
  if (!weight) throw new ForwardInputError("The model config asks for post-norms but the weights lack them");
  return s.keep(backend.rmsnorm(y, weight, model.config.rmsNormEps));
}

/**
 * SwiGLU: down(silu(h · gateᵀ) ⊙ (h · upᵀ)), or GeGLU with `gelu`, plus `residual` where given;
 * `project` adds adapter deltas (absent: plain matmuls, as the shared expert's).
 */
function swiglu(
  backend: Backend, h: Tensor, wGate: Tensor, wUp: Tensor, wDown: Tensor, s: Scratch, project?: Project, gelu = false, residual?: Tensor,
): Tensor {
  const mm: Project = project ?? ((x, w, _bias, _target, r) => matmulPlus(backend, x, w, undefined, r, s));
  let act: Tensor;
  // Both products and the gate's activation in one pass, where no adapter needs them apart.
  const fusable = !mm.adapts?.("wGate") && !mm.adapts?.("wUp") && wGate.dtype === wUp.dtype && wGate.shape.every((d, i) => d === wUp.shape[i]);
  if (backend.matmulGlu && fusable) {
    act = s.keep(backend.matmulGlu(h, wGate, wUp, gelu ? "gelu" : "silu"));
  } else {
    const gate = s.keep(mm(h, wGate, undefined, "wGate"));
    const up = s.keep(mm(h, wUp, undefined, "wUp"));
    act = s.keep(gelu ? backend.geluMul(gate, up) : backend.siluMul(gate, up));
  }
  return mm(act, wDown, undefined, "wDown", residual);
}

function mlpBlock(backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, s: Scratch, project: Project): Tensor {
  const h = s.keep(backend.rmsnorm(x, l.ffnNorm, model.config.rmsNormEps));
  const gelu = model.config.ffnActivation === "gelu";
  // Without a post-norm the skip connection joins the down projection (one dispatch with matmulAdd).
  if (!model.config.postNorms) return swiglu(backend, h, l.wGate, l.wUp, l.wDown, s, project, gelu, x);
  const down = s.keep(swiglu(backend, h, l.wGate, l.wUp, l.wDown, s, project, gelu));
  return backend.add(x, postNorm(backend, model, l.ffnPostNorm, down, s));
}

/** x scaled by `scale`, row by row (a one-expert combine: every backend has it). */
function scaled(backend: Backend, x: Tensor, scale: number): Tensor {
  const n = x.shape[0];
  const weights = backend.upload(new Float32Array(n).fill(scale), [n, 1]);
  try {
    return backend.moeCombine(x, weights);
  } finally {
    backend.free(weights);
  }
}

/**
 * The mixture-of-experts feed-forward: route each token, run its experts' SwiGLU, sum them by
 * weight, and add the shared expert where the model has one.
 */
function moeBlock(backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, s: Scratch): Tensor {
  const c = model.config;
  const moe = c.moe!;
  if (!l.router) throw new ForwardInputError("The model config asks for experts but the weights lack a router");
  if (moe.selectionBias && !l.routerBias) throw new ForwardInputError("The model config asks for a router selection bias but the weights lack it");
  if (moe.routerLogitBias && !l.routerLogitBias) throw new ForwardInputError("The model config asks for a router logit bias but the weights lack it");
  const h = s.keep(backend.rmsnorm(x, l.ffnNorm, c.rmsNormEps));
  const logits = s.keep(backend.matmul(h, l.router, l.routerLogitBias));
  const { ids, weights } = backend.moeRoute(logits, moe.numExpertsUsed, {
    normalize: moe.normalizeTopK,
    gating: moe.gating,
    selectionBias: moe.selectionBias ? l.routerBias : undefined,
    scale: moe.routedScale,
    groups: moe.groups,
  });
  s.keep(ids);
  s.keep(weights);
  const biased = expertBiasing(backend, moe, l, ids, s);
  const a = moe.activation;
  let act: Tensor;
  // The gate's and up projection's experts and SiLU in one pass, where no bias or clamped activation (GPT-OSS) comes between.
  const fusable = !a && !moe.expertBiases && l.wGate.dtype === l.wUp.dtype && l.wGate.shape.every((d, i) => d === l.wUp.shape[i]);
  if (backend.matmulExpertsGlu && fusable) {
    act = s.keep(backend.matmulExpertsGlu(h, l.wGate, l.wUp, ids, "silu"));
  } else {
    const gate = biased(s.keep(backend.matmulExperts(h, l.wGate, ids)), l.bGate);
    const up = biased(s.keep(backend.matmulExperts(h, l.wUp, ids)), l.bUp);
    act = s.keep(a ? backend.swigluOai(gate, up, a.alpha, a.limit) : backend.siluMul(gate, up));
  }
  const down = biased(s.keep(backend.matmulExperts(act, l.wDown, ids)), l.bDown);
  let mixed = s.keep(backend.moeCombine(down, weights));
  if (moe.sharedIntermediateSize > 0) {
    if (!l.wGateShared || !l.wUpShared || !l.wDownShared) throw new ForwardInputError("The model config asks for a shared expert but the weights lack it");
    let shared = s.keep(swiglu(backend, h, l.wGateShared, l.wUpShared, l.wDownShared, s));
    if (moe.sharedGate) {
      if (!l.sharedGate) throw new ForwardInputError("The model config asks for a shared-expert gate but the weights lack it");
      // sigmoid(h · gate) per token: a one-expert sigmoid route gives it as the weight, and the
      // combine scales each row by it.
      const gateLogit = s.keep(backend.matmul(h, l.sharedGate));
      const g = backend.moeRoute(gateLogit, 1, { normalize: false, gating: "sigmoid" });
      s.keep(g.ids);
      s.keep(g.weights);
      shared = s.keep(backend.moeCombine(shared, g.weights));
    }
    mixed = s.keep(backend.add(mixed, shared));
  }
  return backend.add(x, postNorm(backend, model, l.ffnPostNorm, mixed, s));
}

/**
 * Adds each routed expert's bias to its rows of an expert matmul's output (row t·k + j is token
 * t's j-th expert): the bias table's rows gathered by the routed ids. The identity without biases.
 */
function expertBiasing(
  backend: Backend,
  moe: MoeConfig,
  l: LayerWeights<Tensor>,
  ids: Tensor,
  s: Scratch,
): (y: Tensor, bias: Tensor | undefined) => Tensor {
  if (!moe.expertBiases) return (y) => y;
  if (!l.bGate || !l.bUp || !l.bDown) throw new ForwardInputError("The model config asks for expert biases but the weights lack them");
  const flatIds = backend.reshape(ids, [ids.shape[0] * ids.shape[1]]);
  return (y, bias) => s.keep(backend.add(y, s.keep(backend.gatherRows(bias!, flatIds))));
}

/** Rows `lastRows` of x, then `extra` (each checked against the step's rows). */
function gatherLast(backend: Backend, x: Tensor, lastRows: Tensor, flat: FlatBatch, extra: readonly number[] | undefined): Tensor {
  if (!extra || extra.length === 0) return backend.gatherRows(x, lastRows);
  const n = flat.ids.length;
  const bad = extra.find((r) => !Number.isInteger(r) || r < 0 || r >= n);
  if (bad !== undefined) throw new ForwardInputError(`Extra logit row ${bad} is outside the step's ${n} rows`);
  const rows = new Int32Array(flat.lastRows.length + extra.length);
  rows.set(flat.lastRows);
  rows.set(extra, flat.lastRows.length);
  const idx = backend.upload(rows, [rows.length]);
  try {
    return backend.gatherRows(x, idx);
  } finally {
    backend.free(idx);
  }
}

/** Builds the flat batch for a step (validating it against the model and cache). */
export function planStep(model: DeviceModel, kv: PagedKv, step: ForwardStep): FlatBatch {
  return flattenBatch(step.entries, kv.blockSize, kv.numBlocks, model.config.vocabSize);
}

/**
 * Runs one forward step: writes the new tokens' K/V into `kv` and returns f32 logits,
 * [entries, vocab] for each entry's last token, then the `extraRows` (or [totalTokens, vocab] with `allPositions`).
 * The caller owns (and frees) the returned tensor.
 */
export function forward(backend: Backend, model: DeviceModel, kv: PagedKv, step: ForwardStep): Tensor {
  return forwardWithHidden(backend, model, kv, step).logits;
}

/**
 * {@link forward}, and the rows `step.hiddenRows` of the hidden state after the output norm,
 * [hiddenRows.length, hidden] (undefined without them). The caller owns (and frees) both.
 */
export function forwardWithHidden(backend: Backend, model: DeviceModel, kv: PagedKv, step: ForwardStep): { logits: Tensor; hidden: Tensor | undefined } {
  const c = model.config;
  const w = model.weights;
  if (kv.k.length !== c.numLayers || kv.v.length !== c.numLayers) {
    throw new ForwardInputError(`The KV cache has ${kv.k.length} layers, the model ${c.numLayers}`);
  }
  if (c.ropeFreqFactors !== undefined && model.ropeFreqFactors === undefined) {
    throw new ForwardInputError("The model config has RoPE frequency factors but the device model lacks them (use uploadModel)");
  }
  const flat = planStep(model, kv, step);
  const tensors = uploadBatch(backend, flat);
  const s = new Scratch(backend);
  const keep: KeepTemp = (t) => s.keep(t);
  const heads = c.mla ? headIndices(backend, flat.ids.length, c.numHeads) : undefined;
  const lora = step.lora;
  const rowSlots = lora ? rowSlotsOf(step.entries, lora.slots, lora.set.slots) : undefined;
  const slotIds = rowSlots && uploadSlots(backend, rowSlots);
  try {
    if (step.tokenIds && step.tokenIds.shape[0] !== flat.ids.length) {
      throw new ForwardInputError(`The step's device token ids hold ${step.tokenIds.shape[0]} rows, its entries ${flat.ids.length}`);
    }
    let x = backend.embedding(w.tokenEmbedding, step.tokenIds ?? tensors.ids);
    if (c.embeddingScale !== undefined && c.embeddingScale !== 1) {
      const raw = x;
      x = scaled(backend, raw, c.embeddingScale);
      backend.free(raw);
    }
    for (let i = 0; i < c.numLayers; i++) {
      const l = w.layers[i];
      const project = projector(backend, lora?.set, slotIds, i, s);
      const afterAttn = heads
        ? mlaAttentionBlock(backend, model, l, x, tensors, kv.k[i], kv.v[i], heads, keep)
        : attentionBlock(backend, model, l, x, tensors, kv.k[i], kv.v[i], layerWindow(c, i), s, project);
      backend.free(x);
      x = isMoeLayer(c, i) ? moeBlock(backend, model, l, afterAttn, s) : mlpBlock(backend, model, l, afterAttn, s, project);
      backend.free(afterAttn);
      s.release();
    }
    if (!step.allPositions) {
      const last = gatherLast(backend, x, tensors.lastRows, flat, step.extraRows);
      backend.free(x);
      x = last;
    }
    const normed = backend.rmsnorm(x, w.outputNorm, c.rmsNormEps);
    backend.free(x);
    let hidden: Tensor | undefined;
    const rows = step.hiddenRows ?? [];
    if (rows.length > 0) {
      const bad = rows.find((r) => !Number.isInteger(r) || r < 0 || r >= normed.shape[0]);
      if (bad !== undefined) throw new ForwardInputError(`Hidden row ${bad} is outside the step's ${normed.shape[0]} result rows`);
      const idx = backend.upload(Int32Array.from(rows), [rows.length]);
      hidden = backend.gatherRows(normed, idx);
      backend.free(idx);
    }
    const outSlots = rowSlots && w.output && lora!.set.weights.has(loraKey(-1, "output"))
      ? uploadSlots(backend, step.allPositions ? rowSlots : resultRows(flat, step.extraRows).map((r) => rowSlots[r]))
      : undefined;
    const logits = projector(backend, lora?.set, outSlots, -1, s)(normed, w.output ?? w.tokenEmbedding, undefined, "output");
    if (outSlots) backend.free(outSlots);
    backend.free(normed);
    return { logits, hidden };
  } finally {
    s.release();
    tensors.free();
    if (heads) backend.free(heads);
    if (slotIds) backend.free(slotIds);
  }
}

/** Each flat row's adapter slot: its entry's. */
function rowSlotsOf(entries: readonly ForwardEntry[], slots: readonly number[], size: number): Int32Array {
  if (slots.length !== entries.length) throw new ForwardInputError(`The step has ${entries.length} entries but ${slots.length} adapter slots`);
  const bad = slots.find((x) => !Number.isInteger(x) || x < 0 || x >= size);
  if (bad !== undefined) throw new ForwardInputError(`Adapter slot ${bad} is outside the set's 0..${size - 1}`);
  const out = new Int32Array(entries.reduce((n, e) => n + e.tokens.length, 0));
  let row = 0;
  entries.forEach((e, i) => {
    out.fill(slots[i], row, row + e.tokens.length);
    row += e.tokens.length;
  });
  return out;
}

/** The flat rows the result holds, in order: the entries' last rows, then `extra`. */
function resultRows(flat: FlatBatch, extra: readonly number[] | undefined): Int32Array {
  const rows = new Int32Array(flat.lastRows.length + (extra?.length ?? 0));
  rows.set(flat.lastRows);
  if (extra) rows.set(extra, flat.lastRows.length);
  return rows;
}
