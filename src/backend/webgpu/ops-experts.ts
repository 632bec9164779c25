/**
 * Mixture-of-experts ops: routing, the expert matmul (GEMV-shaped, the expert read on the device,
 * so a step never waits for the routing on the host) and the weighted combine.
 */
import { type GpuContext } from "./context.ts";
import { weightParams } from "./ops-linear.ts";
import { asGpu } from "./tensor.ts";
import { expectExpertMatmulShapes, expectMoeCombineShapes, expectMoeRouteShapes } from "../shape-checks.ts";
import type { MoeRouting, Tensor } from "../types.ts";

/** Top-k experts per row of router logits and their weights (Backend.moeRoute). */
export function moeRoute(ctx: GpuContext, logitsT: Tensor, k: number, normalize: boolean): MoeRouting {
  const logits = asGpu(logitsT, "moeRoute logits");
  const { n, experts } = expectMoeRouteShapes(logits, k);
  const ids = ctx.output([n, k], "i32");
  const weights = ctx.output([n, k]);
  ctx.recorder.dispatch(
    "moe_route",
    {},
    [n, experts, k, normalize ? 1 : 0],
    [[1, logits.buffer], [2, ids.buffer], [3, weights.buffer]],
    Math.ceil(n / 64),
  );
  return { ids, weights };
}

/** y [n·k, out]: each row through its expert's matrix (Backend.matmulExperts). */
export function matmulExperts(ctx: GpuContext, xT: Tensor, wT: Tensor, idsT: Tensor): Tensor {
  const x = asGpu(xT, "matmulExperts input");
  const w = asGpu(wT, "matmulExperts weight");
  const ids = asGpu(idsT, "matmulExperts ids");
  const { n, k, experts, out, inner, perExpertInput } = expectExpertMatmulShapes(x, w, ids);
  const rows = n * k;
  const y = ctx.output([rows, out]);
  if (rows === 0 || out === 0) return y;
  if (inner === 0 || experts === 0) {
    ctx.recorder.clear(y.buffer, rows * out * 4);
    return y;
  }
  const params = { ...weightParams(ctx, w), VEC4: inner % 4 === 0 };
  const perRow = Math.ceil(out / 4);
  for (const chunk of w.storage.chunks) {
    ctx.recorder.dispatch(
      "matmul_experts",
      params,
      [rows, inner, out, k, perExpertInput ? 1 : 0, experts, chunk.rowStart, chunk.rows, perRow, 0, 0, 0],
      [[1, chunk.buffer], [2, x.buffer], [3, ids.buffer], [4, y.buffer]],
      perRow * rows,
    );
  }
  return y;
}

/** out [n, d] = Σ_j weights[t, j] · y[t·k+j, :] (Backend.moeCombine). */
export function moeCombine(ctx: GpuContext, yT: Tensor, weightsT: Tensor): Tensor {
  const y = asGpu(yT, "moeCombine input");
  const weights = asGpu(weightsT, "moeCombine weights");
  const { n, k, d } = expectMoeCombineShapes(y, weights);
  const out = ctx.output([n, d]);
  ctx.recorder.dispatch("moe_combine", {}, [n, k, d, 0], [[1, y.buffer], [2, weights.buffer], [3, out.buffer]], Math.ceil((n * d) / 256));
  return out;
}
