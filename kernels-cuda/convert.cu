// Weight layout conversion (q8_0 repack, dequantize for download), seeded random fill for
// benchmarks, and a copy kernel that measures achievable memory bandwidth.
#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

inline unsigned grid_for(size_t count, int threads) {
  size_t g = (count + threads - 1) / threads;
  return unsigned(g < 65535u * 64u ? g : 65535u * 64u);
}

// One thread per 32-value block: GGUF's f16 scale + 32 int8 → quants[i*32..] and scales[i].
__global__ void repack_q8_0_kernel(const uint8_t* raw, int8_t* qs, __half* scales, size_t blocks) {
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < blocks; b += size_t(gridDim.x) * blockDim.x) {
    const uint8_t* src = raw + b * 34;
    scales[b] = __ushort_as_half(uint16_t(src[0] | (src[1] << 8)));
#pragma unroll
    for (int j = 0; j < 32; j++) qs[b * 32 + j] = int8_t(src[2 + j]);
  }
}

template <int WT>
__global__ void to_f32_kernel(WeightRef w, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = load_w<WT>(w, i);
}

__device__ __forceinline__ float hash_uniform(uint64_t seed, size_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) * (1.f / 16777216.f) * 2.f - 1.f;
}

__global__ void fill_random_kernel(void* out, int dtype, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float v = hash_uniform(seed, i) * scale;
    switch (dtype) {
      case W_F32: static_cast<float*>(out)[i] = v; break;
      case W_F16: static_cast<__half*>(out)[i] = __float2half(v); break;
      case W_BF16: static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16(v); break;
      default: {
        static_cast<int8_t*>(out)[i] = int8_t(int(hash_uniform(seed, i) * 127.f));
        if ((i & 31) == 0)
          reinterpret_cast<__half*>(static_cast<uint8_t*>(out) + q8_scales_offset(count))[i >> 5] =
              __float2half(scale / 127.f);
      }
    }
  }
}

__global__ void copy_kernel(const uint4* src, uint4* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

cudaError_t repack_q8_0(const uint8_t* raw, void* out, size_t count, cudaStream_t s) {
  const size_t blocks = count / 32;
  if (blocks == 0) return cudaSuccess;
  auto* qs = static_cast<int8_t*>(out);
  auto* scales = reinterpret_cast<__half*>(static_cast<uint8_t*>(out) + q8_scales_offset(count));
  repack_q8_0_kernel<<<grid_for(blocks, 256), 256, 0, s>>>(raw, qs, scales, blocks);
  return cudaGetLastError();
}

cudaError_t weight_to_f32(const void* w, int dtype, size_t count, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  WeightRef r{w, reinterpret_cast<const __half*>(static_cast<const uint8_t*>(w) + q8_scales_offset(count))};
  const unsigned g = grid_for(count, 256);
  switch (dtype) {
    case W_F32: to_f32_kernel<W_F32><<<g, 256, 0, s>>>(r, count, out); break;
    case W_F16: to_f32_kernel<W_F16><<<g, 256, 0, s>>>(r, count, out); break;
    case W_BF16: to_f32_kernel<W_BF16><<<g, 256, 0, s>>>(r, count, out); break;
    default: to_f32_kernel<W_Q8><<<g, 256, 0, s>>>(r, count, out); break;
  }
  return cudaGetLastError();
}

cudaError_t fill_random(void* out, int dtype, size_t count, uint64_t seed, float scale, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  fill_random_kernel<<<grid_for(count, 256), 256, 0, s>>>(out, dtype, count, seed, scale);
  return cudaGetLastError();
}

cudaError_t copy_bytes(const void* src, void* dst, size_t bytes, cudaStream_t s) {
  const size_t n = bytes / 16;
  if (n == 0) return cudaSuccess;
  copy_kernel<<<grid_for(n, 512) < 132 * 32 ? grid_for(n, 512) : 132 * 32, 512, 0, s>>>(
      static_cast<const uint4*>(src), static_cast<uint4*>(dst), n);
  return cudaGetLastError();
}

}  // namespace ek
