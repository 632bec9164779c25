/**
 * One forward pass for the Llama / Qwen2 / Qwen3 family (dense, or with mixture-of-experts
 * feed-forwards: Mixtral, Qwen2-MoE, Qwen3-MoE, GLM-4.5; GPT-OSS's sliding windows, attention
 * sinks, biases and clamped SwiGLU; Gemma 3's scaled embeddings, sandwich norms, GeGLU and sliding
 * layers with their own RoPE base; or DeepSeek V3 / Kimi K2's latent attention, attention-mla.ts)
 * over a ragged batch, against the
 * Backend interface, with a paged KV cache. Everything a step needs is passed in explicitly. The
 * layers' blocks are in forward-layers.ts.
 */
import type { Backend, KvDType, Tensor } from "../backend/types.ts";
import { attendsInParallel, cachedLayers, hasRecurrentState, windowedLayers, isDeltaNetLayer, isMamba2Layer, isMoeLayer, isRecurrentLayer, isShortConvLayer, layerWindow, type ModelConfig } from "./config.ts";
import {
  deltaNetBlock, deltaNetOps, type DeltaNetOps, mamba2Block, mamba2Ops, type Mamba2Ops, recurrentSeqTable, shortConvBlock, shortConvOp, type ShortConvOp,
} from "./forward-delta-net.ts";
import { headIndices, type KeepTemp, mlaAttentionBlock } from "./attention-mla.ts";
import type { DeviceModel } from "./device-weights.ts";
import type { DeviceLoraSet } from "./lora-set.ts";
import { loraKey } from "./lora.ts";
import { type FlatBatch, flattenBatch, type ForwardEntry, ForwardInputError, uploadBatch } from "./forward-batch.ts";
import { writeRows } from "./vision/vision-encoder.ts";
import { attentionBlock, mlpBlock, moeBlock, projector, scaled, Scratch } from "./forward-layers.ts";
import { gemma4MoeBlock, perLayerBlock, perLayerInputs, sharedKvAttention } from "./forward-gemma4.ts";

export { type ForwardEntry, ForwardInputError } from "./forward-batch.ts";

/**
 * Per-layer paged KV caches, each [numBlocks, blockSize, kvHeads, headDim] in `dtype`. A multi-head
 * latent attention model's value is part of its key: `v[i]` is `k[i]`, one cache (attention-mla.ts).
 */
export interface PagedKv {
  /**
   * One per attention layer, in layer order (Gated DeltaNet layers have none: `state` holds theirs;
   * with `state.window`, the sliding layers' caches are there, and these are the other layers').
   */
  k: Tensor[];
  v: Tensor[];
  numBlocks: number;
  blockSize: number;
  /**
   * Blocks at the end that no block table holds (absent: none): where a multi-token-prediction
   * block's chained drafts write past a sequence's blocks (engine/mtp-drafts.ts).
   */
  reserved?: number;
  /** f32 unless the engine chose f16 (engine/kv-cache.ts `resolveKvDtype`); absent means f32. */
  dtype?: KvDType;
  /** The recurrent layers' state ({@link ModelConfig.deltaNet}, {@link ModelConfig.shortConv}); absent for other models. */
  state?: RecurrentState;
}

/**
 * Recurrent layers' per-sequence state, in layer order: each Gated DeltaNet or short convolution
 * layer's convolution inputs f32 [slots, K - 1, channels] (`conv`, one per such layer), and each Gated
 * DeltaNet layer's delta rule matrices f32 [slots, vHeads, dk, dv] (`ssm`); and where the sliding
 * layers keep only their windows, those (`window`: per-sequence state of the same kind, none of it in
 * the KV blocks). A step's entries name their slot (ForwardEntry.stateSlot).
 */
export interface RecurrentState {
  conv: Tensor[];
  ssm: Tensor[];
  /**
   * Slots in all: the running sequences' first, then `checkpoints` kept states
   * (engine/state-checkpoints.ts), then `scratch` ones a step's drafted sequences' recurrent states are
   * copied to before it runs (speculative decoding: engine-runner.ts rolls a sequence whose draft was
   * not all taken back to it).
   */
  slots: number;
  checkpoints?: number;
  scratch?: number;
  /** The sliding layers' windows, where they keep no more (engine option `slidingWindowKv: "window"`). */
  window?: WindowKv;
}

/**
 * Sliding layers' caches that keep each sequence's last tokens only: per windowed layer
 * (config.ts `windowedLayers`, in layer order) K and V [runningSlots × blocksPerSlot + checkpoints ×
 * checkpointBlocks, blockSize, kvHeads, headDim]. Running slot s owns blocks s·blocksPerSlot.. and
 * holds position p in its block ⌊p / blockSize⌋ mod blocksPerSlot, a ring: a step's rows overwrite
 * positions blocksPerSlot·blockSize back, which no row of the step still sees while the step's tokens
 * of one sequence number at most blocksPerSlot·blockSize − window + 1 (forward-batch.ts checks it).
 * Attention reads a row's window only, so the ring's other positions are never read. A checkpoint (the
 * slots after the running ones, RecurrentState.checkpoints) keeps the window before its end only, in
 * a ring of checkpointBlocks (engine/state-copy.ts copies the blocks between the two rings).
 */
export interface WindowKv {
  k: Tensor[];
  v: Tensor[];
  /** Blocks of a running sequence's ring. */
  blocksPerSlot: number;
  /** Blocks of a checkpoint's ring: the window before a block boundary (engine/kv-cache.ts `windowCheckpointBlocks`). */
  checkpointBlocks: number;
  /** Running sequences' slots, the first of RecurrentState.slots (the rest are checkpoints'). */
  runningSlots: number;
  /** The widest window of the layers (ModelConfig.slidingWindow.size). */
  window: number;
}

/** Where slot `slot`'s ring starts among a windowed cache's blocks, and its blocks. */
export function windowRing(w: WindowKv, slot: number): { base: number; blocks: number } {
  return slot < w.runningSlots
    ? { base: slot * w.blocksPerSlot, blocks: w.blocksPerSlot }
    : { base: w.runningSlots * w.blocksPerSlot + (slot - w.runningSlots) * w.checkpointBlocks, blocks: w.checkpointBlocks };
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
  /**
   * Return every row's hidden state after the output norm too, [rows, hidden] in the flat batch's
   * order (`allHidden`): a multi-token-prediction block reads them (forward-mtp.ts).
   */
  allHidden?: boolean;
  /**
   * Layers whose entering state (the residual stream before them) is returned for every row, side by
   * side in this order, [rows, layers · hidden] (`auxHidden`): an EAGLE-3 head fuses them (forward-eagle.ts).
   */
  auxLayers?: readonly number[];
  /** LoRA adapters: the device set and each entry's slot in it (0: the base model). Absent: none. */
  lora?: StepLora;
  /**
   * The step's token ids already on the device, one per row in entry order (the entries' own
   * `tokens` are then placeholders of the right lengths): a step fed what the one before sampled,
   * without reading it back (greedy drafting).
   */
  tokenIds?: Tensor;
  /**
   * Rows whose input is given instead of their token's embedding (an image's positions: the vision
   * tower's embeddings, model/vision/vision-encoder.ts), after any embedding scale, which they do not
   * take (llama.cpp and transformers scale only token embeddings).
   */
  inputRows?: readonly InputRows[];
}

/** {@link ForwardStep.inputRows}: rows of the flat batch (i32 [m], distinct) and their inputs, f32 [m, hidden]. */
export interface InputRows {
  rows: Tensor;
  values: Tensor;
}

/** {@link ForwardStep.lora}. */
export interface StepLora {
  set: DeviceLoraSet;
  /** One per entry; 0 runs the base model. */
  slots: readonly number[];
}

/** Uploads slot ids i32 [rows.length, 1]; undefined when every row runs the base model. */
function uploadSlots(backend: Backend, rows: Int32Array): Tensor | undefined {
  return rows.some((r) => r !== 0) ? backend.upload(rows, [rows.length, 1]) : undefined;
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
  const w = kv.state?.window;
  return flattenBatch(step.entries, kv.blockSize, kv.numBlocks, model.config.vocabSize, w && { blocksPerSlot: w.blocksPerSlot, window: w.window, slots: w.runningSlots });
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
export function forwardWithHidden(
  backend: Backend, model: DeviceModel, kv: PagedKv, step: ForwardStep,
): { logits: Tensor; hidden: Tensor | undefined; allHidden?: Tensor; auxHidden?: Tensor } {
  const c = model.config;
  const w = model.weights;
  const caches = layerCaches(c, kv);
  const recurrentPlan = recurrentStep(backend, c, kv, step);
  if (c.ropeFreqFactors !== undefined && model.ropeFreqFactors === undefined) {
    throw new ForwardInputError("The model config has RoPE frequency factors but the device model lacks them (use uploadModel)");
  }
  const flat = planStep(model, kv, step);
  const tensors = uploadBatch(backend, flat, model.config.attnTemperature);
  const s = new Scratch(backend);
  const keep: KeepTemp = (t) => s.keep(t);
  const heads = c.mla ? headIndices(backend, flat.ids.length, c.numHeads) : undefined;
  const lora = step.lora;
  const rowSlots = lora ? rowSlotsOf(step.entries, lora.slots, lora.set.slots) : undefined;
  const slotIds = rowSlots && uploadSlots(backend, rowSlots);
  const recurrent = recurrentPlan && { ...recurrentPlan, batch: { seqs: backend.upload(recurrentPlan.table, [step.entries.length, 4]), numSeqs: step.entries.length } };
  let perLayer: Tensor | undefined;
  // The states entering step.auxLayers, held past their layer (not freed with it).
  const aux = new Map<number, Tensor>();
  const held = new Set<Tensor>();
  const free = (t: Tensor) => held.has(t) || backend.free(t);
  try {
    const badLayer = step.auxLayers?.find((i) => !Number.isInteger(i) || i < 0 || i >= c.numLayers);
    if (badLayer !== undefined) throw new ForwardInputError(`Layer ${badLayer} is not one of the model's ${c.numLayers}`);
    if (step.auxLayers && step.auxLayers.length < 2) throw new ForwardInputError(`A step returns the states entering two or more layers, not ${step.auxLayers.length}`);
    if (step.tokenIds && step.tokenIds.shape[0] !== flat.ids.length) {
      throw new ForwardInputError(`The step's device token ids hold ${step.tokenIds.shape[0]} rows, its entries ${flat.ids.length}`);
    }
    let x = backend.embedding(w.tokenEmbedding, step.tokenIds ?? tensors.ids);
    if (c.embeddingScale !== undefined && c.embeddingScale !== 1) {
      const raw = x;
      x = scaled(backend, raw, c.embeddingScale);
      backend.free(raw);
    }
    for (const given of step.inputRows ?? []) {
      if (given.values.shape[1] !== c.hiddenSize || given.values.shape[0] !== given.rows.shape[0]) {
        throw new ForwardInputError(`Given input rows [${given.values.shape}] do not fit ${given.rows.shape[0]} rows of the model's width ${c.hiddenSize}`);
      }
      writeRows(backend, x, given.rows, given.values);
    }
    // Gemma 4 E2B/E4B: each token's per-layer inputs, from the scaled embedding.
    perLayer = c.perLayerInput ? perLayerInputs(backend, model, x, step.tokenIds ?? tensors.ids, s) : undefined;
    // The step as a layer's cache sees it: a windowed one through its ring.
    const stepOf = (at: LayerCache) => (at.windowed ? tensors.window! : tensors);
    // The states of recurrent layers, in layer order.
    let conv = 0;
    let ssm = 0;
    for (let i = 0; i < c.numLayers; i++) {
      const l = w.layers[i];
      if (step.auxLayers?.includes(i)) {
        aux.set(i, x);
        held.add(x);
      }
      const project = projector(backend, lora?.set, slotIds, i, s);
      // Nemotron-H's layers have one block each: a mixer (attention or Mamba-2) or a feed-forward normed by attnNorm.
      const blocks = c.layerBlocks?.[i];
      // This layer's cache, or (Gemma 4 E2B/E4B) the one it reads of an earlier layer's.
      const own = caches.get(i);
      const from = c.kvShareFrom?.[i];
      const read = from === undefined ? undefined : caches.get(from)!;
      let afterAttn = x;
      // Falcon-H1: attention beside the scan, both from x's norm; the scan adds its output to x plus attention's.
      const parallel = () => attendsInParallel(c, i) ? s.keep(attentionBlock(backend, model, l, x, tensors, own!.k, own!.v, undefined, true, s, project, i)) : x;
      if (blocks !== "ffn") {
        afterAttn = recurrent?.deltaNet && isDeltaNetLayer(c, i)
          ? deltaNetBlock(backend, recurrent.deltaNet, model, l, x, recurrent.batch, kv.state!.conv[conv++], kv.state!.ssm[ssm++], s, project)
          : recurrent?.shortConv && isShortConvLayer(c, i)
          ? shortConvBlock(backend, recurrent.shortConv, model, l, x, recurrent.batch, kv.state!.conv[conv++], s, project)
          : recurrent?.mamba2 && isMamba2Layer(c, i)
          ? mamba2Block(backend, recurrent.mamba2, model, l, x, recurrent.batch, kv.state!.conv[conv++], kv.state!.ssm[ssm++], s, project, parallel())
          : heads
          ? mlaAttentionBlock(backend, model, l, x, tensors, own!.k, own!.v, heads, keep)
          : read
          ? sharedKvAttention(backend, model, l, x, stepOf(read), read.k, read.v, layerWindow(c, i), s, project, i)
          : attentionBlock(backend, model, l, x, stepOf(own!), own!.k, own!.v, layerWindow(c, i), !c.nopeLayers?.[i], s, project, i);
        free(x);
      }
      if (blocks === "mixer") {
        x = afterAttn;
      } else {
        const norm = blocks === "ffn" ? l.attnNorm : l.ffnNorm;
        x = !isMoeLayer(c, i)
          ? mlpBlock(backend, model, l, afterAttn, s, project, norm)
          : c.moe?.gemma4
          ? gemma4MoeBlock(backend, model, l, afterAttn, s)
          : moeBlock(backend, model, l, afterAttn, s, norm);
        free(afterAttn);
      }
      if (perLayer) {
        const raw = x;
        x = perLayerBlock(backend, model, l, raw, perLayer, i, s);
        backend.free(raw);
      }
      // Gemma 4: the layer's whole output scaled by its scalar.
      const outScale = c.layerOutputScales?.[i];
      if (outScale !== undefined && outScale !== 1) {
        const raw = x;
        x = scaled(backend, raw, outScale);
        backend.free(raw);
      }
      s.release();
    }
    if (step.allHidden && step.allPositions) throw new ForwardInputError("A step returns every row's hidden state or every row's logits, not both");
    // The norm is row by row: the rows asked for, gathered from every row's, are their own.
    const allHidden = step.allHidden ? backend.rmsnorm(x, w.outputNorm, c.rmsNormEps) : undefined;
    let normed: Tensor;
    if (allHidden) {
      backend.free(x);
      normed = gatherLast(backend, allHidden, tensors.lastRows, flat, step.extraRows);
    } else {
      if (!step.allPositions) {
        const last = gatherLast(backend, x, tensors.lastRows, flat, step.extraRows);
        backend.free(x);
        x = last;
      }
      normed = backend.rmsnorm(x, w.outputNorm, c.rmsNormEps);
      backend.free(x);
    }
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
    let logits = projector(backend, lora?.set, outSlots, -1, s)(normed, w.output ?? w.tokenEmbedding, undefined, "output");
    if (outSlots) backend.free(outSlots);
    backend.free(normed);
    if (c.logitScale !== undefined && c.logitScale !== 1) {
      const raw = logits;
      logits = scaled(backend, raw, 1 / c.logitScale);
      backend.free(raw);
    }
    if (c.finalSoftcap !== undefined) {
      const raw = logits;
      logits = backend.softcap(raw, c.finalSoftcap);
      backend.free(raw);
    }
    return { logits, hidden, ...(allHidden ? { allHidden } : {}), ...(step.auxLayers ? { auxHidden: sideBySide(backend, step.auxLayers.map((i) => aux.get(i)!)) } : {}) };
  } finally {
    for (const t of held) backend.free(t);
    s.release();
    tensors.free();
    if (heads) backend.free(heads);
    if (slotIds) backend.free(slotIds);
    if (recurrent) backend.free(recurrent.batch.seqs);
    if (perLayer) backend.free(perLayer);
  }
}

/** Two or more tensors [rows, a], [rows, b], … joined column-wise into a new [rows, a + b + …]. */
function sideBySide(backend: Backend, parts: readonly Tensor[]): Tensor {
  let out = backend.concatColumns(parts[0], parts[1]);
  for (const p of parts.slice(2)) {
    const joined = backend.concatColumns(out, p);
    backend.free(out);
    out = joined;
  }
  return out;
}

/** One attention layer's K and V caches; `windowed`: a sliding layer's ring (RecurrentState.window). */
export interface LayerCache {
  k: Tensor;
  v: Tensor;
  windowed: boolean;
}

/**
 * Each attention layer's K and V caches, by layer: the paged ones in order, a windowed sliding layer's
 * from RecurrentState.window (`windowed`); refuses a cache of another model's layers.
 */
export function layerCaches(c: ModelConfig, kv: PagedKv): Map<number, LayerCache> {
  const layers = cachedLayers(c);
  const window = kv.state?.window;
  const windowed = new Set(window ? windowedLayers(c) : []);
  const paged = layers.length - windowed.size;
  if (kv.k.length !== paged || kv.v.length !== paged) {
    throw new ForwardInputError(`The KV cache has ${kv.k.length} layers, the model ${paged} ${window ? "paged " : ""}attention layers`);
  }
  if (window && (window.k.length !== windowed.size || window.v.length !== windowed.size)) {
    throw new ForwardInputError(`The KV cache holds the windows of ${window.k.length} layers, the model has ${windowed.size} sliding layers`);
  }
  const out = new Map<number, LayerCache>();
  let p = 0, w = 0;
  for (const i of layers) {
    if (windowed.has(i)) out.set(i, { k: window!.k[w], v: window!.v[w++], windowed: true });
    else out.set(i, { k: kv.k[p], v: kv.v[p++], windowed: false });
  }
  // A layer reading another's cache (Gemma 4 E2B/E4B) sees no more of it than that layer keeps.
  c.kvShareFrom?.forEach((from, i) => {
    if (from !== undefined && windowed.has(from) && layerWindow(c, i) === undefined) {
      throw new ForwardInputError(`Layer ${i} attends over all of layer ${from}'s cache, which keeps only its window`);
    }
  });
  return out;
}

/**
 * The step's recurrent sequence table and the backend's ops for a model with recurrent layers
 * (undefined for others), once the KV cache is seen to hold their state.
 */
function recurrentStep(
  backend: Backend, c: ModelConfig, kv: PagedKv, step: ForwardStep,
): { table: Int32Array; deltaNet?: DeltaNetOps; shortConv?: ShortConvOp; mamba2?: Mamba2Ops } | undefined {
  if (!hasRecurrentState(c)) return undefined;
  const ops = {
    ...(c.deltaNet ? { deltaNet: deltaNetOps(backend) } : {}),
    ...(c.shortConv ? { shortConv: shortConvOp(backend) } : {}),
    ...(c.mamba2 ? { mamba2: mamba2Ops(backend) } : {}),
  };
  const layers = Array.from({ length: c.numLayers }, (_, i) => i);
  const recurrent = layers.filter((i) => isRecurrentLayer(c, i)).length;
  // A delta rule's or a scan's state matrices: one per Gated DeltaNet or Mamba-2 layer.
  const deltaNet = layers.filter((i) => isDeltaNetLayer(c, i) || isMamba2Layer(c, i)).length;
  if (!kv.state || kv.state.conv.length !== recurrent || kv.state.ssm.length !== deltaNet) {
    throw new ForwardInputError(`The model has ${recurrent} layers with recurrent state but the KV cache holds state for ${kv.state?.conv.length ?? 0}`);
  }
  return { table: recurrentSeqTable(step.entries, kv.state.slots), ...ops };
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
