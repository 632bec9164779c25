/**
 * Paged KV write and paged causal attention (GQA, block tables, online softmax), over f32, f16 or
 * f8_e4m3 caches (f16: two halves per u32 word, packed and unpacked with WGSL's pack2x16float, so it
 * needs no shader-f16; f8_e4m3: 9-word blocks of 32 values, encoded by kv_write as the reference does). Indices uploaded from the host (slots, the attention batch) are checked there
 * first, with the reference's errors; the kernels skip what is out of range in op results.
 */
import type { PooledBuffer } from "./buffer-pool.ts";
import { type GpuContext } from "./context.ts";
import { F32 } from "./recorder.ts";
import { asGpu, expectRank, fmt, type GpuTensor } from "./tensor.ts";
import { type AttentionBatch, type AttentionOptions, BackendShapeError, type RopeSpec, type Tensor } from "../types.ts";
import { attentionSoftcap, checkIndexRange, expectAttentionOptions, expectRopeArgs } from "../shape-checks.ts";
import { fp8KvFits } from "../quant-blocks-fp8.ts";

/**
 * Largest head dimension the attention kernel supports (9 dims per thread × 64 threads): multi-head
 * latent attention's 512-wide latent plus its 64 RoPE dims (DeepSeek V3, Kimi K2).
 */
export const MAX_HEAD_DIM = 576;

/** Most query floats one attention workgroup holds (kernels-wgsl/paged_attention.wgsl `qs`): 8 KiB. */
const MAX_GROUP_QUERY = 2048;
/** Most query heads one attention workgroup serves (registers: their sums and accumulators). */
const MAX_GROUP_HEADS = 8;

/**
 * Split-KV (flash-decoding): below this many attention workgroups a dispatch leaves most of a GPU
 * idle (a batch-1 decode of Llama 3's 32/8 heads is 8 workgroups, each scanning the whole context),
 * so each row's keys are cut into spans with a workgroup each, up to about this many in all. The
 * default on hardware GPUs (WebGpuOptions.attentionSplitGroups).
 */
export const SPLIT_TARGET_GROUPS = 128;
/** Fewest keys a span takes (a few 64-key tiles, so a span's fixed costs stay small beside its reads). */
const SPLIT_MIN_KEYS = 256;
/** Most spans per row (the merge reads each span's partial sums once per output dim). */
const MAX_SPLITS = 32;

/**
 * How many spans each row's keys are cut into (1: one workgroup scans them all) and how many keys a
 * span takes (a multiple of the 64-key tile), for `groups` workgroups over rows that see at most
 * `reach` keys: enough spans to give about `target` workgroups, none shorter than
 * {@link SPLIT_MIN_KEYS}.
 */
export function attentionSplits(groups: number, reach: number, target = SPLIT_TARGET_GROUPS): { splits: number; span: number } {
  if (groups >= target) return { splits: 1, span: reach };
  const splits = Math.max(1, Math.min(MAX_SPLITS, Math.ceil(target / groups), Math.floor(reach / SPLIT_MIN_KEYS)));
  if (splits === 1) return { splits: 1, span: reach };
  // Spans of whole tiles; rounding them up may leave the last one empty, so count them again.
  const span = Math.ceil(reach / splits / 64) * 64;
  return { splits: Math.ceil(reach / span), span };
}

/**
 * Query heads per attention workgroup: the most heads of one KV group (a divisor of the group, so
 * no workgroup straddles two) that fit its query buffer and registers. Each key and value row is
 * then read once for all of them instead of once per head.
 */
export function attentionHeadsPerGroup(heads: number, kvHeads: number, headDim: number): number {
  const group = heads / kvHeads;
  for (let h = Math.min(group, MAX_GROUP_HEADS); h > 1; h--) {
    if (group % h === 0 && h * headDim <= MAX_GROUP_QUERY) return h;
  }
  return 1;
}

function caches(ctx: GpuContext, kT: Tensor, vT: Tensor): [GpuTensor, GpuTensor] {
  const k = asGpu(kT, "key cache", ctx);
  const v = asGpu(vT, "value cache", ctx);
  expectRank(k, 4, "key cache", ["f32", "f16", "f8_e4m3"]);
  expectRank(v, 4, "value cache", ["f32", "f16", "f8_e4m3"]);
  if (k.shape.some((d, i) => d !== v.shape[i]) || k.dtype !== v.dtype) {
    throw new BackendShapeError(`Key cache ${fmt(k.shape)} ${k.dtype} and value cache ${fmt(v.shape)} ${v.dtype} differ`);
  }
  if (k.dtype === "f16" && k.shape[3] % 2 !== 0) {
    throw new BackendShapeError(`An f16 KV cache needs an even head dimension, got cache ${fmt(k.shape)}`);
  }
  if (k.dtype === "f8_e4m3" && !fp8KvFits(k.shape[2], k.shape[3])) {
    throw new BackendShapeError(`An f8_e4m3 KV cache needs rows of whole 32-value blocks and heads of a multiple of 4 dims, got cache ${fmt(k.shape)}`);
  }
  return [k, v];
}

/**
 * Writes k, v [n, kvHeads, headDim] into the caches at flat slots [n] (f16 caches round to nearest).
 * When both caches are one buffer (MLA) the values must be the keys, and they are written once:
 * WebGPU refuses a buffer bound writable twice in one dispatch.
 */
export function kvWrite(ctx: GpuContext, kT: Tensor, vT: Tensor, kcT: Tensor, vcT: Tensor, slotsT: Tensor, rope?: QueryRope): void {
  const [kc, vc] = caches(ctx, kcT, vcT);
  const [numBlocks, blockSize, kvHeads, headDim] = kc.shape;
  const k = asGpu(kT, "kvWrite keys", ctx);
  const v = asGpu(vT, "kvWrite values", ctx);
  const slots = asGpu(slotsT, "kvWrite slots", ctx);
  expectRank(k, 3, "kvWrite keys", ["f32"]);
  expectRank(v, 3, "kvWrite values", ["f32"]);
  expectRank(slots, 1, "kvWrite slots", ["i32"]);
  const shared = kc.buffer === vc.buffer;
  if (rope && shared) throw new BackendShapeError("rotateAndWriteKv needs separate key and value caches");
  if (shared && k.buffer !== v.buffer) {
    throw new BackendShapeError("kvWrite into one cache shared by keys and values needs the values to be the keys");
  }
  const n = slots.shape[0];
  for (const [t, what] of [[k, "keys"], [v, "values"]] as const) {
    if (t.shape[0] !== n || t.shape[1] !== kvHeads || t.shape[2] !== headDim) {
      throw new BackendShapeError(`kvWrite ${what} ${fmt(t.shape)} do not fit slots ${fmt(slots.shape)} and cache ${fmt(kc.shape)}`);
    }
  }
  if (slots.host) checkIndexRange(slots.host, numBlocks * blockSize, "KV slot");
  const row = kvHeads * headDim;
  const f16 = kc.dtype === "f16";
  const f8 = kc.dtype === "f8_e4m3";
  // Values per invocation: one, a word of two halves, or a 32-value f8_e4m3 block.
  const per = f16 ? 2 : f8 ? 32 : 1;
  const bindings: [number, PooledBuffer][] = [[1, k.buffer], [3, slots.buffer], [4, kc.buffer], ...(shared ? [] : [[2, v.buffer], [5, vc.buffer]] as [number, PooledBuffer][])];
  if (!rope) {
    ctx.recorder.dispatch("kv_write", { F16: f16, F8: f8, WORDS: f16 || f8, V_CACHE: !shared, ROPE: false, NEOX: false, FREQ_FACTORS: false }, [n, row, numBlocks * blockSize, 0], bindings, Math.ceil((n * row) / (256 * per)));
    return;
  }
  const { spec } = rope;
  const q = asGpu(rope.q, "rotateAndWriteKv queries", ctx);
  const pos = asGpu(rope.positions, "rope positions", ctx);
  const factors = spec.freqFactors && asGpu(spec.freqFactors, "rope freqFactors", ctx);
  const qa = expectRopeArgs(q, pos, spec.theta, spec.layout, spec.rotaryDim, factors);
  expectRopeArgs(k, pos, spec.theta, spec.layout, spec.rotaryDim, factors);
  if (qa.n !== n || qa.headDim !== headDim) {
    throw new BackendShapeError(`rotateAndWriteKv queries ${fmt(q.shape)} do not fit keys ${fmt(k.shape)}`);
  }
  // The cache writes' invocations first, then one per rotated pair of q.
  const kvWork = (n * row) / per;
  const qWork = n * qa.heads * (qa.rotaryDim / 2);
  bindings.push([6, pos.buffer], [7, q.buffer]);
  if (factors) bindings.push([8, factors.buffer]);
  ctx.recorder.dispatch(
    "kv_write",
    { F16: f16, F8: f8, WORDS: f16 || f8, V_CACHE: true, ROPE: true, NEOX: spec.layout === "neox", FREQ_FACTORS: factors !== undefined },
    [n, row, numBlocks * blockSize, headDim, qa.rotaryDim, qa.heads, new F32(Math.log2(spec.theta)), kvWork],
    bindings,
    Math.ceil((kvWork + qWork) / 256),
  );
}

/** The queries and rotation of a fused rope and KV write (Backend.rotateAndWriteKv). */
export interface QueryRope {
  q: Tensor;
  positions: Tensor;
  spec: RopeSpec;
}

/** Paged causal attention (optionally windowed, with sinks); q [n, heads, headDim] → [n, heads, headDim]. */
export function pagedAttention(
  ctx: GpuContext,
  qT: Tensor,
  kcT: Tensor,
  vcT: Tensor,
  batch: AttentionBatch,
  scale: number,
  options?: AttentionOptions,
): Tensor {
  const [kc, vc] = caches(ctx, kcT, vcT);
  const [numBlocks, blockSize, kvHeads, headDim] = kc.shape;
  const q = asGpu(qT, "attention queries", ctx);
  expectRank(q, 3, "attention queries", ["f32"]);
  const [n, heads, qDim] = q.shape;
  if (qDim !== headDim || kvHeads === 0 || heads % kvHeads !== 0) {
    throw new BackendShapeError(`Attention queries ${fmt(q.shape)} do not fit cache ${fmt(kc.shape)}`);
  }
  if (headDim > MAX_HEAD_DIM) throw new BackendShapeError(`Attention head dimension ${headDim} exceeds ${MAX_HEAD_DIM}`);
  const window = expectAttentionOptions(options, heads);
  const sinks = options?.sinks ? asGpu(options.sinks, "attention sinks", ctx) : undefined;
  const seq = asGpu(batch.tokenSeq, "tokenSeq", ctx);
  const pos = asGpu(batch.tokenPos, "tokenPos", ctx);
  const tables = asGpu(batch.blockTables, "blockTables", ctx);
  expectRank(seq, 1, "tokenSeq", ["i32"]);
  expectRank(pos, 1, "tokenPos", ["i32"]);
  expectRank(tables, 2, "blockTables", ["i32"]);
  if (seq.shape[0] !== n || pos.shape[0] !== n) {
    throw new BackendShapeError(`tokenSeq ${fmt(seq.shape)} and tokenPos ${fmt(pos.shape)} must have ${n} rows`);
  }
  if (seq.host && pos.host && tables.host) {
    const [numSeqs, maxBlocks] = tables.shape;
    ctx.indexChecks.check(seq.host, pos.host, tables.host, { numSeqs, maxBlocks, blockSize, numBlocks, maxContext: batch.maxContext, window });
  }
  const out = ctx.output(q.shape);
  const dpt = headDim <= 64 ? 1 : headDim <= 128 ? 2 : headDim <= 256 ? 4 : 9;
  const hpg = attentionHeadsPerGroup(heads, kvHeads, headDim);
  // Head dims 8 … 256 in powers of two take the vector value sums: 256 / headDim key groups of headDim / 4 lanes.
  const keyGroups = [8, 16, 32, 64, 128, 256].includes(headDim) ? 256 / headDim : 0;
  const groups = (n * heads) / hpg;
  // A row sees at most maxContext keys, and at most the window's. (The last span takes whatever is
  // past the others, so a maxContext too small costs balance, not keys.)
  const { splits, span } = attentionSplits(groups, window > 0 ? Math.min(window, batch.maxContext) : batch.maxContext, ctx.attentionSplitGroups);
  const split = splits > 1;
  // Split, the spans' partials (sums, then max and weight sum per row, head and span) go to scratch and the sinks to the merge.
  const partials = split ? ctx.scratch(n * heads * splits * (headDim + 2) * 4) : out.buffer;
  ctx.recorder.dispatch(
    "paged_attention",
    {
      DPT: dpt, HPG: hpg, VEC: keyGroups > 0, KG: keyGroups, SINKS: sinks !== undefined && !split, SPLIT: split,
      F16: kc.dtype === "f16", F8: kc.dtype === "f8_e4m3", WORDS: kc.dtype !== "f32",
    },
    [n, heads, kvHeads, headDim, blockSize, tables.shape[1], numBlocks, new F32(scale), window, splits, span, new F32(attentionSoftcap(options))],
    [
      [1, q.buffer], [2, kc.buffer], [3, vc.buffer], [4, seq.buffer], [5, pos.buffer], [6, tables.buffer], [7, partials],
      ...(sinks && !split ? [[8, sinks.buffer] as [number, PooledBuffer]] : []),
    ],
    groups * splits,
  );
  if (split) {
    ctx.recorder.dispatch(
      "attention_combine",
      { SINKS: sinks !== undefined },
      [n, heads, headDim, splits],
      [[1, partials], [2, out.buffer], ...(sinks ? [[3, sinks.buffer] as [number, PooledBuffer]] : [])],
      n * heads,
    );
    ctx.pool.release(partials);
  }
  return out;
}
