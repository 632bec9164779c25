/**
 * Test fixtures for the forward pass: random-weight Llama/Qwen models built in memory, and a
 * dense, unpaged, f64 transformer written straight from the papers, as an independent check.
 */
import { decodeToF32, encodeFromF32 } from "../../src/backend/dtype-codec.ts";
import type { RopeLayout, WeightDType } from "../../src/backend/types.ts";
import type { Architecture, HostTensor, LayerWeights, ModelConfig, ModelWeights } from "../../src/model/config.ts";
import { seededRandom } from "./model-files.ts";

/** Shape options of a random model. */
export interface RandomModelSpec {
  architecture: Architecture;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ffn: number;
  vocab: number;
  ropeLayout: RopeLayout;
  tied: boolean;
  dtype: WeightDType;
  seed: number;
}

/** A host-side model: what a loader would return, minus the tokenizer. */
export interface HostModel {
  config: ModelConfig;
  weights: ModelWeights<HostTensor>;
}

/** Builds a random-weight model of the given shape. */
export function randomModel(spec: RandomModelSpec): HostModel {
  const rand = seededRandom(spec.seed);
  const tensor = (name: string, shape: number[], scale: number, dtype: WeightDType, offset = 0): HostTensor => {
    const count = shape.reduce((a, b) => a * b, 1);
    const values = new Float32Array(count).map(() => offset + (rand() * 2 - 1) * scale);
    return { name, shape, dtype, data: encodeFromF32(values, dtype) };
  };
  const { hidden, heads, kvHeads, headDim, ffn, vocab, dtype } = spec;
  const mat = (name: string, out: number, inp: number) => tensor(name, [out, inp], 1 / Math.sqrt(inp), dtype);
  const norm = (name: string, n: number) => tensor(name, [n], 0.2, "f32", 1);
  const layers: LayerWeights<HostTensor>[] = [];
  for (let i = 0; i < spec.layers; i++) {
    const qwen2 = spec.architecture === "qwen2";
    const qwen3 = spec.architecture === "qwen3";
    layers.push({
      attnNorm: norm("attn_norm", hidden),
      wq: mat("wq", heads * headDim, hidden),
      wk: mat("wk", kvHeads * headDim, hidden),
      wv: mat("wv", kvHeads * headDim, hidden),
      wo: mat("wo", hidden, heads * headDim),
      bq: qwen2 ? tensor("bq", [heads * headDim], 0.5, "f32") : undefined,
      bk: qwen2 ? tensor("bk", [kvHeads * headDim], 0.5, "f32") : undefined,
      bv: qwen2 ? tensor("bv", [kvHeads * headDim], 0.5, "f32") : undefined,
      qNorm: qwen3 ? norm("q_norm", headDim) : undefined,
      kNorm: qwen3 ? norm("k_norm", headDim) : undefined,
      ffnNorm: norm("ffn_norm", hidden),
      wGate: mat("gate", ffn, hidden),
      wUp: mat("up", ffn, hidden),
      wDown: mat("down", hidden, ffn),
    });
  }
  const config: ModelConfig = {
    architecture: spec.architecture, vocabSize: vocab, hiddenSize: hidden, numLayers: spec.layers,
    numHeads: heads, numKvHeads: kvHeads, headDim, intermediateSize: ffn, rmsNormEps: 1e-5,
    ropeTheta: 10000, ropeLayout: spec.ropeLayout, contextLength: 256, tiedEmbeddings: spec.tied,
    qkvBias: spec.architecture === "qwen2", qkNorm: spec.architecture === "qwen3",
    bosTokenId: 1, eosTokenIds: [2], addBos: true,
  };
  return {
    config,
    weights: {
      tokenEmbedding: tensor("tok", [vocab, hidden], 1, dtype),
      layers,
      outputNorm: norm("out_norm", hidden),
      output: spec.tied ? undefined : mat("output", vocab, hidden),
    },
  };
}

const f = (t: HostTensor) => Float64Array.from(decodeToF32(t.data, t.dtype, t.shape.reduce((a, b) => a * b, 1)));

function rms(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  const ss = x.reduce((a, v) => a + v * v, 0) / x.length;
  return x.map((v, i) => (v / Math.sqrt(ss + eps)) * w[i]);
}

function linear(x: Float64Array, w: Float64Array, out: number, b?: Float64Array): Float64Array {
  const inp = x.length;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let acc = b ? b[o] : 0;
    for (let i = 0; i < inp; i++) acc += x[i] * w[o * inp + i];
    y[o] = acc;
  }
  return y;
}

function ropeHead(v: Float64Array, pos: number, theta: number, layout: RopeLayout): Float64Array {
  const d = v.length;
  const out = Float64Array.from(v);
  for (let i = 0; i < d / 2; i++) {
    const a = pos * theta ** (-2 * i / d);
    const [i0, i1] = layout === "normal" ? [2 * i, 2 * i + 1] : [i, i + d / 2];
    out[i0] = v[i0] * Math.cos(a) - v[i1] * Math.sin(a);
    out[i1] = v[i0] * Math.sin(a) + v[i1] * Math.cos(a);
  }
  return out;
}

/** Dense causal forward over one sequence, every position's logits, in f64. */
export function naiveLogits(model: HostModel, tokens: readonly number[]): Float64Array[] {
  const c = model.config;
  const w = model.weights;
  const D = c.headDim;
  const emb = f(w.tokenEmbedding);
  let xs = tokens.map((t) => emb.slice(t * c.hiddenSize, (t + 1) * c.hiddenSize));
  for (const l of w.layers) {
    const keys: Float64Array[][] = [];
    const vals: Float64Array[][] = [];
    const queries: Float64Array[][] = [];
    xs.forEach((x, pos) => {
      const h = rms(x, f(l.attnNorm!), c.rmsNormEps);
      const q = linear(h, f(l.wq!), c.numHeads * D, l.bq && f(l.bq));
      const k = linear(h, f(l.wk!), c.numKvHeads * D, l.bk && f(l.bk));
      const v = linear(h, f(l.wv!), c.numKvHeads * D, l.bv && f(l.bv));
      const split = (a: Float64Array, n: number) => Array.from({ length: n }, (_, i) => a.slice(i * D, (i + 1) * D));
      let qh: Float64Array[] = split(q, c.numHeads);
      let kh: Float64Array[] = split(k, c.numKvHeads);
      if (c.qkNorm) {
        qh = qh.map((e) => rms(e, f(l.qNorm!), c.rmsNormEps));
        kh = kh.map((e) => rms(e, f(l.kNorm!), c.rmsNormEps));
      }
      queries.push(qh.map((e) => ropeHead(e, pos, c.ropeTheta, c.ropeLayout)));
      keys.push(kh.map((e) => ropeHead(e, pos, c.ropeTheta, c.ropeLayout)));
      vals.push(split(v, c.numKvHeads));
    });
    xs = xs.map((x, pos) => {
      const att = new Float64Array(c.numHeads * D);
      for (let h = 0; h < c.numHeads; h++) {
        const kvh = Math.floor(h / (c.numHeads / c.numKvHeads));
        const scores = keys.slice(0, pos + 1).map((k) => k[kvh].reduce((a, kv, d) => a + kv * queries[pos][h][d], 0) / Math.sqrt(D));
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let p = 0; p <= pos; p++) for (let d = 0; d < D; d++) att[h * D + d] += (e[p] / z) * vals[p][kvh][d];
      }
      const o = linear(att, f(l.wo!), c.hiddenSize);
      const x2 = x.map((v, i) => v + o[i]);
      const h2 = rms(x2, f(l.ffnNorm!), c.rmsNormEps);
      const g = linear(h2, f(l.wGate!), c.intermediateSize);
      const u = linear(h2, f(l.wUp!), c.intermediateSize);
      const act = g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]);
      const down = linear(act, f(l.wDown!), c.hiddenSize);
      return x2.map((v, i) => v + down[i]);
    });
  }
  const out = f(w.output ?? w.tokenEmbedding);
  return xs.map((x) => linear(rms(x, f(w.outputNorm), c.rmsNormEps), out, c.vocabSize));
}
