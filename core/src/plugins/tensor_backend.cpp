#include "triad/core/plugins/tensor_backend.hpp"

#include <iterator>
#include <vector>

#include "triad/core/error.hpp"

namespace triad {

namespace {

const char* const kSplitNames[] = {"replicated", "column", "row", "vocab"};
const char* const kCollectiveNames[] = {"identity", "all-reduce", "all-gather", "reduce-scatter"};
const char* const kBoundaryNames[] = {"column-input", "row-output", "embedding-output", "logits",
                                      "replicated-grads"};
const char* const kRoleNames[] = {"word_embedding",   "position_embedding", "layernorm_weight",
                                  "layernorm_bias",   "qkv_weight",         "qkv_bias",
                                  "attn_proj_weight", "attn_proj_bias",     "fc_weight",
                                  "fc_bias",          "fc_proj_weight",     "fc_proj_bias"};
static_assert(std::size(kSplitNames) == TRIAD_TENSOR_SPLIT_VOCAB + 1);
static_assert(std::size(kCollectiveNames) == TRIAD_TENSOR_REDUCE_SCATTER + 1);
static_assert(std::size(kBoundaryNames) == TRIAD_TENSOR_BOUNDARY_COUNT);
static_assert(std::size(kRoleNames) == TRIAD_TENSOR_ROLE_COUNT);

template <size_t N>
const char* name_in(const char* const (&names)[N], int32_t i) {
  return i >= 0 && size_t(i) < N ? names[i] : "unknown";
}

template <size_t N>
bool in_range(const char* const (&)[N], int32_t i) {
  return i >= 0 && size_t(i) < N;
}

// A matmul weight and its bias, the first (column-parallel in Megatron) and second
// (row-parallel) of a block's two matmuls.
struct BlockPair {
  int32_t first_weight, first_bias, second_weight, second_bias;
};
constexpr BlockPair kBlocks[] = {
    {TRIAD_TENSOR_ROLE_QKV_WEIGHT, TRIAD_TENSOR_ROLE_QKV_BIAS, TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT,
     TRIAD_TENSOR_ROLE_ATTN_PROJ_BIAS},
    {TRIAD_TENSOR_ROLE_FC_WEIGHT, TRIAD_TENSOR_ROLE_FC_BIAS, TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT,
     TRIAD_TENSOR_ROLE_FC_PROJ_BIAS}};

using Splits = std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT>;

std::string split_text(const Splits& s, int32_t role) {
  return std::string(tensor_role_name(role)) + " is " + tensor_split_name(s[size_t(role)]);
}

std::string pair_text(const triad_tensor_collectives_v1& c) {
  return std::string(tensor_collective_name(c.forward)) + " / " +
         tensor_collective_name(c.backward);
}

bool adjoint(int32_t f, int32_t b) {
  auto either = [&](int32_t x, int32_t y) { return (f == x && b == y) || (f == y && b == x); };
  return either(TRIAD_TENSOR_IDENTITY, TRIAD_TENSOR_IDENTITY) ||
         either(TRIAD_TENSOR_IDENTITY, TRIAD_TENSOR_ALL_REDUCE) ||
         either(TRIAD_TENSOR_ALL_GATHER, TRIAD_TENSOR_REDUCE_SCATTER);
}

std::string boundary_error(const TensorPlan& p) {
  for (int32_t b = 0; b < TRIAD_TENSOR_BOUNDARY_COUNT; ++b) {
    const triad_tensor_collectives_v1& c = p.boundary[size_t(b)];
    const std::string at = std::string(tensor_boundary_name(b)) + " is " + pair_text(c);
    if (p.layout.tp_size == 1 &&
        (c.forward != TRIAD_TENSOR_IDENTITY || c.backward != TRIAD_TENSOR_IDENTITY))
      return at + " at tp 1 (every collective is identity there)";
    if (!adjoint(c.forward, c.backward))
      return at +
             " (not an adjoint pair: identity pairs with all-reduce or identity, all-gather "
             "with reduce-scatter)";
    if (!p.layout.sequence_parallel && c.forward != TRIAD_TENSOR_IDENTITY &&
        c.forward != TRIAD_TENSOR_ALL_REDUCE)
      return at + " without sequence parallelism (no activation is split along the tokens)";
    if (b == TRIAD_TENSOR_BOUNDARY_LOGITS && c.forward != TRIAD_TENSOR_IDENTITY &&
        c.forward != TRIAD_TENSOR_ALL_REDUCE)
      return at + " (the logits' statistics are reduced, never gathered or scattered)";
    if (b == TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS && c.forward != TRIAD_TENSOR_IDENTITY)
      return at + " (its forward is always identity)";
  }
  return "";
}

}  // namespace

const char* tensor_split_name(int32_t kind) {
  return name_in(kSplitNames, kind);
}
const char* tensor_collective_name(int32_t c) {
  return name_in(kCollectiveNames, c);
}
const char* tensor_boundary_name(int32_t b) {
  return name_in(kBoundaryNames, b);
}
const char* tensor_role_name(int32_t role) {
  return name_in(kRoleNames, role);
}

std::string tensor_layout_text(const triad_tensor_layout_v1& l) {
  return "tp " + std::to_string(l.tp_size) + ", sequence_parallel " +
         (l.sequence_parallel ? "true" : "false");
}

std::string describe_capabilities(const triad_tensor_caps_v1& c) {
  const std::string tp = c.max_tp_size <= 0   ? "any tp"
                         : c.max_tp_size == 1 ? "tp 1 only"
                                              : "tp up to " + std::to_string(c.max_tp_size);
  return tp + (c.sequence_parallel ? ", sequence parallelism" : ", no sequence parallelism");
}

std::string tensor_split_error(int tp_size, const Splits& s) {
  if (tp_size == 1) {
    for (int32_t r = 0; r < TRIAD_TENSOR_ROLE_COUNT; ++r)
      if (s[size_t(r)] != TRIAD_TENSOR_SPLIT_REPLICATED)
        return split_text(s, r) + " at tp 1 (nothing is split there)";
  }
  for (int32_t r = 0; r < TRIAD_TENSOR_ROLE_COUNT; ++r)
    if (s[size_t(r)] == TRIAD_TENSOR_SPLIT_VOCAB && r != TRIAD_TENSOR_ROLE_WORD_EMBEDDING)
      return split_text(s, r) + " (vocab only splits the word embedding)";
  const int32_t whole[] = {TRIAD_TENSOR_ROLE_POSITION_EMBEDDING, TRIAD_TENSOR_ROLE_LAYERNORM_WEIGHT,
                           TRIAD_TENSOR_ROLE_LAYERNORM_BIAS};
  for (int32_t r : whole)
    if (s[size_t(r)] != TRIAD_TENSOR_SPLIT_REPLICATED)
      return split_text(s, r) + " (must be replicated)";
  const int32_t wte = s[TRIAD_TENSOR_ROLE_WORD_EMBEDDING];
  if (wte != TRIAD_TENSOR_SPLIT_REPLICATED && wte != TRIAD_TENSOR_SPLIT_VOCAB)
    return split_text(s, TRIAD_TENSOR_ROLE_WORD_EMBEDDING) + " (must be vocab or replicated)";
  for (const BlockPair& b : kBlocks) {
    const std::pair<int32_t, int32_t> with_bias[] = {{b.first_weight, b.first_bias},
                                                     {b.second_weight, b.second_bias}};
    for (auto [w, bias] : with_bias) {
      const int32_t want_bias = s[size_t(w)] == TRIAD_TENSOR_SPLIT_COLUMN
                                    ? TRIAD_TENSOR_SPLIT_COLUMN
                                    : TRIAD_TENSOR_SPLIT_REPLICATED;
      if (s[size_t(bias)] != want_bias)
        return split_text(s, bias) + " while " + split_text(s, w) + " (its bias must be " +
               tensor_split_name(want_bias) + ")";
    }
    const int32_t first = s[size_t(b.first_weight)], second = s[size_t(b.second_weight)];
    const bool megatron = first == TRIAD_TENSOR_SPLIT_COLUMN && second == TRIAD_TENSOR_SPLIT_ROW;
    const bool whole_block =
        first == TRIAD_TENSOR_SPLIT_REPLICATED && second == TRIAD_TENSOR_SPLIT_REPLICATED;
    if (!megatron && !whole_block)
      return split_text(s, b.first_weight) + " and " + split_text(s, b.second_weight) +
             " (a column-parallel matmul feeds a row-parallel one, or both are replicated)";
  }
  return "";
}

std::string tensor_plan_error(const TensorPlan& plan) {
  std::string e = tensor_split_error(plan.layout.tp_size, plan.split);
  return e.empty() ? boundary_error(plan) : e;
}

// ---------------------------------------------------------------------------------------

TensorBackend::TensorBackend(std::shared_ptr<const LoadedPlugin> plugin,
                             const ResolvedParams& params, const triad_services_v1* services)
    : instance_(std::move(plugin), "tensor", params, services),
      services_(services),
      ops_(instance_.ops<triad_tensor_ops_v1>()),
      caps_(instance_.capabilities(ops_.capabilities)) {}

const std::string& TensorBackend::name() const {
  return instance_.name();
}

const triad_tensor_caps_v1& TensorBackend::capabilities() const {
  return caps_;
}

std::string TensorBackend::last_error() const {
  return instance_.last_error();
}

int TensorBackend::try_split(const triad_tensor_layout_v1& layout, int32_t role,
                             int32_t* kind) const noexcept {
  return instance_.call("split",
                        [&] { return ops_.split(instance_.handle(), &layout, role, kind); });
}

int TensorBackend::try_boundary(const triad_tensor_layout_v1& layout, int32_t boundary,
                                triad_tensor_collectives_v1* out) const noexcept {
  return instance_.call("boundary",
                        [&] { return ops_.boundary(instance_.handle(), &layout, boundary, out); });
}

std::string TensorBackend::try_plan(int tp_size, bool sequence_parallel, TensorPlan* out) const {
  TensorPlan p;
  p.layout = {tp_size, sequence_parallel ? 1 : 0};
  for (int32_t r = 0; r < TRIAD_TENSOR_ROLE_COUNT; ++r) {
    int32_t kind = -1;
    const int s = try_split(p.layout, r, &kind);
    const std::string what = std::string("split(") + tensor_role_name(r) + ")";
    if (s != TRIAD_OK) return instance_.failure(s, what);
    if (!in_range(kSplitNames, kind))
      return what + " returned " + std::to_string(kind) + ", not a triad_tensor_split_kind";
    p.split[size_t(r)] = kind;
  }
  for (int32_t b = 0; b < TRIAD_TENSOR_BOUNDARY_COUNT; ++b) {
    triad_tensor_collectives_v1 c{-1, -1};
    const int s = try_boundary(p.layout, b, &c);
    const std::string what = std::string("boundary(") + tensor_boundary_name(b) + ")";
    if (s != TRIAD_OK) return instance_.failure(s, what);
    if (!in_range(kCollectiveNames, c.forward) || !in_range(kCollectiveNames, c.backward))
      return what + " returned " + std::to_string(c.forward) + " / " + std::to_string(c.backward) +
             ", not a triad_tensor_collective pair";
    p.boundary[size_t(b)] = c;
  }
  if (out) *out = p;
  return "";
}

// Why this plugin cannot plan `layout`, or "" and *out filled.
std::string TensorBackend::refusal(const triad_tensor_layout_v1& l, TensorPlan* out) const {
  if (caps_.max_tp_size > 0 && l.tp_size > caps_.max_tp_size)
    return "it plans tp up to " + std::to_string(caps_.max_tp_size);
  if (l.sequence_parallel && !caps_.sequence_parallel) return "it has no sequence parallelism";
  if (std::string why = try_plan(l.tp_size, l.sequence_parallel != 0, out); !why.empty())
    return why;
  if (std::string broken = tensor_plan_error(*out); !broken.empty())
    return "its plan breaks a rule: " + broken + "; check it with triad-plugin-test tensor " +
           instance_.plugin().path();
  return "";
}

TensorPlan TensorBackend::plan(int tp_size, bool sequence_parallel) const {
  const triad_tensor_layout_v1 layout{tp_size, sequence_parallel ? 1 : 0};
  if (tp_size < 1)
    throw UserError("tensor-parallel size " + std::to_string(tp_size) +
                    " must be at least 1; set parallel.tensor_model_parallel_size to 1 or more");
  TensorPlan p;
  const std::string why = refusal(layout, &p);
  if (why.empty()) return p;
  // Name the installed tensor plugins that can plan this layout (each with its defaults).
  const std::string fix = other_plugins_fix(
      "tensor", name(),
      [&](std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params) {
        TensorBackend be(std::move(plugin), params, services_);
        TensorPlan q;
        return be.refusal(layout, &q).empty();
      },
      "no installed tensor plugin plans it; choose another layout");
  throw UserError(instance_.who() + " cannot plan " + tensor_layout_text(layout) + ": " + why +
                  "; " + fix);
}

}  // namespace triad
