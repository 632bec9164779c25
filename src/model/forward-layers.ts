/**
 * The layers of forward.ts: a dense layer's attention and feed-forward blocks, the mixture-of-experts
 * feed-forward, and the projections with their adapter deltas. Each uses the Backend's optional fused
 * ops where it has them and nothing (a bias, a post-norm, an adapter) comes between: the q, k and v
 * projections as one (`matmulQkv`), both rotations and the cache write (`rotateAndWriteKv`), the gate
 * and up projections with their activation (`matmulGlu`, `matmulExpertsGlu`), and each skip connection
 * in the projection before it (`matmulAdd`).
 */
import type { Backend, Tensor } from "../backend/types.ts";
import { layerAttention, type LayerWeights, type MoeConfig } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import type { DeviceLoraSet } from "./lora-set.ts";
import { loraKey, type LoraTarget } from "./lora.ts";
import { ForwardInputError, type StepTensors } from "./forward-batch.ts";

/**
 * A projection x · Wᵀ (+ bias) of one layer's `target`, plus each row's adapter delta where it has
 * one, plus `residual` where given (a layer's skip connection).
 */
export type Project = ((x: Tensor, w: Tensor, bias: Tensor | undefined, target: LoraTarget, residual?: Tensor) => Tensor) & {
  /** True where an adapter adds a delta to `target`'s output (so the projection cannot be fused away). */
  adapts?(target: LoraTarget): boolean;
};

/**
 * Layer `layer`'s projections: plain matmuls, or where `set` adapts the projection and `ids` (each
 * row's slot, i32 [rows of x, 1]) are given, y + B[slot]·(A[slot]·x) per row through two expert
 * matmuls (slot 0's tables are zeros). Layer -1 is the output projection.
 */
export function projector(backend: Backend, set: DeviceLoraSet | undefined, ids: Tensor | undefined, layer: number, s: Scratch): Project {
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
export function matmulPlus(backend: Backend, x: Tensor, w: Tensor, bias: Tensor | undefined, residual: Tensor | undefined, s: Scratch): Tensor {
  if (!residual) return backend.matmul(x, w, bias);
  if (backend.matmulAdd) return backend.matmulAdd(x, w, residual, bias);
  return backend.add(residual, s.keep(backend.matmul(x, w, bias)));
}

/** Frees tensors registered during a layer; reshape views are not registered twice. */
export class Scratch {
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

/**
 * One layer's attention with its residual add: norm, q/k/v, RoPE (unless `rotates` is false: a NoPE
 * layer), the KV write, paged attention over `window` (or all), the o projection.
 */
export function attentionBlock(
  backend: Backend,
  model: DeviceModel,
  l: LayerWeights<Tensor>,
  x: Tensor,
  step: StepTensors,
  kCache: Tensor,
  vCache: Tensor,
  window: number | undefined,
  rotates: boolean,
  s: Scratch,
  project: Project,
  layer = 0,
): Tensor {
  const c = model.config;
  const n = x.shape[0];
  // Gemma 4's sliding layers have heads of their own size; its layers without a value projection take the keys'.
  const { headDim, numKvHeads, rotaryDim } = layerAttention(c, layer);
  const keyAsValue = c.keyAsValue?.[layer] === true;
  if (!l.wq || !l.wk || (!l.wv && !keyAsValue) || !l.wo) throw new ForwardInputError("The model's attention weights lack the query, key, value or output projection");
  const h = preNorm(backend, model, l.attnNorm, x, s);
  const { wq, wk, wv, wo } = l;
  // The three projections in one pass where nothing tells them apart (no biases, no adapters, one dtype).
  const oneQkv = wv !== undefined && !c.attnOutputGate && !l.bq && !l.bk && !l.bv && !project.adapts?.("wq") && !project.adapts?.("wk") && !project.adapts?.("wv") &&
    wq.dtype === wk.dtype && wk.dtype === wv.dtype;
  const [qProjected, kFlat, vProjected] = backend.matmulQkv && oneQkv
    ? backend.matmulQkv(h, wq, wk, wv)
    : [project(h, wq, l.bq, "wq"), project(h, wk, l.bk, "wk"), keyAsValue ? undefined : project(h, wv!, l.bv, "wv")];
  s.keep(qProjected);
  const { qFlat, gate } = c.attnOutputGate ? splitQueryGate(backend, qProjected, n, c.numHeads, headDim, s) : { qFlat: qProjected, gate: undefined };
  s.keep(kFlat);
  const vFlat = vProjected ?? kFlat;
  let q = backend.reshape(qFlat, [n, c.numHeads, headDim]);
  let k = backend.reshape(kFlat, [n, numKvHeads, headDim]);
  let v = backend.reshape(vProjected ? s.keep(vFlat) : vFlat, [n, numKvHeads, headDim]);
  // Gemma 4: each value head RMS-normed without a weight (the keys' own norm comes after, on k).
  if (c.valueNorm) {
    const ones = model.unitNorms?.get(headDim);
    if (!ones) throw new ForwardInputError("The model config norms its values but the device model lacks their weight of ones (use uploadModel)");
    v = s.keep(backend.rmsnorm(v, ones, c.rmsNormEps));
  }
  if (c.qkNorm && c.qkNormPerRow) {
    // OLMo 2: one norm over each token's whole projection, before the heads are split.
    if (!l.qNorm || !l.kNorm) throw new ForwardInputError("The model config asks for q/k norm but the weights lack it");
    q = backend.reshape(s.keep(backend.rmsnorm(qFlat, l.qNorm, c.rmsNormEps)), [n, c.numHeads, headDim]);
    k = backend.reshape(s.keep(backend.rmsnorm(kFlat, l.kNorm, c.rmsNormEps)), [n, numKvHeads, headDim]);
  } else if (c.qkNorm) {
    if (!l.qNorm || !l.kNorm) throw new ForwardInputError("The model config asks for q/k norm but the weights lack it");
    q = s.keep(backend.rmsnorm(q, l.qNorm, c.rmsNormEps));
    k = s.keep(backend.rmsnorm(k, l.kNorm, c.rmsNormEps));
  }
  // Gemma 3's sliding layers turn with their own base and unscaled; the global ones with the model's.
  const ownRope = window !== undefined ? c.slidingWindow?.ropeTheta : undefined;
  const theta = ownRope ?? c.ropeTheta;
  const f = ownRope === undefined ? model.ropeFreqFactors : undefined;
  let qr = q;
  if (!rotates) {
    backend.kvWrite(k, v, kCache, vCache, step.slots);
  } else if (backend.rotateAndWriteKv && kCache !== vCache && c.ropeMagnitude === undefined) {
    // The fused op turns without a magnitude (none of its users needs one).
    // One dispatch for both rotations and the cache write; q (this block's own) is rotated in place.
    backend.rotateAndWriteKv(q, k, v, step.positions, { theta, layout: c.ropeLayout, rotaryDim, freqFactors: f }, kCache, vCache, step.slots);
  } else {
    qr = s.keep(backend.rope(q, step.positions, theta, c.ropeLayout, rotaryDim, f, c.ropeMagnitude));
    const kr = s.keep(backend.rope(k, step.positions, theta, c.ropeLayout, rotaryDim, f, c.ropeMagnitude));
    backend.kvWrite(kr, v, kCache, vCache, step.slots);
  }
  // Ministral 3: each turned query scaled by its position's temperature (a one-expert weighted sum per row).
  if (step.attnTemperature) qr = backend.reshape(s.keep(backend.moeCombine(backend.reshape(qr, [n, c.numHeads * headDim]), step.attnTemperature)), [n, c.numHeads, headDim]);
  if (c.attentionSinks && !l.sinks) throw new ForwardInputError("The model config asks for attention sinks but the weights lack them");
  const scale = c.attentionScale ?? 1 / Math.sqrt(headDim);
  const att = s.keep(backend.pagedAttention(qr, kCache, vCache, step.attention, scale, { window, sinks: l.sinks, softcap: c.attnSoftcap }));
  const attRows = backend.reshape(att, [n, c.numHeads * headDim]);
  // Qwen3.5: each head's output weighed by the sigmoid of its gate.
  const attFlat = gate ? s.keep(backend.sigmoidMul!(gate, attRows)) : attRows;
  // Without a post-norm or a residual scale the skip connection joins the o projection (one dispatch with matmulAdd).
  if (!c.postNorms && c.residualScale === undefined) return project(attFlat, wo, l.bo, "wo", x);
  const o = s.keep(project(attFlat, wo, l.bo, "wo"));
  return backend.add(x, blockOutput(backend, model, l.attnPostNorm, o, s));
}

/**
 * Qwen3.5's query projection, [n, heads · 2 · headDim]: each head's query, then its output gate. Both
 * come back [n, heads · headDim].
 */
function splitQueryGate(backend: Backend, projected: Tensor, n: number, heads: number, headDim: number, s: Scratch): { qFlat: Tensor; gate: Tensor } {
  if (!backend.sigmoidMul) throw new ForwardInputError(`The ${backend.info.name} backend lacks sigmoidMul, which gated attention needs`);
  const rows = backend.reshape(projected, [n * heads, 2 * headDim]);
  const q = s.keep(backend.sliceColumns(rows, 0, headDim));
  const gate = s.keep(backend.sliceColumns(rows, headDim, headDim));
  return { qFlat: backend.reshape(q, [n, heads * headDim]), gate: backend.reshape(gate, [n, heads * headDim]) };
}

/** What a block adds to the residual stream: its output post-normed (ModelConfig.postNorms), then scaled (ModelConfig.residualScale). */
function blockOutput(backend: Backend, model: DeviceModel, weight: Tensor | undefined, y: Tensor, s: Scratch): Tensor {
  const normed = postNorm(backend, model, weight, y, s);
  const r = model.config.residualScale;
  return r === undefined ? normed : s.keep(scaled(backend, normed, r));
}

/** A block's input: the residual stream normed, or as it is where the model has no pre-norms (ModelConfig.noPreNorms). */
export function preNorm(backend: Backend, model: DeviceModel, weight: Tensor | undefined, x: Tensor, s: Scratch): Tensor {
  if (weight) return s.keep(backend.rmsnorm(x, weight, model.config.rmsNormEps));
  if (!model.config.noPreNorms) throw new ForwardInputError("The model's weights lack a layer's pre-norm");
  return x;
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
export function swiglu(
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

/**
 * The dense feed-forward with its residual add: `norm` (the layer's ffnNorm; attnNorm where a layer is
 * a feed-forward alone), then SwiGLU or GeGLU, or Nemotron-H's ungated down(max(up·h + bUp, 0)²) + bDown.
 */
export function mlpBlock(backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, s: Scratch, project: Project, norm: Tensor | undefined = l.ffnNorm): Tensor {
  const h = preNorm(backend, model, norm, x, s);
  const { wGate, wUp, wDown } = l;
  if (model.config.ffnActivation === "relu2") {
    if (!backend.reluSquared) throw new ForwardInputError(`The ${backend.info.name} backend lacks reluSquared, which this model's feed-forward needs`);
    if (!wUp || !wDown) throw new ForwardInputError("The model's feed-forward weights lack the up or down projection");
    if (model.config.ffnBias && (!l.bUp || !l.bDown)) throw new ForwardInputError("The model config asks for feed-forward biases but the weights lack them");
    const act = s.keep(backend.reluSquared(s.keep(project(h, wUp, l.bUp, "wUp"))));
    return project(act, wDown, l.bDown, "wDown", x);
  }
  if (!wGate || !wUp || !wDown) throw new ForwardInputError("The model's feed-forward weights lack the gate, up or down projection");
  const gelu = model.config.ffnActivation === "gelu";
  // Without a post-norm or a residual scale the skip connection joins the down projection (one dispatch with matmulAdd).
  if (!model.config.postNorms && model.config.residualScale === undefined) return swiglu(backend, h, wGate, wUp, wDown, s, project, gelu, x);
  const down = s.keep(swiglu(backend, h, wGate, wUp, wDown, s, project, gelu));
  return backend.add(x, blockOutput(backend, model, l.ffnPostNorm, down, s));
}

/** x scaled by `scale`, row by row (a one-expert combine: every backend has it). */
export function scaled(backend: Backend, x: Tensor, scale: number): Tensor {
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
export function moeBlock(backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, s: Scratch, norm: Tensor | undefined = l.ffnNorm): Tensor {
  const c = model.config;
  const moe = c.moe!;
  if (!l.router) throw new ForwardInputError("The model config asks for experts but the weights lack a router");
  if (moe.selectionBias && !l.routerBias) throw new ForwardInputError("The model config asks for a router selection bias but the weights lack it");
  if (moe.routerLogitBias && !l.routerLogitBias) throw new ForwardInputError("The model config asks for a router logit bias but the weights lack it");
  const h = preNorm(backend, model, norm, x, s);
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
  const { wGate, wUp, wDown } = l;
  if (c.ffnActivation === "relu2") return backend.add(x, s.keep(reluSquaredExperts(backend, l, h, ids, weights, moe, s)));
  if (!wGate || !wUp || !wDown) throw new ForwardInputError("The model's expert weights lack the gate, up or down projections");
  let act: Tensor;
  // The gate's and up projection's experts and SiLU in one pass, where no bias or clamped activation (GPT-OSS) comes between.
  const fusable = !a && !moe.expertBiases && wGate.dtype === wUp.dtype && wGate.shape.every((d, i) => d === wUp.shape[i]);
  if (backend.matmulExpertsGlu && fusable) {
    act = s.keep(backend.matmulExpertsGlu(h, wGate, wUp, ids, "silu"));
  } else {
    const gate = biased(s.keep(backend.matmulExperts(h, wGate, ids)), l.bGate);
    const up = biased(s.keep(backend.matmulExperts(h, wUp, ids)), l.bUp);
    act = s.keep(a ? backend.swigluOai(gate, up, a.alpha, a.limit) : backend.siluMul(gate, up));
  }
  const down = biased(s.keep(backend.matmulExperts(act, wDown, ids)), l.bDown);
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
  return backend.add(x, blockOutput(backend, model, l.ffnPostNorm, mixed, s));
}

/**
 * Nemotron 3's experts: each token's chosen experts' down(max(up·h, 0)²) summed by weight, plus the
 * shared expert's, as ungated.
 */
function reluSquaredExperts(backend: Backend, l: LayerWeights<Tensor>, h: Tensor, ids: Tensor, weights: Tensor, moe: MoeConfig, s: Scratch): Tensor {
  if (!backend.reluSquared) throw new ForwardInputError(`The ${backend.info.name} backend lacks reluSquared, which this model's experts need`);
  if (!l.wUp || !l.wDown) throw new ForwardInputError("The model's expert weights lack the up or down projections");
  const act = s.keep(backend.reluSquared(s.keep(backend.matmulExperts(h, l.wUp, ids))));
  const mixed = backend.moeCombine(s.keep(backend.matmulExperts(act, l.wDown, ids)), weights);
  if (moe.sharedIntermediateSize === 0) return mixed;
  s.keep(mixed);
  if (!l.wUpShared || !l.wDownShared) throw new ForwardInputError("The model config asks for a shared expert but the weights lack it");
  const shared = s.keep(backend.matmul(s.keep(backend.reluSquared(s.keep(backend.matmul(h, l.wUpShared)))), l.wDownShared));
  return backend.add(mixed, shared);
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
