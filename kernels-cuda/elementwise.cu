// Gathers, elementwise ops, rotary embedding and paged KV writes (all memory-bound, one pass).
#include "common.cuh"
#include "kernels.h"

namespace ek {
namespace {

inline unsigned grid_for(size_t count, int threads) {
  size_t g = (count + threads - 1) / threads;
  return unsigned(g < 65535u * 64u ? g : 65535u * 64u);
}

template <int WT>
__global__ void embedding_kernel(WeightRef table, const int32_t* ids, int n, int dim, int vocab, float* out) {
  const int row = blockIdx.x;
  const int id = ids[row];
  const bool ok = id >= 0 && id < vocab;  // out-of-range ids give a zero row (no device-side throw)
  for (int c = threadIdx.x; c < dim; c += blockDim.x)
    out[size_t(row) * dim + c] = ok ? load_w<WT>(table, size_t(id) * dim + c) : 0.f;
}

__global__ void gather_rows_kernel(const float* x, const int32_t* idx, int d, int rows, float* out) {
  const int row = blockIdx.x;
  const int src = idx[row];
  const bool ok = src >= 0 && src < rows;
  for (int c = threadIdx.x; c < d; c += blockDim.x) out[size_t(row) * d + c] = ok ? x[size_t(src) * d + c] : 0.f;
}

// dst[r, dst_off + c] = src[r, src_off + c]: a column slice, or one half of a concatenation.
__global__ void copy_columns_kernel(const float* src, int src_stride, int src_off, float* dst, int dst_stride, int dst_off,
                                    int width) {
  const int row = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x)
    dst[size_t(row) * dst_stride + dst_off + c] = src[size_t(row) * src_stride + src_off + c];
}

__global__ void add_kernel(const float* a, const float* b, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void silu_mul_kernel(const float* g, const float* u, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = silu(g[i]) * u[i];
}

// 0.5·x·(1 + tanh(y)) written as x·sigmoid(2y), y = √(2/π)(x + 0.044715x³): ggml's gelu.
__global__ void gelu_mul_kernel(const float* g, const float* u, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float x = g[i];
    const float y2 = 1.5957691216057308f * (x + 0.044715f * x * x * x);
    out[i] = x / (1.f + __expf(-y2)) * u[i];
  }
}

__global__ void swiglu_oai_kernel(const float* g, const float* u, size_t count, float alpha, float limit, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float x = fminf(g[i], limit);
    const float y = fminf(fmaxf(u[i], -limit), limit);
    out[i] = x / (1.f + __expf(-alpha * x)) * (y + 1.f);
  }
}

// Angles in double: positions reach 1e5+ and an f32 angle would lose ~1e-2 of phase there.
// `factors` (nullable, [rot_dim / 2]) divides pair i's frequency (Llama 3.1+ rope_freqs).
__device__ __forceinline__ void rope_pair(float& a, float& b, int pos, int i, int rot_dim, float theta,
                                          const float* factors) {
  double inv = pow(double(theta), -2.0 * i / rot_dim);
  if (factors) inv /= double(factors[i]);
  double sn, cs;
  sincos(double(pos) * inv, &sn, &cs);
  const float c = float(cs), s = float(sn);
  const float x = a, y = b;
  a = x * c - y * s;
  b = x * s + y * c;
}

// One thread per (token, head, pair); dims beyond rot_dim are copied through.
// `magnitude` multiplies the rotated pairs only (LongRoPE's attention factor on a partial rotation).
__global__ void rope_kernel(const float* x, const int32_t* pos, int n, int heads, int D, int rot, float theta,
                            int neox, const float* factors, float magnitude, float* out) {
  const int half = rot / 2, pass = D - rot;
  const int per_head = half + pass;
  const size_t total = size_t(n) * heads * per_head;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int j = int(i % per_head);
    const size_t th = i / per_head;
    const int t = int(th / heads);
    const size_t base = th * D;
    if (j < half) {
      const int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
      float a = x[base + i0], b = x[base + i1];
      rope_pair(a, b, pos[t], j, rot, theta, factors);
      out[base + i0] = a * magnitude;
      out[base + i1] = b * magnitude;
    } else {
      const int d = rot + (j - half);
      out[base + d] = x[base + d];
    }
  }
}

__global__ void kv_write_kernel(const float* k, const float* v, float* kc, float* vc, const int32_t* slots, int n,
                                int row, int capacity) {
  const int t = blockIdx.x;
  const int slot = slots[t];
  if (slot < 0 || slot >= capacity) return;  // the TS side validates slots it knows on the host
  for (int c = threadIdx.x; c < row; c += blockDim.x) {
    kc[size_t(slot) * row + c] = k[size_t(t) * row + c];
    vc[size_t(slot) * row + c] = v[size_t(t) * row + c];
  }
}

// One block per token: rope on q and k pairs, copy v, scatter k/v to the token's cache slot.
__global__ void rope_kv_write_kernel(const float* qkv, const int32_t* pos, const int32_t* slots, int heads,
                                     int kv_heads, int D, int rot, float theta, int neox, const float* factors,
                                     float* q_out, float* kc, float* vc, int capacity) {
  const int t = blockIdx.x;
  const int p = pos[t];
  const int slot = slots[t];
  const bool write = slot >= 0 && slot < capacity;
  const int half = rot / 2;
  const int width = (heads + 2 * kv_heads) * D;
  const float* row = qkv + size_t(t) * width;
  const int kv_row = kv_heads * D;
  // Rotated pairs of q and k heads.
  for (int i = threadIdx.x; i < (heads + kv_heads) * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    const int i0 = neox ? j : 2 * j, i1 = neox ? j + half : 2 * j + 1;
    float a = row[h * D + i0], b = row[h * D + i1];
    rope_pair(a, b, p, j, rot, theta, factors);
    if (h < heads) {
      q_out[(size_t(t) * heads + h) * D + i0] = a;
      q_out[(size_t(t) * heads + h) * D + i1] = b;
    } else if (write) {
      const size_t o = size_t(slot) * kv_row + (h - heads) * D;
      kc[o + i0] = a;
      kc[o + i1] = b;
    }
  }
  // Unrotated tail dims of q and k, and all of v.
  const int tail = D - rot;
  for (int i = threadIdx.x; i < (heads + kv_heads) * tail; i += blockDim.x) {
    const int h = i / tail, d = rot + i % tail;
    const float val = row[h * D + d];
    if (h < heads) q_out[(size_t(t) * heads + h) * D + d] = val;
    else if (write) kc[size_t(slot) * kv_row + (h - heads) * D + d] = val;
  }
  if (write)
    for (int i = threadIdx.x; i < kv_row; i += blockDim.x) vc[size_t(slot) * kv_row + i] = row[(heads + kv_heads) * D + i];
}

}  // namespace

cudaError_t embedding(const void* table, int dtype, const int32_t* ids, int n, int dim, int vocab, float* out,
                      cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  WeightRef w{table, reinterpret_cast<const __half*>(static_cast<const uint8_t*>(table) +
                                                     q8_scales_offset(size_t(vocab) * dim))};
  const int threads = dim >= 256 ? 256 : 128;
  switch (dtype) {
    case W_F32: embedding_kernel<W_F32><<<n, threads, 0, s>>>(w, ids, n, dim, vocab, out); break;
    case W_F16: embedding_kernel<W_F16><<<n, threads, 0, s>>>(w, ids, n, dim, vocab, out); break;
    case W_BF16: embedding_kernel<W_BF16><<<n, threads, 0, s>>>(w, ids, n, dim, vocab, out); break;
    default: embedding_kernel<W_Q8><<<n, threads, 0, s>>>(w, ids, n, dim, vocab, out); break;
  }
  return cudaGetLastError();
}

cudaError_t gather_rows(const float* x, const int32_t* idx, int m, int d, int rows, float* out, cudaStream_t s) {
  if (m == 0) return cudaSuccess;
  gather_rows_kernel<<<m, d >= 256 ? 256 : 128, 0, s>>>(x, idx, d, rows, out);
  return cudaGetLastError();
}

cudaError_t copy_columns(const float* src, int src_stride, int src_off, float* dst, int dst_stride, int dst_off, int rows,
                         int width, cudaStream_t s) {
  if (rows == 0 || width == 0) return cudaSuccess;
  copy_columns_kernel<<<rows, width >= 256 ? 256 : 128, 0, s>>>(src, src_stride, src_off, dst, dst_stride, dst_off, width);
  return cudaGetLastError();
}

// Logit biases and penalties: one thread per (distinct) offset, so no two threads touch one element.
__global__ void scatter_add_kernel(float* x, const int32_t* index, const float* values, int m, size_t size) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int32_t o = index[i];
  if (o < 0 || size_t(o) >= size) return;
  x[o] += values[i];
}

cudaError_t scatter_add(float* x, const int32_t* index, const float* values, int m, size_t size, cudaStream_t s) {
  if (m == 0) return cudaSuccess;
  scatter_add_kernel<<<(m + 255) / 256, 256, 0, s>>>(x, index, values, m, size);
  return cudaGetLastError();
}

// Token masks (output grammars): one thread per mask word (32 logits), rows distinct (checked on the host).
__global__ void mask_logits_kernel(float* logits, const int32_t* rows, const uint32_t* bits, int m, int n, int vocab,
                                   int words) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)m * words) return;
  const int k = int(i / words), w = int(i % words);
  const int32_t row = rows[k];
  if (row < 0 || row >= n) return;
  const uint32_t word = bits[i];
  if (word == 0xffffffffu) return;
  float* out = logits + (size_t)row * vocab;
  const int first = w * 32, last = min(first + 32, vocab);
  for (int v = first; v < last; v++)
    if (((word >> (v - first)) & 1u) == 0u) out[v] = -1e30f;
}

// Repetition penalty: one thread per bit word, as mask_logits; a set bit divides a positive logit by
// the row's factor and multiplies any other by it.
__global__ void penalize_repeats_kernel(float* logits, const int32_t* rows, const uint32_t* bits, const float* factors,
                                        int m, int n, int vocab, int words) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)m * words) return;
  const int k = int(i / words), w = int(i % words);
  const int32_t row = rows[k];
  if (row < 0 || row >= n) return;
  const uint32_t word = bits[i];
  if (word == 0u) return;
  const float f = factors[k];
  float* out = logits + (size_t)row * vocab;
  const int first = w * 32, last = min(first + 32, vocab);
  for (int v = first; v < last; v++)
    if (((word >> (v - first)) & 1u) != 0u) out[v] = out[v] > 0.f ? out[v] / f : out[v] * f;
}

// Penalties of the tokens a multi-step group sampled on the device (Backend.penalizeSampled): one
// thread per row records the token the step before sampled in its history, then scales (repetition,
// where the host's `seen` lacks it) and lowers (frequency per occurrence; presence where `present`
// lacks it) each distinct token of the history. A row holds at most a few tokens.
__global__ void penalize_sampled_kernel(float* logits, const int32_t* rows, const int32_t* sampled, int32_t* history,
                                        const uint32_t* seen, const uint32_t* present, const float* params, int m, int n,
                                        int vocab, int words, int h, int count) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= m) return;
  const int32_t row = rows[k];
  if (row < 0 || row >= n) return;
  int32_t* hist = history + (size_t)k * h;
  hist[count - 1] = sampled[row];
  const float factor = params[k * 3], presence = params[k * 3 + 1], frequency = params[k * 3 + 2];
  float* out = logits + (size_t)row * vocab;
  for (int j = 0; j < count; j++) {
    const int32_t t = hist[j];
    if (t < 0 || t >= vocab) continue;
    bool first = true;
    int c = 0;
    for (int i = 0; i < count; i++)
      if (hist[i] == t) {
        if (i < j) first = false;
        c++;
      }
    if (!first) continue;
    const size_t word = (size_t)k * words + (t >> 5);
    const uint32_t bit = 1u << (t & 31);
    float x = out[t];
    if ((seen[word] & bit) == 0u) x = x > 0.f ? x / factor : x * factor;
    float delta = -(frequency * float(c));
    if ((present[word] & bit) == 0u) delta = delta - presence;
    out[t] = x + delta;
  }
}

cudaError_t penalize_sampled(float* logits, const int32_t* rows, const int32_t* sampled, int32_t* history,
                             const uint32_t* seen, const uint32_t* present, const float* params, int m, int n, int vocab,
                             int h, int count, cudaStream_t s) {
  if (m == 0) return cudaSuccess;
  penalize_sampled_kernel<<<unsigned((m + 63) / 64), 64, 0, s>>>(logits, rows, sampled, history, seen, present, params, m,
                                                                 n, vocab, (vocab + 31) / 32, h, count);
  return cudaGetLastError();
}

cudaError_t penalize_repeats(float* logits, const int32_t* rows, const uint32_t* bits, const float* factors, int m, int n,
                             int vocab, cudaStream_t s) {
  const int words = (vocab + 31) / 32;
  const long long threads = (long long)m * words;
  if (threads == 0) return cudaSuccess;
  penalize_repeats_kernel<<<unsigned((threads + 255) / 256), 256, 0, s>>>(logits, rows, bits, factors, m, n, vocab,
                                                                          words);
  return cudaGetLastError();
}

cudaError_t mask_logits(float* logits, const int32_t* rows, const uint32_t* bits, int m, int n, int vocab,
                        cudaStream_t s) {
  const int words = (vocab + 31) / 32;
  const long long threads = (long long)m * words;
  if (threads == 0) return cudaSuccess;
  mask_logits_kernel<<<unsigned((threads + 255) / 256), 256, 0, s>>>(logits, rows, bits, m, n, vocab, words);
  return cudaGetLastError();
}

cudaError_t add(const float* a, const float* b, size_t count, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  add_kernel<<<grid_for(count, 256), 256, 0, s>>>(a, b, count, out);
  return cudaGetLastError();
}

cudaError_t silu_mul(const float* g, const float* u, size_t count, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  silu_mul_kernel<<<grid_for(count, 256), 256, 0, s>>>(g, u, count, out);
  return cudaGetLastError();
}

__global__ void sigmoid_mul_kernel(const float* g, const float* x, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = x[i] / (1.f + expf(-g[i]));
}

cudaError_t sigmoid_mul(const float* g, const float* x, size_t count, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  sigmoid_mul_kernel<<<grid_for(count, 256), 256, 0, s>>>(g, x, count, out);
  return cudaGetLastError();
}

__global__ void softcap_kernel(const float* x, size_t count, float cap, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    out[i] = cap * tanhf(x[i] / cap);
  }
}

cudaError_t softcap(const float* x, size_t count, float cap, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  softcap_kernel<<<grid_for(count, 256), 256, 0, s>>>(x, count, cap, out);
  return cudaGetLastError();
}

__global__ void relu_squared_kernel(const float* x, size_t count, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float r = fmaxf(x[i], 0.f);
    out[i] = r * r;
  }
}

cudaError_t relu_squared(const float* x, size_t count, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  relu_squared_kernel<<<grid_for(count, 256), 256, 0, s>>>(x, count, out);
  return cudaGetLastError();
}

cudaError_t gelu_mul(const float* g, const float* u, size_t count, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  gelu_mul_kernel<<<grid_for(count, 256), 256, 0, s>>>(g, u, count, out);
  return cudaGetLastError();
}

cudaError_t swiglu_oai(const float* g, const float* u, size_t count, float alpha, float limit, float* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  swiglu_oai_kernel<<<grid_for(count, 256), 256, 0, s>>>(g, u, count, alpha, limit, out);
  return cudaGetLastError();
}

cudaError_t rope(const float* x, const int32_t* pos, int n, int heads, int D, int rot, float theta, int neox,
                 const float* factors, float magnitude, float* out, cudaStream_t s) {
  const size_t total = size_t(n) * heads * (rot / 2 + D - rot);
  if (total == 0) return cudaSuccess;
  rope_kernel<<<grid_for(total, 256), 256, 0, s>>>(x, pos, n, heads, D, rot, theta, neox, factors, magnitude, out);
  return cudaGetLastError();
}

cudaError_t kv_write(const float* k, const float* v, float* kc, float* vc, const int32_t* slots, int n, int row,
                     int capacity, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  kv_write_kernel<<<n, row >= 256 ? 256 : 128, 0, s>>>(k, v, kc, vc, slots, n, row, capacity);
  return cudaGetLastError();
}

cudaError_t rope_kv_write(const float* qkv, const int32_t* pos, const int32_t* slots, int n, int heads,
                          int kv_heads, int D, int rot, float theta, int neox, const float* factors, float* q_out,
                          float* kc, float* vc, int capacity, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  rope_kv_write_kernel<<<n, 256, 0, s>>>(qkv, pos, slots, heads, kv_heads, D, rot, theta, neox, factors, q_out, kc,
                                         vc, capacity);
  return cudaGetLastError();
}

}  // namespace ek
