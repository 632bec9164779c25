/**
 * Locates and loads the CUDA addon built by scripts/build-cuda.sh, and probes for a device.
 * Loading never needs a driver (the addon links the CUDA runtime statically and libcuda is
 * opened lazily); only creating a context does.
 */
import { envVar } from "../../runtime/env.ts";
import { loadNativeAddon } from "../../runtime/native.ts";
import { BackendUnavailableError } from "../types.ts";
import type { NativeCudaModule } from "./native-types.ts";

/** Default addon location, relative to this file. EVOLVING_CUDA_ADDON overrides it. */
export function defaultAddonPath(): string {
  return envVar("EVOLVING_CUDA_ADDON") ??
    decodeURIComponent(new URL("../../../kernels-cuda/build/evolving_cuda.node", import.meta.url).pathname);
}

/** Loads the addon or throws BackendUnavailableError saying why (not built, not loadable). */
export function loadCudaAddon(path: string = defaultAddonPath()): NativeCudaModule {
  try {
    return loadNativeAddon<NativeCudaModule>(path);
  } catch (err) {
    const why = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw new BackendUnavailableError(
      `no CUDA addon: could not load "${path}" (${why}); build it with scripts/build-cuda.sh`,
    );
  }
}

/** Throws BackendUnavailableError("no CUDA device: ...") unless the addon sees a device. */
export function requireCudaDevice(mod: NativeCudaModule, device: number): void {
  const probe = mod.deviceCount();
  if (probe.count === 0) {
    throw new BackendUnavailableError(`no CUDA device: ${probe.error ?? "cudaGetDeviceCount reported 0 devices"}`);
  }
  if (!Number.isInteger(device) || device < 0 || device >= probe.count) {
    throw new BackendUnavailableError(`no CUDA device: device ${device} requested, ${probe.count} present`);
  }
}
