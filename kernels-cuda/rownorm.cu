// Row reductions: rmsnorm (plain and fused with the residual add), softmax, argmax. One block per row.
#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

// `groups` weight rows: row r takes row r mod groups (a grouped norm, each token's width viewed as rows).
__global__ void rmsnorm_kernel(const float* x, const float* w, int cols, int groups, float eps, float* out) {
  __shared__ float scratch[32];
  const float* row = x + size_t(blockIdx.x) * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss = fmaf(row[c], row[c], ss);
  const float inv = rsqrtf(block_sum(ss, scratch) / cols + eps);
  float* o = out + size_t(blockIdx.x) * cols;
  const float* wr = w + size_t(blockIdx.x % groups) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = row[c] * inv * wr[c];
}

// The sum goes to `sum` (the next residual) and stays in registers for the norm: x and r are read
// once instead of twice (add, then rmsnorm re-reading the sum).
template <int PER>
__global__ void add_rmsnorm_kernel(const float* x, const float* r, const float* w, int cols, float eps, float* sum,
                                   float* norm) {
  __shared__ float scratch[32];
  const size_t base = size_t(blockIdx.x) * cols;
  float v[PER];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int c = threadIdx.x + i * blockDim.x;
    v[i] = c < cols ? x[base + c] + r[base + c] : 0.f;
    if (c < cols) sum[base + c] = v[i];
    ss = fmaf(v[i], v[i], ss);
  }
  const float inv = rsqrtf(block_sum(ss, scratch) / cols + eps);
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int c = threadIdx.x + i * blockDim.x;
    if (c < cols) norm[base + c] = v[i] * inv * w[c];
  }
}

__global__ void softmax_kernel(const float* x, int cols, float* out) {
  __shared__ float scratch[32];
  const float* row = x + size_t(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_max(m, scratch);
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
  const float inv = 1.f / block_sum(s, scratch);
  float* o = out + size_t(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = expf(row[c] - m) * inv;
}

// (value, index) pairs compare by larger value, then lower index: the reference's tie rule.
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }  // NaN never wins, as in the reference
}

__global__ void argmax_kernel(const float* x, int cols, int32_t* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = x + size_t(blockIdx.x) * cols;
  float v = -INFINITY;
  int idx = 0x7fffffff;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) better(v, idx, row[c], c);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    better(v, idx, ov, oi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { sv[warp] = v; si[warp] = idx; }
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x >> 5) ? sv[lane] : -INFINITY;
    idx = lane < (blockDim.x >> 5) ? si[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, v, o);
      int oi = __shfl_xor_sync(0xffffffffu, idx, o);
      better(v, idx, ov, oi);
    }
    // All -inf (or NaN) rows: the reference keeps index 0.
    if (lane == 0) out[blockIdx.x] = idx == 0x7fffffff ? 0 : idx;
  }
}

inline int row_threads(int cols) { return cols >= 4096 ? 1024 : cols >= 1024 ? 256 : 128; }

}  // namespace

cudaError_t rmsnorm(const float* x, const float* w, int rows, int cols, float eps, int groups, float* out, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (groups < 1) return cudaErrorInvalidValue;
  rmsnorm_kernel<<<rows, row_threads(cols) > 256 ? 256 : row_threads(cols), 0, s>>>(x, w, cols, groups, eps, out);
  return cudaGetLastError();
}

cudaError_t add_rmsnorm(const float* x, const float* r, const float* w, int rows, int cols, float eps, float* sum,
                        float* norm, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int threads = 256;
  const int per = (cols + threads - 1) / threads;
  if (per <= 4) add_rmsnorm_kernel<4><<<rows, threads, 0, s>>>(x, r, w, cols, eps, sum, norm);
  else if (per <= 16) add_rmsnorm_kernel<16><<<rows, threads, 0, s>>>(x, r, w, cols, eps, sum, norm);
  else if (per <= 32) add_rmsnorm_kernel<32><<<rows, threads, 0, s>>>(x, r, w, cols, eps, sum, norm);
  else if (per <= 64) add_rmsnorm_kernel<32><<<rows, threads * 2, 0, s>>>(x, r, w, cols, eps, sum, norm);
  else return cudaErrorInvalidValue;  // > 16384 columns: callers use add + rmsnorm
  return cudaGetLastError();
}

cudaError_t softmax(const float* x, int rows, int cols, float* out, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  softmax_kernel<<<rows, row_threads(cols), 0, s>>>(x, cols, out);
  return cudaGetLastError();
}

cudaError_t argmax(const float* x, int rows, int cols, int32_t* out, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  argmax_kernel<<<rows, row_threads(cols), 0, s>>>(x, cols, out);
  return cudaGetLastError();
}

}  // namespace ek
