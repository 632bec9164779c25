/**
 * The shape of the CUDA addon (kernels-cuda/binding.cpp) as TypeScript sees it. Device pointers
 * are BigInt; 0 stands for "none". Argument order mirrors the binding's comments.
 */

/** Device pointer as the addon returns it. */
export type DevicePtr = bigint;

/** What `deviceCount()` reports; `error` is set when the runtime could not query devices. */
export interface DeviceCountResult {
  count: number;
  error?: string;
  runtimeVersion?: number;
}

/** Facts about the context's device. */
export interface NativeDeviceInfo {
  name: string;
  ccMajor: number;
  ccMinor: number;
  smCount: number;
  totalBytes: number;
  peakGBps: number;
  pooledBytes: number;
  liveBytes: number;
}

/** One device, its stream and allocation pool. Every method throws an Error naming the failing CUDA call. */
export interface NativeContext {
  info(): NativeDeviceInfo;
  alloc(bytes: number): DevicePtr;
  zeros(bytes: number): DevicePtr;
  free(p: DevicePtr): void;
  upload(dst: DevicePtr, data: Float32Array | Int32Array | Uint8Array): void;
  uploadQ8(raw: Uint8Array, count: number): DevicePtr;
  download(src: DevicePtr, bytes: number): ArrayBuffer;
  sync(): void;
  destroy(): void;
  mark(): void;
  sinceMarkMs(): number;
  toF32(w: DevicePtr, dtype: number, count: number): DevicePtr;
  fillRandom(dtype: number, count: number, seed: number, scale: number): DevicePtr;
  copyBytes(src: DevicePtr, dst: DevicePtr, bytes: number): void;
  embedding(table: DevicePtr, dtype: number, ids: DevicePtr, n: number, dim: number, vocab: number): DevicePtr;
  gatherRows(x: DevicePtr, idx: DevicePtr, m: number, d: number, rows: number): DevicePtr;
  sliceColumns(x: DevicePtr, rows: number, cols: number, start: number, width: number): DevicePtr;
  concatColumns(a: DevicePtr, b: DevicePtr, rows: number, colsA: number, colsB: number): DevicePtr;
  scatterAdd(x: DevicePtr, index: DevicePtr, values: DevicePtr, m: number, size: number): void;
  maskLogits(logits: DevicePtr, rows: DevicePtr, bits: DevicePtr, m: number, n: number, vocab: number): void;
  penalizeRepeats(logits: DevicePtr, rows: DevicePtr, bits: DevicePtr, factors: DevicePtr, m: number, n: number, vocab: number): void;
  penalizeSampled(
    logits: DevicePtr, rows: DevicePtr, sampled: DevicePtr, history: DevicePtr, seen: DevicePtr, present: DevicePtr, params: DevicePtr,
    m: number, n: number, vocab: number, h: number, count: number,
  ): void;
  add(a: DevicePtr, b: DevicePtr, count: number): DevicePtr;
  siluMul(gate: DevicePtr, up: DevicePtr, count: number): DevicePtr;
  /** gelu(gate) * up, GELU's tanh approximation. */
  geluMul(gate: DevicePtr, up: DevicePtr, count: number): DevicePtr;
  swigluOai(gate: DevicePtr, up: DevicePtr, count: number, alpha: number, limit: number): DevicePtr;
  softcap(x: DevicePtr, count: number, cap: number): DevicePtr;
  /** max(x, 0)² elementwise. */
  reluSquared(x: DevicePtr, count: number): DevicePtr;
  /** sigmoid(gate) * x. */
  sigmoidMul(gate: DevicePtr, x: DevicePtr, count: number): DevicePtr;
  /**
   * Causal convolution with SiLU → y f32 [n, channels]; `state` f32 [slots, kernel - 1, channels] is
   * updated in place; `seqs` i32 [numSeqs, 4] (first row, rows, slot, fresh); kernel 2..8; `zero` 1
   * clears y first (rows no sequence covers); `gated` 1: LFM2's short convolution, x [n, 3·channels]
   * holding B, C and x (Backend.shortConv); `bias` f32 [channels] added before SiLU, or 0n for none.
   */
  causalConv1d(
    x: DevicePtr, w: DevicePtr, state: DevicePtr, seqs: DevicePtr, numSeqs: number, n: number, channels: number, kernel: number,
    slots: number, zero: number, gated: number, bias: DevicePtr,
  ): DevicePtr;
  /**
   * The gated delta rule → out f32 [n, nv · dv]; `state` f32 [slots, nv, dk, dv] is updated in place;
   * `seqs` and `zero` as for causalConv1d; `grouped` 1 for the "grouped" value-head order; dk ≤ 256.
   */
  gatedDeltaNet(
    x: DevicePtr, alpha: DevicePtr, beta: DevicePtr, decay: DevicePtr, dtBias: DevicePtr, state: DevicePtr, seqs: DevicePtr,
    numSeqs: number, n: number, nk: number, nv: number, dk: number, dv: number, grouped: number, eps: number, slots: number,
    zero: number,
  ): DevicePtr;
  /** Mamba-2's scan → out f32 [n, heads · hd]; `state` f32 [slots, heads, hd, ds] is updated in place; `seqs` and `zero` as for causalConv1d; ds ≤ 256. */
  ssmScan(
    xbc: DevicePtr, dt: DevicePtr, a: DevicePtr, d: DevicePtr, dtBias: DevicePtr, state: DevicePtr, seqs: DevicePtr,
    numSeqs: number, n: number, heads: number, hd: number, ds: number, groups: number, slots: number, zero: number,
  ): DevicePtr;
  /** `groups` weight rows of `cols`: row r takes weight row r mod groups. */
  rmsnorm(x: DevicePtr, w: DevicePtr, rows: number, cols: number, eps: number, groups: number): DevicePtr;
  addRmsnorm(x: DevicePtr, r: DevicePtr, w: DevicePtr, rows: number, cols: number, eps: number): [DevicePtr, DevicePtr];
  softmax(x: DevicePtr, rows: number, cols: number): DevicePtr;
  argmax(x: DevicePtr, rows: number, cols: number): DevicePtr;
  /** `factors` is an f32 [rotDim / 2] frequency-divisor buffer, or 0n for none; `magnitude` multiplies the rotated pairs. */
  rope(
    x: DevicePtr, pos: DevicePtr, n: number, heads: number, headDim: number, rotDim: number, theta: number,
    neox: number, factors: DevicePtr, magnitude: number,
  ): DevicePtr;
  kvWrite(
    k: DevicePtr, v: DevicePtr, kc: DevicePtr, vc: DevicePtr, slots: DevicePtr, n: number, row: number,
    capacity: number,
  ): void;
  ropeKvWrite(
    qkv: DevicePtr, pos: DevicePtr, slots: DevicePtr, n: number, heads: number, kvHeads: number, headDim: number,
    rotDim: number, theta: number, neox: number, kc: DevicePtr, vc: DevicePtr, capacity: number, factors: DevicePtr,
  ): DevicePtr;
  matmul(
    x: DevicePtr, w: DevicePtr, dtype: number, bias: DevicePtr, n: number, k: number, nOut: number, exact: number,
  ): DevicePtr;
  matmulPath(dtype: number, n: number, k: number, nOut: number): number;
  attention(
    q: DevicePtr, kc: DevicePtr, vc: DevicePtr, seq: DevicePtr, pos: DevicePtr, tables: DevicePtr, n: number,
    heads: number, kvHeads: number, headDim: number, blockSize: number, maxBlocks: number, numBlocks: number,
    maxContext: number, scale: number, rows: DevicePtr, rowCount: number, tiles: DevicePtr, tileCount: number,
    /** Sliding window in positions, 0 for none; `sinks` f32 [heads] or 0n; `softcap` 0 for none. */
    window: number, sinks: DevicePtr, softcap: number,
  ): DevicePtr;
  sample(logits: DevicePtr, rows: number, vocab: number, params: Float32Array): DevicePtr;
  /**
   * Top-k routing of logits f32 [n, experts] → [ids i32 [n, k], weights f32 [n, k]]; experts ≤ 4096;
   * `bias` an f32 [experts] selection bias or 0n; `sigmoid` 1 for sigmoid gating; weights times `scale`;
   * `groups` > 1 routes within the `groupsUsed` best expert groups (1, 1 for none).
   */
  moeRoute(
    logits: DevicePtr, n: number, experts: number, k: number, normalize: number, bias: DevicePtr, sigmoid: number, scale: number,
    groups: number, groupsUsed: number,
  ): [DevicePtr, DevicePtr];
  /** y f32 [n·k, nOut] = x · W[ids]ᵀ, W stacked [experts, nOut, inner]; `xPerRow` 1 when x has n·k rows, 0 for n. */
  matmulExperts(
    x: DevicePtr, w: DevicePtr, dtype: number, ids: DevicePtr, n: number, k: number, experts: number, inner: number,
    nOut: number, xPerRow: number,
  ): DevicePtr;
  /** out f32 [n, d] = Σ_j weights[t, j] · y[t·k + j, :]. */
  moeCombine(y: DevicePtr, weights: DevicePtr, n: number, k: number, d: number): DevicePtr;
}

/** The addon's exports. */
export interface NativeCudaModule {
  deviceCount(): DeviceCountResult;
  /** Throws an Error naming the failing CUDA call (e.g. no driver) before any context exists. */
  createContext(device: number): NativeContext;
}
