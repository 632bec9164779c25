/**
 * Phi-3 test files as its converters and checkpoints have them: q, k and v fused into one matrix
 * (GGUF `attn_qkv`, HF `qkv_proj`), gate and up into one of 2·ffn rows, gate first (GGUF `ffn_up`, HF
 * `gate_up_proj`), and LongRoPE as convert_hf_to_gguf.py writes it (`rope_factors_long/short`,
 * `rope.scaling.attn_factor` √(1 + ln s / ln original), `rope.scaling.original_context_length`) or as
 * config.json states it (`rope_scaling` "longrope").
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { gguf } from "../../src/model/gguf-writer.ts";
import type { ModelFileSpec } from "./model-files.ts";
import type { TestVocab } from "./test-vocab.ts";

/** The context a test file declares where its spec names none (ModelFileSpec.contextLength). */
export const TEST_CONTEXT = 256;

/** A tensor on its way into a test GGUF. */
interface GgufPart {
  name: string;
  shape: number[];
  values: Float32Array;
  hf: string;
}

/** Rows of `parts` stacked, in order. */
function stackRows(parts: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** `parts` with each layer's q, k, v fused into `attn_qkv` and its gate and up into one `ffn_up`, as llama.cpp's phi3 files hold them. */
export function fusePhi3Gguf(parts: readonly GgufPart[]): GgufPart[] {
  const byName = new Map(parts.map((p) => [p.name, p]));
  const out: GgufPart[] = [];
  for (const p of parts) {
    const m = /^blk\.(\d+)\.(attn_[qkv]|ffn_gate|ffn_up)\.weight$/.exec(p.name);
    if (!m) {
      out.push(p);
      continue;
    }
    const at = (role: string) => byName.get(`blk.${m[1]}.${role}.weight`)!;
    if (m[2] === "attn_q") {
      const [q, k, v] = ["attn_q", "attn_k", "attn_v"].map(at);
      out.push({ name: `blk.${m[1]}.attn_qkv.weight`, shape: [q.shape[0] + k.shape[0] + v.shape[0], q.shape[1]], values: stackRows([q.values, k.values, v.values]), hf: p.hf });
    } else if (m[2] === "ffn_gate") {
      const [gate, up] = ["ffn_gate", "ffn_up"].map(at);
      out.push({ name: `blk.${m[1]}.ffn_up.weight`, shape: [2 * gate.shape[0], gate.shape[1]], values: stackRows([gate.values, up.values]), hf: p.hf });
    }
  }
  return out;
}

/** convert_hf_to_gguf.py's magnitude factor for LongRoPE. */
export function longRopeAttnFactor(context: number, original: number): number {
  const scale = context / original;
  return scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(original)) : 1;
}

/** The LongRoPE metadata of a phi3 GGUF (none without `spec.longRope`). */
export function phi3GgufMetadata(spec: ModelFileSpec): [string, GgufEntry][] {
  const r = spec.longRope;
  if (!r) return [];
  return [
    ["phi3.rope.scaling.original_context_length", gguf.u32(r.originalContext)],
    ["phi3.rope.scaling.attn_factor", gguf.f32(longRopeAttnFactor(spec.contextLength ?? TEST_CONTEXT, r.originalContext))],
    // As the converter writes every phi3 file (0 for Phi-4); llama.cpp does not apply it.
    ["phi3.attention.sliding_window", gguf.u32(2047)],
  ];
}

/** The HF tensors of a Phi-3 checkpoint: each layer's q/k/v as `qkv_proj`, gate/up as `gate_up_proj`. */
export function fusePhi3Hf(weights: ReadonlyMap<string, { shape: number[]; values: Float32Array }>): Map<string, { shape: number[]; values: Float32Array }> {
  const out = new Map<string, { shape: number[]; values: Float32Array }>();
  for (const [name, w] of weights) {
    const m = /^(model\.layers\.\d+\.)(self_attn\.[qkv]_proj|mlp\.gate_proj|mlp\.up_proj)\.weight$/.exec(name);
    if (!m) {
      out.set(name, w);
      continue;
    }
    const at = (role: string) => weights.get(`${m[1]}${role}.weight`)!;
    if (m[2] === "self_attn.q_proj") {
      const [q, k, v] = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"].map(at);
      out.set(`${m[1]}self_attn.qkv_proj.weight`, { shape: [q.shape[0] + k.shape[0] + v.shape[0], q.shape[1]], values: stackRows([q.values, k.values, v.values]) });
    } else if (m[2] === "mlp.gate_proj") {
      const [gate, up] = ["mlp.gate_proj", "mlp.up_proj"].map(at);
      out.set(`${m[1]}mlp.gate_up_proj.weight`, { shape: [2 * gate.shape[0], gate.shape[1]], values: stackRows([gate.values, up.values]) });
    }
  }
  return out;
}

/** Phi3Config's fields for `spec`: LongRoPE as Phi-3.5-mini's config.json states it. */
export function phi3HfConfig(spec: ModelFileSpec): Record<string, unknown> {
  const r = spec.longRope;
  return {
    sliding_window: 2047,
    original_max_position_embeddings: r?.originalContext ?? spec.contextLength ?? TEST_CONTEXT,
    rope_scaling: r ? { type: "longrope", long_factor: r.long, short_factor: r.short } : null,
  };
}

/**
 * `vocab` with Phi-3's control tokens `<|endoftext|>` and `<|end|>` as its last two (llama.cpp's phi3
 * vocabulary needs the first to load; the second ends chat turns).
 */
export function phi3Vocab(vocab: TestVocab): TestVocab {
  const tokens = [...vocab.tokens];
  const types = [...vocab.types];
  const n = tokens.length;
  const specials = ["<|endoftext|>", "<|end|>"];
  specials.forEach((t, i) => {
    const at = tokens.indexOf(t);
    if (at >= 0 && at !== n - 2 + i) tokens[at] = `<unused${at}>`;
    tokens[n - 2 + i] = t;
    types[n - 2 + i] = 3;
  });
  return { ...vocab, tokens, types };
}
