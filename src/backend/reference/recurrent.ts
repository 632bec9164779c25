/**
 * Reference recurrent-state ops: the causal convolution and the gated delta rule of Gated DeltaNet
 * layers (Qwen3.5, Qwen3-Next), and sigmoid(gate)·x. Sequential over each sequence's rows, f64
 * accumulation; the state tensors are updated in place.
 */
import type { DeltaNetSpec, RecurrentBatch, SsmSpec } from "../types.ts";
import { checkRecurrentSeqs, expectConv1dShapes, expectDeltaNetShapes, expectShortConvShapes, expectSsmShapes } from "../shape-checks-recurrent.ts";
import { expectF32, expectSameShape, f32Tensor, type RefTensor } from "./storage.ts";

const silu = (v: number) => v / (1 + Math.exp(-v));
const sigmoid = (v: number) => 1 / (1 + Math.exp(-v));
/** ggml's softplus: the identity past 20, where log(1 + eˣ) equals x in f32. */
const softplus = (v: number) => (v > 20 ? v : Math.log1p(Math.exp(v)));

/** sigmoid(gate) · x (Backend.sigmoidMul). */
export function sigmoidMul(gate: RefTensor, x: RefTensor): RefTensor {
  expectF32(gate, "sigmoidMul gate");
  expectF32(x, "sigmoidMul input");
  expectSameShape(gate, x, "sigmoidMul");
  const g = gate.f32;
  const v = x.f32;
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = sigmoid(g[i]) * v[i];
  return f32Tensor(out, x.shape);
}

/** Backend.causalConv1d. */
export function causalConv1d(x: RefTensor, weight: RefTensor, state: RefTensor, batch: RecurrentBatch, seqs: Int32Array, bias?: RefTensor): RefTensor {
  const { n, channels: c, kernel: k, slots } = expectConv1dShapes(x, weight, state, batch, bias);
  const xs = x.f32;
  const b = bias?.f32;
  return conv1d(weight, state, batch, seqs, n, c, k, slots, (row, ch) => xs[row * c + ch], (_row, ch, acc) => silu(acc + (b ? b[ch] : 0)));
}

/** Backend.shortConv: the window takes B ⊙ x, the output is C times the sum. */
export function shortConv(bcx: RefTensor, weight: RefTensor, state: RefTensor, batch: RecurrentBatch, seqs: Int32Array): RefTensor {
  const { n, channels: c, kernel: k, slots } = expectShortConvShapes(bcx, weight, state, batch);
  const xs = bcx.f32;
  return conv1d(weight, state, batch, seqs, n, c, k, slots, (row, ch) => xs[row * 3 * c + ch] * xs[row * 3 * c + 2 * c + ch], (row, ch, acc) => xs[row * 3 * c + c + ch] * acc);
}

/**
 * The depthwise causal convolution both ops share: per sequence and channel, the window of the slot's
 * last K - 1 inputs then this step's rows' (`input`), each row's sum turned into its output by `output`;
 * the slot then holds the last K - 1 inputs.
 */
function conv1d(
  weight: RefTensor, state: RefTensor, batch: RecurrentBatch, seqs: Int32Array, n: number, c: number, k: number, slots: number,
  input: (row: number, ch: number) => number, output: (row: number, ch: number, acc: number) => number,
): RefTensor {
  checkRecurrentSeqs(seqs, n, slots);
  const w = weight.f32;
  const st = state.f32;
  const out = new Float32Array(n * c);
  const past = k - 1;
  for (let s = 0; s < batch.numSeqs; s++) {
    const [first, count, slot, fresh] = seqs.subarray(s * 4, s * 4 + 4);
    const base = slot * past * c;
    for (let ch = 0; ch < c; ch++) {
      const u = new Float64Array(past + count);
      for (let j = 0; j < past; j++) u[j] = fresh ? 0 : st[base + j * c + ch];
      for (let t = 0; t < count; t++) u[past + t] = input(first + t, ch);
      for (let t = 0; t < count; t++) {
        let acc = 0;
        for (let j = 0; j < k; j++) acc += w[ch * k + j] * u[t + j];
        out[(first + t) * c + ch] = output(first + t, ch, acc);
      }
      for (let j = 0; j < past; j++) st[base + j * c + ch] = u[count + j];
    }
  }
  return f32Tensor(out, [n, c]);
}

/** Backend.gatedDeltaNet. */
export function gatedDeltaNet(
  x: RefTensor, alpha: RefTensor, beta: RefTensor, decay: RefTensor, dtBias: RefTensor, state: RefTensor, batch: RecurrentBatch, seqs: Int32Array, spec: DeltaNetSpec,
): RefTensor {
  const { n, width, slots } = expectDeltaNetShapes(x, alpha, beta, decay, dtBias, state, batch, spec);
  checkRecurrentSeqs(seqs, n, slots);
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = spec;
  const xs = x.f32;
  const st = state.f32;
  const out = new Float32Array(n * nv * dv);
  const group = nv / nk;
  const scale = 1 / Math.sqrt(dk);
  const unit = (row: number, at: number, times: number): Float64Array => {
    const v = new Float64Array(dk);
    let sum = 0;
    for (let i = 0; i < dk; i++) {
      v[i] = xs[row * width + at + i];
      sum += v[i] * v[i];
    }
    const inv = times / Math.max(Math.sqrt(sum), spec.eps);
    for (let i = 0; i < dk; i++) v[i] *= inv;
    return v;
  };
  for (let s = 0; s < batch.numSeqs; s++) {
    const [first, count, slot, fresh] = seqs.subarray(s * 4, s * 4 + 4);
    for (let h = 0; h < nv; h++) {
      const kh = spec.vHeadOrder === "tiled" ? h % nk : Math.floor(h / group);
      const base = (slot * nv + h) * dk * dv;
      const S = new Float64Array(dk * dv);
      if (!fresh) for (let i = 0; i < dk * dv; i++) S[i] = st[base + i];
      for (let t = 0; t < count; t++) {
        const row = first + t;
        const q = unit(row, kh * dk, scale);
        const k = unit(row, nk * dk + kh * dk, 1);
        const vAt = row * width + 2 * nk * dk + h * dv;
        const g = decay.f32[h] * softplus(alpha.f32[row * nv + h] + dtBias.f32[h]);
        const b = sigmoid(beta.f32[row * nv + h]);
        const d = Math.exp(g);
        for (let i = 0; i < dk * dv; i++) S[i] *= d;
        for (let j = 0; j < dv; j++) {
          let kv = 0;
          for (let i = 0; i < dk; i++) kv += S[i * dv + j] * k[i];
          const u = (xs[vAt + j] - kv) * b;
          let o = 0;
          for (let i = 0; i < dk; i++) {
            S[i * dv + j] += k[i] * u;
            o += S[i * dv + j] * q[i];
          }
          out[row * nv * dv + h * dv + j] = o;
        }
      }
      for (let i = 0; i < dk * dv; i++) st[base + i] = S[i];
    }
  }
  return f32Tensor(out, [n, nv * dv]);
}

/** Backend.ssmScan: Mamba-2's scan, each head's state [headDim, stateDim] in f64 through the sequence's rows. */
export function ssmScan(
  xbc: RefTensor, dt: RefTensor, a: RefTensor, d: RefTensor, dtBias: RefTensor, state: RefTensor, batch: RecurrentBatch, seqs: Int32Array, spec: SsmSpec,
): RefTensor {
  const { n, width, slots } = expectSsmShapes(xbc, dt, a, d, dtBias, state, batch, spec);
  checkRecurrentSeqs(seqs, n, slots);
  const { heads: nh, headDim: hd, stateDim: ds, groups: ng } = spec;
  const xs = xbc.f32;
  const st = state.f32;
  const out = new Float32Array(n * nh * hd);
  const perGroup = nh / ng;
  for (let s = 0; s < batch.numSeqs; s++) {
    const [first, count, slot, fresh] = seqs.subarray(s * 4, s * 4 + 4);
    for (let h = 0; h < nh; h++) {
      const g = Math.floor(h / perGroup);
      const base = (slot * nh + h) * hd * ds;
      const S = new Float64Array(hd * ds);
      if (!fresh) for (let i = 0; i < hd * ds; i++) S[i] = st[base + i];
      for (let t = 0; t < count; t++) {
        const row = first + t;
        const delta = softplus(dt.f32[row * nh + h] + dtBias.f32[h]);
        const decay = Math.exp(delta * a.f32[h]);
        const bAt = row * width + nh * hd + g * ds;
        const cAt = row * width + nh * hd + ng * ds + g * ds;
        for (let i = 0; i < hd; i++) {
          const x = xs[row * width + h * hd + i];
          let y = 0;
          for (let j = 0; j < ds; j++) {
            const v = S[i * ds + j] * decay + xs[bAt + j] * x * delta;
            S[i * ds + j] = v;
            y += v * xs[cAt + j];
          }
          out[row * nh * hd + h * hd + i] = y + d.f32[h] * x;
        }
      }
      for (let i = 0; i < hd * ds; i++) st[base + i] = S[i];
    }
  }
  return f32Tensor(out, [n, nh * hd]);
}
