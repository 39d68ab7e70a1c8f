// The attention conformance suite itself: it passes a correct plugin and catches each
// defect planted in the test plugin `buggy`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "triad/core/conformance/conformance.hpp"
#include "triad/core/plugins/services.hpp"

namespace triad {
namespace {

using conformance::CaseResult;
using conformance::Outcome;

struct SuiteRun {
  conformance::Summary summary;
  std::vector<CaseResult> cases;
  bool failed(const std::string& name_part, const std::string& detail_part = "") const {
    for (const auto& c : cases)
      if (c.outcome == Outcome::kFail && c.name.find(name_part) != std::string::npos &&
          c.detail.find(detail_part) != std::string::npos)
        return true;
    return false;
  }
};

SuiteRun run_buggy(const std::string& bug) {
  CoreServices services(1);
  auto p = PluginLoader(std::vector<std::string>{})
               .load_file(TRIAD_TEST_PLUGIN_DIR "/libtriad-attention-buggy.so");
  AttentionBackend be(p, resolve_params(p->descriptor(), {{"bug", bug}}, "attention"),
                      services.c_services());
  SuiteRun r;
  conformance::AttentionSuiteOptions o;
  o.quick = true;
  o.on_case = [&](const CaseResult& c) { r.cases.push_back(c); };
  r.summary = conformance::run_attention_suite(be, o);
  return r;
}

TEST(AttentionSuite, CorrectPluginPassesEveryCase) {
  SuiteRun r = run_buggy("none");
  EXPECT_EQ(r.summary.failed, 0);
  // It asks for no workspace, so the two "too small workspace" checks do not apply.
  EXPECT_EQ(r.summary.skipped, 2);
  for (const auto& c : r.cases) {
    if (c.outcome == Outcome::kSkip) {
      EXPECT_THAT(c.detail, ::testing::HasSubstr("asks for no"));
    }
  }
  EXPECT_EQ(r.summary.passed + 2, static_cast<int>(r.cases.size()));
  EXPECT_GT(r.summary.passed, 50);
  EXPECT_EQ(conformance::format_summary(r.summary),
            std::to_string(r.summary.passed) + " passed, 0 failed, 2 skipped");
}

TEST(AttentionSuite, CatchesAccumulatingBackward) {
  SuiteRun r = run_buggy("accumulate");
  EXPECT_TRUE(r.failed("backward overwrites", "did it accumulate"));
  EXPECT_TRUE(r.failed("fwd+bwd B=2 H=3 T=7 D=32 causal strided", "not written?"));
}

TEST(AttentionSuite, CatchesWrongScale) {
  SuiteRun r = run_buggy("no_scale");
  EXPECT_TRUE(r.failed("fwd+bwd B=1 H=1 T=7 D=32 causal contiguous", "forward: out"));
}

TEST(AttentionSuite, CatchesIgnoredCausalMask) {
  SuiteRun r = run_buggy("ignore_causal");
  EXPECT_TRUE(r.failed("T=65 D=80 causal strided", "forward"));
  EXPECT_FALSE(r.failed("non-causal"));
}

TEST(AttentionSuite, CatchesMissingLse) {
  SuiteRun r = run_buggy("no_lse");
  EXPECT_TRUE(r.failed("T=7 D=32 causal contiguous", "lse"));
}

TEST(AttentionSuite, CatchesWorkspaceOverrun) {
  SuiteRun r = run_buggy("ws_overrun");
  EXPECT_TRUE(r.failed("T=7 D=32 causal contiguous", "forward wrote past the"));
}

TEST(AttentionSuite, CatchesMissingArgumentChecks) {
  SuiteRun r = run_buggy("no_checks");
  EXPECT_TRUE(r.failed("rejects k with T-1 rows", "returned OK, expected INVALID"));
  EXPECT_TRUE(r.failed("rejects dq with head dim D-1"));
  EXPECT_FALSE(r.failed("fwd+bwd"));
}

TEST(AttentionSuite, SkipsWhatCapabilitiesExclude) {
  SuiteRun r = run_buggy("caps_d64");
  EXPECT_EQ(r.summary.failed, 0);
  // The quick sweep has head dims 32 and 80 only: every shape case is skipped, with the reason.
  int shape_skips = 0;
  for (const auto& c : r.cases)
    if (c.name.rfind("fwd+bwd", 0) == 0) {
      EXPECT_EQ(c.outcome, Outcome::kSkip) << c.name;
      EXPECT_THAT(c.detail, ::testing::HasSubstr("does not support head dim"));
      ++shape_skips;
    }
  EXPECT_EQ(shape_skips + 2, r.summary.skipped);  // + the two workspace checks
  EXPECT_GT(r.summary.passed, 5);                 // the overwrite and argument checks ran at D = 64
}

}  // namespace
}  // namespace triad
