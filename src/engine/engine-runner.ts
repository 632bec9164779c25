/**
 * Runs one scheduler step on a model: one ragged forward over the step's entries, then sampling
 * on the backend with each row's parameters and CPU-drawn uniform. The worker loop only sees the
 * `StepRunner` seam, so it can be driven by any backend (or a test double in unit tests).
 * The model runner also moves preempted KV to and from host memory for swap preemption, and whole
 * cached blocks out of and into the cache when a prefix moves between workers.
 */
import type { Backend, SamplingRow, Tensor } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import { forward, type PagedKv } from "../model/forward.ts";
import { type HostKv, readSlots, slotsOf, writeSlots } from "./kv-copy.ts";
import { HostKvSwap } from "./kv-swap.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import { type TokenLogprob, tokenLogprob } from "./logprobs.ts";
import type { StepEntry, SwapOp } from "./scheduler-types.ts";

/** What a step asks beyond its sampling rows, per entry (undefined: nothing for that entry). */
export interface StepExtras {
  /** Added to the entry's logits before sampling (logit biases and penalties). */
  additions?: readonly (LogitAdditions | undefined)[];
  /** Log probability of the sampled token and this many top alternatives (0 to MAX_TOP_LOGPROBS). */
  logprobs?: readonly (number | undefined)[];
}

/** A step's output: one sampled token per entry (entries that do not sample get any value). */
export interface StepOutput {
  ids: Int32Array;
  /** For the entries that asked (StepExtras.logprobs), from the raw logits. */
  logprobs?: (TokenLogprob | undefined)[];
}

/** Executes steps. */
export interface StepRunner {
  readonly numBlocks: number;
  readonly blockSize: number;
  run(entries: readonly StepEntry[], rows: readonly SamplingRow[], extras?: StepExtras): Promise<StepOutput>;
  /**
   * Copies KV out to host memory, then back in (swap preemption). Must complete its swap-outs'
   * reads before the next `run` writes the same blocks. Absent: only recompute preemption works.
   */
  swap?(out: readonly SwapOp[], into: readonly SwapOp[]): Promise<void>;
  /** Forgets a sequence's host KV (it ended while swapped out). */
  discardSwap?(seqId: number): void;
  /** Reads whole KV blocks to the host (moving a cached prefix to another worker). */
  readBlocks?(blockIds: readonly number[]): Promise<HostKv>;
  /** Writes `data`, from block `fromBlock` of it on, into whole KV blocks (a prefix from another worker). */
  writeBlocks?(blockIds: readonly number[], data: HostKv, fromBlock: number): void;
  /** Releases device memory. */
  close(): void;
}

/** A runner over a backend, an uploaded model and its paged KV cache. */
export function modelStepRunner(backend: Backend, model: DeviceModel, kv: PagedKv, release: () => void = () => {}): StepRunner {
  const host = new HostKvSwap(backend, kv);
  return {
    numBlocks: kv.numBlocks,
    blockSize: kv.blockSize,
    async run(entries, rows, extras) {
      const logits = forward(backend, model, kv, { entries });
      let raw: Tensor | undefined;
      try {
        // The raw rows are copied out before the additions change them.
        const asking = (extras?.logprobs ?? []).flatMap((n, row) => (n === undefined ? [] : [row]));
        if (asking.length > 0) raw = gatherLogitRows(backend, logits, asking);
        if (extras?.additions) addToLogits(backend, logits, extras.additions);
        const idsT = backend.sample(logits, rows);
        let ids: Int32Array;
        try {
          ids = (await backend.download(idsT)) as Int32Array;
        } finally {
          backend.free(idsT);
        }
        if (!raw) return { ids };
        const data = (await backend.download(raw)) as Float32Array;
        const vocab = logits.shape[1];
        const logprobs: (TokenLogprob | undefined)[] = new Array(entries.length);
        asking.forEach((row, k) => (logprobs[row] = tokenLogprob(data.subarray(k * vocab, (k + 1) * vocab), ids[row], extras!.logprobs![row]!)));
        return { ids, logprobs };
      } finally {
        backend.free(logits);
        if (raw) backend.free(raw);
      }
    },
    async swap(out, into) {
      for (const op of out) host.save(op);
      for (const op of into) await host.restore(op);
    },
    discardSwap: (seqId) => host.discard(seqId),
    readBlocks: (ids) => readSlots(backend, kv, slotsOf(ids, ids.length * kv.blockSize, kv.blockSize)),
    writeBlocks: (ids, data, from) => writeSlots(backend, kv, slotsOf(ids, ids.length * kv.blockSize, kv.blockSize), data, from * kv.blockSize),
    close: release,
  };
}

/** Copies rows `rows` of logits [n, vocab] into a new [rows.length, vocab] tensor. */
function gatherLogitRows(backend: Backend, logits: Tensor, rows: readonly number[]): Tensor {
  const idx = backend.upload(Int32Array.from(rows), [rows.length]);
  try {
    return backend.gatherRows(logits, idx);
  } finally {
    backend.free(idx);
  }
}

/** Adds each row's additions to its logits [rows, vocab] in one scatter (nothing when no row has any). */
export function addToLogits(backend: Backend, logits: Tensor, additions: readonly (LogitAdditions | undefined)[]): void {
  const vocab = logits.shape[1];
  const count = additions.reduce((n, a) => n + (a?.size ?? 0), 0);
  if (count === 0) return;
  const index = new Int32Array(count);
  const values = new Float32Array(count);
  let k = 0;
  additions.forEach((a, row) => {
    for (const [token, v] of a ?? []) {
      index[k] = row * vocab + token;
      values[k++] = v;
    }
  });
  const indexT = backend.upload(index, [count]);
  const valuesT = backend.upload(values, [count]);
  try {
    backend.scatterAdd(logits, indexT, valuesT);
  } finally {
    backend.free(indexT);
    backend.free(valuesT);
  }
}
