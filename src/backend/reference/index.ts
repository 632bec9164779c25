/**
 * The reference backend: plain TypeScript on the host, f32 storage, f64 accumulation. Slow and
 * obviously correct; every other backend is tested against it.
 */
import { decodeToF32 } from "../dtype-codec.ts";
import {
  type AttentionBatch,
  type AttentionOptions,
  type Backend,
  type DeltaNetSpec,
  type SsmSpec,
  type GluActivation,
  BackendShapeError,
  type MoeRouteOptions,
  type RecurrentBatch,
  type RopeLayout,
  type RopeSpec,
  type SamplingRow,
  type Tensor,
} from "../types.ts";
import { pagedAttention, kvWrite, rotateAndWriteKv } from "./attention.ts";
import {
  add, argmax, concatColumns, embedding, gatherRows, gelu, geluMul, layerNorm, maskLogits, penalizeRepeats, penalizeSampled, reluSquared, rmsnorm, scatterAdd, siluMul, sliceColumns, softcap, softmax, swigluOai,
} from "./elementwise.ts";
import { matmul, matmulAdd, matmulGlu, matmulQkv, rope } from "./linear.ts";
import { matmulExperts, matmulExpertsGlu, moeCombine, moeRoute } from "./experts.ts";
import { sample } from "./sampling.ts";
import { causalConv1d, gatedDeltaNet, shortConv, sigmoidMul, ssmScan } from "./recurrent.ts";
import { asRef, checkShape, f32Tensor, fmt, i32Tensor, REFERENCE_NAME, RefTensor } from "./storage.ts";
import { checkWeightShape } from "../shape-checks.ts";

/** Creates a reference backend instance (each instance is independent). */
export function createReferenceBackend(): Backend {
  const r = (t: Tensor, what: string) => asRef(t, what);
  return {
    info: { name: REFERENCE_NAME, device: "host CPU (TypeScript, f32 with f64 accumulation)", f16: true, kvDtypes: ["f32", "f16", "f8_e4m3"] },

    upload(data, shape) {
      const count = checkShape(shape, "upload");
      if (data.length !== count) {
        throw new BackendShapeError(`upload got ${data.length} values for shape ${fmt(shape)}`);
      }
      if (data instanceof Float32Array) return f32Tensor(new Float32Array(data), shape);
      if (data instanceof Int32Array) return i32Tensor(new Int32Array(data), shape);
      throw new BackendShapeError("upload accepts only Float32Array or Int32Array data");
    },

    uploadWeight(raw, shape, dtype) {
      const count = checkWeightShape(shape, dtype, "uploadWeight");
      return new RefTensor([...shape], dtype, { data: decodeToF32(raw, dtype, count), freed: false });
    },

    zeros(shape, dtype) {
      const count = checkShape(shape, "zeros");
      if (dtype === "i32") return i32Tensor(new Int32Array(count), shape);
      if (dtype === "f32") return f32Tensor(new Float32Array(count), shape);
      // An f16 or f8_e4m3 KV cache: held widened to f32 like every reference weight; kvWrite rounds what it stores.
      if (dtype === "f16" || dtype === "f8_e4m3") {
        if (dtype === "f8_e4m3" && count % 32 !== 0) throw new BackendShapeError(`An f8_e4m3 KV cache needs whole 32-value blocks, got shape [${shape.join(", ")}]`);
        return new RefTensor([...shape], dtype, { data: new Float32Array(count), freed: false });
      }
      throw new BackendShapeError(`zeros accepts f32 or i32, got ${dtype}`);
    },

    download(t) {
      // A promise, as a device backend's: a bad tensor is a rejection, not a throw.
      try {
        const ref = r(t, "download tensor");
        return Promise.resolve(ref.dtype === "i32" ? new Int32Array(ref.i32) : new Float32Array(ref.f32));
      } catch (e) {
        return Promise.reject(e);
      }
    },

    reshape(t, shape) {
      const ref = r(t, "reshape tensor");
      if (checkShape(shape, "reshape") !== ref.storage.data.length) {
        throw new BackendShapeError(`Cannot reshape ${fmt(ref.shape)} to ${fmt(shape)}`);
      }
      return new RefTensor([...shape], ref.dtype, ref.storage);
    },

    free(t) {
      const ref = r(t, "free tensor");
      ref.storage.freed = true;
    },

    flush: () => Promise.resolve(),
    destroy() {},

    embedding: (table: Tensor, ids: Tensor) => embedding(r(table, "embedding table"), r(ids, "embedding ids")),
    rmsnorm: (x: Tensor, weight: Tensor, eps: number) => rmsnorm(r(x, "rmsnorm input"), r(weight, "rmsnorm weight"), eps),
    matmul: (x: Tensor, w: Tensor, bias?: Tensor) =>
      matmul(r(x, "matmul input"), r(w, "matmul weight"), bias && r(bias, "matmul bias")),
    matmulExpertsGlu: (x: Tensor, wGate: Tensor, wUp: Tensor, ids: Tensor, activation: GluActivation) =>
      matmulExpertsGlu(r(x, "matmulExperts input"), r(wGate, "matmulExperts weight"), r(wUp, "matmulExpertsGlu up weight"), r(ids, "matmulExperts ids"), activation),
    matmulQkv: (x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor) =>
      matmulQkv(r(x, "matmulQkv input"), r(wq, "matmulQkv q weight"), r(wk, "matmulQkv k weight"), r(wv, "matmulQkv v weight")),
    matmulGlu: (x: Tensor, wGate: Tensor, wUp: Tensor, activation: GluActivation) =>
      matmulGlu(r(x, "matmulGlu input"), r(wGate, "matmulGlu gate weight"), r(wUp, "matmulGlu up weight"), activation),
    matmulAdd: (x: Tensor, w: Tensor, residual: Tensor, bias?: Tensor) =>
      matmulAdd(r(x, "matmul input"), r(w, "matmul weight"), r(residual, "matmul residual"), bias && r(bias, "matmul bias")),
    rope: (x: Tensor, positions: Tensor, theta: number, layout: RopeLayout, rotaryDim?: number, freqFactors?: Tensor, magnitude?: number) =>
      rope(r(x, "rope input"), r(positions, "rope positions"), theta, layout, rotaryDim, freqFactors && r(freqFactors, "rope freqFactors"), magnitude),
    kvWrite: (k: Tensor, v: Tensor, kCache: Tensor, vCache: Tensor, slots: Tensor) =>
      kvWrite(r(k, "keys"), r(v, "values"), r(kCache, "key cache"), r(vCache, "value cache"), r(slots, "slots")),
    rotateAndWriteKv: (q: Tensor, k: Tensor, v: Tensor, positions: Tensor, spec: RopeSpec, kCache: Tensor, vCache: Tensor, slots: Tensor) =>
      rotateAndWriteKv(
        r(q, "rotateAndWriteKv queries"), r(k, "keys"), r(v, "values"), r(positions, "rope positions"), spec, r(kCache, "key cache"), r(vCache, "value cache"), r(slots, "slots"),
      ),
    pagedAttention: (q: Tensor, kCache: Tensor, vCache: Tensor, batch: AttentionBatch, scale: number, options?: AttentionOptions) =>
      pagedAttention(r(q, "queries"), r(kCache, "key cache"), r(vCache, "value cache"), batch, scale, {
        window: options?.window,
        sinks: options?.sinks && r(options.sinks, "attention sinks"),
        softcap: options?.softcap,
      }),
    siluMul: (gate: Tensor, up: Tensor) => siluMul(r(gate, "siluMul gate"), r(up, "siluMul up")),
    geluMul: (gate: Tensor, up: Tensor) => geluMul(r(gate, "geluMul gate"), r(up, "geluMul up")),
    swigluOai: (gate: Tensor, up: Tensor, alpha: number, limit: number) =>
      swigluOai(r(gate, "swigluOai gate"), r(up, "swigluOai up"), alpha, limit),
    softcap: (x: Tensor, cap: number) => softcap(r(x, "softcap input"), cap),
    sigmoidMul: (gate: Tensor, x: Tensor) => sigmoidMul(r(gate, "sigmoidMul gate"), r(x, "sigmoidMul input")),
    reluSquared: (x: Tensor) => reluSquared(r(x, "reluSquared input")),
    layerNorm: (x: Tensor, weight: Tensor, bias: Tensor | undefined, eps: number) => layerNorm(r(x, "layerNorm input"), r(weight, "layerNorm weight"), bias && r(bias, "layerNorm bias"), eps),
    gelu: (x: Tensor) => gelu(r(x, "gelu input")),
    causalConv1d: (x: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch, bias?: Tensor) =>
      causalConv1d(
        r(x, "causalConv1d input"), r(weight, "causalConv1d weight"), r(state, "causalConv1d state"), batch, r(batch.seqs, "recurrent sequence table").i32,
        bias === undefined ? undefined : r(bias, "causalConv1d bias"),
      ),
    shortConv: (bcx: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch) =>
      shortConv(r(bcx, "shortConv input"), r(weight, "shortConv weight"), r(state, "shortConv state"), batch, r(batch.seqs, "recurrent sequence table").i32),
    gatedDeltaNet: (x: Tensor, alpha: Tensor, beta: Tensor, decay: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: DeltaNetSpec) =>
      gatedDeltaNet(
        r(x, "gatedDeltaNet input"), r(alpha, "gatedDeltaNet alpha"), r(beta, "gatedDeltaNet beta"), r(decay, "gatedDeltaNet decay"), r(dtBias, "gatedDeltaNet dtBias"),
        r(state, "gatedDeltaNet state"), batch, r(batch.seqs, "recurrent sequence table").i32, spec,
      ),
    ssmScan: (xbc: Tensor, dt: Tensor, a: Tensor, d: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: SsmSpec) =>
      ssmScan(
        r(xbc, "ssmScan input"), r(dt, "ssmScan dt"), r(a, "ssmScan a"), r(d, "ssmScan d"), r(dtBias, "ssmScan dtBias"), r(state, "ssmScan state"), batch,
        r(batch.seqs, "recurrent sequence table").i32, spec,
      ),
    add: (a: Tensor, b: Tensor) => add(r(a, "add left operand"), r(b, "add right operand")),
    softmax: (x: Tensor) => softmax(r(x, "softmax input")),
    argmax: (x: Tensor) => argmax(r(x, "argmax input")),
    sample: (logits: Tensor, rows: readonly SamplingRow[]) => sample(r(logits, "sample logits"), rows),
    gatherRows: (x: Tensor, idx: Tensor) => gatherRows(r(x, "gatherRows input"), r(idx, "gatherRows indices")),
    sliceColumns: (x: Tensor, start: number, width: number) => sliceColumns(r(x, "sliceColumns input"), start, width),
    concatColumns: (a: Tensor, b: Tensor) => concatColumns(r(a, "concatColumns left operand"), r(b, "concatColumns right operand")),
    scatterAdd: (x: Tensor, index: Tensor, values: Tensor) =>
      scatterAdd(r(x, "scatterAdd target"), r(index, "scatterAdd index"), r(values, "scatterAdd values")),
    maskLogits: (logits: Tensor, rows: Tensor, bits: Tensor) =>
      maskLogits(r(logits, "maskLogits logits"), r(rows, "maskLogits rows"), r(bits, "maskLogits bits")),
    penalizeRepeats: (logits: Tensor, rows: Tensor, bits: Tensor, factors: Tensor) =>
      penalizeRepeats(r(logits, "penalizeRepeats logits"), r(rows, "penalizeRepeats rows"), r(bits, "penalizeRepeats bits"), r(factors, "penalizeRepeats factors")),
    penalizeSampled: (logits: Tensor, rows: Tensor, sampled: Tensor, history: Tensor, count: number, seen: Tensor, present: Tensor, params: Tensor) =>
      penalizeSampled(
        r(logits, "penalizeSampled logits"), r(rows, "penalizeSampled rows"), r(sampled, "penalizeSampled sampled"), r(history, "penalizeSampled history"),
        count, r(seen, "penalizeSampled seen"), r(present, "penalizeSampled present"), r(params, "penalizeSampled params"),
      ),
    moeRoute: (logits: Tensor, k: number, options: MoeRouteOptions) =>
      moeRoute(r(logits, "moeRoute logits"), k, {
        ...options,
        selectionBias: options.selectionBias && r(options.selectionBias, "moeRoute selection bias"),
      }),
    matmulExperts: (x: Tensor, w: Tensor, ids: Tensor) =>
      matmulExperts(r(x, "matmulExperts input"), r(w, "matmulExperts weight"), r(ids, "matmulExperts ids")),
    moeCombine: (y: Tensor, weights: Tensor) => moeCombine(r(y, "moeCombine input"), r(weights, "moeCombine weights")),
  };
}
