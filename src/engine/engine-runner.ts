/**
 * Runs one scheduler step on a model: one ragged forward over the step's entries, then sampling
 * on the backend with each row's parameters and CPU-drawn uniform. The worker loop only sees the
 * `StepRunner` seam, so it can be driven by any backend (or a test double in unit tests).
 */
import type { Backend, SamplingRow } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import { forward, type PagedKv } from "../model/forward.ts";
import type { StepEntry } from "./scheduler-types.ts";

/** Executes steps: returns one sampled token per entry (entries that do not sample get any value). */
export interface StepRunner {
  readonly numBlocks: number;
  readonly blockSize: number;
  run(entries: readonly StepEntry[], rows: readonly SamplingRow[]): Promise<Int32Array>;
  /** Releases device memory. */
  close(): void;
}

/** A runner over a backend, an uploaded model and its paged KV cache. */
export function modelStepRunner(backend: Backend, model: DeviceModel, kv: PagedKv, release: () => void = () => {}): StepRunner {
  return {
    numBlocks: kv.numBlocks,
    blockSize: kv.blockSize,
    async run(entries, rows) {
      const logits = forward(backend, model, kv, { entries });
      try {
        const ids = backend.sample(logits, rows);
        try {
          return (await backend.download(ids)) as Int32Array;
        } finally {
          backend.free(ids);
        }
      } finally {
        backend.free(logits);
      }
    },
    close: release,
  };
}
