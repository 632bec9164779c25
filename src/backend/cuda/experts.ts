/**
 * The CUDA backend's mixture-of-experts ops (kernels-cuda/moe.cu): routing, the expert matmul and
 * the weighted combine. The expert matmul reads each row's expert id on the device, so a layer's
 * route → matmul → combine chain never waits on the host.
 */
import { expectExpertMatmulShapes, expectMoeCombineShapes, expectMoeRouteShapes } from "../shape-checks.ts";
import { BackendShapeError, type MoeRouteOptions, type MoeRouting, type Tensor } from "../types.ts";
import { CudaExtras } from "./extras.ts";
import { CUDA_WEIGHT_DTYPES, CudaTensor, type CudaWeightDType, DTYPE_CODE, expect, fmt } from "./tensor.ts";

/** The most experts moeRoute takes on CUDA (kernels.h MOE_MAX_EXPERTS: a row and its top k live in shared memory). */
export const CUDA_MAX_EXPERTS = 4096;

/** Base of CudaBackend that adds the mixture-of-experts ops of the Backend interface. */
export class CudaExperts extends CudaExtras {
  /** Backend.moeRoute: probabilities in f32, the top k by selection score (ties to the lower index). */
  moeRoute(logits: Tensor, k: number, options: MoeRouteOptions): MoeRouting {
    // The shared checks first, so a bad call reads the same on every backend.
    const { n, experts } = expectMoeRouteShapes(logits, k, options);
    const l = expect(logits, 2, "moeRoute logits", ["f32"]);
    const bias = options.selectionBias ? expect(options.selectionBias, 1, "moeRoute selection bias", ["f32"]).ptr : 0n;
    if (experts > CUDA_MAX_EXPERTS) {
      throw new BackendShapeError(
        `moeRoute on CUDA takes at most ${CUDA_MAX_EXPERTS} experts, got logits ${fmt(l.shape)}`,
      );
    }
    const sigmoid = options.gating === "sigmoid" ? 1 : 0;
    const g = options.groups && options.groups.count > 1 ? options.groups : { count: 1, used: 1 };
    const [ids, weights] = this.ctx.moeRoute(l.ptr, n, experts, k, options.normalize ? 1 : 0, bias, sigmoid, options.scale ?? 1, g.count, g.used);
    return { ids: new CudaTensor(ids, [n, k], "i32"), weights: this.f32(weights, [n, k]) };
  }

  /**
   * Backend.matmulExperts on any weight dtype the backend stores (GGUF's other block formats are
   * f16 by then: CudaBackend.uploadWeight). Ids are clamped on the device rather than checked here,
   * even when a host copy exists: routed ids never have one, and both kinds should behave alike.
   */
  matmulExperts(x: Tensor, w: Tensor, ids: Tensor): Tensor {
    const { n, k, experts, out, inner, perExpertInput } = expectExpertMatmulShapes(x, w, ids);
    const xs = expect(x, 2, "matmulExperts input", ["f32"]);
    const ws = expect(w, 3, "matmulExperts weight", CUDA_WEIGHT_DTYPES);
    const is = expect(ids, 2, "matmulExperts ids", ["i32"]);
    const code = DTYPE_CODE[ws.dtype as CudaWeightDType];
    const y = this.ctx.matmulExperts(xs.ptr, ws.ptr, code, is.ptr, n, k, experts, inner, out, perExpertInput ? 1 : 0);
    return this.f32(y, [n * k, out]);
  }

  /** Backend.moeCombine: out[t, :] = Σ_j weights[t, j] · y[t·k + j, :], j in order. */
  moeCombine(y: Tensor, weights: Tensor): Tensor {
    const { n, k, d } = expectMoeCombineShapes(y, weights);
    const ys = expect(y, 2, "moeCombine input", ["f32"]);
    const ws = expect(weights, 2, "moeCombine weights", ["f32"]);
    return this.f32(this.ctx.moeCombine(ys.ptr, ws.ptr, n, k, d), [n, d]);
  }
}
