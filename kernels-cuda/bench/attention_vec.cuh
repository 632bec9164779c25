// An experimental variant of attention.cu's decode_kernel, set aside until a GPU run shows it wins
// (llm.c's rule): not built into the addon; kernels-cuda/bench/sweep.cu times it against the
// current kernel and prints their largest difference. Include after attention.cu (it reopens that
// file's unnamed namespace for kv_offset, window_first, sink_merge and DecodePlan). Unlike
// decode_kernel it needs D = 32·EPL with EPL 2, 4 or 8 (head dims 64, 128, 256): row offsets are
// then multiples of D, so its vector loads stay aligned.
#pragma once

namespace ek {
namespace {

// Vector form of decode_kernel for head dims 32·EPL (EPL 2, 4, 8: 64, 128, 256): lane i owns dims
// [EPL·i, EPL·i + EPL), so a K or V row is one 8- or 16-byte load per lane, and each warp keeps U
// positions' rows in flight at once (decode_kernel keeps 2 as 4-byte loads: too few bytes in
// flight for HBM3e). The U·G dot products are reduced together (independent shuffles) and the
// online softmax rescales once per U positions.
template <int EPL>
__device__ __forceinline__ void load_row(const float* __restrict__ p, float (&out)[EPL]) {
  if constexpr (EPL % 4 == 0) {
#pragma unroll
    for (int e = 0; e < EPL; e += 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p) + e / 4);
      out[e] = v.x; out[e + 1] = v.y; out[e + 2] = v.z; out[e + 3] = v.w;
    }
  } else if constexpr (EPL == 2) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(p));
    out[0] = v.x; out[1] = v.y;
  } else {
#pragma unroll
    for (int e = 0; e < EPL; e++) out[e] = __ldg(p + e);
  }
}

template <int EPL, int G, int U>
__global__ void __launch_bounds__(32 * DEC_WARPS, 2) decode_vec_kernel(AttnArgs a, const int32_t* rows, DecodePlan plan,
                                                                    float* ws_acc, float2* ws_ml) {
  __shared__ float s_m[DEC_WARPS][G], s_l[DEC_WARPS][G];
  __shared__ float s_acc[DEC_WARPS][G][32 * EPL];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int head_chunks = a.kv_heads * plan.cpg;
  const int ri = blockIdx.x / head_chunks, hc = blockIdx.x % head_chunks;
  const int part_idx = blockIdx.y;
  const int t = rows ? rows[ri] : ri;
  const int ctx = min(a.pos[t] + 1, a.max_context), seq = a.seq[t];
  const int first = window_first(a, ctx);
  const int start = first + part_idx * plan.part;
  if (start >= ctx) return;
  const int end = min(ctx, start + plan.part);
  const int group = a.heads / a.kv_heads, D = 32 * EPL;
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
      q[j][e] = j < hcount ? a.q[(size_t(t) * a.heads + h0 + j) * D + lane * EPL + e] * (a.scale * LOG2E) : 0.f;
      acc[j][e] = 0.f;
    }
  }

  for (int p0 = start + warp * U; p0 < end; p0 += DEC_WARPS * U) {
    float k[U][EPL], v[U][EPL];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const long long off = p0 + u < end ? kv_offset(a, seq, p0 + u, kvh) : -1;
      ok[u] = off >= 0;
      if (ok[u]) {
        load_row<EPL>(a.kc + off + lane * EPL, k[u]);
        load_row<EPL>(a.vc + off + lane * EPL, v[u]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; e++) k[u][e] = v[u][e] = 0.f;
      }
    }
    float s[U][G];
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int j = 0; j < G; j++) {
        float d = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; e++) d = fmaf(q[j][e], k[u][e], d);
        s[u][j] = d;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int j = 0; j < G; j++) s[u][j] += __shfl_xor_sync(0xffffffffu, s[u][j], o);
#pragma unroll
    for (int j = 0; j < G; j++) {
      float mn = m[j];
#pragma unroll
      for (int u = 0; u < U; u++) if (ok[u]) mn = fmaxf(mn, s[u][j]);
      if (mn == -INFINITY) continue;  // no valid position yet
      const float corr = exp2f(m[j] - mn);
      l[j] *= corr;
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[j][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; u++) {
        const float pe = ok[u] ? exp2f(s[u][j] - mn) : 0.f;
        l[j] += pe;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[j][e] = fmaf(pe, v[u][e], acc[j][e]);
      }
      m[j] = mn;
    }
  }

#pragma unroll
  for (int j = 0; j < G; j++) {
    if (lane == 0) { s_m[warp][j] = m[j]; s_l[warp][j] = l[j]; }
#pragma unroll
    for (int e = 0; e < EPL; e++) s_acc[warp][j][lane * EPL + e] = acc[j][e];
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

// Positions per warp iteration in decode_vec_kernel (chosen with sweep.cu); head
// dim 256 keeps 4, as 8 would spill with 8 heads per block.
constexpr int DEC_VEC_U = 8;

template <int EPL, int U = (EPL >= 8 ? 4 : DEC_VEC_U)>
void launch_decode_vec(const AttnArgs& a, const int32_t* rows, int row_count, DecodePlan p, float* acc, float2* ml,
                       cudaStream_t s) {
  dim3 grid(row_count * a.kv_heads * p.cpg, p.max_parts);
  switch (p.g) {
    case 1: decode_vec_kernel<EPL, 1, U><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
    case 2: decode_vec_kernel<EPL, 2, U><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
    case 4: decode_vec_kernel<EPL, 4, U><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
    default: decode_vec_kernel<EPL, 8, U><<<grid, 32 * DEC_WARPS, 0, s>>>(a, rows, p, acc, ml); break;
  }
}

}  // namespace
}  // namespace ek
