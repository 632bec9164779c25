// The "matmul bf16" section of sweep.cu (included there after CK, fill_kernel and median_ms): the
// built mma.sync kernel ("fast" path) against the set-aside wgmma + TMA kernel (matmul_wgmma.cuh).
// Correctness first: edge shapes against a CPU reference at every output, then at the device
// bench's shapes the two kernels against each other (max over rows of max|a - b| / max|a|) plus a
// CPU spot check; TFLOP/s of both (wgmma with and without the x -> bf16 pre-pass). Any excess over
// 1e-3 prints "WGMMA MISMATCH"; a launch that does not finish prints "WGMMA HANG" and exits.
#pragma once
static float bf16f(uint16_t b) { const uint32_t u = uint32_t(b) << 16; float f; memcpy(&f, &u, 4); return f; }
static float round_bf16(float f) {  // nearest even, as __floats2bfloat162_rn (inputs are finite)
  uint32_t u; memcpy(&u, &f, 4);
  return bf16f(uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
}

/** Waits for stream 0; a launch still running after `limit_s` is a hang: say so and exit. */
static cudaError_t finish(const char* what, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(0);
    if (e != cudaErrorNotReady) return e;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      printf("WGMMA HANG: %s still running after %.0f s (mbarrier/TMA deadlock?)\n", what, limit_s);
      fflush(stdout);
      _exit(3);
    }
    usleep(100);
  }
}

static cudaError_t run_mma(const float* x, const uint16_t* w, const float* bias, int n, int K, int N, float* y) {
  constexpr int bytes = ek::mma_smem_bytes<false>();
  const cudaError_t e = cudaFuncSetAttribute(ek::mma_gemm_kernel<W_BF16, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e != cudaSuccess) return e;
  ek::mma_gemm_kernel<W_BF16, false><<<dim3((N + ek::MMA_BN - 1) / ek::MMA_BN, (n + ek::MMA_BM - 1) / ek::MMA_BM), ek::MMA_THREADS, bytes>>>(
      x, w, bias, n, K, N, y);
  return cudaGetLastError();
}

/** One shape's buffers: x f32 in [-1, 1), W bf16 in [-0.05, 0.05), bias f32, y with a NaN-filled guard tail. */
struct MmCase {
  int n, K, N;
  float *x, *bias, *y;
  uint16_t *w, *xb;
  static constexpr size_t GUARD = 1024;
  MmCase(int n_, int K_, int N_, uint32_t seed) : n(n_), K(K_), N(N_) {
    CK(cudaMalloc(&x, size_t(n) * K * 4)); CK(cudaMalloc(&w, size_t(N) * K * 2)); CK(cudaMalloc(&bias, size_t(N) * 4));
    CK(cudaMalloc(&y, (size_t(n) * N + GUARD) * 4)); CK(cudaMalloc(&xb, ek::wgmma_scratch_bytes(n, K)));
    fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(x), size_t(n) * K, seed, 0);
    fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(w), size_t(N) * K / 2, seed + 1, 1);
    fill_kernel<<<64, 256>>>(reinterpret_cast<uint32_t*>(bias), N, seed + 2, 0);
    CK(cudaGetLastError());
  }
  ~MmCase() { cudaFree(x); cudaFree(w); cudaFree(bias); cudaFree(y); cudaFree(xb); }
  void poison() { CK(cudaMemset(y, 0xff, (size_t(n) * N + GUARD) * 4)); }  // NaN everywhere, guard included
  std::vector<float> out(bool* guard_ok) {
    std::vector<float> h(size_t(n) * N + GUARD);
    CK(cudaMemcpy(h.data(), y, h.size() * 4, cudaMemcpyDeviceToHost));
    uint32_t bad = 0;
    for (size_t i = size_t(n) * N; i < h.size(); i++) { uint32_t u; memcpy(&u, &h[i], 4); bad |= ~u; }
    *guard_ok = bad == 0;
    h.resize(size_t(n) * N);
    return h;
  }
  /** Max over the (r, c) pairs of |got - ref| / (Σ|x·w| + |bias|), ref in double from bf16-rounded x and W. */
  double cpu_err(const std::vector<float>& got, const std::vector<std::pair<int, int>>& at) const {
    // Small shapes: copy x and W once; large ones: the rows the pairs need (pairs sorted by row).
    const bool whole = (size_t(n) + N) * K <= (size_t(1) << 24);
    std::vector<float> xs(whole ? size_t(n) * K : K), hb(N);
    std::vector<uint16_t> ws(whole ? size_t(N) * K : K);
    CK(cudaMemcpy(hb.data(), bias, size_t(N) * 4, cudaMemcpyDeviceToHost));
    if (whole) {
      CK(cudaMemcpy(xs.data(), x, xs.size() * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(ws.data(), w, ws.size() * 2, cudaMemcpyDeviceToHost));
    }
    double worst = 0;
    int last_r = -1;
    for (auto [r, c] : at) {
      const float* xr = xs.data() + (whole ? size_t(r) * K : 0);
      const uint16_t* wr = ws.data() + (whole ? size_t(c) * K : 0);
      if (!whole) {
        if (r != last_r) CK(cudaMemcpy(xs.data(), x + size_t(r) * K, size_t(K) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ws.data(), w + size_t(c) * K, size_t(K) * 2, cudaMemcpyDeviceToHost));
        last_r = r;
      }
      double ref = hb[c], scale = std::fabs(hb[c]);
      for (int k = 0; k < K; k++) {
        const double p = double(round_bf16(xr[k])) * double(bf16f(wr[k]));
        ref += p;
        scale += std::fabs(p);
      }
      const double e = std::fabs(double(got[size_t(r) * N + c]) - ref) / (scale + 1e-30);
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;  // NaN: infinitely wrong
    }
    return worst;
  }
};

/** max over rows of max|a - b| / max|a| (NaN anywhere: infinity). */
static double row_rel_diff(const std::vector<float>& a, const std::vector<float>& b, int n, int N) {
  double worst = 0;
  for (int r = 0; r < n; r++) {
    double mag = 0, d = 0;
    for (int c = 0; c < N; c++) {
      const size_t i = size_t(r) * N + c;
      if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
      mag = std::max(mag, double(std::fabs(a[i])));
      d = std::max(d, double(std::fabs(a[i] - b[i])));
    }
    worst = std::max(worst, d / (mag + 1e-30));
  }
  return worst;
}

void matmul_section() {
  const double TOL = 1e-3;
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, ek::wg::wgmma_gemm_kernel));
  printf("matmul bf16 (\"fast\": x rounded to bf16; wgmma kernel %d registers, %d B dynamic smem, K %% 8 == 0)\n", fa.numRegs,
         ek::wg::SMEM_BYTES);
  fflush(stdout);
  // Edge shapes against a CPU reference, every output: n, N off the tile, K off 64 (zero-filled by
  // TMA), odd N (scalar stores), more tiles than SMs (a CTA walks several tiles).
  const int small[][3] = {{130, 128, 200}, {77, 200, 333}, {1, 64, 8}, {1100, 64, 4200}};
  bool ok_all = true;
  for (auto& sh : small) {
    MmCase m(sh[0], sh[1], sh[2], 21);
    m.poison();
    cudaError_t e = ek::launch_wgmma_bf16(m.x, m.w, m.bias, m.n, m.K, m.N, m.y, m.xb, 0);
    if (e == cudaSuccess) e = finish("wgmma small shape", 10);
    if (e != cudaSuccess) { printf("WGMMA MISMATCH: n=%d K=%d N=%d launch failed: %s\n", m.n, m.K, m.N, cudaGetErrorString(e)); exit(1); }
    bool guard;
    const std::vector<float> got = m.out(&guard);
    std::vector<std::pair<int, int>> at;
    for (int r = 0; r < m.n; r += (m.n > 200 ? 37 : 1))
      for (int c = 0; c < m.N; c++) at.push_back({r, c});
    for (int c = 0; c < m.N; c++) at.push_back({m.n - 1, c});
    const double err = m.cpu_err(got, at);
    const bool ok = err <= TOL && guard;
    ok_all &= ok;
    printf("  wgmma vs CPU  n=%4d K=%4d N=%4d  max err %.2e (of sum |x*w|)%s%s\n", m.n, m.K, m.N, err,
           guard ? "" : "  WROTE PAST y", ok ? "" : "  <-- WGMMA MISMATCH");
    fflush(stdout);
  }

  const int shapes[][3] = {{4096, 4096, 4096}, {4096, 4096, 14336}, {4096, 14336, 4096}, {2048, 4096, 6144}};
  printf("  %-27s %-21s %-33s %-14s %s\n", "shape", "mma.sync TFLOP/s", "wgmma TFLOP/s (gemm / +x->bf16)", "rel diff", "cpu spot");
  for (auto& sh : shapes) {
    MmCase m(sh[0], sh[1], sh[2], 31);
    const double flop = 2.0 * m.n * m.K * m.N;
    const int iters = 10;
    const float t_mma = median_ms([&](int) { CK(run_mma(m.x, m.w, m.bias, m.n, m.K, m.N, m.y)); }, iters);
    bool g1, g2;
    m.poison();
    CK(run_mma(m.x, m.w, m.bias, m.n, m.K, m.N, m.y));
    CK(cudaDeviceSynchronize());
    const std::vector<float> ref = m.out(&g1);
    m.poison();
    cudaError_t e = ek::launch_wgmma_bf16(m.x, m.w, m.bias, m.n, m.K, m.N, m.y, m.xb, 0);
    if (e == cudaSuccess) e = finish("wgmma", 20);
    if (e != cudaSuccess) { printf("WGMMA MISMATCH: n=%d K=%d N=%d launch failed: %s\n", m.n, m.K, m.N, cudaGetErrorString(e)); exit(1); }
    const std::vector<float> got = m.out(&g2);
    const double diff = row_rel_diff(ref, got, m.n, m.N);
    std::vector<std::pair<int, int>> at;
    for (int i = 0; i < 48; i++) at.push_back({int((size_t(i) * 2654435761u) % m.n), int((size_t(i) * 40503u + 7) % m.N)});
    at.push_back({m.n - 1, m.N - 1});
    std::sort(at.begin(), at.end());
    const double spot = m.cpu_err(got, at);
    const float t_gemm = median_ms([&](int) { CK(ek::launch_wgmma_bf16_xb(m.xb, m.w, m.bias, m.n, m.K, m.N, m.y, 0)); }, iters);
    const float t_all = median_ms([&](int) { CK(ek::launch_wgmma_bf16(m.x, m.w, m.bias, m.n, m.K, m.N, m.y, m.xb, 0)); }, iters);
    const bool ok = diff <= TOL && spot <= TOL && g1 && g2;
    ok_all &= ok;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%d K=%d N=%d", m.n, m.K, m.N);
    printf("  %-27s %5.0f (%6.3f ms)      %5.0f / %5.0f (%6.3f / %6.3f ms)   %.2e       %.2e%s%s\n", shape, flop / (t_mma * 1e9),
           t_mma, flop / (t_gemm * 1e9), flop / (t_all * 1e9), t_gemm, t_all, diff, spot, g1 && g2 ? "" : "  WROTE PAST y",
           ok ? "" : "  <-- WGMMA MISMATCH");
    fflush(stdout);
  }
  printf(ok_all ? "  wgmma: all checks within %.0e\n" : "  WGMMA MISMATCH: some check above exceeds %.0e\n", TOL);
}
