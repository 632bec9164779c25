/**
 * Per-expert tensors stacked into one: Hugging Face checkpoints (and the first Mixtral GGUFs) store
 * each expert's matrices apart, while the forward takes one [experts, out, in] weight per role.
 */
import type { HostTensor } from "./config.ts";
import { ModelLoadError } from "./config.ts";
import type { TensorSource } from "./weights.ts";

/** Stands for the expert's index in a per-expert tensor name (`…experts.{expert}.gate_proj.weight`). */
export const EXPERT = "{expert}";

/**
 * Wraps a tensor source so that a name holding {@link EXPERT} reads the tensors of experts
 * 0..experts-1 and stacks them into [experts, ...shape]; other names pass through. The experts must
 * agree on dtype and shape.
 */
export function stackingExperts(source: TensorSource, experts: number, sourcePath: string): TensorSource {
  const each = (name: string) => Array.from({ length: experts }, (_, e) => name.replace(EXPERT, String(e)));
  return {
    has: (name) => (name.includes(EXPERT) ? each(name).every((n) => source.has(n)) : source.has(name)),
    byteLength: (name) => (name.includes(EXPERT) ? each(name).reduce((a, n) => a + source.byteLength(n), 0) : source.byteLength(name)),
    async read(name): Promise<HostTensor> {
      if (!name.includes(EXPERT)) return source.read(name);
      const parts: HostTensor[] = [];
      for (const n of each(name)) parts.push(await source.read(n));
      const first = parts[0];
      for (const p of parts) {
        if (p.dtype !== first.dtype || p.shape.join() !== first.shape.join()) {
          throw new ModelLoadError(
            `Expert tensor "${p.name}" in "${sourcePath}" is ${p.dtype} [${p.shape}] but "${first.name}" is ${first.dtype} [${first.shape}]`,
          );
        }
      }
      const data = new Uint8Array(parts.reduce((a, p) => a + p.data.byteLength, 0));
      let offset = 0;
      for (const p of parts) {
        data.set(p.data, offset);
        offset += p.data.byteLength;
      }
      return { name, shape: [experts, ...first.shape], dtype: first.dtype, data };
    },
  };
}
