/**
 * Mixture-of-experts ops: routing, the expert matmul and the weighted combine. The expert matmul
 * reads the routing on the device, so a step never waits for it on the host: a GEMV per row for
 * few tokens, and for many (prefill) the rows sorted by expert on the device and multiplied in
 * register-blocked tiles, each expert's weights read once per tile rather than once per row.
 */
import type { PooledBuffer } from "./buffer-pool.ts";
import { type GpuContext } from "./context.ts";
import { F32 } from "./recorder.ts";
import { weightParams } from "./ops-linear.ts";
import type { KernelParams } from "./kernel-source.ts";
import { asGpu, fmt, type GpuTensor } from "./tensor.ts";
import { expectExpertMatmulShapes, expectMoeCombineShapes, expectMoeRouteShapes } from "../shape-checks.ts";
import { BackendShapeError, type GluActivation, type MoeRouteOptions, type MoeRouting, type Tensor } from "../types.ts";

/** Top-k experts per row of router logits and their weights (Backend.moeRoute). */
export function moeRoute(ctx: GpuContext, logitsT: Tensor, k: number, options: MoeRouteOptions): MoeRouting {
  const logits = asGpu(logitsT, "moeRoute logits", ctx);
  const bias = options.selectionBias && asGpu(options.selectionBias, "moeRoute selection bias", ctx);
  const { n, experts } = expectMoeRouteShapes(logits, k, options);
  const ids = ctx.output([n, k], "i32");
  const weights = ctx.output([n, k]);
  const bindings: [number, PooledBuffer][] = [[1, logits.buffer], [2, ids.buffer], [3, weights.buffer]];
  if (bias) bindings.push([4, bias.buffer]);
  const groups = options.groups && options.groups.count > 1 ? options.groups : undefined;
  ctx.recorder.dispatch(
    "moe_route",
    { SIGMOID: options.gating === "sigmoid", BIAS: bias !== undefined, GROUPED: groups !== undefined },
    [n, experts, k, options.normalize ? 1 : 0, new F32(options.scale ?? 1), groups?.count ?? 1, groups?.used ?? 1, 0],
    bindings,
    Math.ceil(n / 64),
  );
  return { ids, weights };
}

/** The second weight and activation of the experts' fused gated feed-forward (Backend.matmulExpertsGlu). */
export interface ExpertGlu {
  up: Tensor;
  activation: GluActivation;
}

/**
 * y [n·k, out]: each row through its expert's matrix (Backend.matmulExperts); with `glu`, act(x · G[e])
 * ⊙ (x · U[e]), the gate's and the up projection's experts read in the same pass (Backend.matmulExpertsGlu).
 */
export function matmulExperts(ctx: GpuContext, xT: Tensor, wT: Tensor, idsT: Tensor, glu?: ExpertGlu): Tensor {
  const x = asGpu(xT, "matmulExperts input", ctx);
  const w = asGpu(wT, "matmulExperts weight", ctx);
  const ids = asGpu(idsT, "matmulExperts ids", ctx);
  const { n, k, experts, out, inner, perExpertInput } = expectExpertMatmulShapes(x, w, ids);
  const up = glu && asGpu(glu.up, "matmulExpertsGlu up weight", ctx);
  if (glu && up) {
    if (up.dtype !== w.dtype || up.shape.length !== w.shape.length || up.shape.some((d, i) => d !== w.shape[i])) {
      throw new BackendShapeError(`matmulExpertsGlu gate weight ${fmt(w.shape)} ${w.dtype} and up weight ${fmt(up.shape)} ${up.dtype} differ`);
    }
    if (up.storage.chunks.length !== w.storage.chunks.length || up.storage.chunks.some((c, i) => c.rows !== w.storage.chunks[i].rows)) {
      throw new BackendShapeError(`matmulExpertsGlu gate and up weights ${fmt(w.shape)} are split into different row chunks`);
    }
    if (glu.activation !== "silu" && glu.activation !== "gelu") throw new BackendShapeError(`Unknown matmulExpertsGlu activation "${String(glu.activation)}"`);
  }
  const rows = n * k;
  const y = ctx.output([rows, out]);
  if (rows === 0 || out === 0) return y;
  if (inner === 0 || experts === 0) {
    ctx.recorder.clear(y.buffer, rows * out * 4);
    return y;
  }
  const params = { ...weightParams(ctx, w), VEC4: inner % 4 === 0, ...(glu ? { GELU: glu.activation === "gelu" } : {}) };
  // Few tokens: a GEMV per row. Many: rows grouped by expert, so each tile reads its expert's
  // weights once (the grouping keeps its counts in workgroup memory: 1024 experts at most).
  if (n > ctx.gemvMaxRows && experts <= MAX_GROUPED_EXPERTS) {
    groupedExpertMatmul(ctx, x, w, ids, y, { rows, k, experts, out, inner, perExpertInput }, params, up);
    return y;
  }
  const perRow = Math.ceil(out / 4);
  w.storage.chunks.forEach((chunk, i) => {
    ctx.recorder.dispatch(
      up ? "matmul_experts_glu" : "matmul_experts",
      params,
      [rows, inner, out, k, perExpertInput ? 1 : 0, experts, chunk.rowStart, chunk.rows, perRow, 0, 0, 0],
      [[1, chunk.buffer], [2, x.buffer], [3, ids.buffer], [4, y.buffer], ...(up ? [[6, up.storage.chunks[i].buffer] as [number, PooledBuffer]] : [])],
      perRow * rows,
    );
  });
  return y;
}

/** The most experts the grouped expert matmul takes (moe_group.wgsl's workgroup arrays). */
const MAX_GROUPED_EXPERTS = 1024;
/** Rows per tile of matmul_experts_tiled.wgsl (8 threads × 4 rows). */
const TILE_ROWS = 32;

interface ExpertShape {
  rows: number;
  k: number;
  experts: number;
  out: number;
  inner: number;
  perExpertInput: boolean;
}

/** Sorts the rows by expert on the device (moe_group), then runs one register-blocked tile per ≤ 32 rows of an expert. */
function groupedExpertMatmul(ctx: GpuContext, x: GpuTensor, w: GpuTensor, ids: GpuTensor, y: GpuTensor, s: ExpertShape, params: KernelParams, up?: GpuTensor): void {
  // Σ ceil(count_e / 32) ≤ rows / 32 + (experts that have rows): the dispatch's bound on tiles.
  const maxTiles = Math.floor(s.rows / TILE_ROWS) + Math.min(s.experts, s.rows);
  const perm = ctx.scratch(s.rows * 4);
  const tiles = ctx.scratch((1 + 3 * maxTiles) * 4);
  ctx.recorder.dispatch("moe_group", {}, [s.rows, s.experts, TILE_ROWS, 0], [[1, ids.buffer], [2, perm], [3, tiles]], 1);
  // A tile's workgroup covers 32 outputs, or 16 of the gated pair (matmul_experts_glu_tiled.wgsl).
  const groupsM = Math.ceil(s.out / (up ? 16 : 32));
  w.storage.chunks.forEach((chunk, i) => {
    ctx.recorder.dispatch(
      up ? "matmul_experts_glu_tiled" : "matmul_experts_tiled",
      params,
      [s.inner, s.out, s.k, s.perExpertInput ? 1 : 0, chunk.rowStart, chunk.rows, groupsM, 0],
      [[1, chunk.buffer], [2, x.buffer], [3, perm], [4, y.buffer], [5, tiles], ...(up ? [[6, up.storage.chunks[i].buffer] as [number, PooledBuffer]] : [])],
      maxTiles * groupsM,
    );
  });
  ctx.pool.release(perm);
  ctx.pool.release(tiles);
}

/** out [n, d] = Σ_j weights[t, j] · y[t·k+j, :] (Backend.moeCombine). */
export function moeCombine(ctx: GpuContext, yT: Tensor, weightsT: Tensor): Tensor {
  const y = asGpu(yT, "moeCombine input", ctx);
  const weights = asGpu(weightsT, "moeCombine weights", ctx);
  const { n, k, d } = expectMoeCombineShapes(y, weights);
  const out = ctx.output([n, d]);
  ctx.recorder.dispatch("moe_combine", {}, [n, k, d, 0], [[1, y.buffer], [2, weights.buffer], [3, out.buffer]], Math.ceil((n * d) / 256));
  return out;
}
