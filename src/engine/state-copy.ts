/**
 * Copies one sequence's recurrent state (every recurrent layer's convolution inputs and each Gated
 * DeltaNet or Mamba-2 layer's state matrices, and the sliding layers' windows where they keep only
 * those) from one slot to another on the device, exactly, with ops
 * every backend has: the slot's values gathered as rows (Backend.gatherRows) and written at the other
 * slot's rows by Backend.kvWrite, each state tensor viewed as an f32 cache of one-head rows. A slot's
 * state also goes to the host and back the same way (a state checkpoint moved to another worker).
 */
import type { Backend, Tensor } from "../backend/types.ts";
import { type RecurrentState, type WindowKv, windowRing } from "../model/forward.ts";

/** The widest row of at most 128 values that divides `n` (the rows kvWrite copies). */
function rowWidth(n: number): number {
  for (let w = 128; w > 1; w /= 2) if (n % w === 0) return w;
  return 1;
}

/** One slot of `t` [slots, ...] as `rows` rows of `width` values. */
function slotRows(t: Tensor): { slots: number; rows: number; width: number } {
  const [slots, ...rest] = t.shape;
  const per = rest.reduce((a, d) => a * d, 1);
  const width = rowWidth(per);
  return { slots, rows: per / width, width };
}

/** The row indices of slot `slot`. */
function rowIndices(backend: Backend, slot: number, rows: number): Tensor {
  return backend.upload(Int32Array.from({ length: rows }, (_, r) => slot * rows + r), [rows]);
}

/** Writes `values` [rows, width] over slot `to` of `t`. */
function writeRows(backend: Backend, t: Tensor, values: Tensor, to: number): void {
  const { slots, rows, width } = slotRows(t);
  const dst = rowIndices(backend, to, rows);
  try {
    const asRows = backend.reshape(values, [rows, 1, width]);
    const cache = backend.reshape(t, [slots, rows, 1, width]);
    backend.kvWrite(asRows, asRows, cache, cache, dst);
  } finally {
    backend.free(dst);
  }
}

/** Slot `from` of `t` as a tensor [rows, width] of its own (the caller frees it). */
function gatherSlot(backend: Backend, t: Tensor, from: number): Tensor {
  const { slots, rows, width } = slotRows(t);
  const src = rowIndices(backend, from, rows);
  try {
    return backend.gatherRows(backend.reshape(t, [slots * rows, width]), src);
  } finally {
    backend.free(src);
  }
}

/** Copies slot `from` of `t` [slots, ...] to slot `to`. */
function copySlot(backend: Backend, t: Tensor, from: number, to: number): void {
  const values = gatherSlot(backend, t, from);
  try {
    writeRows(backend, t, values, to);
  } finally {
    backend.free(values);
  }
}

/** The cache rows of blocks `blocks` of a windowed cache, each block's rows in order. */
function blockRows(backend: Backend, window: WindowKv, blocks: readonly number[]): Tensor {
  const bs = window.k[0].shape[1];
  return backend.upload(Int32Array.from({ length: blocks.length * bs }, (_, r) => blocks[Math.floor(r / bs)] * bs + (r % bs)), [blocks.length * bs]);
}

/** Every block of slot `slot`'s ring, in order. */
function ringBlocks(window: WindowKv, slot: number): number[] {
  const { base, blocks } = windowRing(window, slot);
  return Array.from({ length: blocks }, (_, i) => base + i);
}

/** One ring's rows as f32 rows [rows, kvHeads · headDim] (an f16 or fp8 cache's values read by `embedding`, exactly). */
function gatherWindow(backend: Backend, cache: Tensor, idx: Tensor): Tensor {
  const [blocks, bs, heads, dim] = cache.shape;
  const table = backend.reshape(cache, [blocks * bs, heads * dim]);
  return cache.dtype === "f32" ? backend.gatherRows(table, idx) : backend.embedding(table, idx);
}

/** Writes f32 rows of keys and values over a ring's rows (rounded to the cache's dtype: f16 or fp8 values written back are the same values). */
function writeWindow(backend: Backend, k: Tensor, v: Tensor, kCache: Tensor, vCache: Tensor, idx: Tensor): void {
  const [, , heads, dim] = kCache.shape;
  const rows = idx.shape[0];
  backend.kvWrite(backend.reshape(k, [rows, heads, dim]), backend.reshape(v, [rows, heads, dim]), kCache, vCache, idx);
}

/**
 * Copies the window before position `tokens` (block-aligned) from slot `from`'s ring to slot `to`'s:
 * the last WindowKv.checkpointBlocks logical blocks before it, each from its place in one ring to its
 * place in the other (block j sits at j mod the ring's blocks).
 */
function copyWindow(backend: Backend, w: WindowKv, from: number, to: number, tokens: number): void {
  const bs = w.k[0].shape[1];
  if (!Number.isInteger(tokens) || tokens <= 0 || tokens % bs !== 0) throw new RangeError(`A sliding window is copied up to a block boundary, not ${tokens} (blocks of ${bs})`);
  const end = tokens / bs;
  const src = windowRing(w, from);
  const dst = windowRing(w, to);
  const logical = Array.from({ length: Math.min(end, w.checkpointBlocks) }, (_, i) => end - Math.min(end, w.checkpointBlocks) + i);
  const srcRows = blockRows(backend, w, logical.map((j) => src.base + (j % src.blocks)));
  const dstRows = blockRows(backend, w, logical.map((j) => dst.base + (j % dst.blocks)));
  try {
    for (let l = 0; l < w.k.length; l++) {
      const k = gatherWindow(backend, w.k[l], srcRows);
      const v = gatherWindow(backend, w.v[l], srcRows);
      writeWindow(backend, k, v, w.k[l], w.v[l], dstRows);
      backend.free(k);
      backend.free(v);
    }
  } finally {
    backend.free(srcRows);
    backend.free(dstRows);
  }
}

/**
 * Copies every recurrent layer's state of slot `from` to slot `to`, and where the sliding layers keep
 * only their windows, the window before position `tokens` (the checkpoint's end; block-aligned).
 */
export function copyStateSlot(backend: Backend, state: RecurrentState, from: number, to: number, tokens?: number): void {
  if (from === to) return;
  copyRecurrentSlot(backend, state, from, to);
  if (!state.window) return;
  if (tokens === undefined) throw new RangeError("Copying a sliding layers' window needs the position it ends at");
  copyWindow(backend, state.window, from, to, tokens);
}

/** Copies every recurrent layer's state (convolution inputs, delta rule or scan matrices) of slot `from` to slot `to`; the windows stay. */
export function copyRecurrentSlot(backend: Backend, state: RecurrentState, from: number, to: number): void {
  if (from === to) return;
  for (const t of [...state.conv, ...state.ssm]) copySlot(backend, t, from, to);
}

/**
 * One slot's recurrent state on the host: each state tensor's values, in RecurrentState's order; where
 * the sliding layers keep only their windows, each windowed layer's ring of the slot (a checkpoint's:
 * WindowKv.checkpointBlocks blocks, block j of the sequence at j mod their number), keys then values,
 * f32 [blocks · blockSize, kvHeads · headDim].
 */
export interface HostState {
  conv: Float32Array[];
  ssm: Float32Array[];
  window?: Float32Array[];
}

/** Thrown when a host state does not fit this model's state tensors (a peer's bad message). */
export class StateShapeError extends RangeError {
  override name = "StateShapeError";
}

/**
 * Reads slot `slot`'s state to the host. Every read is queued before this returns, so a later
 * write over the slot cannot reach what is read.
 */
export function readStateSlot(backend: Backend, state: RecurrentState, slot: number): Promise<HostState> {
  const download = (values: Tensor) => backend.download(values).then((d) => (d instanceof Float32Array ? d : Float32Array.from(d))).finally(() => backend.free(values));
  const read = (t: Tensor) => download(gatherSlot(backend, t, slot));
  const conv = state.conv.map(read);
  const ssm = state.ssm.map(read);
  const w = state.window;
  let window: Promise<Float32Array>[] = [];
  if (w) {
    const idx = blockRows(backend, w, ringBlocks(w, slot));
    try {
      window = w.k.flatMap((k, l) => [download(gatherWindow(backend, k, idx)), download(gatherWindow(backend, w.v[l], idx))]);
    } finally {
      backend.free(idx);
    }
  }
  return Promise.all([Promise.all(conv), Promise.all(ssm), Promise.all(window)]).then(([c, s, win]) => ({ conv: c, ssm: s, ...(w ? { window: win } : {}) }));
}

/** Writes `host` over slot `slot`'s state; a StateShapeError, before anything is written, where it does not fit. */
export function writeStateSlot(backend: Backend, state: RecurrentState, slot: number, host: HostState): void {
  const pairs = [...state.conv.map((t, i) => [t, host.conv[i]] as const), ...state.ssm.map((t, i) => [t, host.ssm[i]] as const)];
  if (host.conv.length !== state.conv.length || host.ssm.length !== state.ssm.length) {
    throw new StateShapeError(`A recurrent state of ${host.conv.length} convolution and ${host.ssm.length} delta rule or scan tensors does not fit this model's ${state.conv.length} and ${state.ssm.length}`);
  }
  for (const [t, values] of pairs) {
    const { rows, width } = slotRows(t);
    if (!(values instanceof Float32Array) || values.length !== rows * width) {
      throw new StateShapeError(`A recurrent state tensor of ${values?.length ?? "no"} values does not fit this model's slot of ${rows * width} (shape [${t.shape.slice(1).join(", ")}])`);
    }
  }
  const w = state.window;
  const caches = w ? w.k.flatMap((k, l) => [k, w.v[l]]) : [];
  if ((host.window?.length ?? 0) !== caches.length) {
    throw new StateShapeError(`A state with the windows of ${(host.window?.length ?? 0) / 2} sliding layers does not fit this model's ${caches.length / 2}`);
  }
  caches.forEach((cache, i) => {
    const values = host.window![i];
    const size = windowRing(w!, slot).blocks * cache.shape[1] * cache.shape[2] * cache.shape[3];
    if (!(values instanceof Float32Array) || values.length !== size) {
      throw new StateShapeError(`A sliding layer's window of ${values?.length ?? "no"} values does not fit this model's ring of ${size}`);
    }
  });
  for (const [t, values] of pairs) {
    const { rows, width } = slotRows(t);
    const up = backend.upload(values, [rows, width]);
    try {
      writeRows(backend, t, up, slot);
    } finally {
      backend.free(up);
    }
  }
  if (!w) return;
  const idx = blockRows(backend, w, ringBlocks(w, slot));
  try {
    for (let l = 0; l < w.k.length; l++) {
      const width = w.k[l].shape[2] * w.k[l].shape[3];
      const rows = idx.shape[0];
      const k = backend.upload(host.window![2 * l], [rows, width]);
      const v = backend.upload(host.window![2 * l + 1], [rows, width]);
      writeWindow(backend, k, v, w.k[l], w.v[l], idx);
      backend.free(k);
      backend.free(v);
    }
  } finally {
    backend.free(idx);
  }
}
