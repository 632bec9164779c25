/**
 * A tiny but real GGUF model whose greedy output is scripted, for end-to-end server tests (tool
 * calls, sessions). It is a one-hot bigram model, exact by construction:
 *
 * - Qwen2, one layer, byte-level BPE vocab (`bpeVocab`, pre "qwen2") plus extra *pieces* (any
 *   text, stored in GPT-2's byte-to-unicode form as normal tokens so the decoder returns the raw
 *   text; encoding never produces them, as no merge builds them), padded with unused tokens so the
 *   vocab size V is a multiple of 64. hidden = V, heads = V / 64, head dim 64, one KV head.
 * - The token embedding is the identity (row i = e_i); every attention and MLP projection and bias
 *   is zero, so the residual stream stays e_i; norms are 1; the untied lm_head has
 *   lm_head[j][i] = LOGIT_WEIGHT iff next(i) = j. The logits thus depend only on the last token,
 *   and greedy (and, in practice, any-temperature) decoding follows the `next` map. A token without
 *   an explicit successor goes to EOS (`<|endoftext|>`).
 */
import type { GgufEntry } from "../../src/model/gguf-types.ts";
import { encodeGguf, gguf, hostTensorFromF32 } from "../../src/model/gguf-writer.ts";
import type { HostTensor } from "../../src/model/config.ts";
import { bytesToUnicode } from "../../src/model/tokenizer-bpe.ts";
import { writeFile } from "../../src/runtime/fs.ts";
import { ggufMetadata, type ModelFileSpec } from "./model-files.ts";
import { bpeVocab, type TestVocab } from "./test-vocab.ts";

/** What the scripted model says. */
export interface ScriptedModelSpec {
  /** Extra tokens (raw text), appended to the byte-level vocab (one already in it is reused). */
  pieces: string[];
  /**
   * Make the pieces user-defined tokens, as Qwen's `<tool_call>` is: the tokenizer then turns their
   * text inside a prompt into their ids, so a conversation sent back token for token holds the
   * model's own output tokens. Default false: encoding never produces a piece.
   */
  literalPieces?: boolean;
  /**
   * Pieces to make control tokens instead, as Mistral's `[TOOL_CALLS]` and Kimi K2's section tags are
   * in their checkpoints: their text in a prompt turns into their ids, and they stream as nothing
   * unless the request keeps special tokens (skip_special_tokens false).
   */
  controlPieces?: string[];
  /**
   * Greedy successor map: after the token whose text is `from` comes the token `to` ("<eos>" =
   * end of generation). `from`/`to` may be any single token of the vocab: a piece, a byte
   * character like "!" or "\n" (its byte token), a lone byte token written "<0xC3>", or a merged
   * word of `bpeVocab` like " the".
   */
  next: [from: string, to: string][];
  /** Jinja chat template stored as tokenizer.chat_template (optional). */
  chatTemplate?: string;
  /** {arch}.context_length; default 512. */
  contextLength?: number;
}

/** The scripted model's vocab and its id lookup. */
export interface ScriptedVocab extends TestVocab {
  /** Id of the single token whose decoded text is `text` ("<eos>" = the EOS id); throws otherwise. */
  idOf(text: string): number;
}

/** Size of the byte-level base vocab (256 bytes, some merges, <|endoftext|> last). */
const BASE_VOCAB = 300;
const HEAD_DIM = 64;
/** lm_head entry of a scripted successor: its logit is LOGIT_WEIGHT · sqrt(V) (≈ 70 for V = 320). */
const LOGIT_WEIGHT = 4;

/** The vocab of `spec`: bpeVocab(300), the pieces, then unused fillers up to a multiple of 64. */
export function scriptedVocab(spec: Pick<ScriptedModelSpec, "pieces" | "literalPieces" | "controlPieces">): ScriptedVocab {
  const base = bpeVocab(BASE_VOCAB);
  const tokens = base.tokens.slice();
  const types = base.types.slice();
  const byteChar = bytesToUnicode();
  const mapped = (s: string) => Array.from(new TextEncoder().encode(s), (b) => byteChar[b]).join("");
  const ids = new Map<string, number>();
  tokens.forEach((t, i) => {
    // Only tokens the decoder renders as their (byte-mapped) text: not <|endoftext|> or pads.
    if (types[i] === 1 && !ids.has(t)) ids.set(t, i);
  });
  for (const p of spec.pieces) {
    if (p.length === 0) throw new RangeError("A scripted piece must not be empty");
    const m = mapped(p);
    if (ids.has(m)) continue;
    ids.set(m, tokens.length);
    // A user-defined or control token is stored and decoded as raw text (tokenizer-special.ts).
    const control = spec.controlPieces?.includes(p) === true;
    tokens.push(spec.literalPieces || control ? p : m);
    types.push(control ? 3 : spec.literalPieces ? 4 : 1);
  }
  for (let k = 0; tokens.length % HEAD_DIM !== 0; k++) {
    tokens.push(`<|scripted_unused_${k}|>`);
    types.push(5);
  }
  const idOf = (text: string): number => {
    if (text === "<eos>") return base.eosId;
    // "<0xHH>": the byte token HH alone (a piece of a multi-byte character split across tokens).
    const byte = /^<0x([0-9A-F]{2})>$/.exec(text);
    if (byte) return ids.get(byteChar[parseInt(byte[1], 16)])!;
    const id = ids.get(mapped(text));
    if (id === undefined) throw new RangeError(`${JSON.stringify(text)} is neither a piece nor one token of the scripted vocab`);
    return id;
  };
  return { ...base, tokens, types, idOf };
}

/** Successor id of every token id: the `next` map, EOS elsewhere. */
function successors(vocab: ScriptedVocab, next: ScriptedModelSpec["next"]): Int32Array {
  const succ = new Int32Array(vocab.tokens.length).fill(vocab.eosId);
  const seen = new Set<number>();
  for (const [from, to] of next) {
    const f = vocab.idOf(from);
    if (seen.has(f)) throw new RangeError(`The scripted next map names ${JSON.stringify(from)} twice`);
    seen.add(f);
    succ[f] = vocab.idOf(to);
  }
  return succ;
}

/** The scripted model as GGUF file bytes (all tensors f32). */
export function scriptedModelBytes(spec: ScriptedModelSpec): Uint8Array {
  const vocab = scriptedVocab(spec);
  const succ = successors(vocab, spec.next);
  const v = vocab.tokens.length;
  const shape: ModelFileSpec = {
    architecture: "qwen2", hidden: v, layers: 1, heads: v / HEAD_DIM, kvHeads: 1, headDim: HEAD_DIM, ffn: HEAD_DIM,
    vocab: v, tied: false, dtype: "f32", seed: 0,
  };
  const embedding = new Float32Array(v * v);
  const head = new Float32Array(v * v);
  for (let i = 0; i < v; i++) {
    embedding[i * v + i] = 1;
    head[succ[i] * v + i] = LOGIT_WEIGHT;
  }
  const t = (name: string, dims: number[], values?: Float32Array): HostTensor =>
    hostTensorFromF32(name, dims, values ?? new Float32Array(dims.reduce((a, b) => a * b, 1)), "f32");
  const ones = (n: number) => new Float32Array(n).fill(1);
  const kv = shape.kvHeads * HEAD_DIM;
  const tensors: HostTensor[] = [
    t("token_embd.weight", [v, v], embedding),
    t("blk.0.attn_norm.weight", [v], ones(v)),
    t("blk.0.attn_q.weight", [v, v]),
    t("blk.0.attn_q.bias", [v]),
    t("blk.0.attn_k.weight", [kv, v]),
    t("blk.0.attn_k.bias", [kv]),
    t("blk.0.attn_v.weight", [kv, v]),
    t("blk.0.attn_v.bias", [kv]),
    t("blk.0.attn_output.weight", [v, v]),
    t("blk.0.ffn_norm.weight", [v], ones(v)),
    t("blk.0.ffn_gate.weight", [shape.ffn, v]),
    t("blk.0.ffn_up.weight", [shape.ffn, v]),
    t("blk.0.ffn_down.weight", [v, shape.ffn]),
    t("output_norm.weight", [v], ones(v)),
    t("output.weight", [v, v], head),
  ];
  const overrides = new Map<string, GgufEntry>([
    ["general.name", gguf.str("scripted")],
    ["qwen2.context_length", gguf.u32(spec.contextLength ?? 512)],
  ]);
  const metadata = ggufMetadata(shape, vocab).map(([k, e]): [string, GgufEntry] => [k, overrides.get(k) ?? e]);
  if (spec.chatTemplate !== undefined) metadata.push(["tokenizer.chat_template", gguf.str(spec.chatTemplate)]);
  return encodeGguf({ metadata, tensors });
}

/** Writes the scripted model's GGUF to `path`. */
export async function writeScriptedModel(path: string, spec: ScriptedModelSpec): Promise<void> {
  await writeFile(path, scriptedModelBytes(spec));
}
