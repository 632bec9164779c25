// Seeded sampling with the reference's exact order (src/backend/reference/sampling.ts):
// p = softmax(logits / T), 0 where p / max p < minP (min-p); order by descending p, ties by lower index (a stable radix sort on
// (row, p) keys with index values gives exactly that); keep the top-k; keep the shortest prefix
// whose mass ≥ topP × top-k mass; pick the first token whose cumulative p exceeds uniform × kept mass.
// Rows with temperature 0 take the argmax of their logits, and so do rows without a finite largest
// logit (all -inf or NaN, or a +inf). A NaN logit counts as -inf: never the argmax, no probability.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

constexpr int SAMPLE_THREADS = 1024;

inline int row_bits(int rows) {
  int b = 0;
  while ((1LL << b) < rows) b++;
  return b;
}

struct SampleBuffers {
  uint64_t* keys_in;
  uint64_t* keys_out;
  int32_t* idx_in;
  int32_t* idx_out;
  float* cum;
  void* cub_temp;
  size_t cub_bytes;
};

inline size_t align256(size_t b) { return (b + 255) & ~size_t(255); }

SampleBuffers carve(void* ws, int rows, int vocab, size_t cub_bytes) {
  const size_t n = size_t(rows) * vocab;
  auto* p = static_cast<uint8_t*>(ws);
  SampleBuffers b;
  b.keys_in = reinterpret_cast<uint64_t*>(p); p += align256(n * 8);
  b.keys_out = reinterpret_cast<uint64_t*>(p); p += align256(n * 8);
  b.idx_in = reinterpret_cast<int32_t*>(p); p += align256(n * 4);
  b.idx_out = reinterpret_cast<int32_t*>(p); p += align256(n * 4);
  b.cum = reinterpret_cast<float*>(p); p += align256(n * 4);
  b.cub_temp = p;
  b.cub_bytes = cub_bytes;
  return b;
}

size_t cub_temp_bytes(int rows, int vocab) {
  size_t bytes = 0;
  const size_t n = size_t(rows) * vocab;
  cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                            static_cast<uint64_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr), n, 0, 32 + row_bits(rows));
  return bytes;
}

// Key = (inverted row << 32) | bits(p): p ≥ 0, so its float bits sort like the value; a descending
// sort puts row 0 first and, within a row, larger p first; stability keeps lower indices first.
__global__ void sample_keys_kernel(const float* logits, const float* params, int rows, int vocab, uint64_t* keys,
                                   int32_t* idx) {
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const float T = params[SAMPLE_PARAMS * row], min_p = params[SAMPLE_PARAMS * row + 4];
  const float* l = logits + size_t(row) * vocab;
  const float inv_t = T > 0.f ? 1.f / T : 1.f;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) m = fmaxf(m, l[c] * inv_t);  // fmaxf skips NaN
  m = block_max(m, scratch);
  float s = 0.f;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) s += isnan(l[c]) ? 0.f : expf(l[c] * inv_t - m);
  const float inv_s = 1.f / block_sum(s, scratch);
  const uint64_t hi = uint64_t(rows - 1 - row) << 32;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) {
    const float r = isnan(l[c]) ? 0.f : expf(l[c] * inv_t - m);  // p over the largest p
    const float p = r < min_p ? 0.f : r * inv_s;
    keys[size_t(row) * vocab + c] = hi | __float_as_uint(p);
    idx[size_t(row) * vocab + c] = c;
  }
}

__device__ int lower_bound_ge(const float* a, int n, float x) {  // first i with a[i] >= x, else n
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] >= x) hi = mid; else lo = mid + 1;
  }
  return lo;
}

__device__ int upper_bound_gt(const float* a, int n, float x) {  // first i with a[i] > x, else n
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] > x) hi = mid; else lo = mid + 1;
  }
  return lo;
}

__global__ void __launch_bounds__(SAMPLE_THREADS) sample_pick_kernel(const float* logits, const float* params,
                                                                    int vocab, const uint64_t* keys,
                                                                    const int32_t* idx, float* cum, int32_t* out) {
  using Scan = cub::BlockScan<float, SAMPLE_THREADS>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ float carry_s;
  __shared__ float sv[32];
  __shared__ int si[32];
  const int row = blockIdx.x;
  const float* pr = params + SAMPLE_PARAMS * row;
  const float T = pr[0], topk = pr[1], topp = pr[2], u = pr[3];
  {  // the argmax, lowest index wins ties (NaN never: its comparisons are false)
    const float* l = logits + size_t(row) * vocab;
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int c = threadIdx.x; c < vocab; c += blockDim.x)
      if (l[c] > v || (l[c] == v && c < i)) { v = l[c]; i = c; }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (ov > v || (ov == v && oi < i)) { v = ov; i = oi; }
    }
    if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = v; si[threadIdx.x >> 5] = i; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < SAMPLE_THREADS / 32; w++)
        if (sv[w] > sv[0] || (sv[w] == sv[0] && si[w] < si[0])) { sv[0] = sv[w]; si[0] = si[w]; }
    }
    __syncthreads();
    // Greedy, or no finite largest logit (no distribution to draw from): the argmax.
    if (T == 0.f || !isfinite(sv[0])) {
      if (threadIdx.x == 0) out[row] = si[0] == 0x7fffffff ? 0 : si[0];
      return;
    }
  }
  const int k = topk > 0.f ? min(int(topk), vocab) : vocab;
  const uint64_t* key = keys + size_t(row) * vocab;
  float* c = cum + size_t(row) * vocab;
  if (threadIdx.x == 0) carry_s = 0.f;
  __syncthreads();
  for (int base = 0; base < k; base += SAMPLE_THREADS) {
    const int i = base + threadIdx.x;
    const float p = i < k ? __uint_as_float(uint32_t(key[i] & 0xffffffffu)) : 0.f;
    float incl;
    Scan(scan_tmp).InclusiveSum(p, incl);
    const float carry = carry_s;
    if (i < k) c[i] = carry + incl;
    __syncthreads();
    if (threadIdx.x == SAMPLE_THREADS - 1) carry_s = carry + incl;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float top_mass = c[k - 1];
    const int kept = min(lower_bound_ge(c, k, topp * top_mass) + 1, k);
    const float target = u * c[kept - 1];
    int pick = upper_bound_gt(c, kept, target);
    if (pick >= kept) pick = kept - 1;  // only through rounding at uniform ≈ 1
    out[row] = idx[size_t(row) * vocab + pick];
  }
}

}  // namespace

size_t sample_workspace(int rows, int vocab) {
  const size_t n = size_t(rows) * vocab;
  return align256(n * 8) * 2 + align256(n * 4) * 3 + align256(cub_temp_bytes(rows, vocab));
}

cudaError_t sample(const float* logits, const float* params, int rows, int vocab, int32_t* out, void* ws,
                   size_t ws_bytes, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const size_t cub_bytes = cub_temp_bytes(rows, vocab);
  if (ws_bytes < sample_workspace(rows, vocab)) return cudaErrorInvalidValue;
  SampleBuffers b = carve(ws, rows, vocab, cub_bytes);
  sample_keys_kernel<<<rows, SAMPLE_THREADS, 0, s>>>(logits, params, rows, vocab, b.keys_in, b.idx_in);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  size_t bytes = b.cub_bytes;
  e = cub::DeviceRadixSort::SortPairsDescending(b.cub_temp, bytes, b.keys_in, b.keys_out, b.idx_in, b.idx_out,
                                                size_t(rows) * vocab, 0, 32 + row_bits(rows), s);
  if (e != cudaSuccess) return e;
  sample_pick_kernel<<<rows, SAMPLE_THREADS, 0, s>>>(logits, params, vocab, b.keys_out, b.idx_out, b.cum, out);
  return cudaGetLastError();
}

}  // namespace ek
