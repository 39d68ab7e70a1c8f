// Core-side handle to one tensor-parallel plugin instance (a PluginInstance): asks it for the
// whole plan of a layout (the split of every weight role and the collectives at every region
// boundary) before a run starts, and refuses a layout it cannot plan with one line that says
// which plugin, which layout, what is missing and what to set instead.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/sdk/tensor_v1.h"

namespace triad {

struct TensorPlan {
  triad_tensor_layout_v1 layout{1, 0};
  std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> split{};  // triad_tensor_split_kind per role
  std::array<triad_tensor_collectives_v1, TRIAD_TENSOR_BOUNDARY_COUNT> boundary{};
};

class TensorBackend {
 public:
  // Creates the instance; `params` resolved against the plugin's schema. Throws UserError if
  // the plugin is not of kind "tensor" or refuses to be created.
  TensorBackend(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                const triad_services_v1* services);
  TensorBackend(const TensorBackend&) = delete;
  TensorBackend& operator=(const TensorBackend&) = delete;

  const std::string& name() const;
  const triad_tensor_caps_v1& capabilities() const;

  // The whole plan for a layout. Throws UserError (one line naming the plugin, the layout
  // "tp N, sequence_parallel true|false", what it lacks, and the fix, e.g. "set tensor:
  // megatron") when capabilities refuse the layout, or split()/boundary() return non-OK for any
  // role/boundary, or return a value outside its enum, or the plan breaks the rules of
  // tensor_plan_error().
  TensorPlan plan(int tp_size, bool sequence_parallel) const;

  // The plugin's answers as they come, for the conformance suite: "" and *out filled when every
  // role and boundary was answered OK with an in-range value, else why not (the first failure).
  // Neither the capabilities nor the rules are checked.
  std::string try_plan(int tp_size, bool sequence_parallel, TensorPlan* out) const;
  // The raw status of one call.
  int try_split(const triad_tensor_layout_v1& layout, int32_t role, int32_t* kind) const noexcept;
  int try_boundary(const triad_tensor_layout_v1& layout, int32_t boundary,
                   triad_tensor_collectives_v1* out) const noexcept;
  std::string last_error() const;

 private:
  std::string refusal(const triad_tensor_layout_v1& layout, TensorPlan* out) const;
  PluginInstance instance_;
  const triad_services_v1* services_;
  const triad_tensor_ops_v1& ops_;
  triad_tensor_caps_v1 caps_{};
};

// Names for messages; "unknown" outside the enums.
const char* tensor_split_name(int32_t kind);    // "replicated", "column", "row", "vocab"
const char* tensor_collective_name(int32_t c);  // "identity", "all-reduce", "all-gather", ...
const char* tensor_boundary_name(int32_t b);    // "column-input", "row-output", ...
const char* tensor_role_name(int32_t role);     // "word_embedding", "qkv_weight", ...
// "tp 2, sequence_parallel false"
std::string tensor_layout_text(const triad_tensor_layout_v1& layout);
// "tp up to 8, sequence parallelism" / "tp 1 only, no sequence parallelism" (triad-info)
std::string describe_capabilities(const triad_tensor_caps_v1& caps);

// The first rule of tensor parallelism the plan breaks, or "" (a plugin's answers can be each
// in range and still not fit together):
//   at tp 1 nothing is split and every collective is identity;
//   VOCAB only on the word embedding; the position embedding and layernorms replicated;
//   COLUMN only on matmul weights and their biases, ROW only on matmul weights;
//   a bias splits like its weight when that is COLUMN, and is replicated otherwise;
//   within a block the second matmul (attention / fc projection) is ROW exactly when the first
//   (qkv / fc) is COLUMN, and REPLICATED when it is;
//   each boundary's collectives are an adjoint pair (identity / all-reduce either way,
//   all-gather / reduce-scatter either way, or identity / identity), all-gather and
//   reduce-scatter only under sequence parallelism, the logits' forward identity or all-reduce,
//   and the replicated grads' forward identity.
std::string tensor_plan_error(const TensorPlan& plan);
// The split rules alone (the first five above): what build_param_spec checks of a placement,
// so a plan the conformance suite passes is a plan the GPT model runs.
std::string tensor_split_error(int tp_size,
                               const std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT>& split);

}  // namespace triad
