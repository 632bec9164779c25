// The per-device state the addon hands to JS: one stream, a caching allocator over cudaMalloc
// (never managed memory), timing events. Every CUDA call is checked by the binding.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace ek {

/** Thrown by Device methods; the binding turns it into a JS Error naming the call. */
struct CudaFailure {
  std::string call;
  cudaError_t code;
  std::string message() const {
    return "CUDA call " + call + " failed: " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")";
  }
};

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw CudaFailure{call, e};
}

/** A device, its stream and its allocation pool. Frees are stream-ordered: one stream, so a
 * block returned to the pool is only reused by work enqueued after everything that used it. */
class Device {
 public:
  explicit Device(int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  void* alloc(size_t bytes);
  void release(void* p);
  size_t size_of(void* p) const;
  void trim();      // returns pooled (unused) blocks to the driver
  void destroy();   // frees everything; the device object is unusable afterwards

  cudaStream_t stream() const { return stream_; }
  int sm_count() const { return sm_count_; }
  int ordinal() const { return ordinal_; }
  const cudaDeviceProp& props() const { return props_; }
  double peak_gbps() const { return peak_gbps_; }
  size_t pooled_bytes() const { return pooled_; }
  size_t live_bytes() const { return live_bytes_; }
  void mark();            // records the start event
  float since_mark_ms();  // records the end event, waits, returns elapsed ms

 private:
  static size_t round_size(size_t bytes);
  int ordinal_;
  int sm_count_ = 0;
  double peak_gbps_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_start_ = nullptr, ev_end_ = nullptr;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;
  size_t pooled_ = 0, live_bytes_ = 0;
  bool destroyed_ = false;
};

}  // namespace ek
