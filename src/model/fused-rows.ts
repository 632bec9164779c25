/**
 * Matrices some checkpoints fuse, cut into the plain roles as they are read: Phi-3's q/k/v and
 * gate/up (phi3.ts), Qwen3-Next's per-key-head groups of q, k, v and z, and of beta and alpha
 * (qwen3next.ts). A role is a list of row ranges of its fused matrix, gathered in order (any storage:
 * a row of a block format is whole blocks).
 */
import { type HostTensor, ModelLoadError } from "./config.ts";
import type { TensorSource } from "./weights.ts";

/** Where one plain role's rows lie in a fused tensor: `[first row, count]` ranges, in order. */
export interface FusedPart {
  fused: string;
  ranges: readonly (readonly [number, number])[];
}

/** The ranges' rows of a matrix, gathered in order, under `name`. */
export function gatherRows(t: HostTensor, ranges: readonly (readonly [number, number])[], name: string, path: string): HostTensor {
  const rows = t.shape[0];
  const bad = ranges.find(([first, count]) => first < 0 || count < 1 || first + count > rows);
  if (t.shape.length !== 2 || bad || t.data.byteLength % rows !== 0) {
    const [first, count] = bad ?? ranges[0];
    throw new ModelLoadError(`Tensor "${t.name}" in "${path}" has shape [${t.shape.join(", ")}]; cannot take rows ${first} to ${first + count - 1} of it for "${name}"`);
  }
  const rowBytes = t.data.byteLength / rows;
  const total = ranges.reduce((a, [, count]) => a + count, 0);
  if (ranges.length === 1) {
    const [first] = ranges[0];
    return { name, shape: [total, t.shape[1]], dtype: t.dtype, data: t.data.subarray(first * rowBytes, (first + total) * rowBytes) };
  }
  const data = new Uint8Array(total * rowBytes);
  let at = 0;
  for (const [first, count] of ranges) {
    data.set(t.data.subarray(first * rowBytes, (first + count) * rowBytes), at);
    at += count * rowBytes;
  }
  return { name, shape: [total, t.shape[1]], dtype: t.dtype, data };
}

/**
 * `source` serving each of `parts`' names (absent from it) from its fused tensor. The last fused
 * tensor read is kept, so each is read once for its parts when they are read one after another.
 * `rowsOf`: a fused tensor's stored rows, for byte counts.
 */
export function splittingFused(source: TensorSource, parts: ReadonlyMap<string, FusedPart>, rowsOf: (name: string) => number | undefined, path: string): TensorSource {
  if (parts.size === 0) return source;
  let last: { name: string; tensor: Promise<HostTensor> } | undefined;
  const readFused = (name: string) => {
    if (last?.name !== name) last = { name, tensor: source.read(name) };
    return last.tensor;
  };
  return {
    has: (name) => parts.has(name) || source.has(name),
    byteLength: (name) => {
      const p = parts.get(name);
      if (!p) return source.byteLength(name);
      const rows = rowsOf(p.fused) ?? 1;
      return Math.ceil((source.byteLength(p.fused) * p.ranges.reduce((a, [, count]) => a + count, 0)) / rows);
    },
    async read(name) {
      const p = parts.get(name);
      if (!p) return source.read(name);
      return gatherRows(await readFused(p.fused), p.ranges, name, path);
    },
  };
}
