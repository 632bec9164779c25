/**
 * Turns a ragged batch of (new tokens, start position, block table) entries into the flat index
 * tensors one forward step needs: token ids, positions, KV slots and the attention metadata.
 */
import type { AttentionBatch, Backend, Tensor } from "../backend/types.ts";

/** One sequence's share of a forward step: its new tokens, where they start, and its blocks. */
export interface ForwardEntry {
  /** New token ids (a prefill chunk, or one token when decoding). */
  tokens: readonly number[];
  /** Absolute position of tokens[0]; positions before it must already be in the KV cache. */
  startPos: number;
  /** Block ids covering positions 0 .. startPos + tokens.length - 1, in order. */
  blockTable: readonly number[];
  /**
   * The recurrent state slot of the sequence (models with Gated DeltaNet layers, or sliding layers
   * keeping their windows only; PagedKv.state): it holds the state after positions 0..startPos-1, and
   * is started afresh where startPos is 0.
   */
  stateSlot?: number;
  /**
   * Spans of positions [start, end) whose rows attend to each other both ways (an image's, in Gemma
   * 3): a row there sees the keys up to end − 1. A span the entry's rows reach must end within them:
   * its later rows' keys are written in the same step (or were cached whole before it).
   */
  bidirectional?: readonly (readonly [number, number])[];
}

/** Thrown when a forward step's entries do not fit the model or the KV cache. */
export class ForwardInputError extends RangeError {
  override name = "ForwardInputError";
}

/** Host-side arrays of a flattened step (exposed for tests and other backends' planners). */
export interface FlatBatch {
  ids: Int32Array;
  positions: Int32Array;
  tokenSeq: Int32Array;
  slots: Int32Array;
  /** [entries, maxBlocks] row-major; unused entries hold 0. */
  blockTables: Int32Array;
  maxBlocks: number;
  maxContext: number;
  /** Row of each entry's last token in the flat batch. */
  lastRows: Int32Array;
  /** The position each row's attention takes as its own (its keys up to it): its position, or its bidirectional span's last (ForwardEntry.bidirectional); absent when every row's is its position. */
  attnPositions?: Int32Array;
  /** Where the windowed sliding layers (RecurrentState.window) write and read: each row's cache slot, each entry's ring of blocks [entries, maxBlocks]. */
  window?: { slots: Int32Array; blockTables: Int32Array };
}

/** What the windowed sliding layers' caches hold (forward.ts WindowKv), as flattenBatch needs it. */
export interface WindowGeometry {
  blocksPerSlot: number;
  window: number;
  /** Running sequences' state slots (WindowKv.runningSlots). */
  slots: number;
}

/** Flattens and validates the entries of a step. */
export function flattenBatch(
  entries: readonly ForwardEntry[],
  blockSize: number,
  numBlocks: number,
  vocabSize: number,
  window?: WindowGeometry,
): FlatBatch {
  if (entries.length === 0) throw new ForwardInputError("A forward step needs at least one entry");
  let total = 0;
  let maxBlocks = 1;
  let maxContext = 0;
  entries.forEach((e, i) => {
    if (e.tokens.length === 0) throw new ForwardInputError(`Entry ${i} has no tokens`);
    if (!Number.isInteger(e.startPos) || e.startPos < 0) {
      throw new ForwardInputError(`Entry ${i} has an invalid start position ${e.startPos}`);
    }
    const end = e.startPos + e.tokens.length;
    const needed = Math.ceil(end / blockSize);
    if (e.blockTable.length < needed) {
      throw new ForwardInputError(
        `Entry ${i} reaches position ${end - 1} but its block table has ${e.blockTable.length} blocks of ${blockSize}`,
      );
    }
    for (const b of e.blockTable.slice(0, needed)) {
      if (!Number.isInteger(b) || b < 0 || b >= numBlocks) {
        throw new ForwardInputError(`Entry ${i} uses block ${b}, outside 0..${numBlocks - 1}`);
      }
    }
    if (window) checkWindowEntry(e, i, blockSize, window);
    for (const [s, t] of e.bidirectional ?? []) {
      if (!(Number.isInteger(s) && Number.isInteger(t) && 0 <= s && s < t)) throw new ForwardInputError(`Entry ${i} has an invalid bidirectional span [${s}, ${t})`);
      if (s < end && t > e.startPos && t > end) throw new ForwardInputError(`Entry ${i}'s rows end at position ${end - 1}, inside its bidirectional span [${s}, ${t}): the span's later keys would be missing`);
    }
    total += e.tokens.length;
    maxBlocks = Math.max(maxBlocks, needed);
    maxContext = Math.max(maxContext, end);
  });
  const flat: FlatBatch = {
    ids: new Int32Array(total),
    positions: new Int32Array(total),
    tokenSeq: new Int32Array(total),
    slots: new Int32Array(total),
    blockTables: new Int32Array(entries.length * maxBlocks),
    maxBlocks,
    maxContext,
    lastRows: new Int32Array(entries.length),
    ...(window ? { window: { slots: new Int32Array(total), blockTables: new Int32Array(entries.length * maxBlocks) } } : {}),
    ...(entries.some((e) => e.bidirectional?.length) ? { attnPositions: new Int32Array(total) } : {}),
  };
  let row = 0;
  entries.forEach((e, i) => {
    const needed = Math.ceil((e.startPos + e.tokens.length) / blockSize);
    for (let b = 0; b < needed; b++) flat.blockTables[i * maxBlocks + b] = e.blockTable[b];
    // The windowed layers' logical block b is block b mod blocksPerSlot of the sequence's slot.
    const ring = window && flat.window && ((b: number) => e.stateSlot! * window.blocksPerSlot + (b % window.blocksPerSlot));
    if (ring) for (let b = 0; b < needed; b++) flat.window!.blockTables[i * maxBlocks + b] = ring(b);
    e.tokens.forEach((id, j) => {
      if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw new ForwardInputError(`Entry ${i} has token id ${id}, outside the vocabulary 0..${vocabSize - 1}`);
      }
      const pos = e.startPos + j;
      flat.ids[row] = id;
      flat.positions[row] = pos;
      if (flat.attnPositions) flat.attnPositions[row] = (e.bidirectional?.find(([s, t]) => s <= pos && pos < t)?.[1] ?? pos + 1) - 1;
      flat.tokenSeq[row] = i;
      flat.slots[row] = e.blockTable[Math.floor(pos / blockSize)] * blockSize + (pos % blockSize);
      if (ring) flat.window!.slots[row] = ring(Math.floor(pos / blockSize)) * blockSize + (pos % blockSize);
      row++;
    });
    flat.lastRows[i] = row - 1;
  });
  return flat;
}

/**
 * Refuses an entry the windowed layers' rings cannot take: one without its state slot, or with more
 * tokens than its ring holds beyond the window (a row would read a position another row of the step
 * overwrote).
 */
function checkWindowEntry(e: ForwardEntry, i: number, blockSize: number, w: WindowGeometry): void {
  const slot = e.stateSlot;
  if (slot === undefined || !Number.isInteger(slot) || slot < 0 || slot >= w.slots) {
    throw new ForwardInputError(`Entry ${i} has state slot ${slot}, outside the ${w.slots} slots of the sliding layers' windows`);
  }
  const most = w.blocksPerSlot * blockSize - w.window + 1;
  if (e.tokens.length > most) {
    throw new ForwardInputError(
      `Entry ${i} has ${e.tokens.length} tokens; a sliding window of ${w.window} in a ring of ${w.blocksPerSlot} blocks of ${blockSize} takes at most ${most} a step`,
    );
  }
}

/** The uploaded index tensors of one step; `free` releases them all. */
export interface StepTensors {
  ids: Tensor;
  positions: Tensor;
  slots: Tensor;
  attention: AttentionBatch;
  lastRows: Tensor;
  /** Each row's query scale under Llama 4's attention temperature tuning (ModelConfig.attnTemperature), f32 [n, 1]. */
  attnTemperature?: Tensor;
  /** The same step as the windowed sliding layers see it: their slots and block tables (FlatBatch.window); `free` frees it with the rest. */
  window?: StepTensors;
  free(): void;
}

/** Uploads a flattened step to the backend (with `temperature`, each row's query scale for it). */
export function uploadBatch(backend: Backend, flat: FlatBatch, temperature?: { beta: number; originalContext: number }): StepTensors {
  const n = flat.ids.length;
  const scales = temperature && Float32Array.from(flat.positions, (p) => 1 + temperature.beta * Math.log(1 + Math.floor(p / temperature.originalContext)));
  const tensors = {
    ...(scales ? { attnTemperature: backend.upload(scales, [n, 1]) } : {}),
    ids: backend.upload(flat.ids, [n]),
    positions: backend.upload(flat.positions, [n]),
    ...(flat.attnPositions ? { attnPositions: backend.upload(flat.attnPositions, [n]) } : {}),
    slots: backend.upload(flat.slots, [n]),
    lastRows: backend.upload(flat.lastRows, [flat.lastRows.length]),
    tokenSeq: backend.upload(flat.tokenSeq, [n]),
    blockTables: backend.upload(flat.blockTables, [flat.lastRows.length, flat.maxBlocks]),
    ...(flat.window
      ? {
        windowSlots: backend.upload(flat.window.slots, [n]),
        windowTables: backend.upload(flat.window.blockTables, [flat.lastRows.length, flat.maxBlocks]),
      }
      : {}),
  };
  const step: StepTensors = {
    ids: tensors.ids,
    positions: tensors.positions,
    slots: tensors.slots,
    lastRows: tensors.lastRows,
    ...(tensors.attnTemperature ? { attnTemperature: tensors.attnTemperature } : {}),
    attention: {
      tokenSeq: tensors.tokenSeq,
      tokenPos: tensors.attnPositions ?? tensors.positions,
      blockTables: tensors.blockTables,
      maxContext: flat.maxContext,
    },
    free: () => Object.values(tensors).forEach((t) => backend.free(t)),
  };
  const { windowSlots, windowTables } = tensors;
  if (!windowSlots || !windowTables) return step;
  const window: StepTensors = { ...step, slots: windowSlots, attention: { ...step.attention, blockTables: windowTables }, free: () => {} };
  return { ...step, window };
}
