/**
 * Several LoRA adapters on a device at once, one batch serving them all (S-LoRA / Punica's batched
 * multi-adapter matmul): per adapted projection, the adapters' A matrices stacked as one
 * [slots, rank, in] table and their B matrices as [slots, out, rank], so a step's rows each pick
 * their adapter by slot with the expert matmul MoE models already use (Backend.matmulExperts is
 * llama.cpp's mul_mat_id, the same gather-by-id product). Slot 0 is all zeros: a row of the base
 * model adds nothing. Ranks below the largest are padded with zero rows and columns.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { ModelConfig } from "./config.ts";
import { type LoraAdapter, loraKey, type LoraTarget, targetDims } from "./lora.ts";

/** One adapted projection's stacked tables. */
export interface DeviceLoraWeight {
  /** f32 [slots, rank, in]. */
  a: Tensor;
  /** f32 [slots, out, rank]. */
  b: Tensor;
}

/** Adapters on a device, by slot (slot 0: none). */
export interface DeviceLoraSet {
  /** Slots in the tables (adapters + 1). */
  readonly slots: number;
  /** By {@link loraKey}; projections no adapter changes are absent. */
  readonly weights: ReadonlyMap<string, DeviceLoraWeight>;
}

/**
 * Uploads `adapters` (adapter i at slot i + 1; undefined leaves a slot empty, as after an unload)
 * into stacked tables. The caller frees them with {@link freeLoraSet}.
 */
export function uploadLoraSet(backend: Backend, config: ModelConfig, adapters: readonly (LoraAdapter | undefined)[], hasOutput: boolean): DeviceLoraSet {
  const slots = adapters.length + 1;
  const byKey = new Map<string, { layer: number; target: LoraTarget; rank: number }>();
  for (const ad of adapters) {
    for (const w of ad?.weights ?? []) {
      const key = loraKey(w.layer, w.target);
      const seen = byKey.get(key);
      byKey.set(key, { layer: w.layer, target: w.target, rank: Math.max(seen?.rank ?? 0, w.rank) });
    }
  }
  const weights = new Map<string, DeviceLoraWeight>();
  for (const [key, { layer, target, rank }] of byKey) {
    const dims = targetDims(config, layer, target, hasOutput);
    if (typeof dims === "string") throw new RangeError(`LoRA projection ${key} cannot be adapted: ${dims}`);
    const [inDim, outDim] = dims;
    const a = new Float32Array(slots * rank * inDim);
    const b = new Float32Array(slots * outDim * rank);
    adapters.forEach((ad, i) => {
      const w = ad?.weights.find((x) => x.layer === layer && x.target === target);
      if (!w) return;
      const slot = i + 1;
      a.set(w.a, slot * rank * inDim); // rows 0..w.rank-1 of the slot; the rest stay zero
      for (let o = 0; o < outDim; o++) b.set(w.b.subarray(o * w.rank, (o + 1) * w.rank), (slot * outDim + o) * rank);
    });
    weights.set(key, {
      a: backend.uploadWeight(new Uint8Array(a.buffer), [slots, rank, inDim], "f32"),
      b: backend.uploadWeight(new Uint8Array(b.buffer), [slots, outDim, rank], "f32"),
    });
  }
  return { slots, weights };
}

/** Frees a set's tables. */
export function freeLoraSet(backend: Backend, set: DeviceLoraSet): void {
  for (const w of set.weights.values()) {
    backend.free(w.a);
    backend.free(w.b);
  }
}
