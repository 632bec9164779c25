/**
 * A Gemma 4 GGUF's expert tensors as the forward takes them (forward-gemma4.ts): the router's scale
 * (`ffn_gate_inp.scale`) over √hidden, the weight of the router's own RMS norm of the residual (llama.cpp
 * norms, divides by √hidden and multiplies by the scale); fused `ffn_gate_up_exps` [E, 2·ff, hidden]
 * (gate rows first) read as `ffn_gate_exps` and `ffn_up_exps` where the file has no such tensors.
 */
import { byteSize, decodeToF32 } from "../backend/dtype-codec.ts";
import { numel } from "../backend/types.ts";
import { ModelLoadError } from "./config.ts";
import type { TensorSource } from "./weights.ts";

const FUSED = /^(blk\.\d+\.)ffn_(gate|up)_exps\.weight$/;

/** `source` with Gemma 4's router scale and fused experts read as the forward takes them. */
export function gemma4ExpertTensors(source: TensorSource, hiddenSize: number): TensorSource {
  const fused = (name: string) => {
    const m = FUSED.exec(name);
    return m && !source.has(name) && source.has(`${m[1]}ffn_gate_up_exps.weight`) ? { whole: `${m[1]}ffn_gate_up_exps.weight`, up: m[2] === "up" } : undefined;
  };
  return {
    has: (name) => source.has(name) || fused(name) !== undefined,
    byteLength: (name) => {
      const f = fused(name);
      return f ? source.byteLength(f.whole) / 2 : source.byteLength(name);
    },
    async read(name) {
      const f = fused(name);
      if (f) {
        const t = await source.read(f.whole);
        if (t.shape.length !== 3 || t.shape[1] % 2 !== 0) throw new ModelLoadError(`Fused experts "${f.whole}" have shape [${t.shape}]; expected [experts, 2·ff, hidden]`);
        const [experts, rows, cols] = t.shape;
        const half = byteSize(t.dtype, (rows / 2) * cols);
        const data = new Uint8Array(experts * half);
        for (let e = 0; e < experts; e++) data.set(t.data.subarray((2 * e + (f.up ? 1 : 0)) * half, (2 * e + (f.up ? 1 : 0) + 1) * half), e * half);
        return { name, shape: [experts, rows / 2, cols], dtype: t.dtype, data };
      }
      const t = await source.read(name);
      if (!name.endsWith(".ffn_gate_inp.scale")) return t;
      const v = decodeToF32(t.data, t.dtype, numel(t.shape)).map((x) => x / Math.sqrt(hiddenSize));
      return { ...t, dtype: "f32", data: new Uint8Array(v.buffer) };
    },
  };
}
