// Shared device helpers: weight element loads for every weight dtype, warp/block reductions.
// Weight dtypes (codes shared with the binding and src/backend/cuda): 0 f32, 1 f16, 2 bf16, 3 q8_0.
// q8_0 lives on the device repacked (see repack_q8_0 in convert.cu): all int8 quants row-major
// [rows * cols] first, then one f16 scale per 32 values, so kernels can use aligned vector loads.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <climits>

enum WDType : int { W_F32 = 0, W_F16 = 1, W_BF16 = 2, W_Q8 = 3 };

/** Byte offset of the scale array inside a repacked q8_0 allocation of `count` values. */
__host__ __device__ inline size_t q8_scales_offset(size_t count) { return (count + 255) & ~size_t(255); }

/** A weight matrix as kernels see it: base pointer plus (for q8_0) its scale array. */
struct WeightRef {
  const void* data;
  const __half* scales;  // q8_0 only
};

template <int WT>
__device__ __forceinline__ float load_w(const WeightRef& w, size_t i) {
  if constexpr (WT == W_F32) return __ldg(static_cast<const float*>(w.data) + i);
  else if constexpr (WT == W_F16) return __half2float(__ldg(static_cast<const __half*>(w.data) + i));
  else if constexpr (WT == W_BF16) return __bfloat162float(__ldg(static_cast<const __nv_bfloat16*>(w.data) + i));
  else return float(__ldg(static_cast<const int8_t*>(w.data) + i)) * __half2float(w.scales[i >> 5]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/** Block-wide sum; every thread gets the result. `scratch` holds 32 floats. blockDim % 32 == 0. */
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

/** Block-wide max; every thread gets the result. */
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Accurate expf: conformance holds silu·mul to 1e-5 relative.
__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }

/** A score in log2 units (scale·LOG2E already in it), soft-capped where `cap` > 0: cap·tanh(s/cap) in natural units (Gemma 2). */
__device__ __forceinline__ float soft_capped(float s, float cap) {
  if (cap <= 0.f) return s;
  constexpr float L2E = 1.4426950408889634f;
  return cap * L2E * tanhf(s / (cap * L2E));
}
