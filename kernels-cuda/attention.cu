// Paged causal attention with GQA.
// - decode (any rows): split-KV. Each block takes one row, one chunk of ≤8 query heads that share
//   a KV head, and one partition of the row's context; warps stream K/V rows (each read once per
//   block for all its heads), online softmax in base 2, then a reduction kernel merges partitions.
// - prefill tiles (≤32 rows of one sequence): flash style. K/V tiles of 32 positions are staged in
//   shared memory once for all rows of the tile; online softmax; f32 throughout.
// With a sliding window a row's partitions cover only its last `window` positions; a sink logit
// joins each head's softmax denominator once, where its partitions are merged (sink_merge).
#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr int DEC_WARPS = 4;

struct DecodePlan {
  int part;        // context positions per partition
  int max_parts;   // partitions of the longest row
  int g;           // heads per block (template G)
  int cpg;         // head chunks per KV head
};

// The first visible position of a row whose context is ctx.
__device__ __forceinline__ int window_first(const AttnArgs& a, int ctx) {
  return a.window > 0 ? max(0, ctx - a.window) : 0;
}

// out = A / L after a head's sink logit (natural units) joins the softmax whose running max is M
// (base 2): both are rescaled to the larger max first.
__device__ __forceinline__ float sink_merge(const AttnArgs& a, int h, float M, float L, float A) {
  if (a.sinks) {
    const float s2 = a.sinks[h] * LOG2E;
    const float M2 = fmaxf(M, s2);
    const float f = M == -INFINITY ? 0.f : exp2f(M - M2);
    L = L * f + exp2f(s2 - M2);
    A *= f;
  }
  return L > 0.f ? A / L : 0.f;
}

// Base float offset of position p's KV row for kv head `kvh`, or -1 for an invalid block id.
__device__ __forceinline__ long long kv_offset(const AttnArgs& a, int seq, int p, int kvh) {
  const int blk = a.tables[size_t(seq) * a.max_blocks + p / a.block_size];
  if (blk < 0 || blk >= a.num_blocks) return -1;
  return ((long long)blk * a.block_size + p % a.block_size) * a.kv_heads * a.head_dim + (long long)kvh * a.head_dim;
}

template <int EPL, int G>
__global__ void __launch_bounds__(32 * DEC_WARPS, 2) decode_kernel(AttnArgs a, const int32_t* rows, DecodePlan plan,
                                                                float* ws_acc, float2* ws_ml) {
  __shared__ float s_m[DEC_WARPS][G], s_l[DEC_WARPS][G];
  __shared__ float s_acc[DEC_WARPS][G][32 * EPL];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int head_chunks = a.kv_heads * plan.cpg;
  const int ri = blockIdx.x / head_chunks, hc = blockIdx.x % head_chunks;
  const int part_idx = blockIdx.y;
  const int t = rows ? rows[ri] : ri;
  // Clamped so a position past maxContext (validated on the host when it knows the values)
  // cannot index partitions beyond the workspace.
  const int ctx = min(a.pos[t] + 1, a.max_context), seq = a.seq[t];
  const int first = window_first(a, ctx);
  const int start = first + part_idx * plan.part;
  if (start >= ctx) return;
  const int end = min(ctx, start + plan.part);
  const int group = a.heads / a.kv_heads, D = a.head_dim;
  const int kvh = hc / plan.cpg;
  const int h0 = kvh * group + (hc % plan.cpg) * G;
  const int hcount = min(G, group - (hc % plan.cpg) * G);

  float q[G][EPL], acc[G][EPL], m[G], l[G];
#pragma unroll
  for (int j = 0; j < G; j++) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      const int d = lane + 32 * e;
      q[j][e] = j < hcount && d < D ? a.q[(size_t(t) * a.heads + h0 + j) * D + d] * (a.scale * LOG2E) : 0.f;
      acc[j][e] = 0.f;
    }
  }

  for (int p = start + warp; p < end; p += 2 * DEC_WARPS) {
    // Two positions per iteration: both K/V loads are in flight before the first dot product.
    float k[2][EPL], v[2][EPL];
    bool ok[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const int pp = p + u * DEC_WARPS;
      const long long off = pp < end ? kv_offset(a, seq, pp, kvh) : -1;
      ok[u] = off >= 0;
#pragma unroll
      for (int e = 0; e < EPL; e++) {
        const int d = lane + 32 * e;
        k[u][e] = ok[u] && d < D ? __ldg(a.kc + off + d) : 0.f;
        v[u][e] = ok[u] && d < D ? __ldg(a.vc + off + d) : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
      if (!ok[u]) continue;
#pragma unroll
      for (int j = 0; j < G; j++) {
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; e++) s = fmaf(q[j][e], k[u][e], s);
        s = soft_capped(warp_sum(s), a.softcap);
        const float mn = fmaxf(m[j], s);
        const float corr = exp2f(m[j] - mn), pe = exp2f(s - mn);
        l[j] = l[j] * corr + pe;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[j][e] = fmaf(pe, v[u][e], acc[j][e] * corr);
        m[j] = mn;
      }
    }
  }

#pragma unroll
  for (int j = 0; j < G; j++) {
    if (lane == 0) { s_m[warp][j] = m[j]; s_l[warp][j] = l[j]; }
#pragma unroll
    for (int e = 0; e < EPL; e++) s_acc[warp][j][lane + 32 * e] = acc[j][e];
  }
  __syncthreads();
  const int parts = (ctx - first + plan.part - 1) / plan.part;
  for (int i = threadIdx.x; i < hcount * D; i += blockDim.x) {
    const int j = i / D, d = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, s_m[w][j]);
    float L = 0.f, A = 0.f;
#pragma unroll
    for (int w = 0; w < DEC_WARPS; w++) {
      const float f = s_m[w][j] == -INFINITY ? 0.f : exp2f(s_m[w][j] - M);
      L += s_l[w][j] * f;
      A += s_acc[w][j][d] * f;
    }
    const int h = h0 + j;
    if (parts == 1) {
      a.out[(size_t(t) * a.heads + h) * D + d] = sink_merge(a, h, M, L, A);
    } else {
      const size_t slot = (size_t(ri) * a.heads + h) * plan.max_parts + part_idx;
      ws_acc[slot * D + d] = A;
      if (d == 0) ws_ml[slot] = make_float2(M, L);
    }
  }
}

__global__ void decode_reduce_kernel(AttnArgs a, const int32_t* rows, DecodePlan plan, const float* ws_acc,
                                     const float2* ws_ml) {
  const int ri = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
  const int t = rows ? rows[ri] : ri;
  const int ctx = min(a.pos[t] + 1, a.max_context);
  const int parts = (ctx - window_first(a, ctx) + plan.part - 1) / plan.part;
  if (parts <= 1) return;  // the decode kernel wrote this row directly
  const size_t base = (size_t(ri) * a.heads + h) * plan.max_parts;
  float M = -INFINITY;
  for (int p = 0; p < parts; p++) M = fmaxf(M, ws_ml[base + p].x);
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float L = 0.f, A = 0.f;
    for (int p = 0; p < parts; p++) {
      const float2 ml = ws_ml[base + p];
      const float f = ml.x == -INFINITY ? 0.f : exp2f(ml.x - M);
      L += ml.y * f;
      A += ws_acc[(base + p) * a.head_dim + d] * f;
    }
    a.out[(size_t(t) * a.heads + h) * a.head_dim + d] = sink_merge(a, h, M, L, A);
  }
}

DecodePlan plan_decode(const AttnArgs& a, int row_count, int sm_count) {
  DecodePlan p;
  const int group = a.heads / a.kv_heads;
  p.g = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
  p.cpg = (group + p.g - 1) / p.g;
  const long long blocks_per_part = (long long)row_count * a.kv_heads * p.cpg;
  const long long target = 4LL * (sm_count > 0 ? sm_count : 132);
  int parts = int((target + blocks_per_part - 1) / blocks_per_part);
  // Partitions split the visible span: the whole context, or the window.
  const int span = a.window > 0 ? min(a.max_context, a.window) : a.max_context;
  const int ctx = span > 0 ? span : 1;
  parts = max(1, min(parts, (ctx + 63) / 64));  // at least 64 positions per partition
  p.part = (ctx + parts - 1) / parts;
  p.part = (p.part + 15) & ~15;
  p.max_parts = (ctx + p.part - 1) / p.part;
  return p;
}

template <int EPL>
void launch_decode_epl(const AttnArgs& a, const int32_t* rows, int row_count, DecodePlan p, float* acc, float2* ml,
                       cudaStream_t s) {
  dim3 grid(row_count * a.kv_heads * p.cpg, p.max_parts);  // rows in x: y is limited to 65535
  switch (p.g) {
    case 1: decode_kernel<EPL, 1><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
    case 2: decode_kernel<EPL, 2><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
    case 4: decode_kernel<EPL, 4><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
    default: decode_kernel<EPL, 8><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
  }
}

}  // namespace

size_t attention_workspace(const AttnArgs& a, int row_count, int sm_count) {
  const DecodePlan p = plan_decode(a, row_count, sm_count);
  if (p.max_parts <= 1) return 0;
  const size_t slots = size_t(row_count) * a.heads * p.max_parts;
  return slots * a.head_dim * sizeof(float) + slots * sizeof(float2);
}

cudaError_t attention_decode(const AttnArgs& a, const int32_t* rows, int row_count, int sm_count, void* ws,
                             cudaStream_t s) {
  if (row_count == 0) return cudaSuccess;
  if (a.head_dim > 256 || a.head_dim <= 0) return cudaErrorInvalidValue;
  const DecodePlan p = plan_decode(a, row_count, sm_count);
  const size_t slots = size_t(row_count) * a.heads * p.max_parts;
  float* acc = static_cast<float*>(ws);
  float2* ml = reinterpret_cast<float2*>(acc + slots * a.head_dim);
  const int D = a.head_dim;
  if (D <= 32) launch_decode_epl<1>(a, rows, row_count, p, acc, ml, s);
  else if (D <= 64) launch_decode_epl<2>(a, rows, row_count, p, acc, ml, s);
  else if (D <= 128) launch_decode_epl<4>(a, rows, row_count, p, acc, ml, s);
  else launch_decode_epl<8>(a, rows, row_count, p, acc, ml, s);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.max_parts <= 1) return e;
  decode_reduce_kernel<<<row_count * a.heads, D <= 64 ? 64 : 128, 0, s>>>(a, rows, p, acc, ml);
  return cudaGetLastError();
}

}  // namespace ek
