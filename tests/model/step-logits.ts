/** One forward step of a loaded model for tests that compare logits: upload, run, download, free. */
import type { Backend, KvDType } from "../../src/backend/types.ts";
import { allocatePagedKv, freePagedKv } from "../../src/engine/kv-cache.ts";
import type { LoadedModel } from "../../src/model/config.ts";
import { freeDeviceModel, uploadModel } from "../../src/model/device-weights.ts";
import { type ForwardEntry, forward } from "../../src/model/forward.ts";

/**
 * The f32 logits of one step of `model` on `backend`: each entry's last row, or every position with
 * `allPositions`. The model is uploaded for the step and freed after it, with a paged KV cache of
 * 16-token blocks as many as the entries' block tables reach.
 */
export async function stepLogits(backend: Backend, model: Pick<LoadedModel, "config" | "weights">, entries: ForwardEntry[], allPositions = false): Promise<Float32Array> {
  const blocks = 1 + Math.max(0, ...entries.flatMap((e) => e.blockTable));
  const dm = uploadModel(backend, model);
  const kv = allocatePagedKv(backend, model.config, blocks, 16);
  try {
    const out = forward(backend, dm, kv, { entries, allPositions });
    const data = (await backend.download(out)) as Float32Array;
    backend.free(out);
    return data;
  } finally {
    freePagedKv(backend, kv);
    freeDeviceModel(backend, dm);
  }
}

/**
 * The logits of `prompt`'s last position on `backend` with a paged KV cache of `dtype`: all but the
 * last token as one prefill chunk, then the last token as a decode step, which attends to the rest
 * only through the cache (so its logits carry the cache's rounding). Blocks of 16 in reverse order.
 */
export async function lastLogitsThroughCache(backend: Backend, model: LoadedModel, prompt: readonly number[], dtype: KvDType): Promise<Float32Array> {
  const dm = uploadModel(backend, model);
  const blocks = Math.ceil(prompt.length / 16) + 1;
  const kv = allocatePagedKv(backend, model.config, blocks, 16, dtype);
  const table = Array.from({ length: blocks }, (_, i) => blocks - 1 - i);
  try {
    const head = prompt.slice(0, -1);
    backend.free(forward(backend, dm, kv, { entries: [{ tokens: head, startPos: 0, blockTable: table }] }));
    const out = forward(backend, dm, kv, { entries: [{ tokens: prompt.slice(-1), startPos: head.length, blockTable: table }] });
    const data = (await backend.download(out)) as Float32Array;
    backend.free(out);
    return data;
  } finally {
    freePagedKv(backend, kv);
    freeDeviceModel(backend, dm);
  }
}
