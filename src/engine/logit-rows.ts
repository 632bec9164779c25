/**
 * Per-row operations on a step's logits [rows, vocab], each one backend call for every row that
 * asks: gathering rows into a new tensor, grammar masks, repetition penalties, and additive biases.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { LogitAdditions } from "./logit-adjust.ts";
import type { TokenMask } from "./output-constraint.ts";
import type { RepeatPenalty } from "./repeat-penalty.ts";

/** Copies rows `rows` of logits [n, vocab] into a new [rows.length, vocab] tensor. */
export function gatherLogitRows(backend: Backend, logits: Tensor, rows: readonly number[]): Tensor {
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
