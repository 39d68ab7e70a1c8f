// C++ layer for tensor-parallel plugins: derive from TensorPlugin, then
//   TRIAD_TENSOR_PLUGIN(MyTensor, "myname", "1.0", "what it is", TRIAD_PARAMS(kParams))
// The adapter checks every call before it reaches the plugin: a role or boundary outside its
// enum is TRIAD_ERR_INVALID, and a layout the plugin's capabilities() exclude (tp_size < 1, above
// max_tp_size, or sequence parallelism it does not plan) is TRIAD_ERR_UNSUPPORTED with a message
// saying so. split() and boundary() therefore only see layouts the plugin declared.
#pragma once

#include <cstdint>
#include <string>

#include "triad/sdk/plugin.hpp"
#include "triad/sdk/tensor_v1.h"

namespace triad::sdk {

class TensorPlugin {
 public:
  virtual ~TensorPlugin() = default;
  virtual triad_tensor_caps_v1 capabilities() const = 0;
  // The triad_tensor_split_kind of `role` (a triad_tensor_role) under `layout`.
  virtual int32_t split(const triad_tensor_layout_v1& layout, int32_t role) const = 0;
  // The collectives at `boundary` (a triad_tensor_boundary) under `layout`.
  virtual triad_tensor_collectives_v1 boundary(const triad_tensor_layout_v1& layout,
                                               int32_t boundary) const = 0;
};

// "tp 4, sequence_parallel true", as the core writes a layout.
inline std::string layout_text(const triad_tensor_layout_v1& l) {
  return "tp " + std::to_string(l.tp_size) + ", sequence_parallel " +
         (l.sequence_parallel ? "true" : "false");
}

// Throws unsupported(...) when `caps` exclude `layout`.
inline void require_layout(const triad_tensor_caps_v1& caps, const triad_tensor_layout_v1& l) {
  if (l.tp_size < 1) throw invalid("tp_size " + std::to_string(l.tp_size) + " is below 1");
  if (caps.max_tp_size > 0 && l.tp_size > caps.max_tp_size)
    throw unsupported("no plan for " + layout_text(l) + ": it plans tp up to " +
                      std::to_string(caps.max_tp_size));
  if (l.sequence_parallel && !caps.sequence_parallel)
    throw unsupported("no plan for " + layout_text(l) + ": it has no sequence parallelism");
}

template <class Impl>
struct TensorAdapter {
  static const triad_tensor_layout_v1& checked(const Impl& p, const triad_tensor_layout_v1* l) {
    if (!l) throw invalid("layout is null");
    require_layout(p.capabilities(), *l);
    return *l;
  }
  static int capabilities(void* h, triad_tensor_caps_v1* caps) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!caps) throw invalid("caps is null");
      *caps = p.capabilities();
    });
  }
  static int split(void* h, const triad_tensor_layout_v1* layout, int32_t role, int32_t* kind) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!kind) throw invalid("split_kind is null");
      if (role < 0 || role >= TRIAD_TENSOR_ROLE_COUNT)
        throw invalid("role " + std::to_string(role) + " is not a triad_tensor_role");
      *kind = p.split(checked(p, layout), role);
    });
  }
  static int boundary(void* h, const triad_tensor_layout_v1* layout, int32_t b,
                      triad_tensor_collectives_v1* out) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!out) throw invalid("collectives is null");
      if (b < 0 || b >= TRIAD_TENSOR_BOUNDARY_COUNT)
        throw invalid("boundary " + std::to_string(b) + " is not a triad_tensor_boundary");
      *out = p.boundary(checked(p, layout), b);
    });
  }
  static constexpr triad_tensor_ops_v1 ops = {&capabilities, &split, &boundary};
};

template <>
struct KindTraits<triad_tensor_ops_v1> {
  static constexpr std::string_view kind = "tensor";
  static constexpr uint32_t abi_version = TRIAD_TENSOR_ABI_VERSION;
};

}  // namespace triad::sdk

// Impl must derive from TensorPlugin and be constructible from
// (triad::sdk::Services, triad::sdk::Params).
#define TRIAD_TENSOR_PLUGIN(Impl, NAME, VERSION, DESC, PARAMS)        \
  TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, "tensor", NAME, VERSION, DESC, \
                                 &::triad::sdk::TensorAdapter<Impl>::ops, PARAMS)
