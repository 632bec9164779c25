/**
 * Gemma 4's experts' layer (the 26B-A4B), as llama.cpp's gemma4 graph runs it: beside a dense GeGLU
 * feed-forward (the shared roles; normed in by `ffnNorm` and out by `ffnPostNorm1`), the residual
 * normed by `ffnPreNorm2` goes to GELU experts, routed by softmax over `router` · (the residual
 * RMS-normed with `routerNorm`: Gemma 4's router scale over √hidden), the chosen weights renormalised,
 * each expert's output scaled by its `expertScale`, their sum normed by `ffnPostNorm2`; the two are
 * added, normed by `ffnPostNorm` and joined to the residual.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { LayerWeights } from "./config.ts";
import type { DeviceModel } from "./device-weights.ts";
import { ForwardInputError } from "./forward-batch.ts";
import { type Scratch, swiglu } from "./forward-layers.ts";

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
