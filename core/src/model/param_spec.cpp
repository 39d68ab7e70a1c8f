#include "triad/core/model/param_spec.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "triad/core/error.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/plugins/tensor_backend.hpp"

namespace triad {

namespace {

std::string str(int64_t v) {
  return std::to_string(v);
}

size_t product(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

void validate(const ModelConfig& m, const Placement& p) {
  const std::string tp_key = "parallel.tensor_model_parallel_size";
  if (p.tp_size < 1)
    throw UserError(tp_key + " = " + str(p.tp_size) + " must be at least 1; set it to 1 or more");
  if (p.tp_rank < 0 || p.tp_rank >= p.tp_size)
    throw UserError("tensor-parallel rank " + str(p.tp_rank) + " is outside [0, " + str(p.tp_size) +
                    ") for " + tp_key + " = " + str(p.tp_size) +
                    "; pass a rank below the tensor-parallel size");
  const int tp = p.tp_size;
  if (tp > 1)
    if (std::string broken = tensor_split_error(tp, p.split); !broken.empty())
      throw UserError("the tensor plan cannot run: " + broken +
                      "; fix the tensor plugin's split() (triad-plugin-test tensor checks these "
                      "rules) or set tensor: megatron");
  const TensorShards shards = tensor_shards(p);
  if (m.num_attention_heads % shards.attention != 0)
    throw UserError("model.num_attention_heads = " + str(m.num_attention_heads) +
                    " is not divisible by " + tp_key + " = " + str(tp) +
                    "; choose a tensor-parallel size that divides the number of heads, or keep "
                    "attention whole on every rank (tensor: {name: megatron, replicate: "
                    "attention})");
  if ((4 * static_cast<int64_t>(m.hidden_size)) % shards.mlp != 0)
    throw UserError("the MLP width 4 x model.hidden_size = " + str(4 * int64_t{m.hidden_size}) +
                    " is not divisible by " + tp_key + " = " + str(tp) +
                    "; choose a tensor-parallel size that divides it, or keep the MLP whole on "
                    "every rank (tensor: {name: megatron, replicate: mlp})");
  if (m.hidden_size % shards.attention != 0)
    throw UserError("model.hidden_size = " + str(m.hidden_size) + " is not divisible by " + tp_key +
                    " = " + str(tp) +
                    "; choose a tensor-parallel size that divides the hidden size");
  if (p.make_vocab_size_divisible_by < 1)
    throw UserError("make_vocab_size_divisible_by = " + str(p.make_vocab_size_divisible_by) +
                    " must be at least 1; set it to 1 (no padding) or more (default 128)");
  const int n = p.num_layers < 0 ? m.num_layers - p.first_layer : p.num_layers;
  std::vector<std::pair<int, int>> runs = p.chunks;
  if (runs.empty()) runs.push_back({p.first_layer, n});
  for (auto [first, count] : runs)
    if (first < 0 || first > m.num_layers || count < 0 || first + count > m.num_layers)
      throw UserError("layers [" + str(first) + ", " + str(int64_t{first} + count) +
                      ") are out of range for model.num_layers = " + str(m.num_layers) +
                      "; place layers within [0, " + str(m.num_layers) + ")");
}

// The tensor viewed as [outer, D, inner] around the split dimension.
struct SplitView {
  size_t outer = 1, inner = 1;
  size_t part_global = 0;  // rows of one strided part in the global tensor
  size_t piece = 0;        // rows of one rank's piece of a part
  int parts = 1;
};

SplitView split_view(const TensorSpec& t) {
  SplitView v;
  const int d = t.split.dim;
  for (int i = 0; i < d; ++i) v.outer *= static_cast<size_t>(t.global_shape[i]);
  for (size_t i = static_cast<size_t>(d) + 1; i < t.global_shape.size(); ++i)
    v.inner *= static_cast<size_t>(t.global_shape[i]);
  v.parts = t.split.strided_parts;
  v.part_global = static_cast<size_t>(t.global_shape[d]) / static_cast<size_t>(v.parts);
  v.piece = v.part_global / static_cast<size_t>(t.split.chunks);
  return v;
}

template <typename F>
void for_each_run(const TensorSpec& t, int tp_rank, F&& copy) {
  if (!t.split.is_split()) {  // replicated: every rank holds the whole tensor
    copy(size_t{0}, size_t{0}, t.numel);
    return;
  }
  if (tp_rank < 0 || tp_rank >= t.split.chunks)
    throw std::out_of_range("rank " + str(tp_rank) + " outside the " + str(t.split.chunks) +
                            " chunks of " + t.name);
  const SplitView v = split_view(t);
  const size_t run = v.piece * v.inner;  // contiguous elements of one piece
  const size_t global_row = v.parts * v.part_global * v.inner;
  const size_t local_row = v.parts * run;
  for (size_t o = 0; o < v.outer; ++o)
    for (int part = 0; part < v.parts; ++part) {
      const size_t g = o * global_row +
                       (part * v.part_global + static_cast<size_t>(tp_rank) * v.piece) * v.inner;
      const size_t l = o * local_row + part * run;
      copy(g, l, run);
    }
}

}  // namespace

const char* role_name(TensorRole r) {
  switch (r) {
    case TensorRole::word_embedding:
      return "word_embedding";
    case TensorRole::position_embedding:
      return "position_embedding";
    case TensorRole::layernorm_weight:
      return "layernorm_weight";
    case TensorRole::layernorm_bias:
      return "layernorm_bias";
    case TensorRole::qkv_weight:
      return "qkv_weight";
    case TensorRole::qkv_bias:
      return "qkv_bias";
    case TensorRole::attn_proj_weight:
      return "attn_proj_weight";
    case TensorRole::attn_proj_bias:
      return "attn_proj_bias";
    case TensorRole::fc_weight:
      return "fc_weight";
    case TensorRole::fc_bias:
      return "fc_bias";
    case TensorRole::fc_proj_weight:
      return "fc_proj_weight";
    case TensorRole::fc_proj_bias:
      return "fc_proj_bias";
  }
  return "unknown";
}

size_t TensorSpec::global_numel() const {
  return product(global_shape);
}

const TensorSpec& ParamSpec::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  throw std::out_of_range("no tensor named " + name + " on this rank");
}

const LayerRange& ParamSpec::layer(int global_layer) const {
  for (const auto& l : layers)
    if (l.layer == global_layer) return l;
  throw std::out_of_range("layer " + str(global_layer) + " is not held by this rank");
}

std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> megatron_splits() {
  std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> s{};
  s.fill(TRIAD_TENSOR_SPLIT_REPLICATED);
  s[TRIAD_TENSOR_ROLE_WORD_EMBEDDING] = TRIAD_TENSOR_SPLIT_VOCAB;
  s[TRIAD_TENSOR_ROLE_QKV_WEIGHT] = s[TRIAD_TENSOR_ROLE_QKV_BIAS] = TRIAD_TENSOR_SPLIT_COLUMN;
  s[TRIAD_TENSOR_ROLE_FC_WEIGHT] = s[TRIAD_TENSOR_ROLE_FC_BIAS] = TRIAD_TENSOR_SPLIT_COLUMN;
  s[TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT] = s[TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT] =
      TRIAD_TENSOR_SPLIT_ROW;
  return s;
}

TensorShards tensor_shards(const Placement& p) {
  TensorShards s;
  if (p.tp_size <= 1) return s;
  if (p.split[TRIAD_TENSOR_ROLE_QKV_WEIGHT] == TRIAD_TENSOR_SPLIT_COLUMN) s.attention = p.tp_size;
  if (p.split[TRIAD_TENSOR_ROLE_FC_WEIGHT] == TRIAD_TENSOR_SPLIT_COLUMN) s.mlp = p.tp_size;
  if (p.split[TRIAD_TENSOR_ROLE_WORD_EMBEDDING] == TRIAD_TENSOR_SPLIT_VOCAB) s.vocab = p.tp_size;
  return s;
}

int64_t padded_vocab_size(int64_t vocab_size, int divisible_by, int tp_size) {
  const int64_t multiple = int64_t{divisible_by} * tp_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

ParamSpec build_param_spec(const ModelConfig& m, const Placement& placement) {
  validate(m, placement);
  ParamSpec spec;
  spec.placement = placement;
  Placement& p = spec.placement;
  if (p.num_layers < 0) p.num_layers = m.num_layers - p.first_layer;
  const int tp = p.tp_size;
  const int64_t C = m.hidden_size, maxT = context_length(m);
  spec.vocab_size = m.vocab_size;
  spec.padded_vocab_size = padded_vocab_size(m.vocab_size, p.make_vocab_size_divisible_by, tp);

  enum class Kind { replicated, column, column_qkv, row, vocab };
  auto add = [&](std::string name, TensorRole role, int layer, std::vector<int64_t> shape,
                 Kind kind, bool decay, bool matmul) {
    if (p.split[static_cast<int>(role)] == TRIAD_TENSOR_SPLIT_REPLICATED) kind = Kind::replicated;
    TensorSpec t;
    t.name = std::move(name);
    t.role = role;
    t.layer = layer;
    t.global_shape = shape;
    t.local_shape = shape;
    t.weight_decay = decay;
    t.is_matmul_weight = matmul;
    t.replicated_in_tp = kind == Kind::replicated;
    switch (kind) {
      case Kind::replicated:
        break;
      case Kind::column:
      case Kind::vocab:
        t.split = {0, tp, 1};
        break;
      case Kind::column_qkv:
        t.split = {0, tp, 3};
        break;
      case Kind::row:
        t.split = {1, tp, 1};
        break;
    }
    if (t.split.is_split()) t.local_shape[t.split.dim] /= tp;
    if (role == TensorRole::word_embedding) t.tie_group = "wte";
    t.numel = product(t.local_shape);
    t.offset = spec.total;
    spec.total += t.numel;
    spec.tensors.push_back(std::move(t));
  };
  auto add_wte = [&] {
    add("wte.weight", TensorRole::word_embedding, -1, {spec.padded_vocab_size, C}, Kind::vocab,
        true, false);
  };
  using R = TensorRole;

  spec.embedding.begin = spec.total;
  if (p.has_embedding) {
    add_wte();
    if (m.position_embedding == "learned")
      add("wpe.weight", R::position_embedding, -1, {maxT, C}, Kind::replicated, true, false);
  }
  spec.embedding.end = spec.total;

  std::vector<int> held;
  if (p.chunks.empty())
    for (int l = p.first_layer; l < p.first_layer + p.num_layers; ++l) held.push_back(l);
  for (auto [first, count] : p.chunks)
    for (int l = first; l < first + count; ++l) held.push_back(l);
  for (int l : held) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerRange lr;
    lr.layer = l;
    lr.range.begin = spec.total;
    add(h + "ln_1.weight", R::layernorm_weight, l, {C}, Kind::replicated, false, false);
    add(h + "ln_1.bias", R::layernorm_bias, l, {C}, Kind::replicated, false, false);
    add(h + "attn.c_attn.weight", R::qkv_weight, l, {3 * C, C}, Kind::column_qkv, true, true);
    add(h + "attn.c_attn.bias", R::qkv_bias, l, {3 * C}, Kind::column_qkv, false, false);
    add(h + "attn.c_proj.weight", R::attn_proj_weight, l, {C, C}, Kind::row, true, true);
    add(h + "attn.c_proj.bias", R::attn_proj_bias, l, {C}, Kind::replicated, false, false);
    add(h + "ln_2.weight", R::layernorm_weight, l, {C}, Kind::replicated, false, false);
    add(h + "ln_2.bias", R::layernorm_bias, l, {C}, Kind::replicated, false, false);
    add(h + "mlp.c_fc.weight", R::fc_weight, l, {4 * C, C}, Kind::column, true, true);
    add(h + "mlp.c_fc.bias", R::fc_bias, l, {4 * C}, Kind::column, false, false);
    add(h + "mlp.c_proj.weight", R::fc_proj_weight, l, {C, 4 * C}, Kind::row, true, true);
    add(h + "mlp.c_proj.bias", R::fc_proj_bias, l, {C}, Kind::replicated, false, false);
    lr.range.end = spec.total;
    spec.layers.push_back(lr);
  }

  spec.head.begin = spec.total;
  if (p.has_head) {
    add("ln_f.weight", R::layernorm_weight, -1, {C}, Kind::replicated, false, false);
    add("ln_f.bias", R::layernorm_bias, -1, {C}, Kind::replicated, false, false);
    if (!p.has_embedding) add_wte();  // the tied LM head's own copy
  }
  spec.head.end = spec.total;
  return spec;
}

void slice_of_global(const TensorSpec& t, int tp_rank, const float* global, float* local) {
  for_each_run(t, tp_rank, [&](size_t g, size_t l, size_t n) {
    std::memcpy(local + l, global + g, n * sizeof(float));
  });
}

void place_in_global(const TensorSpec& t, int tp_rank, const float* local, float* global) {
  for_each_run(t, tp_rank, [&](size_t g, size_t l, size_t n) {
    std::memcpy(global + g, local + l, n * sizeof(float));
  });
}

// The global tensor's elements that exist in the full (unpadded) layout come first in row-major
// order: only the word embedding is padded, and only with rows at its end. So a run of this
// rank's slice at global element g maps to the full layout's element g, cut at its size.
namespace {

template <typename F>
void for_each_unpadded_run(const TensorSpec& t, int tp_rank, size_t full_numel, F&& copy) {
  for_each_run(t, tp_rank, [&](size_t g, size_t l, size_t n) {
    if (g < full_numel) copy(g, l, std::min(n, full_numel - g));
  });
}

}  // namespace

void local_from_full(const ParamSpec& spec, const GptLayout& full_layout, const float* full,
                     float* local) {
  for (const TensorSpec& t : spec.tensors) {
    const ParamInfo& f = full_layout.find(t.name);
    std::fill(local + t.offset, local + t.offset + t.numel, 0.0f);  // the padding
    for_each_unpadded_run(t, spec.placement.tp_rank, f.numel, [&](size_t g, size_t l, size_t n) {
      std::memcpy(local + t.offset + l, full + f.offset + g, n * sizeof(float));
    });
  }
}

void full_from_local(const ParamSpec& spec, int tp_rank, const GptLayout& full_layout,
                     const float* local, float* full) {
  for (const TensorSpec& t : spec.tensors) {
    const ParamInfo& f = full_layout.find(t.name);
    for_each_unpadded_run(t, tp_rank, f.numel, [&](size_t g, size_t l, size_t n) {
      std::memcpy(full + f.offset + g, local + t.offset + l, n * sizeof(float));
    });
  }
}

std::vector<ArenaRange> arena_units(const ParamSpec& spec) {
  std::vector<ArenaRange> u;
  if (spec.embedding.size()) u.push_back(spec.embedding);
  for (const LayerRange& l : spec.layers) u.push_back(l.range);
  if (spec.head.size()) u.push_back(spec.head);
  std::sort(u.begin(), u.end(),
            [](const ArenaRange& a, const ArenaRange& b) { return a.begin < b.begin; });
  return u;
}

GptLayout arena_layout(const ParamSpec& spec) {
  GptLayout l;
  for (const TensorSpec& t : spec.tensors)
    l.params.push_back(
        {t.name, t.local_shape, t.offset, t.numel, t.weight_decay, t.is_matmul_weight});
  l.total = spec.total;
  return l;
}

}  // namespace triad
