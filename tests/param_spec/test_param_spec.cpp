// The ParamSpec table: tp 1 equals gpt_layout; every tensor's slices reassemble the global
// tensor; the fused qkv, row-parallel and replicated splits hold exactly the expected elements;
// vocabulary padding; pipeline placement; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "triad/core/error.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/param_spec.hpp"

namespace triad {
namespace {

ModelConfig small_model(const std::string& positions = "learned") {
  ModelConfig m;
  m.num_layers = 3;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.seq_length = 8;
  m.vocab_size = 300;  // not a multiple of 128: padded
  m.position_embedding = positions;
  return m;
}

Placement tp_placement(int rank, int size) {
  Placement p;
  p.tp_rank = rank;
  p.tp_size = size;
  return p;
}

void expect_same_as_gpt_layout(const ModelConfig& m, const Placement& p) {
  const GptLayout lay = gpt_layout(m);
  const ParamSpec spec = build_param_spec(m, p);
  ASSERT_EQ(spec.tensors.size(), lay.params.size());
  EXPECT_EQ(spec.total, lay.total);
  EXPECT_EQ(spec.padded_vocab_size, m.vocab_size);
  for (size_t i = 0; i < lay.params.size(); ++i) {
    const ParamInfo& a = lay.params[i];
    const TensorSpec& b = spec.tensors[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.offset, a.offset);
    EXPECT_EQ(b.numel, a.numel);
    EXPECT_EQ(b.global_shape, a.shape);
    EXPECT_EQ(b.local_shape, a.shape);
    EXPECT_EQ(b.weight_decay, a.weight_decay);
    EXPECT_EQ(b.is_matmul_weight, a.is_matmul_weight);
  }
}

TEST(ParamSpec, TpOneEqualsGptLayout) {
  for (const char* pos : {"learned", "rope"}) {
    SCOPED_TRACE(pos);
    ModelConfig m = small_model(pos);
    m.vocab_size = 256;  // already a multiple of 128
    expect_same_as_gpt_layout(m, Placement{});
    m.vocab_size = 50257;  // no padding asked for
    Placement p;
    p.make_vocab_size_divisible_by = 1;
    expect_same_as_gpt_layout(m, p);
  }
}

TEST(ParamSpec, TpOneWithPaddingDiffersOnlyInWte) {
  const ModelConfig m = small_model();  // vocab 300 -> 384
  const ParamSpec spec = build_param_spec(m, Placement{});
  const GptLayout lay = gpt_layout(m);
  EXPECT_EQ(spec.padded_vocab_size, 384);
  EXPECT_EQ(spec.total, lay.total + 84 * 16);
  EXPECT_EQ(spec.find("wte.weight").global_shape, (std::vector<int64_t>{384, 16}));
}

TEST(ParamSpec, RolesSplitsAndTies) {
  const ModelConfig m = small_model();
  const ParamSpec s = build_param_spec(m, tp_placement(1, 2));
  auto check = [&](const std::string& name, TensorRole role, int dim, int chunks, int parts,
                   bool replicated) {
    SCOPED_TRACE(name);
    const TensorSpec& t = s.find(name);
    EXPECT_EQ(t.role, role) << role_name(t.role);
    EXPECT_EQ(t.split.dim, dim);
    EXPECT_EQ(t.split.chunks, chunks);
    EXPECT_EQ(t.split.strided_parts, parts);
    EXPECT_EQ(t.replicated_in_tp, replicated);
    EXPECT_EQ(t.tie_group, role == TensorRole::word_embedding ? "wte" : "");
  };
  using R = TensorRole;
  check("wte.weight", R::word_embedding, 0, 2, 1, false);
  check("wpe.weight", R::position_embedding, -1, 1, 1, true);
  check("h.1.ln_1.weight", R::layernorm_weight, -1, 1, 1, true);
  check("h.1.ln_1.bias", R::layernorm_bias, -1, 1, 1, true);
  check("h.1.attn.c_attn.weight", R::qkv_weight, 0, 2, 3, false);
  check("h.1.attn.c_attn.bias", R::qkv_bias, 0, 2, 3, false);
  check("h.1.attn.c_proj.weight", R::attn_proj_weight, 1, 2, 1, false);
  check("h.1.attn.c_proj.bias", R::attn_proj_bias, -1, 1, 1, true);
  check("h.1.ln_2.weight", R::layernorm_weight, -1, 1, 1, true);
  check("h.1.mlp.c_fc.weight", R::fc_weight, 0, 2, 1, false);
  check("h.1.mlp.c_fc.bias", R::fc_bias, 0, 2, 1, false);
  check("h.1.mlp.c_proj.weight", R::fc_proj_weight, 1, 2, 1, false);
  check("h.1.mlp.c_proj.bias", R::fc_proj_bias, -1, 1, 1, true);
  check("ln_f.bias", R::layernorm_bias, -1, 1, 1, true);
  EXPECT_EQ(s.find("h.1.attn.c_attn.weight").local_shape, (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(s.find("h.1.mlp.c_proj.weight").local_shape, (std::vector<int64_t>{16, 32}));
  // The arena is dense and in order.
  size_t at = 0;
  for (const auto& t : s.tensors) {
    EXPECT_EQ(t.offset, at) << t.name;
    at += t.numel;
  }
  EXPECT_EQ(at, s.total);
}

// Slices of a random global tensor from every rank, placed back into a NaN-filled buffer,
// give the global tensor exactly; the split ranks' slices are disjoint (numel adds up), the
// replicated ones are the whole tensor on every rank.
TEST(ParamSpec, SlicesReassembleTheGlobalTensor) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const char* pos : {"learned", "rope"})
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE(std::string(pos) + " tp " + std::to_string(tp));
      const ModelConfig m = small_model(pos);
      std::vector<ParamSpec> specs;
      for (int r = 0; r < tp; ++r) specs.push_back(build_param_spec(m, tp_placement(r, tp)));
      for (size_t i = 0; i < specs[0].tensors.size(); ++i) {
        const TensorSpec& t0 = specs[0].tensors[i];
        SCOPED_TRACE(t0.name);
        std::vector<float> global(t0.global_numel());
        for (auto& x : global) x = dist(rng);
        std::vector<float> back(global.size(), std::numeric_limits<float>::quiet_NaN());
        size_t local_sum = 0;
        for (int r = 0; r < tp; ++r) {
          const TensorSpec& t = specs[r].tensors[i];
          ASSERT_EQ(t.name, t0.name);
          ASSERT_EQ(t.global_shape, t0.global_shape);
          std::vector<float> local(t.numel, std::numeric_limits<float>::quiet_NaN());
          slice_of_global(t, r, global.data(), local.data());
          for (float x : local) ASSERT_FALSE(std::isnan(x));
          if (t.replicated_in_tp) {
            EXPECT_EQ(t.local_shape, t.global_shape);
            EXPECT_EQ(0, std::memcmp(local.data(), global.data(), global.size() * sizeof(float)));
          }
          place_in_global(t, r, local.data(), back.data());
          local_sum += t.numel;
        }
        EXPECT_EQ(local_sum, t0.replicated_in_tp ? tp * global.size() : global.size());
        EXPECT_EQ(0, std::memcmp(back.data(), global.data(), global.size() * sizeof(float)));
      }
    }
}

// global[i][j] = 1000 i + j, so a local element names its global row and column.
std::vector<float> indexed(size_t rows, size_t cols) {
  std::vector<float> g(rows * cols);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) g[i * cols + j] = static_cast<float>(1000 * i + j);
  return g;
}

std::vector<float> slice(const TensorSpec& t, int r, const std::vector<float>& g) {
  std::vector<float> l(t.numel);
  slice_of_global(t, r, g.data(), l.data());
  return l;
}

TEST(ParamSpec, QkvRankHoldsItsOwnQKV) {
  ModelConfig m = small_model();
  m.hidden_size = 8;
  const int C = 8;
  for (int tp : {2, 4}) {
    const int w = C / tp;  // rows of q (and k, v) per rank
    for (int r = 0; r < tp; ++r) {
      SCOPED_TRACE("tp " + std::to_string(tp) + " rank " + std::to_string(r));
      const ParamSpec s = build_param_spec(m, tp_placement(r, tp));
      const TensorSpec& wt = s.find("h.0.attn.c_attn.weight");
      ASSERT_EQ(wt.local_shape, (std::vector<int64_t>{3 * w, C}));
      const auto l = slice(wt, r, indexed(3 * C, C));
      // Hand-computed rows: q rows [w r, w r + w), then k at C + ..., then v at 2C + ...
      std::vector<int> rows;
      for (int part = 0; part < 3; ++part)
        for (int i = 0; i < w; ++i) rows.push_back(part * C + r * w + i);
      for (int i = 0; i < 3 * w; ++i)
        for (int j = 0; j < C; ++j)
          ASSERT_EQ(l[i * C + j], 1000.f * rows[i] + j) << "local row " << i << " col " << j;
      const TensorSpec& bt = s.find("h.0.attn.c_attn.bias");
      const auto lb = slice(bt, r, indexed(3 * C, 1));
      ASSERT_EQ(lb.size(), rows.size());
      for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(lb[i], 1000.f * rows[i]);
    }
  }
}

TEST(ParamSpec, ColumnParallelSplitsRowsRowParallelSplitsColumns) {
  const ModelConfig m = small_model();
  const int C = 16, tp = 4;
  for (int r = 0; r < tp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const ParamSpec s = build_param_spec(m, tp_placement(r, tp));
    // c_fc (4C, C): rows [r 4C/tp, (r+1) 4C/tp).
    const auto fc = slice(s.find("h.2.mlp.c_fc.weight"), r, indexed(4 * C, C));
    const int fr = 4 * C / tp;
    for (int i = 0; i < fr; ++i)
      for (int j = 0; j < C; ++j) ASSERT_EQ(fc[i * C + j], 1000.f * (r * fr + i) + j);
    // c_proj (C, C) and mlp c_proj (C, 4C): columns [r in/tp, (r+1) in/tp), every row.
    for (int in : {C, 4 * C}) {
      const std::string name = in == C ? "h.2.attn.c_proj.weight" : "h.2.mlp.c_proj.weight";
      SCOPED_TRACE(name);
      const TensorSpec& t = s.find(name);
      const int lc = in / tp;
      ASSERT_EQ(t.local_shape, (std::vector<int64_t>{C, lc}));
      const auto l = slice(t, r, indexed(C, in));
      for (int i = 0; i < C; ++i)
        for (int j = 0; j < lc; ++j) ASSERT_EQ(l[i * lc + j], 1000.f * i + (r * lc + j));
    }
  }
}

TEST(ParamSpec, VocabularyPadding) {
  ModelConfig m = small_model();
  m.vocab_size = 50257;
  EXPECT_EQ(padded_vocab_size(50257, 128, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 128, 4), 50688);
  EXPECT_EQ(padded_vocab_size(50304, 128, 1), 50304);
  for (int r = 0; r < 2; ++r) {
    const ParamSpec s = build_param_spec(m, tp_placement(r, 2));
    EXPECT_EQ(s.padded_vocab_size, 50432);
    EXPECT_EQ(s.vocab_size, 50257);
    const TensorSpec& wte = s.find("wte.weight");
    EXPECT_EQ(wte.global_shape, (std::vector<int64_t>{50432, 16}));
    EXPECT_EQ(wte.local_shape, (std::vector<int64_t>{25216, 16}));
    EXPECT_EQ(wte.numel, size_t{25216} * 16);
  }
}

void expect_ranges_cover_arena(const ParamSpec& s) {
  EXPECT_EQ(s.embedding.begin, 0u);
  size_t at = s.embedding.end;
  for (const auto& l : s.layers) {
    EXPECT_EQ(l.range.begin, at) << "layer " << l.layer;
    at = l.range.end;
  }
  EXPECT_EQ(s.head.begin, at);
  EXPECT_EQ(s.head.end, s.total);
  // Every tensor lies in the range of its layer (or its end).
  for (const auto& t : s.tensors) {
    const ArenaRange r = t.layer >= 0              ? s.layer(t.layer).range
                         : t.offset < s.head.begin ? s.embedding
                                                   : s.head;
    EXPECT_GE(t.offset, r.begin) << t.name;
    EXPECT_LE(t.offset + t.numel, r.end) << t.name;
  }
}

TEST(ParamSpec, PipelinePlacement) {
  ModelConfig m = small_model();
  m.num_layers = 6;
  Placement p = tp_placement(0, 2);
  p.first_layer = 2;
  p.num_layers = 2;
  p.has_embedding = false;
  p.has_head = false;
  {
    SCOPED_TRACE("middle stage");
    const ParamSpec s = build_param_spec(m, p);
    EXPECT_THROW(s.find("wte.weight"), std::out_of_range);
    EXPECT_THROW(s.find("wpe.weight"), std::out_of_range);
    EXPECT_THROW(s.find("ln_f.weight"), std::out_of_range);
    EXPECT_THROW(s.layer(1), std::out_of_range);
    EXPECT_THROW(s.layer(4), std::out_of_range);
    EXPECT_EQ(s.tensors.front().name, "h.2.ln_1.weight");
    EXPECT_EQ(s.tensors.front().offset, 0u);
    EXPECT_EQ(s.tensors.back().name, "h.3.mlp.c_proj.bias");
    ASSERT_EQ(s.layers.size(), 2u);
    EXPECT_EQ(s.layers[0].layer, 2);
    EXPECT_EQ(s.layers[0].range.begin, 0u);
    EXPECT_EQ(s.layers[1].range.end, s.total);
    EXPECT_EQ(s.embedding.size(), 0u);
    EXPECT_EQ(s.head.size(), 0u);
    EXPECT_EQ(s.layers[0].range.size(), s.layers[1].range.size());
    expect_ranges_cover_arena(s);
  }
  {
    SCOPED_TRACE("first stage, asked for the embedding");
    p.has_embedding = true;
    const ParamSpec s = build_param_spec(m, p);
    EXPECT_EQ(s.tensors[0].name, "wte.weight");
    EXPECT_EQ(s.tensors[1].name, "wpe.weight");
    EXPECT_EQ(s.embedding.end, s.tensors[2].offset);
    expect_ranges_cover_arena(s);
  }
  {
    SCOPED_TRACE("both ends");
    p.has_head = true;
    const ParamSpec s = build_param_spec(m, p);
    EXPECT_EQ(s.tensors.back().name, "ln_f.bias");
    EXPECT_EQ(s.head.size(), 2u * 16);
    expect_ranges_cover_arena(s);
  }
  {
    SCOPED_TRACE("last stage: the LM head's own copy of wte, after ln_f");
    p.has_embedding = false;
    p.first_layer = 4;
    p.num_layers = -1;  // to the end
    const ParamSpec s = build_param_spec(m, p);
    EXPECT_EQ(s.placement.num_layers, 2);
    ASSERT_EQ(s.layers.size(), 2u);
    EXPECT_EQ(s.layers[1].layer, 5);
    const TensorSpec& wte = s.tensors.back();
    EXPECT_EQ(wte.name, "wte.weight");
    EXPECT_EQ(wte.tie_group, "wte");
    EXPECT_EQ(wte.local_shape, (std::vector<int64_t>{256, 16}));  // 300 -> 512 (128 x 2), / 2
    EXPECT_EQ(s.tensors[s.tensors.size() - 3].name, "ln_f.weight");
    expect_ranges_cover_arena(s);
  }
}

void expect_user_error(const ModelConfig& m, const Placement& p,
                       const std::vector<std::string>& parts) {
  try {
    build_param_spec(m, p);
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(ParamSpec, BadInput) {
  ModelConfig m = small_model();
  m.num_attention_heads = 6;
  m.hidden_size = 24;
  expect_user_error(
      m, tp_placement(0, 4),
      {"model.num_attention_heads = 6", "parallel.tensor_model_parallel_size = 4", "divides"});
  expect_user_error(small_model(), tp_placement(0, 0),
                    {"parallel.tensor_model_parallel_size = 0", "at least 1"});
  expect_user_error(small_model(), tp_placement(2, 2), {"rank 2", "[0, 2)"});
  m = small_model();
  m.num_attention_heads = 8;
  m.hidden_size = 1;  // 4 x 1 = 4 not divisible by 8
  expect_user_error(m, tp_placement(0, 8), {"4 x model.hidden_size = 4", "= 8"});
  m.hidden_size = 2;  // the MLP width 8 divides, the hidden size does not
  expect_user_error(m, tp_placement(0, 8), {"model.hidden_size = 2", "= 8"});
  Placement p;
  p.first_layer = 2;
  p.num_layers = 2;  // [2, 4) of 3 layers
  expect_user_error(small_model(), p, {"layers [2, 4)", "model.num_layers = 3", "[0, 3)"});
  p.first_layer = -1;
  p.num_layers = 1;
  expect_user_error(small_model(), p, {"layers [-1, 0)", "model.num_layers = 3"});
  p = Placement{};
  p.first_layer = 4;
  expect_user_error(small_model(), p, {"model.num_layers = 3"});
  p = Placement{};
  p.make_vocab_size_divisible_by = 0;
  expect_user_error(small_model(), p, {"make_vocab_size_divisible_by = 0", "at least 1"});
  // And the good ones pass.
  EXPECT_NO_THROW(build_param_spec(small_model(), tp_placement(3, 4)));
}

// A plan may keep any block or the embedding whole on every rank; the heads then need not divide.
TEST(ParamSpec, MixedPlans) {
  ModelConfig m = small_model();
  m.num_attention_heads = 3;
  m.hidden_size = 12;
  Placement p = tp_placement(1, 2);
  expect_user_error(m, p, {"model.num_attention_heads = 3", "= 2", "replicate: attention"});
  for (int r : {TRIAD_TENSOR_ROLE_QKV_WEIGHT, TRIAD_TENSOR_ROLE_QKV_BIAS,
                TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT, TRIAD_TENSOR_ROLE_WORD_EMBEDDING})
    p.split[size_t(r)] = TRIAD_TENSOR_SPLIT_REPLICATED;
  const ParamSpec s = build_param_spec(m, p);
  for (const TensorSpec& t : s.tensors) {
    const bool mlp = t.role == TensorRole::fc_weight || t.role == TensorRole::fc_bias ||
                     t.role == TensorRole::fc_proj_weight;
    EXPECT_EQ(t.split.is_split(), mlp) << t.name;
    EXPECT_EQ(t.replicated_in_tp, !mlp) << t.name;
    EXPECT_EQ(t.local_shape == t.global_shape, !mlp) << t.name;
  }
  const TensorShards sh = tensor_shards(p);
  EXPECT_EQ(sh.attention, 1);
  EXPECT_EQ(sh.mlp, 2);
  EXPECT_EQ(sh.vocab, 1);
  // A block half split is refused by the rules the conformance suite checks too.
  p.split[TRIAD_TENSOR_ROLE_QKV_WEIGHT] = p.split[TRIAD_TENSOR_ROLE_QKV_BIAS] =
      TRIAD_TENSOR_SPLIT_COLUMN;
  m.num_attention_heads = 4;
  expect_user_error(m, p,
                    {"the tensor plan cannot run",
                     "qkv_weight is column and attn_proj_weight is "
                     "replicated",
                     "triad-plugin-test tensor"});
}

}  // namespace
}  // namespace triad
