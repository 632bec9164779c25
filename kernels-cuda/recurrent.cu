// Recurrent-state ops of Gated DeltaNet layers (Qwen3.5, Qwen3-Next): the depthwise causal
// convolution with SiLU, and the gated delta rule. Both walk each sequence's rows in order and carry
// their state across steps in per-slot state tensors, updated in place. The sequence table is
// i32 [num_seqs, 4] = (first row, row count, slot, fresh); the host range-checks it when it knows its
// values (shape-checks-recurrent.ts checkRecurrentSeqs), and these kernels skip a sequence whose rows
// or slot are out of range rather than touch memory outside the tensors.
#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

struct SeqRow {
  int first, count, slot, fresh;
};

/** The sequence's table row, or count 0 where it lies outside `n` rows or `slots` slots. */
__device__ __forceinline__ SeqRow load_seq(const int32_t* seqs, int seq, int n, int slots) {
  const int32_t* r = seqs + size_t(seq) * 4;
  SeqRow s{__ldg(r), __ldg(r + 1), __ldg(r + 2), __ldg(r + 3)};
  if (s.first < 0 || s.count < 1 || s.count > n - s.first || s.slot < 0 || s.slot >= slots) s.count = 0;
  return s;
}

// One thread per (sequence, channel): the K taps and the K - 1 previous inputs live in registers; each
// row's input enters the window once. Threads of a block hold consecutive channels, so every row's
// loads and stores, and the state's, are coalesced. GATED: LFM2's short convolution, x [n, 3C] holding
// each row's B, C and x; the window takes B·x, the output is C times the sum, with no activation.
template <int K, bool GATED>
__global__ void __launch_bounds__(128) causal_conv1d_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ state,
                                     const int32_t* __restrict__ seqs, int n, int C, int slots, const float* __restrict__ bias, float* __restrict__ y) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const SeqRow s = load_seq(seqs, blockIdx.x, n, slots);
  if (s.count == 0) return;
  const float b = bias != nullptr ? __ldg(bias + c) : 0.f;
  float tap[K];
#pragma unroll
  for (int j = 0; j < K; j++) tap[j] = __ldg(w + size_t(c) * K + j);
  float* st = state + size_t(s.slot) * (K - 1) * C + c;
  float win[K - 1];  // win[j] = u[t - (K - 1) + j]: the K - 1 inputs before row t, oldest first
#pragma unroll
  for (int j = 0; j < K - 1; j++) win[j] = s.fresh ? 0.f : st[size_t(j) * C];
#pragma unroll 1
  for (int t = 0; t < s.count; t++) {
    const size_t at = size_t(s.first + t) * C + c;
    const size_t row = size_t(s.first + t) * 3 * C + c;
    const float xv = GATED ? x[row] * x[row + 2 * size_t(C)] : x[at];
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < K - 1; j++) acc = fmaf(tap[j], win[j], acc);
    acc = fmaf(tap[K - 1], xv, acc);
    y[at] = GATED ? x[row + C] * acc : silu(acc + b);
#pragma unroll
    for (int j = 0; j < K - 2; j++) win[j] = win[j + 1];
    win[K - 2] = xv;
  }
#pragma unroll
  for (int j = 0; j < K - 1; j++) st[size_t(j) * C] = win[j];
}

// Rows of a state column each thread holds in registers; a column of dk rows is split over P threads
// (P a power of two, P·DN_ROWS ≥ dk), thread `part` holding rows part, part + P, part + 2P, ...
constexpr int DN_ROWS = 32;

/** Sums of a and b over the block (≤ 4 warps); every thread gets both. `scratch` holds 8 floats. */
__device__ __forceinline__ float2 block_sum2(float a, float b, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    scratch[warp] = a;
    scratch[4 + warp] = b;
  }
  __syncthreads();
  float2 r{0.f, 0.f};
  for (int i = 0; i < warps; i++) {
    r.x += scratch[i];
    r.y += scratch[4 + i];
  }
  return r;
}

/** Sum over the P adjacent lanes that share a column (P divides 32). */
template <int P>
__device__ __forceinline__ float column_sum(float v) {
#pragma unroll
  for (int o = P / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float softplus(float z) { return z > 20.f ? z : log1pf(expf(z)); }

// The gated delta rule. Block (sequence, value head h, tile of columns): the columns of S [dk, dv]
// evolve independently, so a block holds blockDim / P of them, P threads per column, each thread
// DN_ROWS of its column's rows in registers. Per row, the block stages the row's raw q and k slices in
// shared memory and reduces their squared norms together; the norms' reciprocals (and q's 1/√dk) are
// folded into the column's scalars instead of rescaling the slices. Rows past dk are zero in shared
// memory, so the padded registers stay zero and the loops need no bounds.
template <int P>
__global__ void __launch_bounds__(128) gated_delta_net_kernel(DeltaNetArgs a) {
  __shared__ float qs[DN_ROWS * 8];
  __shared__ float ks[DN_ROWS * 8];
  __shared__ float scratch[8];
  const int h = blockIdx.y;
  const SeqRow s = load_seq(a.seqs, blockIdx.x, a.n, a.slots);
  if (s.count == 0) return;  // uniform over the block
  const int dk = a.dk, dv = a.dv, nv = a.nv;
  const int kh = a.grouped ? h / (nv / a.nk) : h % a.nk;
  const int part = threadIdx.x % P;
  const int j = blockIdx.z * (blockDim.x / P) + threadIdx.x / P;
  const bool live = j < dv;
  const int width = 2 * a.nk * dk + nv * dv;
  for (int i = dk + threadIdx.x; i < P * DN_ROWS; i += blockDim.x) {
    qs[i] = 0.f;
    ks[i] = 0.f;
  }
  float S[DN_ROWS];
  float* st = a.state + (size_t(s.slot) * nv + h) * size_t(dk) * dv + j;
#pragma unroll
  for (int r = 0; r < DN_ROWS; r++) {
    const int i = part + P * r;
    S[r] = live && !s.fresh && i < dk ? st[size_t(i) * dv] : 0.f;
  }
  const float dh = a.decay[h], bias = a.dt_bias[h];
  const float q_scale = rsqrtf(float(dk));
#pragma unroll 1
  for (int t = 0; t < s.count; t++) {
    const int row = s.first + t;
    const float* xr = a.x + size_t(row) * width;
    __syncthreads();  // the previous row's readers of qs, ks and scratch are done
    float qq = 0.f, kk = 0.f;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      const float qv = xr[kh * dk + i], kv = xr[a.nk * dk + kh * dk + i];
      qs[i] = qv;
      ks[i] = kv;
      qq = fmaf(qv, qv, qq);
      kk = fmaf(kv, kv, kk);
    }
    const float2 norms = block_sum2(qq, kk, scratch);  // its barrier also publishes qs and ks
    const float inv_q = q_scale / fmaxf(sqrtf(norms.x), a.eps);
    const float inv_k = 1.f / fmaxf(sqrtf(norms.y), a.eps);
    const float g = dh * softplus(a.alpha[size_t(row) * nv + h] + bias);
    const float decay = expf(g);
    const float b = 1.f / (1.f + expf(-a.beta[size_t(row) * nv + h]));
    // Sᵀk over the decayed state, then u = (v − Sᵀk)·b; S += k uᵀ; out = Sᵀq.
    float sk = 0.f;
#pragma unroll
    for (int r = 0; r < DN_ROWS; r++) {
      S[r] *= decay;
      sk = fmaf(S[r], ks[part + P * r], sk);
    }
    sk = column_sum<P>(sk) * inv_k;
    const float v = live ? xr[2 * a.nk * dk + h * dv + j] : 0.f;
    const float uk = (v - sk) * b * inv_k;  // u scaled by k's normalisation
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < DN_ROWS; r++) {
      S[r] = fmaf(ks[part + P * r], uk, S[r]);
      o = fmaf(S[r], qs[part + P * r], o);
    }
    o = column_sum<P>(o);
    if (live && part == 0) a.out[size_t(row) * nv * dv + size_t(h) * dv + j] = o * inv_q;
  }
  if (!live) return;
#pragma unroll
  for (int r = 0; r < DN_ROWS; r++) {
    const int i = part + P * r;
    if (i < dk) st[size_t(i) * dv] = S[r];
  }
}

}  // namespace

namespace {
template <bool GATED>
cudaError_t launch_conv1d(const float* x, const float* w, float* state, const int32_t* seqs, int num_seqs, int n, int C, int K, int slots,
                          const float* bias, float* y, cudaStream_t s) {
  const int threads = C >= 128 ? 128 : (C + 31) / 32 * 32;
  const dim3 grid(unsigned(num_seqs), unsigned((C + threads - 1) / threads));
  switch (K) {
    case 2: causal_conv1d_kernel<2, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    case 3: causal_conv1d_kernel<3, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    case 4: causal_conv1d_kernel<4, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    case 5: causal_conv1d_kernel<5, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    case 6: causal_conv1d_kernel<6, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    case 7: causal_conv1d_kernel<7, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    case 8: causal_conv1d_kernel<8, GATED><<<grid, threads, 0, s>>>(x, w, state, seqs, n, C, slots, bias, y); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
}  // namespace

cudaError_t causal_conv1d(const float* x, const float* w, float* state, const int32_t* seqs, int num_seqs, int n, int C,
                          int K, int slots, bool gated, const float* bias, float* y, cudaStream_t s) {
  if (num_seqs == 0 || C == 0) return cudaSuccess;
  return gated ? launch_conv1d<true>(x, w, state, seqs, num_seqs, n, C, K, slots, nullptr, y, s)
               : launch_conv1d<false>(x, w, state, seqs, num_seqs, n, C, K, slots, bias, y, s);
}

cudaError_t gated_delta_net(const DeltaNetArgs& a, int num_seqs, cudaStream_t s) {
  if (num_seqs == 0 || a.nv == 0 || a.dv == 0) return cudaSuccess;
  if (a.dk < 1 || a.dk > DELTA_NET_MAX_KEY_DIM) return cudaErrorInvalidValue;
  const int need = (a.dk + DN_ROWS - 1) / DN_ROWS;  // threads per column: the next power of two
  const int P = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8;
  const int want = (a.dv * P + 31) / 32 * 32;
  const int threads = want < 128 ? want : 128;
  const int cols = threads / P;
  const dim3 grid(unsigned(num_seqs), unsigned(a.nv), unsigned((a.dv + cols - 1) / cols));
  switch (P) {
    case 1: gated_delta_net_kernel<1><<<grid, threads, 0, s>>>(a); break;
    case 2: gated_delta_net_kernel<2><<<grid, threads, 0, s>>>(a); break;
    case 4: gated_delta_net_kernel<4><<<grid, threads, 0, s>>>(a); break;
    default: gated_delta_net_kernel<8><<<grid, threads, 0, s>>>(a); break;
  }
  return cudaGetLastError();
}

namespace {
// Mamba-2's scan (Backend.ssmScan): one warp per (sequence, head, state row i); the row's stateDim
// values spread over the warp's lanes (SSM_PER_LANE each), so each step is a fused multiply-add per
// value and one warp sum. Rows of a head sit in consecutive warps of a block.
constexpr int SSM_PER_LANE = 8;
__global__ void __launch_bounds__(128) ssm_scan_kernel(SsmArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.z * (blockDim.x / 32) + warp;
  const int h = blockIdx.y;
  const SeqRow s = load_seq(a.seqs, blockIdx.x, a.n, a.slots);
  if (s.count == 0 || i >= a.hd) return;
  const int ds = a.ds;
  const int g = h / (a.heads / a.groups);
  const size_t width = size_t(a.heads) * a.hd + 2 * size_t(a.groups) * ds;
  float* st = a.state + ((size_t(s.slot) * a.heads + h) * a.hd + i) * ds;
  float S[SSM_PER_LANE];
#pragma unroll
  for (int r = 0; r < SSM_PER_LANE; r++) {
    const int j = lane + 32 * r;
    S[r] = (j < ds && !s.fresh) ? st[j] : 0.f;
  }
  const float rate = __ldg(a.a + h), bias = __ldg(a.dt_bias + h), skip = __ldg(a.d + h);
#pragma unroll 1
  for (int t = 0; t < s.count; t++) {
    const size_t row = size_t(s.first) + t;
    const float* xr = a.xbc + row * width;
    const float v = __ldg(a.dt + row * a.heads + h) + bias;
    const float delta = v > 20.f ? v : log1pf(expf(v));
    const float decay = expf(delta * rate);
    const float x = __ldg(xr + size_t(h) * a.hd + i);
    const float xd = x * delta;
    const float* B = xr + size_t(a.heads) * a.hd + size_t(g) * ds;
    const float* Cv = B + size_t(a.groups) * ds;
    float y = 0.f;
#pragma unroll
    for (int r = 0; r < SSM_PER_LANE; r++) {
      const int j = lane + 32 * r;
      if (j < ds) {
        S[r] = fmaf(S[r], decay, __ldg(B + j) * xd);
        y = fmaf(S[r], __ldg(Cv + j), y);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
    if (lane == 0) a.out[row * a.heads * a.hd + size_t(h) * a.hd + i] = fmaf(skip, x, y);
  }
#pragma unroll
  for (int r = 0; r < SSM_PER_LANE; r++) {
    const int j = lane + 32 * r;
    if (j < ds) st[j] = S[r];
  }
}
}  // namespace

cudaError_t ssm_scan(const SsmArgs& a, int num_seqs, cudaStream_t s) {
  if (num_seqs == 0 || a.heads == 0 || a.hd == 0) return cudaSuccess;
  if (a.ds < 1 || a.ds > SSM_MAX_STATE_DIM || a.groups < 1 || a.heads % a.groups != 0) return cudaErrorInvalidValue;
  const int rows_per_block = 4;
  const dim3 grid(unsigned(num_seqs), unsigned(a.heads), unsigned((a.hd + rows_per_block - 1) / rows_per_block));
  ssm_scan_kernel<<<grid, 32 * rows_per_block, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace ek
