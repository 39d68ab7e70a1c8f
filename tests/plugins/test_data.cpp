// The data conformance suite against the planted defects of the test plugin `hostile` (its
// stages 0 and 1, dp 2 and 4 in real processes over ucx). `zero` itself is pinned by
// dist.data_conformance.zero.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "test_helpers.hpp"

namespace triad {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kHostile = TRIAD_TEST_PLUGIN_DIR "/libtriad-data-hostile.so";
constexpr const char* kVersion1 = TRIAD_TEST_PLUGIN_DIR "/libtriad-data-v1old.so";

// Runs the tool, returns its exit code and fills *out with what it printed.
int run_tool(const std::string& args, std::string* out) {
  return test::run_plugin_test("data", args, out);
}

// A plugin built against data_v1.h runs through the loader's adapter: its stage 0 passes every
// case (dp 1, 2, 4 × 4 arenas × 4 checks, a communicator-use case per world and a ranks case per
// forked world), stages 1-3 skipped by its capabilities.
TEST(DataSuite, VersionOnePluginPassesThroughTheAdapter) {
  std::string out;
  EXPECT_EQ(run_tool(std::string(kVersion1) + " --expect-pass 53 --expect-skip 3", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("PASS v1old stage=0 dp=4 odd-sizes default gradients"));
}

// Stages 0-3 × dp 1, 2, 4 × 4 arenas × 3 bucket settings × 4 checks, a communicator-use case
// per world and a ranks case per forked world.
TEST(DataSuite, CorrectHostilePluginPasses) {
  std::string out;
  EXPECT_EQ(
      run_tool(std::string(kHostile) + " --param bug=none --expect-pass 596 --expect-skip 0", &out),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr("PASS hostile stage=1 dp=4 three-elements default owned ranges "
                             "([0, 1) [1, 2) [2, 3) [3, 3) of 3 elements)"));
}

// A parameter given with --param is not swept: stage 1 alone (stage 0 is skipped), and with
// overlap_comm fixed only the default and reduce_bucket_size 7 remain.
TEST(DataSuite, GivenParametersNarrowTheSweep) {
  std::string out;
  EXPECT_EQ(run_tool(std::string(kHostile) +
                         " --param stage=1 --param overlap_comm=false --expect-pass 101"
                         " --expect-skip 3",
                     &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("SKIP hostile stage=0: --param stage=1 chose another"));
  EXPECT_THAT(out, HasSubstr("PASS hostile stage=1 dp=2 odd-sizes bucket=7 gradients"));
  EXPECT_THAT(out, Not(HasSubstr("no-overlap")));
}

// Each planted defect fails the suite (exit 1) at the case that can see it. Which rank's words a
// case carries is the first rank's to report it, so rank-dependent parts are left out.
TEST(DataSuite, CatchesEachPlantedDefect) {
  const std::pair<const char*, std::vector<const char*>> bugs[] = {
      {"overlap",
       {"FAIL hostile stage=1 dp=2 one-tensor default owned ranges: rank 1 owns [2050, 4099), "
        "overlapping rank 0's [0, 2051)"}},
      {"reversed",
       {"FAIL hostile stage=1 dp=2 one-tensor default owned ranges: elements [0, 2050) belong to "
        "no rank before rank 0, which owns [2050, 4099)"}},
      {"skip_bucket",
       {"FAIL hostile stage=0 dp=2 one-tensor default gradients: rank ",
        "where the sum over 2 ranks is"}},
      {"divide",
       {"FAIL hostile stage=0 dp=2 many-small default gradients: rank ",
        "(off by 0.5 relative; the mean would be "}},
      {"reduce_twice",
       {"FAIL hostile stage=1 dp=4 odd-sizes bucket=7 gradients: rank ",
        "where the sum over 4 ranks is"}},
      {"no_reset",
       {"FAIL hostile stage=0 dp=1 one-tensor default steps 2-3: rank 0, step 2: grads_ready(0, "
        "4099) failed (INVALID): gradients reported ready twice"}},
      {"no_gather",
       {"FAIL hostile stage=1 dp=2 one-tensor default parameters: rank ",
        "where every rank must hold its owner's"}},
      {"shard_overlap",
       {"FAIL hostile stage=2 dp=2 one-tensor default owned ranges: unit 0: rank 1 owns [0, 2050), "
        "overlapping rank 0's [0, 2050)"}},
      {"no_reduce",
       {"FAIL hostile stage=2 dp=2 one-tensor default gradients: rank ",
        "where the sum over 2 ranks and 2 micro-batches is"}},
      {"gather_skip",
       {"FAIL hostile stage=3 dp=2 one-tensor default parameters: rank ",
        "where every rank must hold its owner's", "after gather_unit"}},
      {"by_unit_claimed",
       {"FAIL hostile stage=1 dp=2 many-small default parameters: rank ",
        "where every rank must hold its owner's"}},
      {"unbounded_wait",
       {"FAIL hostile stage=0 dp=1 communicator use: hostile stage=0 dp=1 one-tensor default: "
        "waited with timeout_ms -1 (no limit), beyond the setup's timeout_ms 30000"}},
  };
  for (const auto& [bug, expect] : bugs) {
    std::string out;
    EXPECT_EQ(run_tool(std::string(kHostile) + " --param bug=" + bug, &out), 1) << bug << "\n"
                                                                                << out;
    for (const char* e : expect) EXPECT_THAT(out, HasSubstr(e)) << bug;
  }
}

TEST(DataSuite, UserErrorsExitWithTwo) {
  std::string out;
  EXPECT_EQ(run_tool(TRIAD_NAIVE_PLUGIN, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("a plugin of kind 'data' is needed"));
  out.clear();
  EXPECT_EQ(run_tool(std::string(kHostile) + " --param bug=nope", &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("unknown bug 'nope'"));
  out.clear();
  EXPECT_EQ(run_tool(std::string(kHostile) + " --param stages=1", &out), 2) << out;
}

}  // namespace
}  // namespace triad
