// Flash-style attention for prefill tiles: ≤32 query rows of one sequence x one query head per
// block; K/V tiles of 32 positions are staged in shared memory once and used by every row.
// Online softmax in base 2, f32 throughout (keeps conformance tolerances tight).
#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr int PF_ROWS = 32, PF_KEYS = 32, PF_WARPS = 4, PF_RPW = PF_ROWS / PF_WARPS;

template <int EPL>
__global__ void __launch_bounds__(32 * PF_WARPS) prefill_kernel(AttnArgs a, const int32_t* tiles) {
  extern __shared__ float smem[];
  const int D = a.head_dim;
  float* Qs = smem;                          // [PF_ROWS][D]
  float* Ks = Qs + PF_ROWS * D;              // [PF_KEYS][D + 1]: lane j reads row j, no conflicts
  float* Vs = Ks + PF_KEYS * (D + 1);        // [PF_KEYS][D]
  float* Ps = Vs + PF_KEYS * D;              // [PF_ROWS][PF_KEYS]
  __shared__ int s_pos[PF_ROWS];
  __shared__ int s_maxpos, s_minpos;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int first = tiles[2 * blockIdx.x], count = tiles[2 * blockIdx.x + 1];
  const int h = blockIdx.y, kvh = h / (a.heads / a.kv_heads);
  const int seq = a.seq[first];

  if (threadIdx.x < PF_ROWS) s_pos[threadIdx.x] = threadIdx.x < count ? a.pos[first + threadIdx.x] : -1;
  for (int i = threadIdx.x; i < PF_ROWS * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    Qs[i] = r < count ? a.q[(size_t(first + r) * a.heads + h) * D + d] * (a.scale * LOG2E) : 0.f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int mp = -1, lo = INT_MAX;
    for (int r = 0; r < count; r++) {
      mp = max(mp, s_pos[r]);
      lo = min(lo, s_pos[r]);
    }
    s_maxpos = mp;
    s_minpos = lo;
  }
  __syncthreads();
  const int kv_end = s_maxpos + 1;
  // With a sliding window, keys before the earliest row's window are never visible: start at its tile.
  const int kv_begin = a.window > 0 ? (max(0, s_minpos - a.window + 1) / PF_KEYS) * PF_KEYS : 0;

  float acc[PF_RPW][EPL], m[PF_RPW], l[PF_RPW];
#pragma unroll
  for (int r = 0; r < PF_RPW; r++) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; e++) acc[r][e] = 0.f;
  }

  for (int k0 = kv_begin; k0 < kv_end; k0 += PF_KEYS) {
    for (int i = threadIdx.x; i < PF_KEYS * D; i += blockDim.x) {
      const int j = i / D, d = i % D, p = k0 + j;
      float kv = 0.f, vv = 0.f;
      if (p < kv_end) {
        const int blk = a.tables[size_t(seq) * a.max_blocks + p / a.block_size];
        if (blk >= 0 && blk < a.num_blocks) {
          const size_t off = ((size_t(blk) * a.block_size + p % a.block_size) * a.kv_heads + kvh) * D + d;
          kv = __ldg(a.kc + off);
          vv = __ldg(a.vc + off);
        }
      }
      Ks[j * (D + 1) + d] = kv;
      Vs[j * D + d] = vv;
    }
    __syncthreads();
    // Scores: lane j owns key k0 + j for this warp's rows.
    float s[PF_RPW];
#pragma unroll
    for (int r = 0; r < PF_RPW; r++) s[r] = 0.f;
    for (int d = 0; d < D; d++) {
      const float kd = Ks[lane * (D + 1) + d];
#pragma unroll
      for (int r = 0; r < PF_RPW; r++) s[r] = fmaf(Qs[(warp * PF_RPW + r) * D + d], kd, s[r]);
    }
#pragma unroll
    for (int r = 0; r < PF_RPW; r++) {
      const int row = warp * PF_RPW + r;
      const int pos = s_pos[row];
      const bool valid = row < count && k0 + lane <= pos && (a.window <= 0 || pos - (k0 + lane) < a.window);
      const float sv = valid ? soft_capped(s[r], a.softcap) : -INFINITY;
      const float mn = fmaxf(m[r], warp_max(sv));
      float pe = 0.f, corr = 1.f;
      if (mn != -INFINITY) {
        pe = valid ? exp2f(sv - mn) : 0.f;
        corr = m[r] == -INFINITY ? 0.f : exp2f(m[r] - mn);
      }
      l[r] = l[r] * corr + warp_sum(pe);
      m[r] = mn;
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[r][e] *= corr;
      Ps[row * PF_KEYS + lane] = pe;
    }
    __syncwarp();
    for (int j = 0; j < PF_KEYS; j++) {
      float vj[EPL];
#pragma unroll
      for (int e = 0; e < EPL; e++) vj[e] = lane + 32 * e < D ? Vs[j * D + lane + 32 * e] : 0.f;
#pragma unroll
      for (int r = 0; r < PF_RPW; r++) {
        const float p = Ps[(warp * PF_RPW + r) * PF_KEYS + j];
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[r][e] = fmaf(p, vj[e], acc[r][e]);
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < PF_RPW; r++) {
    const int row = warp * PF_RPW + r;
    if (row >= count) continue;
    // A sink logit joins the denominator: rescale both to the larger max (base 2).
    float f = 1.f, L = l[r];
    if (a.sinks) {
      const float s2 = a.sinks[h] * LOG2E, M2 = fmaxf(m[r], s2);
      f = m[r] == -INFINITY ? 0.f : exp2f(m[r] - M2);
      L = L * f + exp2f(s2 - M2);
    }
    const float inv = L > 0.f ? f / L : 0.f;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      const int d = lane + 32 * e;
      if (d < D) a.out[(size_t(first + row) * a.heads + h) * D + d] = acc[r][e] * inv;
    }
  }
}

template <int EPL>
cudaError_t launch_prefill(const AttnArgs& a, const int32_t* tiles, int tile_count, cudaStream_t s) {
  const int D = a.head_dim;
  const size_t bytes = sizeof(float) * (PF_ROWS * D + PF_KEYS * (D + 1) + PF_KEYS * D + PF_ROWS * PF_KEYS);
  cudaError_t e = cudaFuncSetAttribute(prefill_kernel<EPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e != cudaSuccess) return e;
  prefill_kernel<EPL><<<dim3(tile_count, a.heads), 32 * PF_WARPS, bytes, s>>>(a, tiles);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_prefill(const AttnArgs& a, const int32_t* tiles, int tile_count, cudaStream_t s) {
  if (tile_count == 0) return cudaSuccess;
  const int D = a.head_dim;
  if (D <= 32) return launch_prefill<1>(a, tiles, tile_count, s);
  if (D <= 64) return launch_prefill<2>(a, tiles, tile_count, s);
  if (D <= 128) return launch_prefill<4>(a, tiles, tile_count, s);
  if (D <= 256) return launch_prefill<8>(a, tiles, tile_count, s);
  return cudaErrorInvalidValue;
}

}  // namespace ek
