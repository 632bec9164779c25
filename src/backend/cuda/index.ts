/**
 * The CUDA backend's entry point. `createCudaBackend()` returns a Backend on an NVIDIA GPU, or
 * throws BackendUnavailableError ("no CUDA addon: ..." when it is not built, "no CUDA device:
 * ..." without a driver or device) so `--backend auto` can fall back to WebGPU.
 */
import { BackendUnavailableError } from "../types.ts";
import { defaultAddonPath, loadCudaAddon, requireCudaDevice } from "./addon.ts";
import { CudaBackend } from "./backend.ts";

export { CudaBackend } from "./backend.ts";
export type { AddRmsnormResult } from "./extras.ts";
export { CudaTensor } from "./tensor.ts";

/** Options for createCudaBackend. */
export interface CudaBackendOptions {
  /** CUDA device ordinal (default 0). */
  device?: number;
  /** Path of the addon (default kernels-cuda/build/evolving_cuda.node or $EVOLVING_CUDA_ADDON). */
  addonPath?: string;
  /** Tensor-core matmul activations: "exact" (default, f32-accurate) or "fast" (rounded to 16 bits). */
  matmulPrecision?: "exact" | "fast";
}

/** Creates the CUDA backend or throws BackendUnavailableError saying why it cannot. */
export function createCudaBackend(options: CudaBackendOptions = {}): CudaBackend {
  const device = options.device ?? 0;
  const mod = loadCudaAddon(options.addonPath ?? defaultAddonPath());
  requireCudaDevice(mod, device);
  try {
    return new CudaBackend(mod.createContext(device), options.matmulPrecision ?? "exact");
  } catch (err) {
    throw new BackendUnavailableError(`no CUDA device: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Whether the addon loads and sees a device, with the reason when it does not. */
export function probeCuda(addonPath?: string): { available: boolean; reason?: string } {
  try {
    requireCudaDevice(loadCudaAddon(addonPath ?? defaultAddonPath()), 0);
    return { available: true };
  } catch (err) {
    return { available: false, reason: err instanceof Error ? err.message : String(err) };
  }
}
