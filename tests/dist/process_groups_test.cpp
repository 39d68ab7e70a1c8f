// Process groups against Megatron-LM's documented assignment (parallel_state.py:
// "16 GPUs, 2-way tensor, 4-way pipeline" example) and hand-written tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "triad/core/dist/process_groups.hpp"
#include "triad/core/error.hpp"

using triad::ProcessGroups;
using triad::RankCoords;
using Groups = std::vector<std::vector<int>>;

TEST(ProcessGroups, MegatronSixteenRanksTp2Pp4) {
  ProcessGroups g(16, 2, 4);
  EXPECT_EQ(g.dp_size(), 2);
  EXPECT_EQ(g.tp_groups(),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.dp_groups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.pp_groups(), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

TEST(ProcessGroups, EightRanksTp2Pp2Dp2Coordinates) {
  ProcessGroups g(8, 2, 2, 2);
  // rank -> (tp, dp, pp): tensor parallel fastest, then data parallel, then pipeline.
  const RankCoords want[8] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                              {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(g.coords(r), want[r]) << "rank " << r;
    EXPECT_EQ(g.rank_of(want[r]), r);
  }
  EXPECT_EQ(g.tp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.dp_groups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.pp_groups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.tp_group(5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.dp_group(5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.pp_group(5), (std::vector<int>{1, 5}));
}

TEST(ProcessGroups, OneDimensionalLayouts) {
  ProcessGroups dp(4, 1, 1);
  EXPECT_EQ(dp.dp_size(), 4);
  EXPECT_EQ(dp.dp_groups(), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(dp.tp_groups(), (Groups{{0}, {1}, {2}, {3}}));
  ProcessGroups tp(4, 4, 1);
  EXPECT_EQ(tp.tp_groups(), (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(tp.dp_groups(), (Groups{{0}, {1}, {2}, {3}}));
  ProcessGroups pp(4, 1, 4);
  EXPECT_EQ(pp.pp_groups(), (Groups{{0, 1, 2, 3}}));
  ProcessGroups six(6, 2, 1);  // dp 3
  EXPECT_EQ(six.dp_groups(), (Groups{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(six.tp_groups(), (Groups{{0, 1}, {2, 3}, {4, 5}}));
}

TEST(ProcessGroups, TwelveRanksTp2Pp3Dp2) {
  ProcessGroups g(12, 2, 3);
  EXPECT_EQ(g.dp_size(), 2);
  EXPECT_EQ(g.pp_groups(), (Groups{{0, 4, 8}, {1, 5, 9}, {2, 6, 10}, {3, 7, 11}}));
  EXPECT_EQ(g.dp_groups(), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}}));
}

// The split (color, key) of every rank must rebuild exactly the group lists, in order.
TEST(ProcessGroups, SplitSpecsRebuildTheGroups) {
  for (auto [w, tp, pp] :
       std::vector<std::tuple<int, int, int>>{{8, 2, 2}, {16, 2, 4}, {12, 3, 2}, {6, 1, 3}}) {
    ProcessGroups g(w, tp, pp);
    for (int kind = 0; kind < 3; ++kind) {
      std::map<int, std::vector<std::pair<int, int>>> by_color;
      for (int r = 0; r < w; ++r) {
        auto s = kind == 0 ? g.tp_split(r) : kind == 1 ? g.dp_split(r) : g.pp_split(r);
        by_color[s.color].push_back({s.key, r});
      }
      for (auto& [color, members] : by_color) {
        std::sort(members.begin(), members.end());
        std::vector<int> ranks;
        for (auto& m : members) ranks.push_back(m.second);
        int r0 = ranks.front();
        auto want = kind == 0 ? g.tp_group(r0) : kind == 1 ? g.dp_group(r0) : g.pp_group(r0);
        EXPECT_EQ(ranks, want) << g.describe() << " kind " << kind << " color " << color;
      }
    }
  }
}

TEST(ProcessGroups, SizesThatDoNotMultiplyAreRefused) {
  try {
    ProcessGroups g(8, 3, 1);
    FAIL() << "accepted world 8 with tp 3";
  } catch (const triad::UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("world size 8"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor_model_parallel_size 3"), std::string::npos) << m;
  }
  try {
    ProcessGroups g(8, 2, 2, 3);
    FAIL() << "accepted 2 x 2 x 3 for world 8";
  } catch (const triad::UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("= 12"), std::string::npos) << m;
    EXPECT_NE(m.find("8 ranks"), std::string::npos) << m;
  }
  EXPECT_THROW(ProcessGroups(4, 0, 1), triad::UserError);
  EXPECT_THROW(ProcessGroups(4, 2, 2).coords(4), triad::UserError);
}
