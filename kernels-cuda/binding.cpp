// Node-API binding (node-addon-api): one addon for Node and Deno. Exposes deviceCount() (safe
// without a driver: cudart_static loads libcuda lazily) and a Context class whose methods
// allocate, copy and enqueue kernels on the context's stream. Device pointers travel as BigInt.
#include <napi.h>

#include <memory>

#include "context.h"
#include "kernels.h"

namespace {

using ek::check;

uint64_t big(const Napi::Value& v) {
  if (v.IsBigInt()) {
    bool lossless = true;
    return v.As<Napi::BigInt>().Uint64Value(&lossless);
  }
  return uint64_t(v.As<Napi::Number>().Int64Value());  // 0 for "none"
}
template <typename T>
T* ptr(const Napi::Value& v) { return reinterpret_cast<T*>(big(v)); }
int num(const Napi::Value& v) { return v.As<Napi::Number>().Int32Value(); }
double dbl(const Napi::Value& v) { return v.As<Napi::Number>().DoubleValue(); }
Napi::Value bigv(Napi::Env env, const void* p) { return Napi::BigInt::New(env, uint64_t(reinterpret_cast<uintptr_t>(p))); }

void launched(cudaError_t e, const char* kernel) {
  if (e != cudaSuccess) throw ek::CudaFailure{std::string("kernel launch ") + kernel, e};
}

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Context",
                       {
                           InstanceMethod<&Context::Info>("info"),
                           InstanceMethod<&Context::Alloc>("alloc"),
                           InstanceMethod<&Context::Zeros>("zeros"),
                           InstanceMethod<&Context::Free>("free"),
                           InstanceMethod<&Context::Upload>("upload"),
                           InstanceMethod<&Context::UploadQ8>("uploadQ8"),
                           InstanceMethod<&Context::Download>("download"),
                           InstanceMethod<&Context::Sync>("sync"),
                           InstanceMethod<&Context::Destroy>("destroy"),
                           InstanceMethod<&Context::Mark>("mark"),
                           InstanceMethod<&Context::SinceMarkMs>("sinceMarkMs"),
                           InstanceMethod<&Context::ToF32>("toF32"),
                           InstanceMethod<&Context::FillRandom>("fillRandom"),
                           InstanceMethod<&Context::CopyBytes>("copyBytes"),
                           InstanceMethod<&Context::Embedding>("embedding"),
                           InstanceMethod<&Context::GatherRows>("gatherRows"),
                           InstanceMethod<&Context::SliceColumns>("sliceColumns"),
                           InstanceMethod<&Context::ConcatColumns>("concatColumns"),
                           InstanceMethod<&Context::ScatterAdd>("scatterAdd"),
                           InstanceMethod<&Context::MaskLogits>("maskLogits"),
                           InstanceMethod<&Context::PenalizeRepeats>("penalizeRepeats"),
                           InstanceMethod<&Context::PenalizeSampled>("penalizeSampled"),
                           InstanceMethod<&Context::Add>("add"),
                           InstanceMethod<&Context::SiluMul>("siluMul"),
                           InstanceMethod<&Context::GeluMul>("geluMul"),
                           InstanceMethod<&Context::SwigluOai>("swigluOai"),
                           InstanceMethod<&Context::Softcap>("softcap"),
                           InstanceMethod<&Context::SigmoidMul>("sigmoidMul"),
                           InstanceMethod<&Context::ReluSquared>("reluSquared"),
                           InstanceMethod<&Context::CausalConv1d>("causalConv1d"),
                           InstanceMethod<&Context::GatedDeltaNet>("gatedDeltaNet"),
                           InstanceMethod<&Context::SsmScan>("ssmScan"),
                           InstanceMethod<&Context::Rmsnorm>("rmsnorm"),
                           InstanceMethod<&Context::AddRmsnorm>("addRmsnorm"),
                           InstanceMethod<&Context::Softmax>("softmax"),
                           InstanceMethod<&Context::Argmax>("argmax"),
                           InstanceMethod<&Context::Rope>("rope"),
                           InstanceMethod<&Context::KvWrite>("kvWrite"),
                           InstanceMethod<&Context::RopeKvWrite>("ropeKvWrite"),
                           InstanceMethod<&Context::Matmul>("matmul"),
                           InstanceMethod<&Context::MatmulPath>("matmulPath"),
                           InstanceMethod<&Context::Attention>("attention"),
                           InstanceMethod<&Context::Sample>("sample"),
                           InstanceMethod<&Context::MoeRoute>("moeRoute"),
                           InstanceMethod<&Context::MatmulExperts>("matmulExperts"),
                           InstanceMethod<&Context::MoeCombine>("moeCombine"),
                       });
  }

  // Adopts a Device made by createContext(). Never throws: an exception escaping an ObjectWrap
  // constructor leaves a wrap whose finalizer frees the object a second time (heap corruption
  // seen under Deno), so everything that can fail happens before the JS object exists.
  explicit Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
    if (info.Length() > 0 && info[0].IsExternal()) dev_.reset(info[0].As<Napi::External<ek::Device>>().Data());
  }

 private:
  std::unique_ptr<ek::Device> dev_;

  template <typename F>
  static void guard(Napi::Env env, F&& f) {
    try {
      f();
    } catch (const ek::CudaFailure& e) {
      throw Napi::Error::New(env, e.message());
    }
  }
  template <typename F>
  Napi::Value run(const Napi::CallbackInfo& info, F&& f) {
    Napi::Value out = info.Env().Undefined();
    guard(info.Env(), [&] {
      if (!dev_) throw ek::CudaFailure{"(context destroyed)", cudaErrorInvalidValue};
      out = f(info.Env());
    });
    return out;
  }
  cudaStream_t s() const { return dev_->stream(); }
  template <typename T>
  T* out(size_t count) { return static_cast<T*>(dev_->alloc(count * sizeof(T))); }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) -> Napi::Value {
      const cudaDeviceProp& p = dev_->props();
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", std::string(p.name));
      o.Set("ccMajor", p.major);
      o.Set("ccMinor", p.minor);
      o.Set("smCount", dev_->sm_count());
      o.Set("totalBytes", double(p.totalGlobalMem));
      o.Set("peakGBps", dev_->peak_gbps());
      o.Set("pooledBytes", double(dev_->pooled_bytes()));
      o.Set("liveBytes", double(dev_->live_bytes()));
      return o;
    });
  }
  Napi::Value Alloc(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) { return bigv(env, dev_->alloc(size_t(dbl(info[0])))); });
  }
  Napi::Value Zeros(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      const size_t bytes = size_t(dbl(info[0]));
      void* p = dev_->alloc(bytes);
      check(cudaMemsetAsync(p, 0, bytes, s()), "cudaMemsetAsync");
      return bigv(env, p);
    });
  }
  Napi::Value Free(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) { dev_->release(ptr<void>(info[0])); return env.Undefined(); });
  }
  // upload(dst, bytes: TypedArray | ArrayBuffer view): copies the view's bytes to dst.
  Napi::Value Upload(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      Napi::TypedArray t = info[1].As<Napi::TypedArray>();
      const uint8_t* src = static_cast<const uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
      // Pageable source: the copy is staged before cudaMemcpyAsync returns, so JS may reuse it.
      check(cudaMemcpyAsync(ptr<void>(info[0]), src, t.ByteLength(), cudaMemcpyHostToDevice, s()), "cudaMemcpyAsync");
      return env.Undefined();
    });
  }
  // uploadQ8(raw: Uint8Array, count) → repacked q8_0 allocation.
  Napi::Value UploadQ8(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      Napi::Uint8Array raw = info[0].As<Napi::Uint8Array>();
      const size_t count = size_t(dbl(info[1]));
      void* tmp = dev_->alloc(raw.ByteLength());
      check(cudaMemcpyAsync(tmp, raw.Data(), raw.ByteLength(), cudaMemcpyHostToDevice, s()), "cudaMemcpyAsync");
      void* dst = dev_->alloc(ek::q8_scales_offset_host(count) + count / 32 * 2);
      launched(ek::repack_q8_0(static_cast<uint8_t*>(tmp), dst, count, s()), "repack_q8_0");
      dev_->release(tmp);
      return bigv(env, dst);
    });
  }
  Napi::Value Download(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      const size_t bytes = size_t(dbl(info[1]));
      Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(env, bytes);
      check(cudaMemcpyAsync(buf.Data(), ptr<void>(info[0]), bytes, cudaMemcpyDeviceToHost, s()), "cudaMemcpyAsync");
      check(cudaStreamSynchronize(s()), "cudaStreamSynchronize");
      return buf;
    });
  }
  Napi::Value Sync(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) { check(cudaStreamSynchronize(s()), "cudaStreamSynchronize"); return env.Undefined(); });
  }
  Napi::Value Destroy(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    guard(env, [&] {
      if (dev_) dev_->destroy();
      dev_.reset();
    });
    return env.Undefined();
  }
  Napi::Value Mark(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) { dev_->mark(); return env.Undefined(); });
  }
  Napi::Value SinceMarkMs(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) { return Napi::Number::New(env, dev_->since_mark_ms()); });
  }
  Napi::Value ToF32(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      const size_t count = size_t(dbl(info[2]));
      float* o = out<float>(count);
      launched(ek::weight_to_f32(ptr<void>(info[0]), num(info[1]), count, o, s()), "weight_to_f32");
      return bigv(env, o);
    });
  }
  // fillRandom(dtype, count, seed, scale) → new weight allocation of random values.
  Napi::Value FillRandom(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      const int dtype = num(info[0]);
      const size_t count = size_t(dbl(info[1]));
      const size_t bytes = dtype == 3 ? ek::q8_scales_offset_host(count) + count / 32 * 2
                                      : count * (dtype == 0 ? 4 : 2);
      void* p = dev_->alloc(bytes);
      launched(ek::fill_random(p, dtype, count, uint64_t(dbl(info[2])), float(dbl(info[3])), s()), "fill_random");
      return bigv(env, p);
    });
  }
  // copyBytes(src, dst, bytes): device copy kernel (bandwidth probe).
  Napi::Value CopyBytes(const Napi::CallbackInfo& info) {
    return run(info, [&](Napi::Env env) {
      launched(ek::copy_bytes(ptr<void>(info[0]), ptr<void>(info[1]), size_t(dbl(info[2])), s()), "copy_bytes");
      return env.Undefined();
    });
  }
#include "binding_ops.inc"
};

Napi::Value DeviceCount(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  Napi::Object o = Napi::Object::New(env);
  o.Set("count", e == cudaSuccess ? count : 0);
  if (e != cudaSuccess) {
    o.Set("error", std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  int rt = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) o.Set("runtimeVersion", rt);
  return o;
}

// createContext(device) → Context. A CUDA failure throws here, before any Context exists.
Napi::Value CreateContext(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::unique_ptr<ek::Device> dev;
  try {
    dev = std::make_unique<ek::Device>(info.Length() > 0 ? num(info[0]) : 0);
  } catch (const ek::CudaFailure& e) {
    throw Napi::Error::New(env, e.message());
  }
  Napi::Value ext = Napi::External<ek::Device>::New(env, dev.release());
  return env.GetInstanceData<Napi::FunctionReference>()->New({ext});
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  // Finalizers are kept to the one instance-data wrapper: the template forms of InstanceMethod and
  // Function::New attach no per-method callback data (the plain forms register one finalizer per
  // method). The napi reference inside it is not deleted at teardown (SuppressDestruct): the runtime
  // frees every reference when the environment goes, and deleting one from a finalizer then is the
  // double free Node fixed in nodejs/node#31638; Deno's teardown aborted rarely with a heap-corruption
  // message while this addon was loaded (docs/modules.md, Known issues).
  auto* ctor = new Napi::FunctionReference(Napi::Persistent(Context::Define(env)));
  ctor->SuppressDestruct();
  env.SetInstanceData<Napi::FunctionReference>(ctor);  // per-environment; the wrapper is freed with it
  exports.Set("deviceCount", Napi::Function::New<DeviceCount>(env, "deviceCount"));
  exports.Set("createContext", Napi::Function::New<CreateContext>(env, "createContext"));
  return exports;
}

}  // namespace

NODE_API_MODULE(evolving_cuda, Init)
