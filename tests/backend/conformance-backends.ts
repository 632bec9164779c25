/**
 * Which backends the conformance suite runs on: WebGPU always (its absence fails the suite unless
 * EVOLVING_ALLOW_NO_WEBGPU=1), CUDA when src/backend/cuda/index.ts exists and finds a device.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { envVar } from "../../src/runtime/env.ts";
import type { Backend } from "../../src/backend/types.ts";
import { createWebGpuBackend } from "../../src/backend/webgpu/index.ts";
import { SPLIT_TARGET_GROUPS } from "../../src/backend/webgpu/ops-attention.ts";

/** A backend the suite will run on, or why it cannot. */
export interface Candidate {
  name: string;
  backend?: Backend;
  /** Why it is unavailable. */
  reason?: string;
  /** An unavailable required backend is a failure, not a skip. */
  required: boolean;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

async function webgpu(): Promise<Candidate> {
  const required = envVar("EVOLVING_ALLOW_NO_WEBGPU") !== "1";
  try {
    // Split-KV as on a hardware GPU (lavapipe's default, its thread count, would split the long-context cases less or not at all).
    return { name: "webgpu", backend: await createWebGpuBackend({ poison: true, attentionSplitGroups: SPLIT_TARGET_GROUPS }), required };
  } catch (e) {
    return { name: "webgpu", reason: message(e), required };
  }
}

interface CudaModule {
  createCudaBackend(): Promise<Backend>;
}

async function cuda(): Promise<Candidate> {
  const url = new URL("../../src/backend/cuda/index.ts", import.meta.url);
  if (!existsSync(fileURLToPath(url))) return { name: "cuda", reason: "src/backend/cuda/index.ts does not exist", required: false };
  try {
    const mod = (await import(url.href)) as Partial<CudaModule>;
    if (typeof mod.createCudaBackend !== "function") throw new Error("it exports no createCudaBackend()");
    return { name: "cuda", backend: await mod.createCudaBackend(), required: false };
  } catch (e) {
    return { name: "cuda", reason: message(e), required: false };
  }
}

/** Every backend the suite knows, available or not. */
export async function conformanceCandidates(): Promise<Candidate[]> {
  return [await webgpu(), await cuda()];
}
