/**
 * Obtains a WebGPU `GPU` object on either runtime: Deno has `navigator.gpu` built in; Node gets
 * one from the `webgpu` npm package (Dawn). Whether it has an adapter is the caller's question.
 */
import { runtimeName } from "./env.ts";

/** The runtime has no WebGPU at all; the message says why, in the runtime's terms. */
export class WebGpuUnavailableError extends Error {
  override name = "WebGpuUnavailableError";
}

/** Where the process's one Dawn `GPU` is kept (Node). */
const DAWN_GPU = Symbol.for("evolving-infra.dawn-gpu");

function firstLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).split("\n")[0];
}

/**
 * Returns the runtime's GPU entry point. Throws WebGpuUnavailableError saying why when the runtime
 * has none: a Deno without `navigator.gpu`, or a Node where the `webgpu` package does not load.
 */
export async function getGpu(): Promise<GPU> {
  if (runtimeName() === "deno") {
    const nav = (globalThis as unknown as { navigator?: { gpu?: GPU } }).navigator;
    if (nav?.gpu === undefined) throw new WebGpuUnavailableError("This Deno has no WebGPU: navigator.gpu is missing");
    return nav.gpu;
  }
  let mod: { create: (flags: string[]) => GPU; globals: Record<string, unknown> };
  try {
    mod = (await import("webgpu")) as unknown as typeof mod;
    // Dawn's classes (GPUBufferUsage, GPUShaderStage, ...) are needed as globals by WebGPU code.
    for (const [k, v] of Object.entries(mod.globals)) {
      if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
    }
    // One Dawn instance per process, as Deno's navigator.gpu: an instance per backend, each destroyed
    // when its GPU object is collected, crashed or deadlocked Dawn now and then (docs/modules.md).
    const slot = globalThis as unknown as Record<symbol, GPU | undefined>;
    return (slot[DAWN_GPU] ??= mod.create([]));
  } catch (e) {
    throw new WebGpuUnavailableError(`WebGPU on Node needs the "webgpu" package (Dawn), which did not load: ${firstLine(e)}`);
  }
}
