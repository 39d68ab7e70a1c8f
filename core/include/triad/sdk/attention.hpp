// C++ layer for attention plugins: derive from AttentionPlugin, then
//   TRIAD_ATTENTION_PLUGIN(MyAttention, "myname", "1.0", "what it is", TRIAD_PARAMS(kParams))
#pragma once

#include <cmath>
#include <string>

#include "triad/sdk/attention_v1.h"
#include "triad/sdk/plugin.hpp"

namespace triad::sdk {

class AttentionPlugin {
 public:
  virtual ~AttentionPlugin() = default;
  virtual triad_attention_caps_v1 capabilities() const = 0;
  virtual void workspace_size(const triad_attention_shape_v1& shape, size_t* fwd_bytes,
                              size_t* bwd_bytes) const = 0;
  virtual void forward(const triad_attention_fwd_args_v1& args) = 0;
  virtual void backward(const triad_attention_bwd_args_v1& args) = 0;
};

// A strided (B, H, T, D) view; the D stride is 1.
template <class T>
struct View4 {
  T* data = nullptr;
  int64_t n[4] = {0, 0, 0, 0};
  int64_t s[3] = {0, 0, 0};  // strides of B, H, T in elements
  T* row(int64_t b, int64_t h, int64_t t) const { return data + b * s[0] + h * s[1] + t * s[2]; }
};

inline std::string dl_dtype_name(DLDataType t) {
  const char* base = t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kDLInt    ? "int"
                                           : "type";
  return std::string(base) + std::to_string(t.bits);
}

// The strided view of a 4-d attention tensor, whatever its dtype (the caller checks that T
// matches it); `what` names it in errors.
template <class T>
View4<T> strided_view4(const DLTensor* t, const char* what) {
  if (!t) throw invalid(std::string(what) + " is null");
  if (t->ndim != 4)
    throw invalid(std::string(what) + " must be 4-d (B,H,T,D), got ndim " +
                  std::to_string(t->ndim));
  View4<T> v;
  v.data = reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
  for (int i = 0; i < 4; ++i) v.n[i] = t->shape[i];
  if (t->strides) {
    if (t->strides[3] != 1) throw invalid(std::string(what) + " must have unit stride along D");
    for (int i = 0; i < 3; ++i) v.s[i] = t->strides[i];
  } else {
    v.s[2] = v.n[3];
    v.s[1] = v.n[2] * v.n[3];
    v.s[0] = v.n[1] * v.n[2] * v.n[3];
  }
  return v;
}

// Checks a float32 4-d attention tensor and returns its view; `what` names it in errors.
template <class T>
View4<T> view4(const DLTensor* t, const char* what) {
  const View4<T> v = strided_view4<T>(t, what);
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1)
    throw unsupported(std::string(what) + " dtype " + dl_dtype_name(t->dtype) +
                      " is not supported (float32 only)");
  return v;
}

template <class T, class U>
void require_same_shape(const View4<T>& a, const View4<U>& b, const char* an, const char* bn) {
  for (int i = 0; i < 4; ++i)
    if (a.n[i] != b.n[i]) throw invalid(std::string(an) + " and " + bn + " differ in shape");
}

// lse (B,H,T) fp32 contiguous.
inline float* lse_view(const DLTensor* t, int64_t B, int64_t H, int64_t T) {
  if (!t) throw invalid("lse is null");
  if (t->ndim != 3 || t->shape[0] != B || t->shape[1] != H || t->shape[2] != T)
    throw invalid("lse must have shape (B,H,T)");
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32) throw invalid("lse must be float32");
  return reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
}

template <class Impl>
struct AttentionAdapter {
  static int capabilities(void* h, triad_attention_caps_v1* caps) {
    return guarded<Impl>(h, [&](Impl& p) { *caps = p.capabilities(); });
  }
  static int workspace_size(void* h, const triad_attention_shape_v1* shape, size_t* f, size_t* b) {
    return guarded<Impl>(h, [&](Impl& p) { p.workspace_size(*shape, f, b); });
  }
  static int forward(void* h, const triad_attention_fwd_args_v1* a) {
    return guarded<Impl>(h, [&](Impl& p) { p.forward(*a); });
  }
  static int backward(void* h, const triad_attention_bwd_args_v1* a) {
    return guarded<Impl>(h, [&](Impl& p) { p.backward(*a); });
  }
  static constexpr triad_attention_ops_v1 ops = {&capabilities, &workspace_size, &forward,
                                                 &backward};
};

template <>
struct KindTraits<triad_attention_ops_v1> {
  static constexpr std::string_view kind = "attention";
  static constexpr uint32_t abi_version = TRIAD_ATTENTION_ABI_VERSION;
};

}  // namespace triad::sdk

// Impl must be constructible from (triad::sdk::Services, triad::sdk::Params).
#define TRIAD_ATTENTION_PLUGIN(Impl, NAME, VERSION, DESC, PARAMS)        \
  TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, "attention", NAME, VERSION, DESC, \
                                 &::triad::sdk::AttentionAdapter<Impl>::ops, PARAMS)
