// Matrix-vector path for decode-sized batches (n ≤ 8 rows of x): memory-bound on the weights, so
// each lane keeps several 16-byte weight loads in flight and x (small, L1-resident) is re-read.
#pragma once
#include "common.cuh"

namespace ek {

/** Eight consecutive weights in their stored form (decoded only when used). */
struct Raw8 {
  uint4 a;
  uint4 b;  // f32 only (8 floats = 32 bytes)
  float d;  // q8_0 scale
};

template <int WT>
__device__ __forceinline__ Raw8 load_raw8(const WeightRef& w, size_t i) {
  Raw8 r;
  if constexpr (WT == W_F32) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const float*>(w.data) + i);
    r.a = __ldg(p);
    r.b = __ldg(p + 1);
  } else if constexpr (WT == W_F16 || WT == W_BF16) {
    r.a = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + i));
  } else {
    uint2 q = __ldg(reinterpret_cast<const uint2*>(static_cast<const int8_t*>(w.data) + i));
    r.a.x = q.x;
    r.a.y = q.y;
    r.d = __half2float(w.scales[i >> 5]);
  }
  return r;
}

template <int WT>
__device__ __forceinline__ void decode8(const Raw8& r, float out[8]) {
  if constexpr (WT == W_F32) {
    out[0] = __uint_as_float(r.a.x); out[1] = __uint_as_float(r.a.y);
    out[2] = __uint_as_float(r.a.z); out[3] = __uint_as_float(r.a.w);
    out[4] = __uint_as_float(r.b.x); out[5] = __uint_as_float(r.b.y);
    out[6] = __uint_as_float(r.b.z); out[7] = __uint_as_float(r.b.w);
  } else if constexpr (WT == W_F16 || WT == W_BF16) {
    const uint32_t words[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if constexpr (WT == W_F16) {
        out[2 * j] = __half2float(__ushort_as_half(uint16_t(words[j] & 0xffffu)));
        out[2 * j + 1] = __half2float(__ushort_as_half(uint16_t(words[j] >> 16)));
      } else {
        out[2 * j] = __uint_as_float(words[j] << 16);
        out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const uint32_t word = j < 4 ? r.a.x : r.a.y;
      out[j] = float(int8_t((word >> (8 * (j & 3))) & 0xffu)) * r.d;
    }
  }
}

constexpr int GEMV_WARPS = 4;
constexpr int GEMV_ROWS = 2;   // output rows per warp
constexpr int GEMV_UNROLL = 2; // 256-element slices per row in flight

/** K % 8 == 0. Grid: ceil(N / (GEMV_WARPS * ROWS)) blocks of 32 * GEMV_WARPS threads. Each lane
 * keeps ROWS * UNROLL 16-byte weight loads in flight (ROWS, UNROLL: see kernels-cuda/bench). */
template <int WT, int NT, int ROWS = GEMV_ROWS, int UNROLL = GEMV_UNROLL>
__global__ void __launch_bounds__(32 * GEMV_WARPS, 4) gemv_kernel(const float* __restrict__ x, WeightRef w,
                                                               const float* __restrict__ bias, int n, int K, int N,
                                                               float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5)) * ROWS;
  if (row0 >= N) return;
  float acc[ROWS][NT];
#pragma unroll
  for (int r = 0; r < ROWS; r++)
#pragma unroll
    for (int t = 0; t < NT; t++) acc[r][t] = 0.f;
  constexpr int STEP = 256 * UNROLL;
  for (int k0 = lane * 8; k0 < K; k0 += STEP) {
    Raw8 raw[ROWS][UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
#pragma unroll
      for (int r = 0; r < ROWS; r++) {
        const int k = k0 + u * 256;
        const int row = min(row0 + r, N - 1);  // duplicate the last row rather than branch
        if (k < K) raw[r][u] = load_raw8<WT>(w, size_t(row) * K + k);
      }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const int k = k0 + u * 256;
      if (k >= K) continue;
      float wf[ROWS][8];
#pragma unroll
      for (int r = 0; r < ROWS; r++) decode8<WT>(raw[r][u], wf[r]);
#pragma unroll
      for (int t = 0; t < NT; t++) {
        if (t >= n) continue;
        const float4* xp = reinterpret_cast<const float4*>(x + size_t(t) * K + k);
        const float4 xa = __ldg(xp), xb = __ldg(xp + 1);
        const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
          for (int j = 0; j < 8; j++) acc[r][t] = fmaf(wf[r][j], xv[j], acc[r][t]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++)
#pragma unroll
    for (int t = 0; t < NT; t++) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && t < n && row0 + r < N) y[size_t(t) * N + row0 + r] = v + (bias ? bias[row0 + r] : 0.f);
    }
}

/** Any K (scalar loads): one warp per output row, all n ≤ NT tokens. */
template <int WT, int NT>
__global__ void gemv_scalar_kernel(const float* __restrict__ x, WeightRef w, const float* __restrict__ bias, int n,
                                   int K, int N, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= N) return;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) acc[t] = 0.f;
  for (int k = lane; k < K; k += 32) {
    const float wv = load_w<WT>(w, size_t(row) * K + k);
#pragma unroll
    for (int t = 0; t < NT; t++)
      if (t < n) acc[t] = fmaf(wv, __ldg(x + size_t(t) * K + k), acc[t]);
  }
#pragma unroll
  for (int t = 0; t < NT; t++) {
    const float v = warp_sum(acc[t]);
    if (lane == 0 && t < n) y[size_t(t) * N + row] = v + (bias ? bias[row] : 0.f);
  }
}

}  // namespace ek
