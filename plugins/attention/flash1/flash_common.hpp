// What flash1 and flash2 share around the math: argument checks, the workspace carve-up,
// tile parameters and the thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tile_gemm.hpp"
#include "triad/sdk/attention.hpp"

namespace triad::flash {

using sdk::invalid;
using sdk::unsupported;
using sdk::View4;

constexpr int kMaxHeadDim = 256;
constexpr int kMaxBlock = 512;

inline triad_attention_caps_v1 cpu_fp32_caps() {
  triad_attention_caps_v1 c{};
  c.devices = 1u << kDLCPU;
  c.dtypes = TRIAD_DTYPE_BIT_FP32;
  c.num_head_dims = 0;  // any D in [1, max_head_dim]
  c.max_head_dim = kMaxHeadDim;
  c.causal = 1;
  c.non_causal = 1;
  return c;
}

// Reads an integer tile parameter and checks it: block_k must be a multiple of kLane so that
// packed K^T rows need no tail.
inline int block_param(const sdk::Params& params, const std::string& plugin,
                       const std::string& name, int multiple) {
  const long long v = params.get_int(name);
  if (v < multiple || v > kMaxBlock || v % multiple != 0)
    throw invalid(plugin + ": parameter " + name + " = " + std::to_string(v) + " must be " +
                  (multiple > 1 ? "a multiple of " + std::to_string(multiple) + " " : "") + "in [" +
                  std::to_string(multiple) + ", " + std::to_string(kMaxBlock) +
                  "]; set attention." + name + " to e.g. 64");
  return static_cast<int>(v);
}

// Threads the plugin runs with: the core's choice, else OpenMP's. Fixed at creation so the
// per-thread scratch counted by workspace_size() matches what the kernels use.
inline int thread_count(const sdk::Services& services) {
  return services.num_threads() > 0 ? services.num_threads() : omp_get_max_threads();
}

// Carves 64-byte aligned float arrays out of the workspace. With a null base it only counts,
// so workspace_size() and the kernels share one layout function and cannot disagree.
class Arena {
 public:
  explicit Arena(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  char* take(size_t bytes) {
    const size_t at = (used_ + 63) / 64 * 64;
    used_ = at + bytes;
    return base_ ? base_ + at : nullptr;
  }
  float* floats(size_t n) { return reinterpret_cast<float*>(take(n * sizeof(float))); }
  size_t used() const { return used_; }
  // Bytes to ask the core for: what was carved, plus slack to align an unaligned base.
  size_t request() const { return used_ == 0 ? 0 : used_ + 64; }

 private:
  char* base_;
  size_t used_ = 0;
};

struct Tiles {
  int bq = 64;  // query rows per tile
  int bk = 64;  // key rows per tile, a multiple of kLane
};

// Same-sized scratch regions, one per thread, each a Scratch(Arena&, D, Tiles) carved on
// demand, so no thread shares a cache line with another and nothing is heap-allocated.
template <class Scratch>
class PerThread {
 public:
  PerThread(Arena& a, int threads, int D, Tiles t) : D_(D), tiles_(t) {
    Arena probe;
    [[maybe_unused]] const Scratch sized(probe, D, t);
    stride_ = (probe.used() + 63) / 64 * 64;
    base_ = a.take(stride_ * threads);
  }
  Scratch get(int thread) const {
    Arena a(base_ + stride_ * thread);
    return Scratch(a, D_, tiles_);
  }

 private:
  char* base_ = nullptr;
  size_t stride_ = 0;
  int D_;
  Tiles tiles_;
};

// The workspace the core passed, aligned to 64 bytes; throws if it is smaller than asked.
inline void* aligned_workspace(void* ws, size_t have, size_t need, const std::string& plugin) {
  if (need == 0) return nullptr;
  if (!ws || have < need)
    throw invalid(plugin + ": workspace of " + std::to_string(have) +
                  " bytes is smaller than the " + std::to_string(need) +
                  " bytes workspace_size() asked for this shape");
  const auto p = reinterpret_cast<uintptr_t>(ws);
  return reinterpret_cast<void*>((p + 63) / 64 * 64);
}

struct Heads {
  View4<const float> q, k, v;
  int B = 0, H = 0, T = 0, D = 0;
};

inline void require_host(const DLTensor* t, const char* what, const std::string& plugin) {
  if (!t) throw invalid(plugin + ": " + what + " is null");
  if (t->device.device_type != kDLCPU)
    throw unsupported(plugin + ": " + what + " is not in host memory; " + plugin +
                      " runs on the CPU only");
}

inline View4<float> output_view(DLTensor* t, const char* what, const Heads& h,
                                const std::string& plugin) {
  require_host(t, what, plugin);
  auto o = sdk::view4<float>(t, what);
  sdk::require_same_shape(h.q, o, "q", what);
  return o;
}

inline View4<const float> input_view(const DLTensor* t, const char* what, const Heads& h,
                                     const std::string& plugin) {
  require_host(t, what, plugin);
  auto o = sdk::view4<const float>(t, what);
  sdk::require_same_shape(h.q, o, "q", what);
  return o;
}

inline Heads check_heads(const DLTensor* q, const DLTensor* k, const DLTensor* v,
                         const std::string& plugin) {
  require_host(q, "q", plugin);
  require_host(k, "k", plugin);
  require_host(v, "v", plugin);
  Heads h;
  h.q = sdk::view4<const float>(q, "q");
  h.k = sdk::view4<const float>(k, "k");
  h.v = sdk::view4<const float>(v, "v");
  sdk::require_same_shape(h.q, h.k, "q", "k");
  sdk::require_same_shape(h.q, h.v, "q", "v");
  for (int i = 0; i < 4; ++i)
    if (h.q.n[i] < 0 || h.q.n[i] > INT32_MAX)
      throw invalid(plugin + ": q dimension " + std::to_string(i) + " = " +
                    std::to_string(h.q.n[i]) + " is out of range");
  h.B = static_cast<int>(h.q.n[0]);
  h.H = static_cast<int>(h.q.n[1]);
  h.T = static_cast<int>(h.q.n[2]);
  h.D = static_cast<int>(h.q.n[3]);
  if (h.D < 1 || h.D > kMaxHeadDim)
    throw unsupported(plugin + ": head dim " + std::to_string(h.D) + " is outside [1, " +
                      std::to_string(kMaxHeadDim) + "]");
  return h;
}

// lse (B,H,T), fp32 contiguous.
inline float* lse_data(const DLTensor* t, const Heads& h, const std::string& plugin) {
  require_host(t, "lse", plugin);
  float* data = sdk::lse_view(t, h.B, h.H, h.T);
  // A stride matters only along a dimension longer than 1.
  if (t->strides && ((h.T > 1 && t->strides[2] != 1) || (h.H > 1 && t->strides[1] != h.T) ||
                     (h.B > 1 && t->strides[0] != int64_t{h.H} * h.T)))
    throw invalid(plugin + ": lse must be contiguous (B,H,T)");
  return data;
}

}  // namespace triad::flash
