/**
 * WebGPU backend entry point: WGSL kernels from kernels-wgsl/, on Deno's built-in WebGPU or
 * Node's `webgpu` package (Dawn).
 */
import { availableParallelism } from "node:os";
import { WebGpuBackend } from "./backend.ts";
import { SPLIT_TARGET_GROUPS } from "./ops-attention.ts";
import { acquireDevice } from "./device.ts";

export { WebGpuBackend, type WebGpuStats } from "./backend.ts";

/** Options for createWebGpuBackend. */
export interface WebGpuOptions {
  /** Fill every op output with NaN before the op writes it (tests). Default false. */
  poison?: boolean;
  /** Use shader-f16 for f16 weights when the adapter has it. Default true. */
  useF16?: boolean;
  /** Splits weights into row chunks above this many bytes (default: the device's binding limit). */
  maxBindingBytes?: number;
  /**
   * Matmuls with at most this many rows use the GEMV kernel, more rows the register-blocked one.
   * Default 4 on hardware GPUs and 0 on CPU adapters, where the register-blocked kernel measured
   * faster even for one row (docs/bench-engine.md).
   */
  gemvMaxRows?: number;
  /**
   * Split-KV attention cuts rows' keys into spans until a dispatch has about this many workgroups.
   * Default 128 on hardware GPUs; on CPU adapters the CPU's threads, as llvmpipe runs a workgroup
   * per thread at a time: more spans there only add the merge (docs/bench-engine.md).
   */
  attentionSplitGroups?: number;
}

/**
 * Creates a WebGPU backend. Throws BackendUnavailableError when the runtime has no WebGPU adapter.
 * Call `destroy()` when done: on Node the process only exits once the device is destroyed.
 */
export async function createWebGpuBackend(options: WebGpuOptions = {}): Promise<WebGpuBackend> {
  const gpu = await acquireDevice({ useF16: options.useF16, maxBindingBytes: options.maxBindingBytes });
  return new WebGpuBackend(gpu, {
    poison: options.poison ?? false,
    gemvMaxRows: options.gemvMaxRows ?? (gpu.software ? 0 : 4),
    attentionSplitGroups: options.attentionSplitGroups ?? (gpu.software ? availableParallelism() : SPLIT_TARGET_GROUPS),
  });
}
