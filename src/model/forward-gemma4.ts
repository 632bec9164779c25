/**
 * Gemma 4's own blocks, as llama.cpp's gemma4 graph runs them. The experts' layer (the 26B-A4B): beside a dense GeGLU
 * feed-forward (the shared roles; normed in by `ffnNorm` and out by `ffnPostNorm1`), the residual
 * normed by `ffnPreNorm2` goes to GELU experts, routed by softmax over `router` · (the residual
 * RMS-normed with `routerNorm`: Gemma 4's router scale over √hidden), the chosen weights renormalised,
 * each expert's output scaled by its `expertScale`, their sum normed by `ffnPostNorm2`; the two are
 * added, normed by `ffnPostNorm` and joined to the residual. E2B/E4B's per-layer inputs and the
 * attention of their layers that read another layer's KV cache.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import { layerAttention, type LayerWeights } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import { ForwardInputError, type StepTensors } from "./forward-batch.ts";
import { type Project, type Scratch, scaled, swiglu } from "./forward-layers.ts";

/** The experts' layer's feed-forward with its residual add (see the module comment). */
export function gemma4MoeBlock(backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, s: Scratch): Tensor {
  const c = model.config;
  const moe = c.moe!;
  const eps = c.rmsNormEps;
  const { ffnNorm, ffnPostNorm1, ffnPreNorm2, ffnPostNorm2, ffnPostNorm, routerNorm, expertScale, router, wGate, wUp, wDown, wGateShared, wUpShared, wDownShared } = l;
  if (!ffnNorm || !ffnPostNorm1 || !ffnPreNorm2 || !ffnPostNorm2 || !ffnPostNorm || !routerNorm || !expertScale || !router || !wGate || !wUp || !wDown || !wGateShared || !wUpShared || !wDownShared) {
    throw new ForwardInputError("The model config asks for Gemma 4's experts but the layer's weights lack some of them");
  }
  const dense = s.keep(swiglu(backend, s.keep(backend.rmsnorm(x, ffnNorm, eps)), wGateShared, wUpShared, wDownShared, s, undefined, true));
  const denseOut = s.keep(backend.rmsnorm(dense, ffnPostNorm1, eps));
  const logits = s.keep(backend.matmul(s.keep(backend.rmsnorm(x, routerNorm, eps)), router));
  const { ids, weights } = backend.moeRoute(logits, moe.numExpertsUsed, { normalize: moe.normalizeTopK, gating: moe.gating, scale: moe.routedScale });
  s.keep(ids);
  s.keep(weights);
  const h = s.keep(backend.rmsnorm(x, ffnPreNorm2, eps));
  const act = s.keep(
    backend.matmulExpertsGlu && wGate.dtype === wUp.dtype
      ? backend.matmulExpertsGlu(h, wGate, wUp, ids, "gelu")
      : backend.geluMul(s.keep(backend.matmulExperts(h, wGate, ids)), s.keep(backend.matmulExperts(h, wUp, ids))),
  );
  const down = s.keep(backend.matmulExperts(act, wDown, ids));
  // Each routed row (token t's j-th expert) scaled by its expert's scale: the scales gathered by id, then a one-row combine.
  const rows = down.shape[0];
  const perRow = s.keep(backend.embedding(backend.reshape(expertScale, [moe.numExperts, 1]), backend.reshape(ids, [rows])));
  const scaledDown = s.keep(backend.moeCombine(down, perRow));
  const mixed = s.keep(backend.moeCombine(scaledDown, weights));
  const expertsOut = s.keep(backend.rmsnorm(mixed, ffnPostNorm2, eps));
  return backend.add(x, s.keep(backend.rmsnorm(s.keep(backend.add(denseOut, expertsOut)), ffnPostNorm, eps)));
}

/**
 * Gemma 4 E2B/E4B's per-layer inputs for the step, [n, layers · width]: each token's row of the
 * per-layer table times √width, plus the (scaled) embedding `x` projected, divided by √hidden and
 * RMS-normed per layer's width, the sum over √2 (llama.cpp's project_per_layer_inputs).
 */
export function perLayerInputs(backend: Backend, model: DeviceModel, x: Tensor, ids: Tensor, s: Scratch): Tensor {
  const c = model.config;
  const { width } = c.perLayerInput!;
  const w = model.weights;
  if (!w.perLayerEmbedding || !w.perLayerModelProj || !w.perLayerProjNorm) throw new ForwardInputError("The model config asks for per-layer inputs but the weights lack them");
  const n = x.shape[0];
  const all = width * c.numLayers;
  const table = s.keep(scaled(backend, s.keep(backend.embedding(w.perLayerEmbedding, ids)), Math.sqrt(width)));
  const projected = s.keep(scaled(backend, s.keep(backend.matmul(x, w.perLayerModelProj)), 1 / Math.sqrt(c.hiddenSize)));
  const normed = backend.reshape(s.keep(backend.rmsnorm(backend.reshape(projected, [n * c.numLayers, width]), w.perLayerProjNorm, c.rmsNormEps)), [n, all]);
  // Not kept in `s`: the caller holds it for every layer of the step and frees it.
  return scaled(backend, s.keep(backend.add(normed, table)), Math.SQRT1_2);
}

/** Layer `layer`'s per-layer input joined to its output `x`: x + norm(proj(gelu(gate · x) ⊙ input)). */
export function perLayerBlock(backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, inputs: Tensor, layer: number, s: Scratch): Tensor {
  const { width } = model.config.perLayerInput!;
  if (!l.pleGate || !l.pleProj || !l.plePostNorm) throw new ForwardInputError("The model config asks for per-layer inputs but the layer's weights lack them");
  const gated = s.keep(backend.geluMul(s.keep(backend.matmul(x, l.pleGate)), s.keep(backend.sliceColumns(inputs, layer * width, width))));
  const out = s.keep(backend.rmsnorm(s.keep(backend.matmul(gated, l.pleProj)), l.plePostNorm, model.config.rmsNormEps));
  return backend.add(x, out);
}

/**
 * Attention of a layer that reads another's KV cache (Gemma 4 E2B/E4B's last layers): queries
 * projected, normed and turned, attending over `kCache`/`vCache` as written by the layer it shares
 * with; no key, value or cache write of its own. Its residual add after the post-norm.
 */
export function sharedKvAttention(
  backend: Backend, model: DeviceModel, l: LayerWeights<Tensor>, x: Tensor, step: StepTensors, kCache: Tensor, vCache: Tensor, window: number | undefined,
  s: Scratch, project: Project, layer: number,
): Tensor {
  const c = model.config;
  const n = x.shape[0];
  const { headDim, rotaryDim } = layerAttention(c, layer);
  if (!l.wq || !l.wo || !l.attnNorm) throw new ForwardInputError("The model's attention weights lack the query or output projection");
  const h = s.keep(backend.rmsnorm(x, l.attnNorm, c.rmsNormEps));
  let q = backend.reshape(s.keep(project(h, l.wq, undefined, "wq")), [n, c.numHeads, headDim]);
  if (c.qkNorm) {
    if (!l.qNorm) throw new ForwardInputError("The model config asks for q norm but the weights lack it");
    q = s.keep(backend.rmsnorm(q, l.qNorm, c.rmsNormEps));
  }
  const ownRope = window !== undefined ? c.slidingWindow?.ropeTheta : undefined;
  const qr = s.keep(backend.rope(q, step.positions, ownRope ?? c.ropeTheta, c.ropeLayout, rotaryDim, ownRope === undefined ? model.ropeFreqFactors : undefined));
  const att = s.keep(backend.pagedAttention(qr, kCache, vCache, step.attention, c.attentionScale ?? 1 / Math.sqrt(headDim), { window, softcap: c.attnSoftcap }));
  const o = s.keep(project(backend.reshape(att, [n, c.numHeads * headDim]), l.wo, undefined, "wo"));
  return backend.add(x, l.attnPostNorm ? s.keep(backend.rmsnorm(o, l.attnPostNorm, c.rmsNormEps)) : o);
}
