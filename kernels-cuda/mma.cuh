// Tensor-core GEMM for f16/bf16 weights: y [n, N] = x [n, K] · Wᵀ with x in f32.
// 128x128x32 tiles, 8 warps (2 x 4, 64x32 each), mma.sync m16n8k16 with f32 accumulation.
// x is converted to the weight's 16-bit type while it is staged into shared memory (registers
// carry the next tile's f32 values during the current tile's MMAs); W arrives by cp.async.
// SPLIT ("exact", the default at the interface): x = hi + lo, both 16-bit, two MMAs per fragment,
// so activations keep ~16 (bf16) or ~22 (f16) mantissa bits, as f32 inputs demand. Without
// SPLIT ("fast") x is rounded once to 16 bits, as torch.matmul on bf16 tensors does.
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

/** The 16-bit pair nearest (a, b), and the pair nearest what it leaves over. */
template <int WT>
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  if constexpr (WT == W_F16) {
    __half2 h = __floats2half2_rn(a, b);
    const float2 f = __half22float2(h);
    __half2 l = __floats2half2_rn(a - f.x, b - f.y);
    hi = *reinterpret_cast<uint32_t*>(&h);
    lo = *reinterpret_cast<uint32_t*>(&l);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    const float2 f = __bfloat1622float2(h);
    __nv_bfloat162 l = __floats2bfloat162_rn(a - f.x, b - f.y);
    hi = *reinterpret_cast<uint32_t*>(&h);
    lo = *reinterpret_cast<uint32_t*>(&l);
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

/** Dynamic shared memory the kernel needs. */
template <bool SPLIT>
constexpr int mma_smem_bytes() { return (SPLIT ? 6 : 4) * MMA_BM * MMA_LD * 2; }

/** Requires K % 32 == 0. Grid (ceil(N/128), ceil(n/128)), 256 threads, mma_smem_bytes<SPLIT>(). */
template <int WT, bool SPLIT>
__global__ void __launch_bounds__(MMA_THREADS, 2)
    mma_gemm_kernel(const float* __restrict__ x, const uint16_t* __restrict__ w, const float* __restrict__ bias,
                    int n, int K, int N, float* __restrict__ y) {
  extern __shared__ __align__(16) uint16_t smem[];
  constexpr int TILE = MMA_BM * MMA_LD;  // one buffer of one operand (BM == BN)
  // Buffers: x hi [2], W [2], x lo [2] (SPLIT only).
  auto As = [&](int buf, int r, int c) { return smem + buf * TILE + r * MMA_LD + c; };
  auto Bs = [&](int buf, int r, int c) { return smem + (2 + buf) * TILE + r * MMA_LD + c; };
  auto Al = [&](int buf, int r, int c) { return smem + (4 + buf) * TILE + r * MMA_LD + c; };
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
      const int r = (tid >> 3) + 32 * i, c = 4 * (tid & 7);
      if constexpr (SPLIT) {
        uint2 hi, lo;
        split2<WT>(xa[i].x, xa[i].y, hi.x, lo.x);
        split2<WT>(xa[i].z, xa[i].w, hi.y, lo.y);
        *reinterpret_cast<uint2*>(As(buf, r, c)) = hi;
        *reinterpret_cast<uint2*>(Al(buf, r, c)) = lo;
      } else {
        *reinterpret_cast<uint2*>(As(buf, r, c)) =
            make_uint2(pack2<WT>(xa[i].x, xa[i].y), pack2<WT>(xa[i].z, xa[i].w));
      }
    }
  };
  auto load_w = [&](int buf, int k0) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int c = tid + MMA_THREADS * i;  // 512 chunks of 16 bytes
      const int row = c >> 2, col = (c & 3) * 8;
      const bool ok = n0 + row < N;
      const uint16_t* src = w + size_t(ok ? n0 + row : 0) * K + k0 + col;
      cp_async16(Bs(buf, row, col), src, ok);
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
      uint32_t bf[4][2];
#pragma unroll
      for (int nj = 0; nj < 2; nj++) {
        uint32_t r[4];
        ldmatrix_x4(r, Bs(cur, wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), kk + ((lane >> 3) & 1) * 8));
        bf[2 * nj][0] = r[0];
        bf[2 * nj][1] = r[1];
        bf[2 * nj + 1][0] = r[2];
        bf[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; mi++) {
        uint32_t af[4];
        const int ar = wm * 64 + mi * 16 + (lane & 15), ac = kk + (lane >> 4) * 8;
        ldmatrix_x4(af, As(cur, ar, ac));
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma16816<WT>(acc[mi][ni], af, bf[ni]);
        if constexpr (SPLIT) {
          ldmatrix_x4(af, Al(cur, ar, ac));
#pragma unroll
          for (int ni = 0; ni < 4; ni++) mma16816<WT>(acc[mi][ni], af, bf[ni]);
        }
      }
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
