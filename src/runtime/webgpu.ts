/**
 * Obtains a WebGPU `GPU` object on either runtime: Deno has `navigator.gpu` built in; Node gets
 * one from the `webgpu` npm package (Dawn). Returns undefined when neither has an adapter.
 */
import { runtimeName } from "./env.ts";

/** Returns the runtime's GPU entry point, or undefined when WebGPU is unavailable. */
export async function getGpu(): Promise<GPU | undefined> {
  if (runtimeName() === "deno") {
    const nav = (globalThis as unknown as { navigator?: { gpu?: GPU } }).navigator;
    return nav?.gpu;
  }
  try {
    const mod = (await import("webgpu")) as unknown as {
      create: (flags: string[]) => GPU;
      globals: Record<string, unknown>;
    };
    // Dawn's classes (GPUBufferUsage, GPUShaderStage, ...) are needed as globals by WebGPU code.
    for (const [k, v] of Object.entries(mod.globals)) {
      if (!(k in globalThis)) (globalThis as Record<string, unknown>)[k] = v;
    }
    return mod.create([]);
  } catch {
    return undefined;
  }
}
