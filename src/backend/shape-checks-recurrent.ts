/**
 * Shape checks of the recurrent-state ops (Backend.causalConv1d, Backend.gatedDeltaNet), shared by
 * every backend, and the host-side check of a step's sequence table.
 */
import { BackendShapeError, type DeltaNetSpec, type RecurrentBatch, type SsmSpec, type Tensor } from "./types.ts";
import { expectRank, fmt } from "./shape-checks.ts";

/** The shapes of a causalConv1d call: x f32 [n, channels], weight f32 [channels, K], state f32 [slots, K - 1, channels]. */
export function expectConv1dShapes(x: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch, bias?: Tensor): { n: number; channels: number; kernel: number; slots: number } {
  expectRank(x, 2, "causalConv1d input", ["f32"]);
  expectRank(weight, 2, "causalConv1d weight", ["f32"]);
  expectRank(state, 3, "causalConv1d state", ["f32"]);
  const [n, channels] = x.shape;
  const kernel = weight.shape[1];
  if (weight.shape[0] !== channels || kernel < 2) {
    throw new BackendShapeError(`causalConv1d weight ${fmt(weight.shape)} must be [${channels}, K] with K of at least 2 for input ${fmt(x.shape)}`);
  }
  if (state.shape[1] !== kernel - 1 || state.shape[2] !== channels) {
    throw new BackendShapeError(`causalConv1d state ${fmt(state.shape)} must be [slots, ${kernel - 1}, ${channels}]`);
  }
  if (bias !== undefined) {
    expectRank(bias, 1, "causalConv1d bias", ["f32"]);
    if (bias.shape[0] !== channels) throw new BackendShapeError(`causalConv1d bias ${fmt(bias.shape)} must be [${channels}]`);
  }
  expectSeqTable(batch);
  return { n, channels, kernel, slots: state.shape[0] };
}

/** The shapes of a shortConv call: bcx [n, 3·C], weight [C, K], state [slots, K - 1, C]. */
export function expectShortConvShapes(bcx: Tensor, weight: Tensor, state: Tensor, batch: RecurrentBatch): { n: number; channels: number; kernel: number; slots: number } {
  expectRank(bcx, 2, "shortConv input", ["f32"]);
  expectRank(weight, 2, "shortConv weight", ["f32"]);
  expectRank(state, 3, "shortConv state", ["f32"]);
  const [n, width] = bcx.shape;
  const [channels, kernel] = weight.shape;
  if (width !== 3 * channels || kernel < 2) {
    throw new BackendShapeError(`shortConv input ${fmt(bcx.shape)} must be [n, 3 × ${channels}] (B, C and x) for weight ${fmt(weight.shape)} of K at least 2`);
  }
  if (state.shape[1] !== kernel - 1 || state.shape[2] !== channels) {
    throw new BackendShapeError(`shortConv state ${fmt(state.shape)} must be [slots, ${kernel - 1}, ${channels}]`);
  }
  expectSeqTable(batch);
  return { n, channels, kernel, slots: state.shape[0] };
}

/** The shapes of a gatedDeltaNet call ({@link DeltaNetSpec}); returns the width of x's rows and the slot count. */
export function expectDeltaNetShapes(
  x: Tensor, alpha: Tensor, beta: Tensor, decay: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: DeltaNetSpec,
): { n: number; width: number; slots: number } {
  const { numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv } = spec;
  const bad = Object.entries({ numKHeads: nk, numVHeads: nv, headKDim: dk, headVDim: dv }).find(([, v]) => !Number.isInteger(v) || v < 1);
  if (bad) throw new BackendShapeError(`gatedDeltaNet ${bad[0]} ${bad[1]} must be a positive integer`);
  if (nv % nk !== 0) throw new BackendShapeError(`gatedDeltaNet value heads ${nv} must be a multiple of key heads ${nk}`);
  if (spec.vHeadOrder !== "tiled" && spec.vHeadOrder !== "grouped") throw new BackendShapeError(`gatedDeltaNet value-head order "${String(spec.vHeadOrder)}" must be tiled or grouped`);
  if (!(spec.eps >= 0 && Number.isFinite(spec.eps))) throw new BackendShapeError(`gatedDeltaNet eps ${spec.eps} must be a finite number of at least 0`);
  expectRank(x, 2, "gatedDeltaNet input", ["f32"]);
  const [n, width] = x.shape;
  if (width !== 2 * nk * dk + nv * dv) throw new BackendShapeError(`gatedDeltaNet input ${fmt(x.shape)} must have ${2 * nk * dk + nv * dv} columns (q, k and v)`);
  for (const [t, what] of [[alpha, "alpha"], [beta, "beta"]] as const) {
    expectRank(t, 2, `gatedDeltaNet ${what}`, ["f32"]);
    if (t.shape[0] !== n || t.shape[1] !== nv) throw new BackendShapeError(`gatedDeltaNet ${what} ${fmt(t.shape)} must be [${n}, ${nv}]`);
  }
  for (const [t, what] of [[decay, "decay"], [dtBias, "dtBias"]] as const) {
    expectRank(t, 1, `gatedDeltaNet ${what}`, ["f32"]);
    if (t.shape[0] !== nv) throw new BackendShapeError(`gatedDeltaNet ${what} ${fmt(t.shape)} must be [${nv}]`);
  }
  expectRank(state, 4, "gatedDeltaNet state", ["f32"]);
  if (state.shape[1] !== nv || state.shape[2] !== dk || state.shape[3] !== dv) {
    throw new BackendShapeError(`gatedDeltaNet state ${fmt(state.shape)} must be [slots, ${nv}, ${dk}, ${dv}]`);
  }
  expectSeqTable(batch);
  return { n, width, slots: state.shape[0] };
}

/** The shapes of an ssmScan call ({@link SsmSpec}); returns the width of xbc's rows and the slot count. */
export function expectSsmShapes(
  xbc: Tensor, dt: Tensor, a: Tensor, d: Tensor, dtBias: Tensor, state: Tensor, batch: RecurrentBatch, spec: SsmSpec,
): { n: number; width: number; slots: number } {
  const { heads, headDim, stateDim, groups } = spec;
  const bad = Object.entries({ heads, headDim, stateDim, groups }).find(([, v]) => !Number.isInteger(v) || v < 1);
  if (bad) throw new BackendShapeError(`ssmScan ${bad[0]} ${bad[1]} must be a positive integer`);
  if (heads % groups !== 0) throw new BackendShapeError(`ssmScan heads ${heads} must be a multiple of groups ${groups}`);
  expectRank(xbc, 2, "ssmScan input", ["f32"]);
  const [n, width] = xbc.shape;
  if (width !== heads * headDim + 2 * groups * stateDim) throw new BackendShapeError(`ssmScan input ${fmt(xbc.shape)} must have ${heads * headDim + 2 * groups * stateDim} columns (x, B and C)`);
  expectRank(dt, 2, "ssmScan dt", ["f32"]);
  if (dt.shape[0] !== n || dt.shape[1] !== heads) throw new BackendShapeError(`ssmScan dt ${fmt(dt.shape)} must be [${n}, ${heads}]`);
  for (const [t, what] of [[a, "a"], [d, "d"], [dtBias, "dtBias"]] as const) {
    expectRank(t, 1, `ssmScan ${what}`, ["f32"]);
    if (t.shape[0] !== heads) throw new BackendShapeError(`ssmScan ${what} ${fmt(t.shape)} must be [${heads}]`);
  }
  expectRank(state, 4, "ssmScan state", ["f32"]);
  if (state.shape[1] !== heads || state.shape[2] !== headDim || state.shape[3] !== stateDim) {
    throw new BackendShapeError(`ssmScan state ${fmt(state.shape)} must be [slots, ${heads}, ${headDim}, ${stateDim}]`);
  }
  expectSeqTable(batch);
  return { n, width, slots: state.shape[0] };
}

function expectSeqTable(batch: RecurrentBatch): void {
  expectRank(batch.seqs, 2, "recurrent sequence table", ["i32"]);
  if (batch.seqs.shape[1] !== 4 || batch.seqs.shape[0] !== batch.numSeqs || batch.numSeqs < 1) {
    throw new BackendShapeError(`recurrent sequence table ${fmt(batch.seqs.shape)} must be [${batch.numSeqs}, 4] with at least one sequence`);
  }
}

/**
 * Host-side check of a sequence table's values (a device kernel cannot throw): each sequence's rows
 * inside 0..rows-1 and at least one, its slot inside 0..slots-1, its fresh flag 0 or 1, and no slot
 * twice (two sequences would race on one state).
 */
export function checkRecurrentSeqs(seqs: Int32Array, rows: number, slots: number): void {
  const seen = new Set<number>();
  for (let s = 0; s * 4 < seqs.length; s++) {
    const [first, count, slot, fresh] = seqs.subarray(s * 4, s * 4 + 4);
    if (first < 0 || count < 1 || first + count > rows) throw new RangeError(`Recurrent sequence ${s} covers rows ${first}..${first + count - 1}, outside 0..${rows - 1}`);
    if (slot < 0 || slot >= slots) throw new RangeError(`Recurrent state slot ${slot} of sequence ${s} is outside 0..${slots - 1}`);
    if (fresh !== 0 && fresh !== 1) throw new RangeError(`Recurrent sequence ${s} has fresh flag ${fresh}; expected 0 or 1`);
    if (seen.has(slot)) throw new RangeError(`Recurrent state slot ${slot} is used by two sequences of one step`);
    seen.add(slot);
  }
}
