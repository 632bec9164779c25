// matmul dispatch: GEMV for decode-sized batches, tensor cores for f16/bf16 at prefill sizes,
// and a SIMT tiled kernel for everything else (f32 and q8_0 weights at n > 8, odd K).
#include "common.cuh"
#include "gemv.cuh"
#include "kernels.h"
#include "mma.cuh"

namespace ek {
namespace {

constexpr int ST = 64, SK = 16;  // SIMT tile: 64x64 outputs, 16-deep K slices, 256 threads x 4x4

template <int WT>
__global__ void __launch_bounds__(256) simt_gemm_kernel(const float* __restrict__ x, WeightRef w,
                                                        const float* __restrict__ bias, int n, int K, int N,
                                                        float* __restrict__ y) {
  __shared__ float As[SK][ST + 4];
  __shared__ float Bs[SK][ST + 4];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int m0 = blockIdx.y * ST, n0 = blockIdx.x * ST;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += SK) {
    // 64x16 slices of x and W, transposed into [k][row] so the inner loop reads rows contiguously.
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int e = tid + 256 * i, r = e >> 4, k = e & 15;
      const int gm = m0 + r, gn = n0 + r, gk = k0 + k;
      As[k][r] = gm < n && gk < K ? x[size_t(gm) * K + gk] : 0.f;
      Bs[k][r] = gn < N && gk < K ? load_w<WT>(w, size_t(gn) * K + gk) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < SK; k++) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; i++) { a[i] = As[k][ty + 16 * i]; b[i] = Bs[k][tx + 16 * i]; }
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
      if (gm < n && gn < N) y[size_t(gm) * N + gn] = acc[i][j] + (bias ? bias[gn] : 0.f);
    }
}

template <int WT, int NT>
void launch_gemv(const float* x, WeightRef w, const float* bias, int n, int K, int N, float* y, cudaStream_t s) {
  if (K % 8 == 0) {
    const int per_block = GEMV_WARPS * GEMV_ROWS;
    gemv_kernel<WT, NT><<<(N + per_block - 1) / per_block, 32 * GEMV_WARPS, 0, s>>>(x, w, bias, n, K, N, y);
  } else {
    gemv_scalar_kernel<WT, NT><<<(N + 3) / 4, 128, 0, s>>>(x, w, bias, n, K, N, y);
  }
}

template <int WT>
void launch_gemv_n(const float* x, WeightRef w, const float* bias, int n, int K, int N, float* y, cudaStream_t s) {
  if (n <= 1) launch_gemv<WT, 1>(x, w, bias, n, K, N, y, s);
  else if (n <= 2) launch_gemv<WT, 2>(x, w, bias, n, K, N, y, s);
  else if (n <= 4) launch_gemv<WT, 4>(x, w, bias, n, K, N, y, s);
  else launch_gemv<WT, 8>(x, w, bias, n, K, N, y, s);
}

template <int WT>
void launch_simt(const float* x, WeightRef w, const float* bias, int n, int K, int N, float* y, cudaStream_t s) {
  dim3 grid((N + ST - 1) / ST, (n + ST - 1) / ST);
  simt_gemm_kernel<WT><<<grid, 256, 0, s>>>(x, w, bias, n, K, N, y);
}

template <int WT, bool SPLIT>
cudaError_t launch_mma(dim3 grid, const float* x, const uint16_t* w, const float* bias, int n, int K, int N, float* y,
                       cudaStream_t s) {
  constexpr int bytes = mma_smem_bytes<SPLIT>();
  const cudaError_t e = cudaFuncSetAttribute(mma_gemm_kernel<WT, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  mma_gemm_kernel<WT, SPLIT><<<grid, MMA_THREADS, bytes, s>>>(x, w, bias, n, K, N, y);
  return cudaSuccess;
}

}  // namespace

int matmul_path(int dtype, int n, int K, int N) {
  (void)N;
  if (n <= 8) return 0;
  if ((dtype == W_F16 || dtype == W_BF16) && K % MMA_BK == 0) return 1;
  return 2;
}

cudaError_t matmul(const float* x, const void* wp, int dtype, const float* bias, int n, int K, int N, float* y,
                   int exact, int sm_count, cudaStream_t s) {
  (void)sm_count;
  if (n == 0 || N == 0) return cudaSuccess;
  if (K == 0) return cudaMemsetAsync(y, 0, size_t(n) * N * sizeof(float), s);  // bias-free empty sum
  WeightRef w{wp, reinterpret_cast<const __half*>(static_cast<const uint8_t*>(wp) +
                                                  q8_scales_offset(size_t(N) * K))};
  switch (matmul_path(dtype, n, K, N)) {
    case 0:
      switch (dtype) {
        case W_F32: launch_gemv_n<W_F32>(x, w, bias, n, K, N, y, s); break;
        case W_F16: launch_gemv_n<W_F16>(x, w, bias, n, K, N, y, s); break;
        case W_BF16: launch_gemv_n<W_BF16>(x, w, bias, n, K, N, y, s); break;
        default: launch_gemv_n<W_Q8>(x, w, bias, n, K, N, y, s); break;
      }
      break;
    case 1: {
      dim3 grid((N + MMA_BN - 1) / MMA_BN, (n + MMA_BM - 1) / MMA_BM);
      const auto* w16 = static_cast<const uint16_t*>(wp);
      cudaError_t e;
      if (dtype == W_F16) e = exact ? launch_mma<W_F16, true>(grid, x, w16, bias, n, K, N, y, s)
                                    : launch_mma<W_F16, false>(grid, x, w16, bias, n, K, N, y, s);
      else e = exact ? launch_mma<W_BF16, true>(grid, x, w16, bias, n, K, N, y, s)
                     : launch_mma<W_BF16, false>(grid, x, w16, bias, n, K, N, y, s);
      if (e != cudaSuccess) return e;
      break;
    }
    default:
      switch (dtype) {
        case W_F32: launch_simt<W_F32>(x, w, bias, n, K, N, y, s); break;
        case W_F16: launch_simt<W_F16>(x, w, bias, n, K, N, y, s); break;
        case W_BF16: launch_simt<W_BF16>(x, w, bias, n, K, N, y, s); break;
        default: launch_simt<W_Q8>(x, w, bias, n, K, N, y, s); break;
      }
  }
  return cudaGetLastError();
}

}  // namespace ek
