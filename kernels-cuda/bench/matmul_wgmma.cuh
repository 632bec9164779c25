// Set-aside Hopper GEMM (sm_90a only; not in the addon until it wins on a device, see docs/cuda.md):
// y [n, N] (f32) = x [n, K] · Wᵀ (+ bias), W [N, K] bf16 row-major, x f32 — the contract of
// mma_gemm_kernel<W_BF16, false> ("fast": x rounded once to bf16).
//   1. a pre-pass rounds x to bf16 [n, K] into a scratch buffer (wgmma_scratch_bytes);
//   2. a persistent, warp-specialized kernel: 3 warpgroups, 128x256x64 tiles. Warpgroup 0, one
//      thread, issues TMA loads (128-byte swizzle) of the x and W tiles into a 4-stage ring guarded by
//      mbarriers (full: TMA bytes landed; empty: both consumers are done reading). Warpgroups 1 and 2
//      each own 64 rows x 256 columns: wgmma.mma_async m64n256k16 from shared-memory descriptors,
//      f32 accumulators in registers (128 per thread), one wgmma group kept in flight (the previous
//      stage is released once the next group is issued). The epilogue adds the bias and stores f32
//      straight from registers, masked at the edges; the producer meanwhile fetches the next tile.
// Edges: TMA zero-fills rows past n / N and columns past K, so n, N are free and K needs only
// K % 8 == 0 (TMA's 16-byte stride rule); the launcher answers cudaErrorInvalidValue otherwise.
// No cuBLAS, no libcuda link: cuTensorMapEncodeTiled comes from cudaGetDriverEntryPointByVersion.
#pragma once
#include <cuda.h>          // CUtensorMap and its enums (types only)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace ek {
namespace wg {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CONSUMERS = 2;
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;  // 16 KiB + 32 KiB per stage
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
// Tiles first (1024-byte aligned for the 128-byte swizzle), then full[STAGES], empty[STAGES].
constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/** 2-D TMA tile load: box at (c0 = column, c1 = row) of the tensor map into shared memory. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
/** K-major operand, 128-byte swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart (SBO). */
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
/** Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits. */
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; i++) asm volatile("" : "+f"(d[i])::"memory");
}

#define EK_WG_D8(i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

/** d[64x256] += A[64x16] · B[16x256], both K-major in shared memory; scale-d = 1 (accumulate). */
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,"
      "%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,"
      "%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,"
      "%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,"
      "%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,"
      "%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
      "}, %128, %129, 1, 1, 1, 0, 0;\n"
      : EK_WG_D8(0), EK_WG_D8(8), EK_WG_D8(16), EK_WG_D8(24), EK_WG_D8(32), EK_WG_D8(40), EK_WG_D8(48),
        EK_WG_D8(56), EK_WG_D8(64), EK_WG_D8(72), EK_WG_D8(80), EK_WG_D8(88), EK_WG_D8(96), EK_WG_D8(104),
        EK_WG_D8(112), EK_WG_D8(120)
      : "l"(da), "l"(db));
}
#undef EK_WG_D8
#endif

/** Grid: min(tiles, SMs), THREADS threads, SMEM_BYTES dynamic shared memory. */
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                      const float* __restrict__ bias, int n, int K, int N, float* __restrict__ y) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t wg_smem_raw[];
  const uint32_t raw = uint32_t(__cvta_generic_to_shared(wg_smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t sA = base, sB = base + STAGES * A_BYTES;
  const uint32_t full = base + STAGES * STAGE_BYTES, empty = full + STAGES * 8;
  const int tid = threadIdx.x, wgi = tid / 128;
  const int tiles_m = (n + BM - 1) / BM, tiles = tiles_m * ((N + BN - 1) / BN);
  const int KT = (K + BK - 1) / BK;

  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(full + 8 * s, 1);                // the producer's arrive.expect_tx
      mbar_init(empty + 8 * s, CONSUMERS * 4);   // lane 0 of every consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmA)) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmB)) : "memory");
  }
  __syncthreads();

  if (wgi == 0) {  // producer: one thread walks the same tile sequence as the consumers
    if (tid != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int m0 = (t % tiles_m) * BM, n0 = (t / tiles_m) * BN;
      for (int kt = 0; kt < KT; kt++) {
        mbar_wait(empty + 8 * stage, phase ^ 1);  // first round passes: the slot starts free
        mbar_expect_tx(full + 8 * stage, STAGE_BYTES);  // full boxes, out-of-bounds parts zero-filled
        tma_load(sA + stage * A_BYTES, &tmA, full + 8 * stage, kt * BK, m0);
        tma_load(sB + stage * B_BYTES, &tmB, full + 8 * stage, kt * BK, n0);
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
    }
    return;
  }

  // Consumers: warpgroup c = wgi - 1 owns tile rows [64c, 64c + 64).
  const int c = wgi - 1, warp = (tid / 32) & 3, lane = tid & 31;
  int stage = 0;
  uint32_t phase = 0;
  float d[128];
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int m0 = (t % tiles_m) * BM, n0 = (t / tiles_m) * BN;
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.f;
    fence_acc(d);
    int prev = -1;
    for (int kt = 0; kt < KT; kt++) {
      mbar_wait(full + 8 * stage, phase);
      const uint64_t da = sw128_desc(sA + stage * A_BYTES + c * (64 * 128));
      const uint64_t db = sw128_desc(sB + stage * B_BYTES);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int k = 0; k < BK / 16; k++) wgmma_m64n256k16(d, da + 2 * k, db + 2 * k);  // +32 bytes per k16
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // the previous group is done
      if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);
      prev = stage;
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_acc(d);
    if (prev >= 0 && lane == 0) mbar_arrive(empty + 8 * prev);

    // Accumulator fragment (m64nNk16, f32): d[4j + 2h + e] is row 16*warp + lane/4 + 8h,
    // column 8j + 2*(lane%4) + e of this warpgroup's 64x256 block.
    const int row0 = m0 + 64 * c + 16 * warp + (lane >> 2);
    const bool pair = (N & 1) == 0 && (reinterpret_cast<uintptr_t>(y) & 7) == 0;  // float2 stores stay aligned
#pragma unroll
    for (int j = 0; j < 32; j++) {
      const int col = n0 + 8 * j + 2 * (lane & 3);
      if (col >= N) continue;
      const bool two = col + 1 < N;
      const float b0 = bias ? bias[col] : 0.f, b1 = bias && two ? bias[col + 1] : 0.f;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
        if (row >= n) continue;
        float* dst = y + size_t(row) * N + col;
        const float v0 = d[4 * j + 2 * h] + b0, v1 = d[4 * j + 2 * h + 1] + b1;
        if (two && pair) {
          *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        } else {
          dst[0] = v0;
          if (two) dst[1] = v1;
        }
      }
    }
  }
#else
  __trap();  // wgmma needs sm_90a; the launcher refuses other devices
#endif
}

/** x f32 -> bf16 (round to nearest even, as the mma.sync "fast" path rounds), 4 values a step. */
__global__ void x_to_bf16_kernel(const float4* __restrict__ x, uint2* __restrict__ xb, size_t quads) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < quads; i += size_t(gridDim.x) * blockDim.x) {
    const float4 v = x[i];
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    xb[i] = make_uint2(*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi));
  }
}

}  // namespace wg

/** Scratch bytes launch_wgmma_bf16 needs for x rounded to bf16. */
inline size_t wgmma_scratch_bytes(int n, int K) { return (size_t(n) * size_t(K) * 2 + 255) & ~size_t(255); }

/** Whether the wgmma path takes this shape (the dispatcher falls back otherwise). */
inline bool wgmma_shape_ok(int n, int K, int N) { return n > 0 && N > 0 && K > 0 && K % 8 == 0; }

namespace wg {
inline cudaError_t make_map(CUtensorMap* map, const void* p, int rows, int K, int box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return cudaErrorNotSupported;
  const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(K) * 2};  // bytes between rows
  const cuuint32_t box[2] = {cuuint32_t(BK), cuuint32_t(box_rows)};  // 64 bf16 = the 128-byte swizzle span
  const cuuint32_t estrides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides, box, estrides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}
}  // namespace wg

/** y = xb · Wᵀ (+ bias) with x already bf16 [n, K] (16-byte aligned, as W). sm_90 devices only. */
inline cudaError_t launch_wgmma_bf16_xb(const uint16_t* xb, const uint16_t* w, const float* bias, int n, int K, int N,
                                        float* y, cudaStream_t s) {
  if (n == 0 || N == 0) return cudaSuccess;
  if (!wgmma_shape_ok(n, K, N) || (reinterpret_cast<uintptr_t>(xb) | reinterpret_cast<uintptr_t>(w)) % 16 != 0)
    return cudaErrorInvalidValue;
  int dev, major, minor, sms;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  if (major != 9 || minor != 0) return cudaErrorNotSupported;
  CUtensorMap ta, tb;
  if ((e = wg::make_map(&ta, xb, n, K, wg::BM)) != cudaSuccess) return e;
  if ((e = wg::make_map(&tb, w, N, K, wg::BN)) != cudaSuccess) return e;
  e = cudaFuncSetAttribute(wg::wgmma_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wg::SMEM_BYTES);
  if (e != cudaSuccess) return e;
  const int tiles = ((n + wg::BM - 1) / wg::BM) * ((N + wg::BN - 1) / wg::BN);
  wg::wgmma_gemm_kernel<<<tiles < sms ? tiles : sms, wg::THREADS, wg::SMEM_BYTES, s>>>(ta, tb, bias, n, K, N, y);
  return cudaGetLastError();
}

/** The "fast" matmul contract with x in f32: rounds x into `scratch` (wgmma_scratch_bytes(n, K)), then the GEMM. */
inline cudaError_t launch_wgmma_bf16(const float* x, const uint16_t* w, const float* bias, int n, int K, int N, float* y,
                                     void* scratch, cudaStream_t s) {
  if (n == 0 || N == 0) return cudaSuccess;
  if (!wgmma_shape_ok(n, K, N) || reinterpret_cast<uintptr_t>(x) % 16 != 0) return cudaErrorInvalidValue;
  const size_t quads = size_t(n) * K / 4;
  const size_t blocks = (quads + 255) / 256;
  wg::x_to_bf16_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(reinterpret_cast<const float4*>(x),
                                                                                static_cast<uint2*>(scratch), quads);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return launch_wgmma_bf16_xb(static_cast<const uint16_t*>(scratch), w, bias, n, K, N, y, s);
}

}  // namespace ek
