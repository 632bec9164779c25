// Variant sweep for the memory-bound decode kernels, run on a GPU machine by
// scripts/device-check.sh (DEVICE_SWEEP=1): bf16 GEMV (batch 1) with several (rows per warp,
// 256-value slices in flight) configurations, and split-KV decode attention (f32 KV, D 128, GQA 4)
// as built (attention.cu's decode_kernel) and in the set-aside vector form (attention_vec.cuh) with U
// positions per warp iteration. Prints GB/s against a copy kernel's bandwidth; a winner becomes
// GEMV_ROWS/GEMV_UNROLL, or moves into attention.cu with its U. Last, "matmul bf16": the built
// mma.sync kernel ("fast") against the set-aside wgmma + TMA kernel (matmul_wgmma.cuh), TFLOP/s and
// correctness (CPU references at edge shapes, the two kernels against each other at full size);
// `sweep matmul` runs that section alone. Not run by CI (needs a GPU).
// Build: nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I kernels-cuda kernels-cuda/bench/sweep.cu
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include "../attention.cu"
#include "attention_vec.cuh"
#include "../gemv.cuh"
#include "../mma.cuh"
#include "matmul_wgmma.cuh"
#include <chrono>
#include <cmath>
#include <cstring>
#include <unistd.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void fill_kernel(uint32_t* p, size_t words, uint32_t seed, int bf16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    if (bf16) {  // two bf16 in [-0.05, 0.05)
      const float a = ((h & 0xffff) / 65536.f - 0.5f) * 0.1f, b = ((h >> 16) / 65536.f - 0.5f) * 0.1f;
      p[i] = (__float_as_uint(a) >> 16) | (__float_as_uint(b) & 0xffff0000u);
    } else {
      p[i] = __float_as_uint((h / 4294967296.f - 0.5f) * 2.f);
    }
  }
}
__global__ void copy_kernel(const float4* __restrict__ a, float4* __restrict__ b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) b[i] = a[i];
}

template <class F>
float median_ms(F f, int iters) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) f(i);
  std::vector<float> v;
  for (int r = 0; r < 7; r++) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; i++) f(i);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
    v.push_back(ms / iters);
  }
  CK(cudaGetLastError());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#include "matmul_sweep.cuh"  // matmul_section(): uses CK, fill_kernel and median_ms above

static const size_t POOL = size_t(2) << 30;  // 2 GiB of weights, rotated so no launch reads from L2
static uint16_t* pool;

template <int ROWS, int UNROLL>
float gemv_gbps(const float* x, float* y, int K, int N) {
  const size_t bytes = size_t(K) * N * 2, slices = std::max<size_t>(1, POOL / bytes);
  const int per_block = ek::GEMV_WARPS * ROWS;
  const float ms = median_ms([&](int i) {
    WeightRef w{pool + (i % slices) * size_t(K) * N, nullptr};
    ek::gemv_kernel<W_BF16, 1, ROWS, UNROLL><<<(N + per_block - 1) / per_block, 32 * ek::GEMV_WARPS>>>(x, w, nullptr, 1, K, N, y);
  }, 20);
  return bytes / (ms * 1e-3) / 1e9;
}

int main(int argc, char** argv) {
  // "matmul": that section alone; "decode": every section but it (device-check.sh runs the set-aside
  // wgmma kernel last, after the timing, so that a hang there costs nothing else).
  if (argc > 1 && strcmp(argv[1], "matmul") == 0) { matmul_section(); return 0; }
  const bool decode_only = argc > 1 && strcmp(argv[1], "decode") == 0;
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaMalloc(&pool, POOL));
  fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(pool), POOL / 4, 7, 1);
  float *x, *y;
  CK(cudaMalloc(&x, 1 << 20)); CK(cudaMalloc(&y, 1 << 20));
  fill_kernel<<<64, 256>>>(reinterpret_cast<uint32_t*>(x), (1 << 20) / 4, 9, 0);
  CK(cudaDeviceSynchronize());

  const size_t half = POOL / 2;
  const float cms = median_ms([&](int) {
    copy_kernel<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(pool), reinterpret_cast<float4*>(reinterpret_cast<char*>(pool) + half), half / 16);
  }, 10);
  const float copy = 2.0 * half / (cms * 1e-3) / 1e9;
  printf("sweep: copy kernel %.0f GB/s (%d SMs)\n", copy, sms);

  const int shapes[][2] = {{4096, 6144}, {4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 128256}};
  printf("gemv bf16 n=1 GB/s   rows,unroll: 2,2    2,4    4,2    1,4    4,4    1,8    2,8\n");
  for (auto& sh : shapes) {
    const int K = sh[0], N = sh[1];
    const float r[] = {gemv_gbps<2, 2>(x, y, K, N), gemv_gbps<2, 4>(x, y, K, N), gemv_gbps<4, 2>(x, y, K, N),
                       gemv_gbps<1, 4>(x, y, K, N), gemv_gbps<4, 4>(x, y, K, N), gemv_gbps<1, 8>(x, y, K, N),
                       gemv_gbps<2, 8>(x, y, K, N)};
    printf("  K=%5d N=%6d                ", K, N);
    for (float g : r) printf(" %5.0f ", g);
    printf("\n");
  }

  // Decode attention: 32 heads, 8 KV heads, D 128, blocks of 16, scattered tables, f32 KV.
  const int heads = 32, kvh = 8, D = 128, bs = 16;
  const int cases[][2] = {{1, 4096}, {1, 32768}, {8, 8192}, {8, 32768}, {32, 4096}};
  printf("attention f32 KV GB/s   scalar  vec2   vec4   vec8   vec16  (max |vec8 - scalar|)\n");
  for (auto& c : cases) {
    const int batch = c[0], ctx = c[1], per = (ctx + bs - 1) / bs, nb = batch * per;
    const size_t kvfloats = size_t(nb) * bs * kvh * D;
    float *kc = reinterpret_cast<float*>(pool), *vc = kc + kvfloats;  // 2 GiB holds b=8 ctx 32k (2 x 1 GiB)
    if (2 * kvfloats * 4 > POOL) { printf("  skip b=%d ctx=%d\n", batch, ctx); continue; }
    fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(kc), 2 * kvfloats, 11, 0);
    std::vector<int32_t> tab(nb), seqv(batch), posv(batch, ctx - 1);
    for (int i = 0; i < nb; i++) tab[i] = int32_t((size_t(i) * 7919) % nb);
    for (int i = 0; i < batch; i++) seqv[i] = i;
    int32_t *dt, *ds, *dp; float *q, *out, *out2;
    CK(cudaMalloc(&dt, nb * 4)); CK(cudaMalloc(&ds, batch * 4)); CK(cudaMalloc(&dp, batch * 4));
    CK(cudaMemcpy(dt, tab.data(), nb * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, seqv.data(), batch * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dp, posv.data(), batch * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&q, batch * heads * D * 4)); CK(cudaMalloc(&out, batch * heads * D * 4)); CK(cudaMalloc(&out2, batch * heads * D * 4));
    fill_kernel<<<64, 256>>>(reinterpret_cast<uint32_t*>(q), batch * heads * D, 13, 0);
    ek::AttnArgs a{q, kc, vc, ds, dp, dt, out, batch, heads, kvh, D, bs, per, nb, ctx, 0.0883883f, 0, nullptr};
    const ek::DecodePlan p = ek::plan_decode(a, batch, sms);
    const size_t slots = size_t(batch) * heads * p.max_parts;
    float* acc; CK(cudaMalloc(&acc, slots * D * 4 + slots * 8 + 16));
    float2* ml = reinterpret_cast<float2*>(acc + slots * D);
    auto reduce = [&]() { if (p.max_parts > 1) ek::decode_reduce_kernel<<<batch * heads, 128>>>(a, nullptr, p, acc, ml); };
    const double bytes = 2.0 * batch * ctx * kvh * D * 4;
    auto gb = [&](float ms) { return bytes / (ms * 1e-3) / 1e9; };
    const float t0 = median_ms([&](int) { ek::launch_decode_epl<4>(a, nullptr, batch, p, acc, ml, 0); reduce(); }, 20);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out2, out, batch * heads * D * 4, cudaMemcpyDeviceToDevice));
    const float t2 = median_ms([&](int) { ek::launch_decode_vec<4, 2>(a, nullptr, batch, p, acc, ml, 0); reduce(); }, 20);
    const float t4 = median_ms([&](int) { ek::launch_decode_vec<4, 4>(a, nullptr, batch, p, acc, ml, 0); reduce(); }, 20);
    const float t16 = median_ms([&](int) { ek::launch_decode_vec<4, 16>(a, nullptr, batch, p, acc, ml, 0); reduce(); }, 20);
    const float t8 = median_ms([&](int) { ek::launch_decode_vec<4, 8>(a, nullptr, batch, p, acc, ml, 0); reduce(); }, 20);
    CK(cudaDeviceSynchronize());
    std::vector<float> h1(batch * heads * D), h2(batch * heads * D);
    CK(cudaMemcpy(h1.data(), out2, h1.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), out, h2.size() * 4, cudaMemcpyDeviceToHost));
    float diff = 0;
    for (size_t i = 0; i < h1.size(); i++) diff = std::max(diff, std::fabs(h1[i] - h2[i]));
    printf("  b=%2d ctx=%5d parts=%3d   %5.0f  %5.0f  %5.0f  %5.0f  %5.0f  (%.2e)\n", batch, ctx, p.max_parts, gb(t0), gb(t2),
           gb(t4), gb(t8), gb(t16), diff);
    CK(cudaFree(dt)); CK(cudaFree(ds)); CK(cudaFree(dp)); CK(cudaFree(q)); CK(cudaFree(out)); CK(cudaFree(out2)); CK(cudaFree(acc));
  }
  CK(cudaFree(pool)); CK(cudaFree(x)); CK(cudaFree(y));
  if (!decode_only) matmul_section();
  return 0;
}
