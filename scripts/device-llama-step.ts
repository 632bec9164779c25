/**
 * One batch-1 decode step of a random-weight Llama-shaped bf16 model on the CUDA backend, for
 * scripts/device-bench-cuda.ts. Weights are filled on the device (no host copy of 16 GB). The
 * step uses the fused ops a CUDA forward would: one QKV matmul + ropeKvWrite, addRmsnorm.
 */
import type { CudaBackend } from "../src/backend/cuda/index.ts";
import type { Tensor } from "../src/backend/types.ts";

/** Model shape. */
export interface LlamaShape {
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  vocab: number;
}

/** Llama-3.1-8B (untied embeddings). */
export const LLAMA_8B: LlamaShape = { layers: 32, hidden: 4096, heads: 32, kvHeads: 8, headDim: 128, ffn: 14336, vocab: 128256 };

/** Bytes one decode step must read: every weight except the embedding table (one row is
 * gathered), the norms, and the f32 KV of `context` positions. */
export function stepBytes(m: LlamaShape, context: number): number {
  const qkv = (m.heads + 2 * m.kvHeads) * m.headDim * m.hidden;
  const perLayer = (qkv + m.heads * m.headDim * m.hidden + 3 * m.ffn * m.hidden) * 2 + 2 * m.hidden * 4;
  const kv = 2 * context * m.kvHeads * m.headDim * 4;
  return m.layers * (perLayer + kv) + m.vocab * m.hidden * 2 + m.hidden * 4;
}

interface Layer { attnNorm: Tensor; wqkv: Tensor; wo: Tensor; ffnNorm: Tensor; wGate: Tensor; wUp: Tensor; wDown: Tensor; kc: Tensor; vc: Tensor }

/** Mean device and wall time of a step, and one step's device time per op kind, each op timed
 * alone (synchronised before and after, so each includes one launch latency). */
export interface StepTiming { deviceMs: number; wallMs: number; perOpMs: Record<string, number> }

/** Builds the model, runs warm-up steps, and returns the mean device and wall time of a step. */
export function decodeStepMs(be: CudaBackend, m: LlamaShape, context: number): StepTiming {
  const blockSize = 16;
  const blocks = Math.ceil((context + 64) / blockSize);
  const s = 0.02;
  let seed = 100;
  const ones = be.upload(new Float32Array(m.hidden).fill(1), [m.hidden]);
  const layers: Layer[] = Array.from({ length: m.layers }, () => ({
    attnNorm: ones,
    wqkv: be.randomWeight([(m.heads + 2 * m.kvHeads) * m.headDim, m.hidden], "bf16", seed++, s),
    wo: be.randomWeight([m.hidden, m.heads * m.headDim], "bf16", seed++, s),
    ffnNorm: ones,
    wGate: be.randomWeight([m.ffn, m.hidden], "bf16", seed++, s),
    wUp: be.randomWeight([m.ffn, m.hidden], "bf16", seed++, s),
    wDown: be.randomWeight([m.hidden, m.ffn], "bf16", seed++, s),
    kc: be.randomWeight([blocks, blockSize, m.kvHeads, m.headDim], "f32", seed++, 1),
    vc: be.randomWeight([blocks, blockSize, m.kvHeads, m.headDim], "f32", seed++, 1),
  }));
  const embed = be.randomWeight([m.vocab, m.hidden], "bf16", seed++, s);
  const lmHead = be.randomWeight([m.vocab, m.hidden], "bf16", seed++, s);
  const table = be.upload(Int32Array.from({ length: blocks }, (_, i) => i), [1, blocks]);
  const ids = be.upload(Int32Array.from([1234]), [1]);
  const pos = be.upload(Int32Array.from([context - 1]), [1]);
  const slots = be.upload(Int32Array.from([context - 1]), [1]);
  const batch = { tokenSeq: be.upload(Int32Array.from([0]), [1]), tokenPos: pos, blockTables: table, maxContext: context };
  const scale = 1 / Math.sqrt(m.headDim);

  let perOp: Record<string, number> | undefined;
  const op = <T>(name: string, f: () => T): T => {
    if (!perOp) return f();
    let r: T | undefined;
    perOp[name] = (perOp[name] ?? 0) + be.timeMs(() => { r = f(); });
    return r as T;
  };
  const step = (): void => {
    let residual = op("embedding", () => be.embedding(embed, ids));
    let normed = op("rmsnorm", () => be.rmsnorm(residual, layers[0].attnNorm, 1e-5));
    for (let i = 0; i < m.layers; i++) {
      const L = layers[i];
      const qkv = op("matmul qkv", () => be.matmul(normed, L.wqkv));
      be.free(normed);
      const q = op("ropeKvWrite", () => be.ropeKvWrite(qkv, pos, slots, m.heads, 500000, "neox", L.kc, L.vc));
      be.free(qkv);
      const attn = op("pagedAttention", () => be.pagedAttention(q, L.kc, L.vc, batch, scale));
      be.free(q);
      const o = op("matmul o", () => be.matmul(be.reshape(attn, [1, m.heads * m.headDim]), L.wo));
      be.free(attn);
      const r1 = op("addRmsnorm", () => be.addRmsnorm(o, residual, L.ffnNorm, 1e-5));
      be.free(o); be.free(residual);
      const gate = op("matmul gate", () => be.matmul(r1.normed, L.wGate));
      const up = op("matmul up", () => be.matmul(r1.normed, L.wUp));
      be.free(r1.normed);
      const act = op("siluMul", () => be.siluMul(gate, up));
      be.free(gate); be.free(up);
      const down = op("matmul down", () => be.matmul(act, L.wDown));
      be.free(act);
      const next = i + 1 < m.layers ? layers[i + 1].attnNorm : ones;
      const r2 = op("addRmsnorm", () => be.addRmsnorm(down, r1.sum, next, 1e-5));
      be.free(down); be.free(r1.sum);
      residual = r2.sum;
      normed = r2.normed;
    }
    const logits = op("matmul lm head", () => be.matmul(normed, lmHead));
    const token = op("argmax", () => be.argmax(logits));
    be.free(normed); be.free(residual); be.free(logits); be.free(token);
  };

  step();
  step();
  const iters = 10;
  const deviceMs = be.timeMs(() => { for (let i = 0; i < iters; i++) step(); }) / iters;
  be.timeMs(() => {});
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) step();
  be.timeMs(() => {}); // waits for the stream
  const wallMs = (performance.now() - t0) / iters;
  perOp = {};
  step();
  const perOpMs = perOp;
  perOp = undefined;
  for (const L of layers) for (const t of [L.wqkv, L.wo, L.wGate, L.wUp, L.wDown, L.kc, L.vc]) be.free(t);
  for (const t of [ones, embed, lmHead, table, ids, pos, slots, batch.tokenSeq]) be.free(t);
  return { deviceMs, wallMs, perOpMs };
}
