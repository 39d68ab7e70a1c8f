// TensorBackend (plans, refusals, names) and the tensor conformance suite against `megatron`,
// `none` and the planted defects of the test plugin `hostile`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "test_helpers.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/plugins/tensor_backend.hpp"

namespace triad {
namespace {

using test::user_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kHostile = TRIAD_TEST_PLUGIN_DIR "/libtriad-tensor-hostile.so";

struct Backend {
  CoreServices services;
  std::unique_ptr<TensorBackend> be;
  Backend(const std::string& path, const std::map<std::string, std::string>& params = {}) {
    auto p = PluginLoader().load_file(path, "tensor");
    be = std::make_unique<TensorBackend>(p, resolve_params(p->descriptor(), params, "tensor"),
                                         services.c_services());
  }
  TensorBackend* operator->() { return be.get(); }
};

constexpr int32_t R = TRIAD_TENSOR_SPLIT_REPLICATED, COL = TRIAD_TENSOR_SPLIT_COLUMN,
                  ROW = TRIAD_TENSOR_SPLIT_ROW, VOC = TRIAD_TENSOR_SPLIT_VOCAB;
constexpr int32_t I = TRIAD_TENSOR_IDENTITY, AR = TRIAD_TENSOR_ALL_REDUCE,
                  AG = TRIAD_TENSOR_ALL_GATHER, RS = TRIAD_TENSOR_REDUCE_SCATTER;

std::vector<std::pair<int32_t, int32_t>> pairs(const TensorPlan& p) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const auto& c : p.boundary) out.emplace_back(c.forward, c.backward);
  return out;
}

TEST(TensorBackend, MegatronPlansMegatronLM) {
  Backend be(TRIAD_MEGATRON_PLUGIN);
  EXPECT_EQ(be->name(), "megatron");
  EXPECT_EQ(be->capabilities().max_tp_size, 0);
  EXPECT_NE(be->capabilities().sequence_parallel, 0);

  const TensorPlan one = be->plan(1, false);
  for (int32_t s : one.split) EXPECT_EQ(s, R);
  for (const auto& [f, b] : pairs(one)) EXPECT_EQ(f * 10 + b, I * 10 + I);

  // Roles in triad_tensor_role order: wte, wpe, ln w, ln b, qkv w, qkv b, proj w, proj b, fc w,
  // fc b, fc proj w, fc proj b.
  const std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> megatron = {VOC, R, R,   R,   COL, COL,
                                                                 ROW, R, COL, COL, ROW, R};
  const TensorPlan tp2 = be->plan(2, false);
  EXPECT_EQ(tp2.layout.tp_size, 2);
  EXPECT_EQ(tp2.layout.sequence_parallel, 0);
  EXPECT_EQ(tp2.split, megatron);
  // column-input, row-output, embedding-output, logits, replicated-grads
  EXPECT_EQ(pairs(tp2),
            (std::vector<std::pair<int32_t, int32_t>>{{I, AR}, {AR, I}, {AR, I}, {AR, I}, {I, I}}));
  const TensorPlan sp4 = be->plan(4, true);
  EXPECT_EQ(sp4.split, megatron);
  EXPECT_EQ(pairs(sp4), (std::vector<std::pair<int32_t, int32_t>>{
                            {AG, RS}, {RS, AG}, {RS, AG}, {AR, I}, {I, AR}}));
  EXPECT_EQ(tensor_plan_error(sp4), "");
}

TEST(TensorBackend, NoneRefusesWhatItCannotPlanAndNamesTheFix) {
  Backend be(TRIAD_NONE_TENSOR_PLUGIN);
  const TensorPlan one = be->plan(1, false);
  for (int32_t s : one.split) EXPECT_EQ(s, R);
  std::string msg = user_error([&] { be->plan(2, false); });
  EXPECT_THAT(msg,
              AllOf(HasSubstr("tensor plugin 'none' cannot plan tp 2, sequence_parallel false"),
                    HasSubstr("it plans tp up to 1"), HasSubstr("set tensor: megatron")));
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_THAT(
      user_error([&] { be->plan(1, true); }),
      AllOf(HasSubstr("tp 1, sequence_parallel true"), HasSubstr("it has no sequence parallelism"),
            HasSubstr("set tensor: megatron")));
  EXPECT_THAT(user_error([&] { be->plan(0, false); }), HasSubstr("at least 1"));
  // The raw calls say UNSUPPORTED, with a message.
  int32_t kind = -1;
  EXPECT_EQ(be->try_split({2, 0}, TRIAD_TENSOR_ROLE_QKV_WEIGHT, &kind), TRIAD_ERR_UNSUPPORTED);
  EXPECT_THAT(be->last_error(), HasSubstr("it plans tp up to 1"));
  EXPECT_EQ(be->try_split({1, 0}, TRIAD_TENSOR_ROLE_COUNT, &kind), TRIAD_ERR_INVALID);
}

TEST(TensorBackend, BrokenPlansAreRefusedBeforeARun) {
  Backend ln(kHostile, {{"bug", "ln_column"}});
  EXPECT_THAT(user_error([&] { ln->plan(2, false); }),
              AllOf(HasSubstr("tensor plugin 'hostile' cannot plan tp 2, sequence_parallel false"),
                    HasSubstr("layernorm_weight is column"), HasSubstr("must be replicated"),
                    HasSubstr("triad-plugin-test tensor"), HasSubstr("set tensor: megatron")));
  Backend range(kHostile, {{"bug", "out_of_range"}});
  EXPECT_THAT(user_error([&] { range->plan(2, true); }),
              AllOf(HasSubstr("split(attn_proj_weight) returned 7"),
                    HasSubstr("not a triad_tensor_split_kind")));
  Backend adjoint(kHostile, {{"bug", "non_adjoint"}});
  EXPECT_THAT(user_error([&] { adjoint->plan(2, false); }),
              HasSubstr("column-input is all-reduce / all-reduce (not an adjoint pair"));
  Backend tp4(kHostile, {{"bug", "unsupported_tp4"}});
  EXPECT_NO_THROW(tp4->plan(2, true));
  EXPECT_THAT(user_error([&] { tp4->plan(4, false); }),
              AllOf(HasSubstr("failed (UNSUPPORTED): tp 4 is not implemented yet"),
                    HasSubstr("set tensor: megatron")));
}

TEST(TensorBackend, OnlyTakesTensorPlugins) {
  CoreServices services;
  auto p = PluginLoader().load_file(TRIAD_NAIVE_PLUGIN);
  EXPECT_THAT(user_error([&] {
                TensorBackend be(p, resolve_params(p->descriptor(), {}, "tensor"),
                                 services.c_services());
              }),
              HasSubstr("is an attention plugin; a tensor plugin is needed here"));
  auto h = PluginLoader().load_file(kHostile);
  EXPECT_THAT(user_error([&] {
                TensorBackend be(h, resolve_params(h->descriptor(), {{"bug", "nope"}}, "tensor"),
                                 services.c_services());
              }),
              AllOf(HasSubstr("tensor plugin 'hostile'"), HasSubstr("failed to start (INVALID)"),
                    HasSubstr("unknown bug 'nope'")));
}

TEST(TensorBackend, Names) {
  EXPECT_STREQ(tensor_split_name(VOC), "vocab");
  EXPECT_STREQ(tensor_split_name(4), "unknown");
  EXPECT_STREQ(tensor_collective_name(RS), "reduce-scatter");
  EXPECT_STREQ(tensor_collective_name(-1), "unknown");
  EXPECT_STREQ(tensor_boundary_name(TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT), "embedding-output");
  EXPECT_STREQ(tensor_boundary_name(TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS), "replicated-grads");
  EXPECT_STREQ(tensor_role_name(TRIAD_TENSOR_ROLE_FC_PROJ_BIAS), "fc_proj_bias");
  EXPECT_EQ(tensor_layout_text({4, 1}), "tp 4, sequence_parallel true");
}

// Runs the tool, returns its exit code and fills *out with what it printed.
int run_tool(const std::string& args, std::string* out) {
  return test::run_plugin_test("tensor", args, out);
}

TEST(TensorSuite, CorrectHostilePluginPasses) {
  std::string out;
  EXPECT_EQ(run_tool(std::string(kHostile) + " --param bug=none --expect-pass 35", &out), 0) << out;
}

// Each planted defect fails the suite (exit 1) at the case that can see it: the plan's rules,
// or the numerics on real communicators.
TEST(TensorSuite, CatchesEachPlantedDefect) {
  const std::pair<const char*, const char*> bugs[] = {
      {"ln_column", "FAIL hostile tp=2 plan: layernorm_weight is column"},
      {"bias_replicated",
       "FAIL hostile tp=2 plan: fc_bias is replicated while fc_weight is column"},
      {"non_adjoint", "FAIL hostile tp=2 plan: column-input is all-reduce / all-reduce"},
      {"out_of_range", "FAIL hostile tp=2 plan: split(attn_proj_weight) returned 7"},
      {"unsupported_tp4", "FAIL hostile tp=4 plan: split(word_embedding) failed (UNSUPPORTED)"},
      {"row_output_identity", "FAIL hostile tp=2 mlp block: y is off by"},
      {"no_grad_reduce", "FAIL hostile tp=2 sp mlp block: d ln weight is off by"},
      {"swapped_sp", "FAIL hostile tp=2 sp mlp block: the block's forward leaves 1 token rows"},
      {"logits_identity", "FAIL hostile tp=2 vocab-parallel cross-entropy: loss is off by"},
  };
  for (const auto& [bug, expect] : bugs) {
    std::string out;
    EXPECT_EQ(run_tool(std::string(kHostile) + " --param bug=" + bug, &out), 1) << bug << "\n"
                                                                                << out;
    EXPECT_THAT(out, HasSubstr(expect)) << bug;
  }
}

TEST(TensorSuite, UserErrorsExitWithTwo) {
  std::string out;
  EXPECT_EQ(run_tool(TRIAD_NAIVE_PLUGIN, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("a plugin of kind 'tensor' is needed"));
  out.clear();
  EXPECT_EQ(run_tool(std::string(kHostile) + " --param bug=nope", &out), 2) << out;
}

}  // namespace
}  // namespace triad
