// Host-side launchers for every kernel. Each enqueues on `stream` and returns the launch status
// (cudaGetLastError), so the binding can name the failing launch in its JS error.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace ek {

/** Byte offset of the f16 scales in a repacked q8_0 allocation (matches common.cuh). */
inline size_t q8_scales_offset_host(size_t count) { return (count + 255) & ~size_t(255); }

// --- weights (convert.cu) -----------------------------------------------------------------
/** GGUF q8_0 blocks (34 bytes per 32 values) → device layout [int8 quants][f16 scales]. */
cudaError_t repack_q8_0(const uint8_t* raw, void* out, size_t count, cudaStream_t s);
/** Any weight dtype → f32 (for download). */
cudaError_t weight_to_f32(const void* w, int dtype, size_t count, float* out, cudaStream_t s);
/** Deterministic pseudo-random fill, uniform in [-scale, scale], stored as `dtype` (benchmarks). */
cudaError_t fill_random(void* out, int dtype, size_t count, uint64_t seed, float scale, cudaStream_t s);
/** Streams `bytes` from src to dst (a bandwidth probe: read + write). */
cudaError_t copy_bytes(const void* src, void* dst, size_t bytes, cudaStream_t s);

// --- elementwise and row ops (elementwise.cu, rownorm.cu) ---------------------------------
cudaError_t embedding(const void* table, int dtype, const int32_t* ids, int n, int dim, int vocab, float* out,
                      cudaStream_t s);
cudaError_t gather_rows(const float* x, const int32_t* idx, int m, int d, int rows, float* out, cudaStream_t s);
/** dst[r * dst_stride + dst_off + c] = src[r * src_stride + src_off + c] for r < rows, c < width. */
cudaError_t copy_columns(const float* src, int src_stride, int src_off, float* dst, int dst_stride, int dst_off, int rows,
                         int width, cudaStream_t s);
/** x[index[i]] += values[i] for i < m (distinct offsets, checked on the host); offsets outside [0, size) skipped. */
cudaError_t scatter_add(float* x, const int32_t* index, const float* values, int m, size_t size, cudaStream_t s);
/** logits[rows[k] * vocab + v] = -1e30 wherever bit v of mask row k (ceil(vocab / 32) words) is 0; rows distinct. */
cudaError_t mask_logits(float* logits, const int32_t* rows, const uint32_t* bits, int m, int n, int vocab,
                        cudaStream_t s);
/** Where bit v of row k is set: logits[rows[k] * vocab + v] /= factors[k] if positive, else *= it; rows distinct. */
cudaError_t penalize_repeats(float* logits, const int32_t* rows, const uint32_t* bits, const float* factors, int m, int n,
                             int vocab, cudaStream_t s);
cudaError_t penalize_sampled(float* logits, const int32_t* rows, const int32_t* sampled, int32_t* history,
                             const uint32_t* seen, const uint32_t* present, const float* params, int m, int n, int vocab,
                             int h, int count, cudaStream_t s);
cudaError_t add(const float* a, const float* b, size_t count, float* out, cudaStream_t s);
cudaError_t silu_mul(const float* gate, const float* up, size_t count, float* out, cudaStream_t s);
// gelu(gate) * up (tanh approximation, ggml's gelu).
cudaError_t gelu_mul(const float* gate, const float* up, size_t count, float* out, cudaStream_t s);
/** sigmoid(gate)·x elementwise (Qwen3.5's gated attention output). */
cudaError_t sigmoid_mul(const float* gate, const float* x, size_t count, float* out, cudaStream_t s);
/** cap·tanh(x/cap) elementwise (Gemma 2's final logit soft-capping). */
cudaError_t softcap(const float* x, size_t count, float cap, float* out, cudaStream_t s);
/** max(x, 0)² elementwise (Nemotron-H's feed-forward activation). */
cudaError_t relu_squared(const float* x, size_t count, float* out, cudaStream_t s);
/** GPT-OSS's clamped SwiGLU: g = min(gate, limit), u = clamp(up, ±limit); g·sigmoid(alpha·g)·(u + 1). */
cudaError_t swiglu_oai(const float* gate, const float* up, size_t count, float alpha, float limit, float* out, cudaStream_t s);
cudaError_t rmsnorm(const float* x, const float* w, int rows, int cols, float eps, int groups, float* out, cudaStream_t s);
/** Fused residual add + rmsnorm: sum = x + r; norm = rmsnorm(sum). One read of x and r. */
cudaError_t add_rmsnorm(const float* x, const float* r, const float* w, int rows, int cols, float eps, float* sum,
                        float* norm, cudaStream_t s);
cudaError_t softmax(const float* x, int rows, int cols, float* out, cudaStream_t s);
cudaError_t argmax(const float* x, int rows, int cols, int32_t* out, cudaStream_t s);
/** `factors` (nullable) f32 [rot_dim / 2] divides each pair's frequency (Llama 3.1+ rope_freqs);
 * `magnitude` multiplies each rotated pair (LongRoPE's attention factor), not the dims past rot_dim. */
cudaError_t rope(const float* x, const int32_t* pos, int n, int heads, int head_dim, int rot_dim, float theta,
                 int neox, const float* factors, float magnitude, float* out, cudaStream_t s);
cudaError_t kv_write(const float* k, const float* v, float* kc, float* vc, const int32_t* slots, int n,
                     int row_elems, int capacity, cudaStream_t s);
/** Fused: qkv [n, (H + 2*Hkv) * D] → rope(q) into q_out [n, H, D]; rope(k), v into the caches.
 * `factors` as for `rope`. */
cudaError_t rope_kv_write(const float* qkv, const int32_t* pos, const int32_t* slots, int n, int heads,
                          int kv_heads, int head_dim, int rot_dim, float theta, int neox, const float* factors,
                          float* q_out, float* kc, float* vc, int capacity, cudaStream_t s);

// --- matmul (matmul.cu) --------------------------------------------------------------------
/** y [n, N] = x [n, K] · Wᵀ (+ bias). Picks GEMV, tensor-core (f16/bf16) or SIMT tiles. `exact`
 * keeps f32 activations exact to ~2^-16 on the tensor-core path (two MMAs); 0 rounds x to 16 bits. */
cudaError_t matmul(const float* x, const void* w, int dtype, const float* bias, int n, int K, int N, float* y,
                   int exact, int sm_count, cudaStream_t s);
/** Which matmul path `matmul` takes for a shape (0 gemv, 1 tensor core, 2 simt); for benchmarks. */
int matmul_path(int dtype, int n, int K, int N);

// --- mixture of experts (moe.cu) -----------------------------------------------------------
/** The most experts moe_route takes: its shared memory holds a row's logits and its top k (≤ 32 KiB). */
constexpr int MOE_MAX_EXPERTS = 4096;
/** Per row of logits [n, experts]: the top k experts by selection score (descending, ties to the lower
 * index) → ids [n, k], and their probabilities (softmax, or each logit's sigmoid when `sigmoid`) →
 * weights [n, k], over the k's sum when `normalize`, times `scale`. The score is the logit, or with
 * `bias` (f32 [experts], may be null) the probability plus the bias. With groups > 1 (≤ 32, dividing
 * experts) scores are probabilities (+ bias) and experts come only from the groups_used groups whose
 * two best scores sum highest (ties to the lower group). */
cudaError_t moe_route(const float* logits, const float* bias, int n, int experts, int k, int normalize, int sigmoid,
                      float scale, int groups, int groups_used, int32_t* ids, float* weights, cudaStream_t s);
/** y [n·k, N]: row r = x[x_per_row ? r : r / k] · W[ids[r]]ᵀ, W [experts, N, K] stacked (ids clamped to
 * 0..experts-1); dtype as for matmul. */
cudaError_t matmul_experts(const float* x, const void* w, int dtype, const int32_t* ids, int n, int k, int experts,
                           int K, int N, int x_per_row, float* y, cudaStream_t s);
/** out [n, d] = Σ_j weights[t, j] · y[t·k + j, :], j in order. */
cudaError_t moe_combine(const float* y, const float* weights, int n, int k, int d, float* out, cudaStream_t s);

// --- recurrent state (recurrent.cu) --------------------------------------------------------
/** The most taps causal_conv1d takes: its window lives in registers. */
constexpr int CONV1D_MAX_KERNEL = 8;
/** The largest key head dimension gated_delta_net takes: a state column spans at most 8 threads' registers. */
constexpr int DELTA_NET_MAX_KEY_DIM = 256;
/** Depthwise causal convolution with SiLU over each sequence's rows (Backend.causalConv1d): x [n, C],
 * w [C, K] (2 ≤ K ≤ CONV1D_MAX_KERNEL), state [slots, K - 1, C] updated in place, seqs i32 [num_seqs, 4]
 * = (first row, row count, slot, fresh) → y [n, C]. A sequence whose rows or slot are out of range is
 * skipped. `gated`: LFM2's short convolution (Backend.shortConv), x [n, 3C] holding B, C and x: the
 * window takes B·x and y is C times the sum, with no SiLU. `bias` [C] (nullable; not with `gated`) is added
 * to each sum before SiLU (Mamba-2's). */
cudaError_t causal_conv1d(const float* x, const float* w, float* state, const int32_t* seqs, int num_seqs, int n, int C,
                          int K, int slots, bool gated, const float* bias, float* y, cudaStream_t s);
struct DeltaNetArgs {
  const float* x;        // [n, 2·nk·dk + nv·dv]: q, k, v
  const float* alpha;    // [n, nv]
  const float* beta;     // [n, nv]
  const float* decay;    // [nv]
  const float* dt_bias;  // [nv]
  float* state;          // [slots, nv, dk, dv], updated in place
  const int32_t* seqs;   // [num_seqs, 4] as for causal_conv1d
  float* out;            // [n, nv·dv]
  int n, nk, nv, dk, dv, slots;
  int grouped;           // value head h reads key head h / (nv / nk); else h % nk
  float eps;             // floor of the q and k L2 norms
};
/** The gated delta rule over each sequence's rows (Backend.gatedDeltaNet); dk ≤ DELTA_NET_MAX_KEY_DIM. */
cudaError_t gated_delta_net(const DeltaNetArgs& a, int num_seqs, cudaStream_t s);
/** The largest state dimension ssm_scan takes: a state row spans one warp's registers, 8 values a lane. */
constexpr int SSM_MAX_STATE_DIM = 256;
struct SsmArgs {
  const float* xbc;      // [n, heads·hd + 2·groups·ds]: x, B, C
  const float* dt;       // [n, heads]
  const float* a;        // [heads], negative
  const float* d;        // [heads]
  const float* dt_bias;  // [heads]
  float* state;          // [slots, heads, hd, ds], updated in place
  const int32_t* seqs;   // [num_seqs, 4] as for causal_conv1d
  float* out;            // [n, heads·hd]
  int n, heads, hd, ds, groups, slots;
};
/** Mamba-2's selective scan over each sequence's rows (Backend.ssmScan); ds ≤ SSM_MAX_STATE_DIM. */
cudaError_t ssm_scan(const SsmArgs& a, int num_seqs, cudaStream_t s);

// --- attention (attention.cu) --------------------------------------------------------------
struct AttnArgs {
  const float* q;        // [n, heads, D]
  const float* kc;       // [numBlocks, blockSize, kvHeads, D]
  const float* vc;
  const int32_t* seq;    // [n]
  const int32_t* pos;    // [n]
  const int32_t* tables; // [numSeqs, maxBlocks]
  float* out;            // [n, heads, D]
  int n, heads, kv_heads, head_dim, block_size, max_blocks, num_blocks, max_context;
  float scale;
  int window;            // sliding window in positions; 0 for none
  const float* sinks;    // [heads] logits that join each softmax's denominator; null for none
  float softcap;         // scores s become softcap·tanh(s/softcap) (Gemma 2); 0 for none
};
/** Split-KV attention for every row in `rows` (null: all n rows). `ws` is attention_workspace bytes. */
cudaError_t attention_decode(const AttnArgs& a, const int32_t* rows, int row_count, int sm_count, void* ws,
                             cudaStream_t s);
/** Bytes of scratch attention_decode needs for `row_count` rows. */
size_t attention_workspace(const AttnArgs& a, int row_count, int sm_count);
/** Flash-style tiles: tiles[2*i] = first row, tiles[2*i+1] = row count (≤ 32, one sequence). */
cudaError_t attention_prefill(const AttnArgs& a, const int32_t* tiles, int tile_count, cudaStream_t s);

// --- sampling (sample.cu) ------------------------------------------------------------------
/** params: 4 floats per row (temperature, topK, topP, uniform). */
// Floats per sampling row: temperature, topK, topP, uniform, minP (src/backend/cuda/sampling-params.ts).
constexpr int SAMPLE_PARAMS = 5;
size_t sample_workspace(int rows, int vocab);
cudaError_t sample(const float* logits, const float* params, int rows, int vocab, int32_t* out, void* ws,
                   size_t ws_bytes, cudaStream_t s);

}  // namespace ek
