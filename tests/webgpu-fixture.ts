/**
 * What the WebGPU tests share: whether CI runs them (there a missing adapter fails instead of
 * skipping; lavapipe provides one), and a poisoned WebGPU backend or the reason there is none.
 */
import type { Backend } from "../src/backend/types.ts";
import { createWebGpuBackend } from "../src/backend/webgpu/index.ts";
import { envVar } from "../src/runtime/env.ts";

/** True under CI (`CI` set to anything but "" or "false"). */
export const inCi: boolean = envVar("CI") !== undefined && envVar("CI") !== "" && envVar("CI") !== "false";

/**
 * A WebGPU backend whose op outputs are poisoned (NaN), so a read of what no kernel wrote shows up;
 * or, without an adapter, why not. Outside CI the caller's tests skip, saying so with `what`.
 */
export async function poisonedWebGpu(what: string): Promise<{ gpu?: Backend; why: string; skip: boolean }> {
  try {
    return { gpu: await createWebGpuBackend({ poison: true }), why: "", skip: false };
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    if (!inCi) console.error(`skipping ${what}: ${why}`);
    return { why, skip: !inCi };
  }
}
