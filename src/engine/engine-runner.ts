/**
 * Runs one scheduler step on a model: one ragged forward over the step's entries, then sampling
 * on the backend with each row's parameters and CPU-drawn uniform. The worker loop only sees the
 * `StepRunner` seam, so it can be driven by any backend (or a test double in unit tests).
 * The model runner also moves preempted KV to and from host memory for swap preemption, and whole
 * cached blocks out of and into the cache when a prefix moves between workers.
 */
import type { Backend, KvDType, SamplingRow, Tensor } from "../backend/types.ts";
import type { DeviceModel } from "../model/device-weights.ts";
import { forward, forwardWithHidden, type PagedKv, type StepLora } from "../model/forward.ts";
import { type DeviceLoraSet, freeLoraSet, uploadLoraSet } from "../model/lora-set.ts";
import type { LoraAdapter } from "../model/lora.ts";
import { type HostKv, readSlots, slotsOf, writeSlots } from "./kv-copy.ts";
import { HostKvSwap } from "./kv-swap.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import type { TokenMask } from "./output-constraint.ts";
import { type TokenLogprob, tokenLogprob } from "./logprobs.ts";
import type { RepeatPenalty } from "./repeat-penalty.ts";
import type { StepEntry, SwapOp } from "./scheduler-types.ts";

/** A row that takes the most likely token. */
export const GREEDY_ROW: SamplingRow = { temperature: 0, topK: 0, topP: 1, uniform: 0 };

/** What a step asks beyond its sampling rows, per entry (undefined: nothing for that entry). */
export interface StepExtras {
  /** Added to the entry's own row's logits before sampling (logit biases and penalties; after its draft, if any). */
  additions?: readonly (LogitAdditions | undefined)[];
  /**
   * The tokens the entry's output grammar allows at its own row (after its draft, if any); the
   * others are barred after the additions, whatever their bias.
   */
  masks?: readonly (TokenMask | undefined)[];
  /** Log probability of the sampled token and this many top alternatives (0 to MAX_TOP_LOGPROBS), at each row that samples. */
  logprobs?: readonly (number | undefined)[];
  /** Log probabilities of the prompt tokens the entry's rows predict (prompt_logprobs, echo). */
  promptLogprobs?: readonly (PromptLogprobAsk | undefined)[];
  /**
   * For an entry with a draft (StepEntry.draft = d): the sampling rows of its first d rows, each
   * sampling the token after the one it feeds (the entry's own row samples after the last draft
   * token). They report log probabilities when their entry asks (StepOutput.draftLogprobs).
   */
  drafts?: readonly (readonly SamplingRow[] | undefined)[];
  /**
   * Per draft row of an entry with a draft: added to that row's logits (penalties counting the draft
   * tokens before it as output). Absent, or undefined for a row: nothing is added there.
   */
  draftAdditions?: readonly (readonly (LogitAdditions | undefined)[] | undefined)[];
  /** Per draft row of an entry with a draft: the tokens its grammar allows after the draft tokens before it. */
  draftMasks?: readonly (readonly (TokenMask | undefined)[] | undefined)[];
  /** The entry's own row's repetition penalty (after its draft, if any), applied before the additions. */
  repeats?: readonly (RepeatPenalty | undefined)[];
  /** Per draft row of an entry with a draft: its repetition penalty, counting the draft tokens before it. */
  draftRepeats?: readonly (readonly (RepeatPenalty | undefined)[] | undefined)[];
  /** Entries whose own row's hidden state after the output norm is returned (StepOutput.hidden: embeddings). */
  hidden?: readonly (boolean | undefined)[];
  /** Each entry's LoRA adapter slot ({@link StepRunner.setAdapters}; 0 or undefined: the base model). */
  adapters?: readonly (number | undefined)[];
}

/**
 * An entry's prompt log probabilities: its row j predicts `targets[j]`, the prompt token after the
 * one it feeds (so a chunk that ends the prompt asks for one fewer than it feeds).
 */
export interface PromptLogprobAsk {
  /** Top alternatives per token (0 to MAX_TOP_LOGPROBS). */
  top: number;
  targets: readonly number[];
}

/** A step's output: one sampled token per entry (entries that do not sample get any value). */
export interface StepOutput {
  ids: Int32Array;
  /** For the entries that asked (StepExtras.logprobs), from the raw logits. */
  logprobs?: (TokenLogprob | undefined)[];
  /** For the entries that asked (StepExtras.promptLogprobs): one per target, in order. */
  promptLogprobs?: (TokenLogprob[] | undefined)[];
  /** For the entries with a draft (StepExtras.drafts): the token sampled at each draft row. */
  draftIds?: (Int32Array | undefined)[];
  /** For the entries with a draft that asked (StepExtras.logprobs): each draft row's sampled token's, from the raw logits. */
  draftLogprobs?: (TokenLogprob[] | undefined)[];
  /** For the entries that asked (StepExtras.hidden): their own row's hidden state after the output norm. */
  hidden?: (Float32Array | undefined)[];
}

/** Executes steps. */
export interface StepRunner {
  readonly numBlocks: number;
  readonly blockSize: number;
  /** The KV cache's element type (absent: f32, or a runner without a device cache). */
  readonly kvDtype?: KvDType;
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
  /**
   * Puts these LoRA adapters on the device, adapter i at slot i + 1 (undefined: an empty slot), in
   * place of the set before (steps from the next `run` use it). Absent: the runner serves no adapters.
   */
  setAdapters?(adapters: readonly (LoraAdapter | undefined)[]): void;
  /**
   * Greedy drafting (draft-model.ts): runs `entries` (each sampling its last row), then `steps - 1`
   * one-token steps per entry, each fed the token the step before sampled for it without reading it
   * back, and returns each entry's `steps` tokens (one read at the end). Absent: the proposer runs
   * and reads one step at a time.
   */
  draftGreedy?(entries: readonly StepEntry[], steps: number): Promise<Int32Array[]>;
  /** Releases device memory. */
  close(): void;
}

/** A runner over a backend, an uploaded model and its paged KV cache. */
export function modelStepRunner(backend: Backend, model: DeviceModel, kv: PagedKv, release: () => void = () => {}): StepRunner {
  const host = new HostKvSwap(backend, kv);
  let loras: DeviceLoraSet | undefined;
  // A replaced set is freed when the next step starts: the step in flight may still be using it.
  const retired: DeviceLoraSet[] = [];
  const freeRetired = () => {
    for (const set of retired.splice(0)) freeLoraSet(backend, set);
  };
  return {
    numBlocks: kv.numBlocks,
    blockSize: kv.blockSize,
    kvDtype: kv.dtype ?? "f32",
    async run(entries, rows, extras) {
      freeRetired();
      const lora = stepLora(loras, extras?.adapters);
      const scored = promptRows(entries, extras?.promptLogprobs);
      const drafts = draftRows(entries, extras?.drafts);
      const extraRows = [...scored, ...drafts.rows];
      const hiddenRows = extras?.hidden ? entries.flatMap((_, i) => (extras.hidden![i] ? [i] : [])) : [];
      const out = forwardWithHidden(backend, model, kv, { entries, extraRows, hiddenRows, ...(lora ? { lora } : {}) });
      let logits = out.logits;
      let raw: Tensor | undefined;
      let promptLogprobs: (TokenLogprob[] | undefined)[] | undefined;
      let hidden: (Float32Array | undefined)[] | undefined;
      try {
        if (out.hidden) {
          const data = (await backend.download(out.hidden)) as Float32Array;
          const size = out.hidden.shape[1];
          hidden = new Array(entries.length);
          hiddenRows.forEach((i, k) => (hidden![i] = data.slice(k * size, (k + 1) * size)));
        }
        if (extraRows.length > 0) {
          // The prompt rows, then the draft rows follow the entries' last rows: read the prompt rows
          // out, then sample from the entries' rows and the draft rows.
          const all = logits;
          try {
            if (scored.length > 0) promptLogprobs = await readPromptLogprobs(backend, all, entries.length, scored.length, extras!.promptLogprobs!);
            const first = entries.length + scored.length;
            logits = gatherLogitRows(backend, all, [...entries.keys(), ...drafts.rows.map((_, k) => first + k)]);
          } finally {
            backend.free(all);
          }
        }
        // Rows: the entries', then the draft rows (draftRows' order). The raw rows are copied out
        // before the additions change them.
        const n = entries.length;
        const lpTop = [...entries.map((_, i) => extras?.logprobs?.[i]), ...drafts.entry.map((i) => extras?.logprobs?.[i])];
        const asking = lpTop.flatMap((top, row) => (top === undefined ? [] : [row]));
        if (asking.length > 0) raw = gatherLogitRows(backend, logits, asking);
        const perDraftRow = <T>(asks: readonly (readonly (T | undefined)[] | undefined)[] | undefined) => drafts.entry.map((i, k) => asks?.[i]?.[drafts.pos[k]]);
        penalizeRepeatRows(backend, logits, [...entries.map((_, i) => extras?.repeats?.[i]), ...perDraftRow(extras?.draftRepeats)]);
        addToLogits(backend, logits, [...entries.map((_, i) => extras?.additions?.[i]), ...perDraftRow(extras?.draftAdditions)]);
        maskLogitRows(backend, logits, [...entries.map((_, i) => extras?.masks?.[i]), ...perDraftRow(extras?.draftMasks)]);
        const idsT = backend.sample(logits, [...rows, ...drafts.sampling]);
        let all: Int32Array;
        try {
          all = (await backend.download(idsT)) as Int32Array;
        } finally {
          backend.free(idsT);
        }
        const ids = all.subarray(0, n);
        const draftIds = drafts.rows.length === 0 ? undefined : splitDraftRows(Array.from(all.subarray(n)), entries, (xs) => Int32Array.from(xs));
        const more = { ...(promptLogprobs ? { promptLogprobs } : {}), ...(draftIds ? { draftIds } : {}), ...(hidden ? { hidden } : {}) };
        if (!raw) return { ids, ...more };
        const data = (await backend.download(raw)) as Float32Array;
        const vocab = logits.shape[1];
        const rowLogprobs: (TokenLogprob | undefined)[] = new Array(lpTop.length);
        asking.forEach((row, k) => (rowLogprobs[row] = tokenLogprob(data.subarray(k * vocab, (k + 1) * vocab), all[row], lpTop[row]!)));
        const logprobs = rowLogprobs.slice(0, n);
        if (drafts.rows.length === 0 || asking[asking.length - 1] < n) return { ids, logprobs, ...more };
        const draftLogprobs = splitDraftRows(rowLogprobs.slice(n), entries, (xs) => (xs.every((x) => x !== undefined) ? xs as TokenLogprob[] : undefined));
        return { ids, logprobs, draftLogprobs, ...more };
      } finally {
        backend.free(logits);
        if (raw) backend.free(raw);
        if (out.hidden) backend.free(out.hidden);
      }
    },
    async swap(out, into) {
      for (const op of out) host.save(op);
      for (const op of into) await host.restore(op);
    },
    discardSwap: (seqId) => host.discard(seqId),
    readBlocks: (ids) => readSlots(backend, kv, slotsOf(ids, ids.length * kv.blockSize, kv.blockSize)),
    writeBlocks: (ids, data, from) => writeSlots(backend, kv, slotsOf(ids, ids.length * kv.blockSize, kv.blockSize), data, from * kv.blockSize),
    async draftGreedy(entries, steps) {
      freeRetired();
      const rows = entries.map(() => GREEDY_ROW);
      const sampled: Tensor[] = [];
      try {
        let step = entries;
        for (let k = 0; k < steps; k++) {
          const logits = forward(backend, model, kv, { entries: step, ...(k > 0 ? { tokenIds: sampled[k - 1] } : {}) });
          try {
            sampled.push(backend.sample(logits, rows));
          } finally {
            backend.free(logits);
          }
          step = step.map((e) => ({ ...e, tokens: [0], startPos: e.startPos + e.tokens.length, prefill: false }));
        }
        const read = await Promise.all(sampled.map(async (t) => (await backend.download(t)) as Int32Array));
        return entries.map((_, i) => Int32Array.from(read, (ids) => ids[i]));
      } finally {
        for (const t of sampled) backend.free(t);
      }
    },
    setAdapters(adapters) {
      const next = adapters.some((a) => a !== undefined) ? uploadLoraSet(backend, model.config, adapters, model.weights.output !== undefined) : undefined;
      if (loras) retired.push(loras);
      loras = next;
    },
    close() {
      freeRetired();
      if (loras) freeLoraSet(backend, loras);
      loras = undefined;
      release();
    },
  };
}

/** A step's adapters: the set and every entry's slot, when some entry has one (undefined: the base model throughout). */
function stepLora(set: DeviceLoraSet | undefined, slots: readonly (number | undefined)[] | undefined): StepLora | undefined {
  if (!slots?.some((s) => s)) return undefined;
  if (!set) throw new RangeError("A step asks for LoRA adapters but none are loaded");
  return { set, slots: slots.map((s) => s ?? 0) };
}

/** The flat rows whose logits the prompt log probabilities need, in entry order (see PromptLogprobAsk). */
function promptRows(entries: readonly StepEntry[], asks: readonly (PromptLogprobAsk | undefined)[] | undefined): number[] {
  const rows: number[] = [];
  if (!asks) return rows;
  let offset = 0;
  entries.forEach((e, i) => {
    const n = asks[i]?.targets.length ?? 0;
    if (n > e.tokens.length) throw new RangeError(`Entry ${i} asks for ${n} prompt log probabilities but feeds ${e.tokens.length} tokens`);
    for (let j = 0; j < n; j++) rows.push(offset + j);
    offset += e.tokens.length;
  });
  return rows;
}

/**
 * The flat rows of the entries' draft positions (each entry's first `draft` rows), in entry order,
 * with the entry each belongs to, its position in the draft and its sampling row.
 */
function draftRows(entries: readonly StepEntry[], asks: readonly (readonly SamplingRow[] | undefined)[] | undefined) {
  const rows: number[] = [], entry: number[] = [], pos: number[] = [], sampling: SamplingRow[] = [];
  let offset = 0;
  entries.forEach((e, i) => {
    const d = e.draft ?? 0;
    if (d > 0 && asks?.[i]?.length !== d) throw new RangeError(`Entry ${i} drafts ${d} tokens but has ${asks?.[i]?.length ?? 0} draft sampling rows`);
    for (let j = 0; j < d; j++) {
      rows.push(offset + j);
      entry.push(i);
      pos.push(j);
      sampling.push(asks![i]![j]);
    }
    offset += e.tokens.length;
  });
  return { rows, entry, pos, sampling };
}

/** Values per draft row (draftRows' order), split per entry and made into `R` (undefined for entries without a draft). */
function splitDraftRows<T, R>(values: readonly T[], entries: readonly StepEntry[], make: (xs: T[]) => R | undefined): (R | undefined)[] {
  let at = 0;
  return entries.map((e) => {
    const d = e.draft ?? 0;
    if (d === 0) return undefined;
    at += d;
    return make(values.slice(at - d, at));
  });
}

/** Log probabilities of each asking entry's targets, from rows `first`..`first + count` of logits (promptRows' order). */
async function readPromptLogprobs(
  backend: Backend, logits: Tensor, first: number, count: number, asks: readonly (PromptLogprobAsk | undefined)[],
): Promise<(TokenLogprob[] | undefined)[]> {
  const part = gatherLogitRows(backend, logits, Array.from({ length: count }, (_, k) => first + k));
  let data: Float32Array;
  try {
    data = (await backend.download(part)) as Float32Array;
  } finally {
    backend.free(part);
  }
  const vocab = logits.shape[1];
  let row = 0;
  return asks.map((a) =>
    a?.targets.map((id) => {
      const lp = tokenLogprob(data.subarray(row * vocab, (row + 1) * vocab), id, a.top);
      row++;
      return lp;
    })
  );
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

/** Bars what each row's mask does not allow, in one `maskLogits` (nothing when no row has a mask). */
export function maskLogitRows(backend: Backend, logits: Tensor, masks: readonly (TokenMask | undefined)[]): void {
  const rows = masks.flatMap((m, row) => (m === undefined ? [] : [row]));
  if (rows.length === 0) return;
  const words = Math.ceil(logits.shape[1] / 32);
  const bits = new Int32Array(rows.length * words);
  // Logit columns past the mask's vocabulary (an output matrix padded beyond the tokenizer's ids) stay barred.
  rows.forEach((row, k) => bits.set(masks[row]!.bits.subarray(0, words), k * words));
  const rowsT = backend.upload(Int32Array.from(rows), [rows.length]);
  const bitsT = backend.upload(bits, [rows.length, words]);
  try {
    backend.maskLogits(logits, rowsT, bitsT);
  } finally {
    backend.free(rowsT);
    backend.free(bitsT);
  }
}

/** Applies each row's repetition penalty in one `penalizeRepeats` (nothing when no row has one). */
export function penalizeRepeatRows(backend: Backend, logits: Tensor, repeats: readonly (RepeatPenalty | undefined)[]): void {
  const rows = repeats.flatMap((r, row) => (r === undefined ? [] : [row]));
  if (rows.length === 0) return;
  const words = Math.ceil(logits.shape[1] / 32);
  const bits = new Int32Array(rows.length * words);
  rows.forEach((row, k) => bits.set(repeats[row]!.seen.bits.subarray(0, words), k * words));
  const rowsT = backend.upload(Int32Array.from(rows), [rows.length]);
  const bitsT = backend.upload(bits, [rows.length, words]);
  const factorsT = backend.upload(Float32Array.from(rows, (row) => repeats[row]!.factor), [rows.length]);
  try {
    backend.penalizeRepeats(logits, rowsT, bitsT, factorsT);
  } finally {
    backend.free(rowsT);
    backend.free(bitsT);
    backend.free(factorsT);
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
