// Tensor-core GEMM for f16/bf16 weights: y [n, N] = x [n, K] · Wᵀ with x in f32.
// 128x128x32 tiles, 8 warps (2 x 4, 64x32 each), mma.sync m16n8k16 with f32 accumulation.
// x is converted to the weight's 16-bit type while it is staged into shared memory (registers
// carry the next tile's f32 values during the current tile's MMAs); W arrives by cp.async.
#pragma once
#include "common.cuh"

namespace ek {

constexpr int MMA_BM = 128, MMA_BN = 128, MMA_BK = 32, MMA_PAD = 8, MMA_THREADS = 256;
constexpr int MMA_LD = MMA_BK + MMA_PAD;  // 80-byte rows: ldmatrix phases hit distinct banks

template <int WT>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (WT == W_F16) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(smem));
  const int size = valid ? 16 : 0;  // size 0 zero-fills rows past N
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(size));
}

template <int WT>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  if constexpr (WT == W_F16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

/** Requires K % 32 == 0. Grid (ceil(N/128), ceil(n/128)), 256 threads. */
template <int WT>
__global__ void __launch_bounds__(MMA_THREADS, 2)
    mma_gemm_kernel(const float* __restrict__ x, const uint16_t* __restrict__ w, const float* __restrict__ bias,
                    int n, int K, int N, float* __restrict__ y) {
  __shared__ __align__(16) uint16_t As[2][MMA_BM][MMA_LD];
  __shared__ __align__(16) uint16_t Bs[2][MMA_BN][MMA_LD];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // warp tile origin: (wm*64, wn*32)
  const int m0 = blockIdx.y * MMA_BM, n0 = blockIdx.x * MMA_BN;

  // x staging: each thread owns 4 float4 of the 128x32 tile (rows tid/8 + 32i, cols 4*(tid%8)).
  float4 xa[4];
  auto load_x = [&](int k0) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int row = m0 + (tid >> 3) + 32 * i;
      xa[i] = row < n ? __ldg(reinterpret_cast<const float4*>(x + size_t(row) * K + k0) + (tid & 7))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto store_x = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
      uint2 v = make_uint2(pack2<WT>(xa[i].x, xa[i].y), pack2<WT>(xa[i].z, xa[i].w));
      *reinterpret_cast<uint2*>(&As[buf][(tid >> 3) + 32 * i][4 * (tid & 7)]) = v;
    }
  };
  auto load_w = [&](int buf, int k0) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int c = tid + MMA_THREADS * i;  // 512 chunks of 16 bytes
      const int row = c >> 2, col = (c & 3) * 8;
      const bool ok = n0 + row < N;
      const uint16_t* src = w + size_t(ok ? n0 + row : 0) * K + k0 + col;
      cp_async16(&Bs[buf][row][col], src, ok);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) acc[i][j][r] = 0.f;

  const int KT = K / MMA_BK;
  load_w(0, 0);
  load_x(0);
  store_x(0);
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();

  for (int kt = 0; kt < KT; kt++) {
    const int cur = kt & 1;
    const bool more = kt + 1 < KT;
    if (more) {
      load_w(cur ^ 1, (kt + 1) * MMA_BK);
      load_x((kt + 1) * MMA_BK);
    }
#pragma unroll
    for (int kk = 0; kk < MMA_BK; kk += 16) {
      uint32_t af[4][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
        ldmatrix_x4(af[mi], &As[cur][wm * 64 + mi * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
      for (int nj = 0; nj < 2; nj++) {
        uint32_t r[4];
        ldmatrix_x4(r, &Bs[cur][wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)][kk + ((lane >> 3) & 1) * 8]);
        bf[2 * nj][0] = r[0];
        bf[2 * nj][1] = r[1];
        bf[2 * nj + 1][0] = r[2];
        bf[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma16816<WT>(acc[mi][ni], af[mi], bf[ni]);
    }
    if (more) {
      store_x(cur ^ 1);
      asm volatile("cp.async.wait_all;\n" ::);
    }
    __syncthreads();
  }

#pragma unroll
  for (int mi = 0; mi < 4; mi++)
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
      const int col = n0 + wn * 32 + ni * 8 + (lane & 3) * 2;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = m0 + wm * 64 + mi * 16 + (lane >> 2) + h * 8;
        if (row >= n) continue;
#pragma unroll
        for (int e = 0; e < 2; e++)
          if (col + e < N) y[size_t(row) * N + col + e] = acc[mi][ni][2 * h + e] + (bias ? bias[col + e] : 0.f);
      }
    }
}

}  // namespace ek
