/**
 * Backend selection for `--backend auto|reference|webgpu|cuda`. The GPU backends are loaded by
 * dynamic import so a machine (or checkout) without them still runs on the reference backend.
 */
import { fileURLToPath } from "node:url";
import { pathExists } from "../runtime/fs.ts";
import { createReferenceBackend } from "./reference/index.ts";
import { type Backend, BackendUnavailableError } from "./types.ts";

/** Names accepted by `--backend`. */
export const BACKEND_NAMES = ["auto", "reference", "webgpu", "cuda"] as const;

/** A backend name or "auto". */
export type BackendChoice = (typeof BACKEND_NAMES)[number];

/** The chosen backend and a one-line account of why. */
export interface BackendSelection {
  backend: Backend;
  reason: string;
}

/** How to create each non-reference backend: module path (relative to this file) and factory name. */
const GPU_BACKENDS = {
  cuda: { module: "./cuda/index.ts", factory: "createCudaBackend" },
  webgpu: { module: "./webgpu/index.ts", factory: "createWebGpuBackend" },
} as const;

type GpuName = keyof typeof GPU_BACKENDS;

/** True when `name` is a valid `--backend` value. */
export function isBackendChoice(name: string): name is BackendChoice {
  return (BACKEND_NAMES as readonly string[]).includes(name);
}

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0];
}

/** Creates a GPU backend, or throws BackendUnavailableError whose message says why it cannot. */
async function createGpu(name: GpuName): Promise<Backend> {
  const { module, factory } = GPU_BACKENDS[name];
  const url = new URL(module, import.meta.url);
  if (!(await pathExists(fileURLToPath(url)))) {
    throw new BackendUnavailableError(`not part of this build: ${module} is missing`);
  }
  let create: unknown;
  try {
    create = ((await import(url.href)) as Record<string, unknown>)[factory];
  } catch (e) {
    throw new BackendUnavailableError(`failed to load: ${firstLine(e)}`);
  }
  if (typeof create !== "function") {
    throw new BackendUnavailableError(`its module does not export ${factory}()`);
  }
  try {
    return (await (create as () => Backend | Promise<Backend>)()) as Backend;
  } catch (e) {
    throw new BackendUnavailableError(`could not start: ${firstLine(e)}`);
  }
}

/**
 * Creates the requested backend. "auto" tries cuda, then webgpu, then falls back to reference,
 * and the reason names what was picked and why each better one was skipped. Asking explicitly for
 * a backend that cannot start throws BackendUnavailableError.
 */
export async function selectBackend(name: BackendChoice): Promise<BackendSelection> {
  if (!isBackendChoice(name)) {
    throw new BackendUnavailableError(`Unknown backend "${name}"; choose one of ${BACKEND_NAMES.join(", ")}`);
  }
  if (name === "reference") return { backend: createReferenceBackend(), reason: "reference (requested)" };
  if (name !== "auto") {
    try {
      const backend = await createGpu(name);
      return { backend, reason: `${name} (requested) on ${backend.info.device}` };
    } catch (e) {
      throw new BackendUnavailableError(`Backend "${name}" is unavailable: ${firstLine(e)}`);
    }
  }
  const skipped: string[] = [];
  for (const gpu of ["cuda", "webgpu"] as const) {
    try {
      const backend = await createGpu(gpu);
      const why = skipped.length ? `; skipped ${skipped.join("; ")}` : "";
      return { backend, reason: `auto picked ${gpu} on ${backend.info.device}${why}` };
    } catch (e) {
      skipped.push(`${gpu} (${firstLine(e)})`);
    }
  }
  return { backend: createReferenceBackend(), reason: `auto picked reference; skipped ${skipped.join("; ")}` };
}
