// Device: stream, caching allocator and timing events (see context.h).
#include "context.h"

namespace ek {

Device::Device(int ordinal) : ordinal_(ordinal) {
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  check(cudaGetDeviceProperties(&props_, ordinal), "cudaGetDeviceProperties");
  check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, ordinal), "cudaDeviceGetAttribute");
  int mem_khz = 0, bus_bits = 0;
  // Reported clocks are informational: benchmarks measure bandwidth with a copy kernel.
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, ordinal) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, ordinal) == cudaSuccess) {
    peak_gbps_ = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  }
  cudaGetLastError();  // clear a non-sticky error from an unsupported attribute query
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaEventCreate(&ev_start_), "cudaEventCreate");
  check(cudaEventCreate(&ev_end_), "cudaEventCreate");
}

Device::~Device() {
  if (!destroyed_) {
    try {
      destroy();
    } catch (...) {
      // A destructor must not throw; a failing teardown leaves memory to the process exit.
    }
  }
}

size_t Device::round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (size_t(1) << 20)) {
    size_t r = 256;
    while (r < bytes) r <<= 1;
    return r;
  }
  const size_t g = size_t(1) << 16;
  return (bytes + g - 1) / g * g;
}

void* Device::alloc(size_t bytes) {
  const size_t r = round_size(bytes);
  auto it = free_.find(r);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    pooled_ -= r;
    live_[p] = r;
    live_bytes_ += r;
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, r);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    trim();
    e = cudaMalloc(&p, r);
  }
  check(e, "cudaMalloc");
  live_[p] = r;
  live_bytes_ += r;
  return p;
}

void Device::release(void* p) {
  auto it = live_.find(p);
  if (it == live_.end()) return;  // double free from JS: ignore rather than corrupt the pool
  free_[it->second].push_back(p);
  pooled_ += it->second;
  live_bytes_ -= it->second;
  live_.erase(it);
}

size_t Device::size_of(void* p) const {
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second;
}

void Device::trim() {
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  for (auto& kv : free_)
    for (void* p : kv.second) check(cudaFree(p), "cudaFree");
  free_.clear();
  pooled_ = 0;
}

void Device::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  for (auto& kv : free_)
    for (void* p : kv.second) cudaFree(p);
  for (auto& kv : live_) cudaFree(kv.first);
  free_.clear();
  live_.clear();
  pooled_ = live_bytes_ = 0;
  cudaEventDestroy(ev_start_);
  cudaEventDestroy(ev_end_);
  check(cudaStreamDestroy(stream_), "cudaStreamDestroy");
}

void Device::mark() { check(cudaEventRecord(ev_start_, stream_), "cudaEventRecord"); }

float Device::since_mark_ms() {
  check(cudaEventRecord(ev_end_, stream_), "cudaEventRecord");
  check(cudaEventSynchronize(ev_end_), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, ev_start_, ev_end_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace ek
