/**
 * Copies one sequence's recurrent state (every Gated DeltaNet layer's convolution inputs and delta
 * rule matrices) from one slot to another on the device, exactly, with ops every backend has: the
 * slot's values gathered as rows (Backend.gatherRows) and written at the other slot's rows by
 * Backend.kvWrite, each state tensor viewed as an f32 cache of one-head rows.
 */
import type { Backend, Tensor } from "../backend/types.ts";
import type { RecurrentState } from "../model/forward.ts";

/** The widest row of at most 128 values that divides `n` (the rows kvWrite copies). */
function rowWidth(n: number): number {
  for (let w = 128; w > 1; w /= 2) if (n % w === 0) return w;
  return 1;
}

/** Copies slot `from` of `t` [slots, ...] to slot `to`. */
function copySlot(backend: Backend, t: Tensor, from: number, to: number): void {
  const [slots, ...rest] = t.shape;
  const per = rest.reduce((a, d) => a * d, 1);
  const w = rowWidth(per);
  const rows = per / w;
  const src = backend.upload(Int32Array.from({ length: rows }, (_, r) => from * rows + r), [rows]);
  const dst = backend.upload(Int32Array.from({ length: rows }, (_, r) => to * rows + r), [rows]);
  const values = backend.gatherRows(backend.reshape(t, [slots * rows, w]), src);
  try {
    const asRows = backend.reshape(values, [rows, 1, w]);
    const cache = backend.reshape(t, [slots, rows, 1, w]);
    backend.kvWrite(asRows, asRows, cache, cache, dst);
  } finally {
    for (const x of [src, dst, values]) backend.free(x);
  }
}

/** Copies every recurrent layer's state of slot `from` to slot `to`. */
export function copyStateSlot(backend: Backend, state: RecurrentState, from: number, to: number): void {
  if (from === to) return;
  for (const t of [...state.conv, ...state.ssm]) copySlot(backend, t, from, to);
}
