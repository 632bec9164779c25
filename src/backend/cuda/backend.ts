/**
 * The CUDA backend: the Backend interface over the addon's context. Ops validate shapes here,
 * then enqueue one kernel (or two) on the context's stream and wrap the returned pointer.
 */
import { byteSize, denseBlockQuantStorage } from "../dtype-codec.ts";
import { isBlockQuant } from "../quant-blocks.ts";
import {
  type AttentionBatch,
  type AttentionOptions,
  type Backend,
  type BackendInfo,
  BackendShapeError,
  numel,
  type RopeLayout,
  type SamplingRow,
  type Tensor,
  type WeightDType,
} from "../types.ts";
import { CudaRecurrent } from "./recurrent.ts";
import type { DevicePtr, NativeContext } from "./native-types.ts";
import { PlanCache } from "./plan-cache.ts";
import { packSamplingRows } from "./sampling-params.ts";
import { checkShape, CUDA_WEIGHT_DTYPES, CudaTensor, type CudaWeightDType, DTYPE_CODE, expect, fmt, rowsOf } from "./tensor.ts";
import {
  AttentionIndexChecks, attentionSoftcap, checkWeightShape, expectAttentionOptions, expectConcatColumnsShapes, expectMaskShapes, expectRepeatShapes, expectRopeArgs,
  expectRmsnormShapes, expectSampledPenaltyShapes, expectSliceColumnsShapes, expectSoftcap,
} from "../shape-checks.ts";

/**
 * Backend implementation on one CUDA device; the mixture-of-experts ops come from CudaExperts, the
 * recurrent-state ops from CudaRecurrent. Also offers fused ops and benchmark helpers.
 */
export class CudaBackend extends CudaRecurrent implements Backend {
  readonly info: BackendInfo;
  private readonly plans: PlanCache;
  private readonly exactMatmul: number;
  private readonly indexChecks = new AttentionIndexChecks();

  /** `matmulPrecision` "fast" rounds activations to the weight's 16-bit type on the tensor-core path
   * (like torch.matmul on bf16 tensors); "exact" (default) keeps them f32-accurate with two MMAs. */
  constructor(ctx: NativeContext, matmulPrecision: "exact" | "fast" = "exact") {
    super(ctx);
    this.exactMatmul = matmulPrecision === "exact" ? 1 : 0;
    this.plans = new PlanCache(ctx);
    const d = ctx.info();
    this.info = {
      name: "cuda",
      device: `${d.name} (sm_${d.ccMajor}${d.ccMinor}, ${d.smCount} SMs, ${(d.totalBytes / 2 ** 30).toFixed(0)} GiB)`,
      f16: true,
      denseBlockQuants: true,
      // attention.cu's decode kernels hold up to 8 dims per lane (256); MLA's 576 is not written yet.
      maxHeadDim: 256,
      // kv_write and attention.cu read and write f32 caches; their f16 variants are not written (no GPU to run them here).
      kvDtypes: ["f32"],
      // CUDA 12's default lazy module loading loads each kernel at its first launch.
      preparesKernelsLazily: true,
      peakGBps: d.peakGBps > 0 ? d.peakGBps : undefined,
    };
  }

  upload(data: Float32Array | Int32Array, shape: readonly number[]): Tensor {
    const count = checkShape(shape, "upload");
    if (data.length !== count) throw new BackendShapeError(`upload got ${data.length} values for shape ${fmt(shape)}`);
    const isF32 = data instanceof Float32Array;
    if (!isF32 && !(data instanceof Int32Array)) {
      throw new BackendShapeError("upload accepts only Float32Array or Int32Array data");
    }
    const p = this.ctx.alloc(count * 4);
    if (count > 0) this.ctx.upload(p, data);
    return new CudaTensor(p, [...shape], isF32 ? "f32" : "i32", isF32 ? undefined : new Int32Array(data));
  }

  // Any rank: matmul takes [out, in], matmulExperts a stack [experts, out, in] whose experts lie
  // back to back, so one allocation (one q8_0 scale array after all quants) serves every expert.
  uploadWeight(raw: Uint8Array, shape: readonly number[], dtype: WeightDType): Tensor {
    const count = checkWeightShape(shape, dtype, "uploadWeight");
    const need = byteSize(dtype, count);
    if (raw.byteLength < need) {
      throw new BackendShapeError(`uploadWeight needs ${need} bytes for ${dtype} ${fmt(shape)}, got ${raw.byteLength}`);
    }
    // The kernels read f32/f16/bf16/q8_0 only: GGUF's other block formats and f8_e4m3 are
    // dequantized on the host and kept as f16 (16 bits per weight instead of 2.6–9; a product of a
    // 2–6-bit code and an f16-range scale needs up to 17 significant bits, so f16 rounds it once more,
    // declared as info.denseBlockQuants); mxfp4 weights with scales past f16's range, and f8_e4m3
    // ones with a value past f16's largest, are kept as bf16.
    if (isBlockQuant(dtype)) {
      const dense = denseBlockQuantStorage(raw.subarray(0, need), dtype, count);
      return this.uploadWeight(dense.raw, shape, dense.dtype);
    }
    if (dtype === "q8_0") return new CudaTensor(this.ctx.uploadQ8(raw.subarray(0, need), count), [...shape], dtype);
    const p = this.ctx.alloc(need);
    if (need > 0) this.ctx.upload(p, raw.subarray(0, need));
    return new CudaTensor(p, [...shape], dtype);
  }

  zeros(shape: readonly number[], dtype: "f32" | "i32" | "f16"): Tensor {
    const count = checkShape(shape, "zeros");
    return new CudaTensor(this.ctx.zeros(count * (dtype === "f16" ? 2 : 4)), [...shape], dtype);
  }

  // async without an await: the copy is synchronous on the stream, and a bad tensor must reject, not throw.
  // deno-lint-ignore require-await
  async download(t: Tensor): Promise<Float32Array | Int32Array> {
    const c = expect(t, undefined, "download input", ["f32", "i32", ...CUDA_WEIGHT_DTYPES]);
    const count = checkShape(c.shape, "download");
    if (count === 0) return c.dtype === "i32" ? new Int32Array(0) : new Float32Array(0);
    if (c.dtype === "i32") return new Int32Array(this.ctx.download(c.ptr, count * 4));
    if (c.dtype === "f32") return new Float32Array(this.ctx.download(c.ptr, count * 4));
    const tmp = this.ctx.toF32(c.ptr, DTYPE_CODE[c.dtype as CudaWeightDType], count);
    try {
      return new Float32Array(this.ctx.download(tmp, count * 4));
    } finally {
      this.ctx.free(tmp);
    }
  }

  reshape(t: Tensor, shape: readonly number[]): Tensor {
    const c = expect(t, undefined, "reshape input", ["f32", "i32", ...CUDA_WEIGHT_DTYPES]);
    if (checkShape(shape, "reshape") !== checkShape(c.shape, "reshape")) {
      throw new BackendShapeError(`Cannot reshape ${fmt(c.shape)} to ${fmt(shape)}`);
    }
    return new CudaTensor(c.ptr, [...shape], c.dtype, c.host);
  }

  free(t: Tensor): void {
    this.ctx.free(expect(t, undefined, "free input", ["f32", "i32", ...CUDA_WEIGHT_DTYPES]).ptr);
  }

  flush(): Promise<void> {
    this.ctx.sync();
    return Promise.resolve();
  }

  destroy(): void {
    this.plans.clear();
    this.ctx.destroy();
  }

  embedding(table: Tensor, ids: Tensor): Tensor {
    const t = expect(table, 2, "embedding table", CUDA_WEIGHT_DTYPES);
    const i = expect(ids, 1, "embedding ids", ["i32"]);
    const [vocab, dim] = t.shape;
    if (i.host) this.checkIndices(i.host, vocab, "Token id");
    const n = i.shape[0];
    return this.f32(this.ctx.embedding(t.ptr, DTYPE_CODE[t.dtype as CudaWeightDType], i.ptr, n, dim, vocab), [n, dim]);
  }

  rmsnorm(x: Tensor, weight: Tensor, eps: number): Tensor {
    const xs = expect(x, undefined, "rmsnorm input", ["f32"]);
    const w = expect(weight, undefined, "rmsnorm weight", ["f32"]);
    const { rows, cols, groups } = expectRmsnormShapes(xs, w);
    return this.f32(this.ctx.rmsnorm(xs.ptr, w.ptr, rows, cols, eps, groups), xs.shape);
  }

  matmul(x: Tensor, w: Tensor, bias?: Tensor): Tensor {
    const xs = expect(x, 2, "matmul input", ["f32"]);
    const ws = expect(w, 2, "matmul weight", CUDA_WEIGHT_DTYPES);
    const [n, k] = xs.shape;
    const [out, kw] = ws.shape;
    if (k !== kw) throw new BackendShapeError(`matmul input ${fmt(xs.shape)} does not fit weight ${fmt(ws.shape)}`);
    let b: DevicePtr = 0n;
    if (bias) {
      const bs = expect(bias, 1, "matmul bias", ["f32"]);
      if (bs.shape[0] !== out) throw new BackendShapeError(`matmul bias ${fmt(bs.shape)} does not fit weight ${fmt(ws.shape)}`);
      b = bs.ptr;
    }
    const code = DTYPE_CODE[ws.dtype as CudaWeightDType];
    return this.f32(this.ctx.matmul(xs.ptr, ws.ptr, code, b, n, k, out, this.exactMatmul), [n, out]);
  }

  rope(x: Tensor, positions: Tensor, theta: number, layout: RopeLayout, rotaryDim?: number, freqFactors?: Tensor, magnitude = 1): Tensor {
    expectRopeArgs(x, positions, theta, layout, rotaryDim, freqFactors, magnitude);
    const xs = expect(x, 3, "rope input", ["f32"]);
    const p = expect(positions, 1, "rope positions", ["i32"]);
    const [n, heads, headDim] = xs.shape;
    if (p.shape[0] !== n) throw new BackendShapeError(`rope positions ${fmt(p.shape)} do not match input ${fmt(xs.shape)}`);
    const rd = this.rotaryDim(rotaryDim, headDim, layout);
    const f = this.freqFactors(freqFactors, rd);
    return this.f32(this.ctx.rope(xs.ptr, p.ptr, n, heads, headDim, rd, theta, layout === "neox" ? 1 : 0, f, magnitude), xs.shape);
  }

  kvWrite(k: Tensor, v: Tensor, kCache: Tensor, vCache: Tensor, slots: Tensor): void {
    const [kc, vc] = this.caches(kCache, vCache);
    const [numBlocks, blockSize, kvHeads, headDim] = kc.shape;
    const s = expect(slots, 1, "kvWrite slots", ["i32"]);
    const n = s.shape[0];
    for (const [t, what] of [[k, "keys"], [v, "values"]] as const) {
      const c = expect(t, 3, `kvWrite ${what}`, ["f32"]);
      if (c.shape[0] !== n || c.shape[1] !== kvHeads || c.shape[2] !== headDim) {
        throw new BackendShapeError(`kvWrite ${what} ${fmt(c.shape)} do not fit slots ${fmt(s.shape)} and cache ${fmt(kc.shape)}`);
      }
    }
    const capacity = numBlocks * blockSize;
    if (s.host) this.checkIndices(s.host, capacity, "KV slot");
    this.ctx.kvWrite((k as CudaTensor).ptr, (v as CudaTensor).ptr, kc.ptr, vc.ptr, s.ptr, n, kvHeads * headDim, capacity);
  }

  pagedAttention(q: Tensor, kCache: Tensor, vCache: Tensor, batch: AttentionBatch, scale: number, options?: AttentionOptions): Tensor {
    const [kc, vc] = this.caches(kCache, vCache);
    const [numBlocks, blockSize, kvHeads, headDim] = kc.shape;
    const qs = expect(q, 3, "attention queries", ["f32"]);
    const [n, heads, qDim] = qs.shape;
    if (qDim !== headDim || heads % kvHeads !== 0 || headDim > 256) {
      throw new BackendShapeError(`Attention queries ${fmt(qs.shape)} do not fit cache ${fmt(kc.shape)} (head dim ≤ 256)`);
    }
    const window = expectAttentionOptions(options, heads);
    const sinks = options?.sinks ? expect(options.sinks, 1, "attention sinks", ["f32"]).ptr : 0n;
    const seq = expect(batch.tokenSeq, 1, "tokenSeq", ["i32"]);
    const pos = expect(batch.tokenPos, 1, "tokenPos", ["i32"]);
    const tables = expect(batch.blockTables, 2, "blockTables", ["i32"]);
    if (seq.shape[0] !== n || pos.shape[0] !== n) {
      throw new BackendShapeError(`tokenSeq ${fmt(seq.shape)} and tokenPos ${fmt(pos.shape)} must have ${n} rows`);
    }
    const [numSeqs, maxBlocks] = tables.shape;
    if (seq.host && pos.host && tables.host) {
      this.indexChecks.check(seq.host, pos.host, tables.host, { numSeqs, maxBlocks, blockSize, numBlocks, maxContext: batch.maxContext, window });
    } else {
      if (seq.host) this.checkIndices(seq.host, numSeqs, "tokenSeq");
      if (pos.host) this.checkIndices(pos.host, Math.min(batch.maxContext, maxBlocks * blockSize), "tokenPos");
    }
    const plan = this.plans.get(seq, n);
    return this.f32(
      this.ctx.attention(
        qs.ptr, kc.ptr, vc.ptr, seq.ptr, pos.ptr, tables.ptr, n, heads, kvHeads, headDim, blockSize, maxBlocks,
        numBlocks, batch.maxContext, scale, plan.rows, plan.rowCount, plan.tiles, plan.tileCount, window, sinks, attentionSoftcap(options),
      ),
      qs.shape,
    );
  }

  siluMul(gate: Tensor, up: Tensor): Tensor {
    const [g, u] = this.same(gate, up, "siluMul");
    return this.f32(this.ctx.siluMul(g.ptr, u.ptr, checkShape(g.shape, "siluMul")), g.shape);
  }

  geluMul(gate: Tensor, up: Tensor): Tensor {
    const [g, u] = this.same(gate, up, "geluMul");
    return this.f32(this.ctx.geluMul(g.ptr, u.ptr, checkShape(g.shape, "geluMul")), g.shape);
  }

  sigmoidMul(gate: Tensor, x: Tensor): Tensor {
    const [g, v] = this.same(gate, x, "sigmoidMul");
    return this.f32(this.ctx.sigmoidMul(g.ptr, v.ptr, checkShape(g.shape, "sigmoidMul")), v.shape);
  }

  reluSquared(x: Tensor): Tensor {
    const xs = expect(x, undefined, "reluSquared input", ["f32"]);
    return this.f32(this.ctx.reluSquared(xs.ptr, checkShape(xs.shape, "reluSquared")), xs.shape);
  }

  softcap(x: Tensor, cap: number): Tensor {
    const xs = expect(x, undefined, "softcap input", ["f32"]);
    expectSoftcap(cap);
    return this.f32(this.ctx.softcap(xs.ptr, checkShape(xs.shape, "softcap"), cap), xs.shape);
  }

  swigluOai(gate: Tensor, up: Tensor, alpha: number, limit: number): Tensor {
    const [g, u] = this.same(gate, up, "swigluOai");
    if (!Number.isFinite(alpha) || !(limit > 0)) throw new BackendShapeError(`swigluOai needs a finite alpha and a positive limit, got ${alpha} and ${limit}`);
    return this.f32(this.ctx.swigluOai(g.ptr, u.ptr, checkShape(g.shape, "swigluOai"), alpha, limit), g.shape);
  }

  add(a: Tensor, b: Tensor): Tensor {
    const [x, y] = this.same(a, b, "add");
    return this.f32(this.ctx.add(x.ptr, y.ptr, checkShape(x.shape, "add")), x.shape);
  }

  softmax(x: Tensor): Tensor {
    const xs = expect(x, undefined, "softmax input", ["f32"]);
    const { rows, cols } = rowsOf(xs.shape, "softmax input");
    return this.f32(this.ctx.softmax(xs.ptr, rows, cols), xs.shape);
  }

  argmax(x: Tensor): Tensor {
    const xs = expect(x, undefined, "argmax input", ["f32"]);
    const { rows, cols } = rowsOf(xs.shape, "argmax input");
    if (cols === 0) throw new BackendShapeError(`argmax needs a non-empty last dimension, got ${fmt(xs.shape)}`);
    return new CudaTensor(this.ctx.argmax(xs.ptr, rows, cols), [rows], "i32");
  }

  sample(logits: Tensor, rows: readonly SamplingRow[]): Tensor {
    const l = expect(logits, 2, "sample logits", ["f32"]);
    const [n, vocab] = l.shape;
    if (rows.length !== n) throw new BackendShapeError(`sample got ${rows.length} sampling rows for ${n} logit rows`);
    if (vocab === 0) throw new BackendShapeError("sample needs a non-empty vocabulary");
    const params = packSamplingRows(rows);
    return new CudaTensor(this.ctx.sample(l.ptr, n, vocab, params), [n], "i32");
  }

  gatherRows(x: Tensor, idx: Tensor): Tensor {
    const xs = expect(x, 2, "gatherRows input", ["f32"]);
    const i = expect(idx, 1, "gatherRows indices", ["i32"]);
    const [rows, d] = xs.shape;
    if (i.host) this.checkIndices(i.host, rows, "Row index");
    const m = i.shape[0];
    return this.f32(this.ctx.gatherRows(xs.ptr, i.ptr, m, d, rows), [m, d]);
  }

  sliceColumns(x: Tensor, start: number, width: number): Tensor {
    const xs = expect(x, undefined, "sliceColumns input", ["f32"]);
    const { rows, cols, shape } = expectSliceColumnsShapes(xs, start, width);
    return this.f32(this.ctx.sliceColumns(xs.ptr, rows, cols, start, width), shape);
  }

  concatColumns(a: Tensor, b: Tensor): Tensor {
    const as = expect(a, undefined, "concatColumns left operand", ["f32"]);
    const bs = expect(b, undefined, "concatColumns right operand", ["f32"]);
    const { rows, colsA, colsB, shape } = expectConcatColumnsShapes(as, bs);
    return this.f32(this.ctx.concatColumns(as.ptr, bs.ptr, rows, colsA, colsB), shape);
  }

  scatterAdd(x: Tensor, index: Tensor, values: Tensor): void {
    const xs = expect(x, undefined, "scatterAdd target", ["f32"]);
    const i = expect(index, 1, "scatterAdd index", ["i32"]);
    const v = expect(values, 1, "scatterAdd values", ["f32"]);
    const m = i.shape[0];
    if (v.shape[0] !== m) throw new BackendShapeError(`scatterAdd values ${fmt(v.shape)} do not match index ${fmt(i.shape)}`);
    const size = numel(xs.shape);
    if (i.host) {
      this.checkIndices(i.host, size, "scatterAdd offset");
      if (new Set(i.host).size !== m) throw new BackendShapeError("scatterAdd offsets must be distinct");
    }
    this.ctx.scatterAdd(xs.ptr, i.ptr, v.ptr, m, size);
  }

  maskLogits(logits: Tensor, rows: Tensor, bits: Tensor): void {
    const l = expect(logits, 2, "maskLogits logits", ["f32"]);
    const r = expect(rows, 1, "maskLogits rows", ["i32"]);
    const b = expect(bits, 2, "maskLogits bits", ["i32"]);
    const { n, vocab, m } = expectMaskShapes(l, r, b);
    if (r.host) {
      this.checkIndices(r.host, n, "maskLogits row");
      if (new Set(r.host).size !== m) throw new BackendShapeError("maskLogits rows must be distinct");
    }
    this.ctx.maskLogits(l.ptr, r.ptr, b.ptr, m, n, vocab);
  }

  penalizeRepeats(logits: Tensor, rows: Tensor, bits: Tensor, factors: Tensor): void {
    const l = expect(logits, 2, "penalizeRepeats logits", ["f32"]);
    const r = expect(rows, 1, "penalizeRepeats rows", ["i32"]);
    const b = expect(bits, 2, "penalizeRepeats bits", ["i32"]);
    const f = expect(factors, 1, "penalizeRepeats factors", ["f32"]);
    const { n, vocab, m } = expectRepeatShapes(l, r, b, f);
    if (r.host) {
      this.checkIndices(r.host, n, "penalizeRepeats row");
      if (new Set(r.host).size !== m) throw new BackendShapeError("penalizeRepeats rows must be distinct");
    }
    this.ctx.penalizeRepeats(l.ptr, r.ptr, b.ptr, f.ptr, m, n, vocab);
  }

  penalizeSampled(logits: Tensor, rows: Tensor, sampled: Tensor, history: Tensor, count: number, seen: Tensor, present: Tensor, params: Tensor): void {
    const [l, r, sa, hi, se, pr, pa] = ([
      [logits, "logits", ["f32"]], [rows, "rows", ["i32"]], [sampled, "sampled", ["i32"]], [history, "history", ["i32"]],
      [seen, "seen", ["i32"]], [present, "present", ["i32"]], [params, "params", ["f32"]],
    ] as const).map(([t, what, dtypes]) => expect(t, undefined, `penalizeSampled ${what}`, dtypes));
    const { n, vocab, m, h } = expectSampledPenaltyShapes(l, r, sa, hi, count, se, pr, pa);
    if (r.host) {
      this.checkIndices(r.host, n, "penalizeSampled row");
      if (new Set(r.host).size !== m) throw new BackendShapeError("penalizeSampled rows must be distinct");
    }
    this.ctx.penalizeSampled(l.ptr, r.ptr, sa.ptr, hi.ptr, se.ptr, pr.ptr, pa.ptr, m, n, vocab, h, count);
  }

  private same(a: Tensor, b: Tensor, op: string): [CudaTensor, CudaTensor] {
    const x = expect(a, undefined, `${op} input`, ["f32"]);
    const y = expect(b, undefined, `${op} input`, ["f32"]);
    if (x.shape.length !== y.shape.length || x.shape.some((d, i) => d !== y.shape[i])) {
      throw new BackendShapeError(`${op} inputs differ in shape: ${fmt(x.shape)} and ${fmt(y.shape)}`);
    }
    return [x, y];
  }
}
