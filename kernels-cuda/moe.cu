// Mixture-of-experts ops (the reference is src/backend/reference/experts.ts):
// - moe_route: per row of router logits, each expert's probability in f32 (softmax over the row, or
//   the sigmoid of its logit) and the top-k experts by selection score. One block per row; each
//   expert's rank is the number of experts that beat it (larger score, or equal score and a lower
//   index), so the order needs no sort and no k rounds of block reductions. Without a selection
//   bias the score is the logit itself: both gatings are monotonic, so comparing the f32 logits
//   orders the probabilities without the f32 exp's rounding creating ties the reference does not
//   have. With one (DeepSeek V3, GLM-4.5) the score is probability + bias, as in the reference.
//   Grouped (groups > 1, DeepSeek V3's n_group): scores are probabilities (+ bias); each group scores
//   the sum of its two best, and experts outside the groups_used best groups get key -inf.
// - matmul_experts: llama.cpp's mul_mat_id as a GEMV per output row. The expert id is read on the
//   device, so routing and the expert matmul queue back to back with no host round trip.
// - moe_combine: the weighted sum of each token's k expert outputs, j in order.
#include "common.cuh"
#include "gemv.cuh"
#include "kernels.h"

namespace ek {
namespace {

// NaN never wins (as in argmax); mapping it to -inf keeps "beats" a strict total order, so every
// rank 0..experts-1 is taken exactly once and every output slot gets written.
__device__ __forceinline__ float route_key(float v) { return isnan(v) ? -INFINITY : v; }

// Dynamic shared memory: the row's keys [experts], then the chosen probabilities [k] in rank order.
// `bias` is f32 [experts] or null; sigmoid gating when `sigmoid`; weights end multiplied by `scale`.
__global__ void __launch_bounds__(256) moe_route_kernel(const float* __restrict__ logits,
                                                        const float* __restrict__ bias, int experts, int k,
                                                        int normalize, int sigmoid, float scale, int groups,
                                                        int groups_used, int32_t* __restrict__ ids,
                                                        float* __restrict__ weights) {
  extern __shared__ float route_smem[];
  float* key = route_smem;
  float* chosen = route_smem + experts;
  __shared__ float scratch[32];
  __shared__ float group_score[32];
  __shared__ int group_ok[32];
  __shared__ float denom;
  const bool grouped = groups > 1;
  const float* row = logits + size_t(blockIdx.x) * experts;
  float m = -INFINITY;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) m = fmaxf(m, row[e]);
  m = block_max(m, scratch);
  // Softmax's denominator; a sigmoid is its own probability (a denominator of 1).
  float total = 1.f;
  if (!sigmoid) {
    float s = 0.f;
    for (int e = threadIdx.x; e < experts; e += blockDim.x) s += expf(row[e] - m);
    total = block_sum(s, scratch);
  }
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    const float v = row[e];
    const float p = sigmoid ? 1.f / (1.f + expf(-v)) : expf(v - m) / total;
    key[e] = route_key(bias ? p + bias[e] : grouped ? p : v);
  }
  __syncthreads();
  if (grouped) {
    const int size = experts / groups;
    if (threadIdx.x < groups) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (int e = threadIdx.x * size; e < (threadIdx.x + 1) * size; e++) {
        const float v = key[e];
        if (v > top1) { top2 = top1; top1 = v; } else if (v > top2) { top2 = v; }
      }
      group_score[threadIdx.x] = top1 + top2;
    }
    __syncthreads();
    if (threadIdx.x < groups) {
      const float v = group_score[threadIdx.x];
      int rank = 0;
      for (int o = 0; o < groups; o++) {
        const float u = group_score[o];
        rank += (u > v || (u == v && o < threadIdx.x)) ? 1 : 0;
      }
      group_ok[threadIdx.x] = rank < groups_used;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x)
      if (!group_ok[e / size]) key[e] = -INFINITY;
    __syncthreads();
  }
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    const float v = key[e];
    int rank = 0;
    for (int o = 0; o < experts; o++) {
      const float u = key[o];  // the same address across the warp: a broadcast
      rank += (u > v || (u == v && o < e)) ? 1 : 0;
    }
    if (rank < k) {
      ids[size_t(blockIdx.x) * k + rank] = e;
      chosen[rank] = sigmoid ? 1.f / (1.f + expf(-row[e])) : expf(row[e] - m) / total;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // The chosen share summed in rank order, as the reference does (k is small next to the row).
    float picked = 0.f;
    for (int j = 0; j < k; j++) picked += chosen[j];
    denom = normalize ? fmaxf(picked, 6.103515625e-5f) : 1.f;  // MIN_ROUTE_SHARE, as llama.cpp clamps
  }
  __syncthreads();
  for (int j = threadIdx.x; j < k; j += blockDim.x) weights[size_t(blockIdx.x) * k + j] = chosen[j] / denom * scale;
}

// One block per output row r = t·k + j (blockIdx.x) and tile of GEMV_WARPS · GEMV_ROWS outputs
// (blockIdx.y, striding when there are more tiles than a grid's y extent): each warp dots GEMV_ROWS
// rows of expert ids[r]'s matrix with one x row. VEC (K % 8 == 0) takes gemv.cuh's 16-byte weight
// loads; otherwise lanes stride K with scalar loads (q8_0 always has K % 32 == 0, so it is VEC).
// ids out of range are clamped: a device kernel cannot throw, and a clamped id stays in bounds.
template <int WT, bool VEC>
__global__ void __launch_bounds__(32 * GEMV_WARPS) expert_gemv_kernel(const float* __restrict__ x, WeightRef w,
                                                                      const int32_t* __restrict__ ids, int k,
                                                                      int experts, int K, int N, int x_per_row,
                                                                      float* __restrict__ y) {
  const int r = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int e = min(max(__ldg(ids + r), 0), experts - 1);
  const float* xr = x + size_t(x_per_row ? r : r / k) * K;
  const size_t first = size_t(e) * N;  // the expert's first row in the stacked [experts · N, K] weight
  const int tiles = (N + GEMV_WARPS * GEMV_ROWS - 1) / (GEMV_WARPS * GEMV_ROWS);
  for (int tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int o0 = (tile * GEMV_WARPS + warp) * GEMV_ROWS;
    if (o0 >= N) break;  // later tiles start further on; no barriers in this kernel
    float acc[GEMV_ROWS];
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; i++) acc[i] = 0.f;
    if constexpr (VEC) {
      constexpr int STEP = 256 * GEMV_UNROLL;
      for (int k0 = lane * 8; k0 < K; k0 += STEP) {
        Raw8 raw[GEMV_ROWS][GEMV_UNROLL];  // every load issued before any use, as gemv_kernel does
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
          for (int i = 0; i < GEMV_ROWS; i++) {
            const int kk = k0 + u * 256;
            const int o = min(o0 + i, N - 1);  // duplicate the last row rather than branch
            if (kk < K) raw[i][u] = load_raw8<WT>(w, (first + o) * K + kk);
          }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
          const int kk = k0 + u * 256;
          if (kk >= K) continue;
          const float4* xp = reinterpret_cast<const float4*>(xr + kk);
          const float4 xa = __ldg(xp), xb = __ldg(xp + 1);
          const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
          for (int i = 0; i < GEMV_ROWS; i++) {
            float wf[8];
            decode8<WT>(raw[i][u], wf);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[i] = fmaf(wf[j], xv[j], acc[i]);
          }
        }
      }
    } else {
      for (int kk = lane; kk < K; kk += 32) {
        const float xv = __ldg(xr + kk);
#pragma unroll
        for (int i = 0; i < GEMV_ROWS; i++) {
          const int o = min(o0 + i, N - 1);
          acc[i] = fmaf(load_w<WT>(w, (first + o) * K + kk), xv, acc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < GEMV_ROWS; i++) {
      const float v = warp_sum(acc[i]);
      if (lane == 0 && o0 + i < N) y[size_t(r) * N + o0 + i] = v;
    }
  }
}

template <int WT>
void launch_expert_gemv(const float* x, WeightRef w, const int32_t* ids, int rows, int k, int experts, int K, int N,
                        int x_per_row, float* y, cudaStream_t s) {
  const int tiles = (N + GEMV_WARPS * GEMV_ROWS - 1) / (GEMV_WARPS * GEMV_ROWS);
  const dim3 grid(unsigned(rows), unsigned(tiles < 65535 ? tiles : 65535));
  if (K % 8 == 0) {
    expert_gemv_kernel<WT, true><<<grid, 32 * GEMV_WARPS, 0, s>>>(x, w, ids, k, experts, K, N, x_per_row, y);
  } else {
    expert_gemv_kernel<WT, false><<<grid, 32 * GEMV_WARPS, 0, s>>>(x, w, ids, k, experts, K, N, x_per_row, y);
  }
}

// One thread per output value; the k products summed in order j = 0..k-1, as the reference does.
__global__ void moe_combine_kernel(const float* __restrict__ y, const float* __restrict__ weights, int k, int d,
                                   size_t count, float* __restrict__ out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const size_t t = i / d, c = i % d;
    float acc = 0.f;
    for (int j = 0; j < k; j++) acc = fmaf(weights[t * k + j], y[(t * k + j) * d + c], acc);
    out[i] = acc;
  }
}

}  // namespace

cudaError_t moe_route(const float* logits, const float* bias, int n, int experts, int k, int normalize, int sigmoid,
                      float scale, int groups, int groups_used, int32_t* ids, float* weights, cudaStream_t s) {
  if (n == 0 || k == 0) return cudaSuccess;
  if (k > experts || experts > MOE_MAX_EXPERTS || groups > 32 || (groups > 1 && experts % groups != 0))
    return cudaErrorInvalidValue;
  const int threads = experts <= 128 ? 128 : 256;
  const size_t smem = (size_t(experts) + k) * sizeof(float);  // ≤ 32 KiB: under the 48 KiB default
  moe_route_kernel<<<n, threads, smem, s>>>(logits, bias, experts, k, normalize, sigmoid, scale, groups, groups_used, ids,
                                            weights);
  return cudaGetLastError();
}

cudaError_t matmul_experts(const float* x, const void* wp, int dtype, const int32_t* ids, int n, int k, int experts,
                           int K, int N, int x_per_row, float* y, cudaStream_t s) {
  const int rows = n * k;
  if (rows == 0 || N == 0) return cudaSuccess;
  // An empty dot product, or no expert to clamp an id to: zeros (as the WebGPU backend does).
  if (K == 0 || experts == 0) return cudaMemsetAsync(y, 0, size_t(rows) * N * sizeof(float), s);
  // q8_0's scales follow the quants of the whole stack, so one WeightRef spans every expert.
  WeightRef w{wp, reinterpret_cast<const __half*>(static_cast<const uint8_t*>(wp) +
                                                  q8_scales_offset(size_t(experts) * N * K))};
  switch (dtype) {
    case W_F32: launch_expert_gemv<W_F32>(x, w, ids, rows, k, experts, K, N, x_per_row, y, s); break;
    case W_F16: launch_expert_gemv<W_F16>(x, w, ids, rows, k, experts, K, N, x_per_row, y, s); break;
    case W_BF16: launch_expert_gemv<W_BF16>(x, w, ids, rows, k, experts, K, N, x_per_row, y, s); break;
    case W_Q8: launch_expert_gemv<W_Q8>(x, w, ids, rows, k, experts, K, N, x_per_row, y, s); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t moe_combine(const float* y, const float* weights, int n, int k, int d, float* out, cudaStream_t s) {
  const size_t count = size_t(n) * d;
  if (count == 0) return cudaSuccess;
  const size_t blocks = (count + 255) / 256;
  moe_combine_kernel<<<unsigned(blocks < 65535u * 64u ? blocks : 65535u * 64u), 256, 0, s>>>(y, weights, k, d, count,
                                                                                          out);
  return cudaGetLastError();
}

}  // namespace ek
