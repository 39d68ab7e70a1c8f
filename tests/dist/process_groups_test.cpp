// Process groups against Megatron-LM's documented assignment (parallel_state.py:
// "16 GPUs, 2-way tensor, 4-way pipeline" example) and hand-written tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

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

// Context parallelism in Megatron's order (TP fastest, then CP, then DP, then PP):
// rank = tp + 2 * (cp + 2 * (dp + 2 * pp)) for tp 2 x cp 2 x dp 2 x pp 2, every group by hand.
TEST(ProcessGroups, SixteenRanksTp2Cp2Dp2Pp2) {
  ProcessGroups g(16, 2, 2, 0, 2);
  EXPECT_EQ(g.dp_size(), 2);
  EXPECT_EQ(g.cp_size(), 2);
  EXPECT_EQ(g.dp_cp_size(), 4);
  EXPECT_EQ(g.describe(), "world 16 = tp 2 x cp 2 x pp 2 x dp 2");
  EXPECT_EQ(g.tp_groups(),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.cp_groups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(g.dp_groups(),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(g.pp_groups(),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  // Gradients reduce, and ZeRO shards, over DP x CP: the ranks of one (tp, pp).
  EXPECT_EQ(g.dp_cp_groups(),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  // Rank 13 = 1 + 2 * (0 + 2 * (1 + 2 * 1)): tp 1, cp 0, dp 1, pp 1.
  EXPECT_EQ(g.coords(13), (RankCoords{.tp = 1, .dp = 1, .pp = 1, .cp = 0}));
  EXPECT_EQ(g.coords(6), (RankCoords{.tp = 0, .dp = 1, .pp = 0, .cp = 1}));
  EXPECT_EQ(g.cp_group(13), (std::vector<int>{13, 15}));
  EXPECT_EQ(g.dp_cp_group(13), (std::vector<int>{9, 11, 13, 15}));
}

TEST(ProcessGroups, ContextParallelCoordinatesRoundTrip) {
  for (auto [w, tp, pp, cp] : std::vector<std::tuple<int, int, int, int>>{
           {16, 2, 2, 2}, {8, 1, 1, 4}, {24, 2, 3, 2}, {12, 3, 1, 2}, {8, 2, 1, 4}}) {
    ProcessGroups g(w, tp, pp, 0, cp);
    EXPECT_EQ(tp * cp * pp * g.dp_size(), w);
    for (int r = 0; r < w; ++r) {
      const RankCoords c = g.coords(r);
      EXPECT_EQ(c.tp + tp * (c.cp + cp * (c.dp + g.dp_size() * c.pp)), r) << g.describe();
      EXPECT_EQ(g.rank_of(c), r) << g.describe();
      EXPECT_EQ(g.cp_group(r)[size_t(c.cp)], r);
      EXPECT_EQ(g.dp_cp_group(r)[size_t(c.cp + cp * c.dp)], r);
    }
  }
  EXPECT_THROW(ProcessGroups(16, 2, 2, 0, 2).rank_of(RankCoords{.cp = 2}), triad::UserError);
}

// Each kind's splits rebuild its groups, with context parallelism; and with cp 1 the cp groups
// are single ranks, the DP x CP groups the DP groups, and the text today's.
TEST(ProcessGroups, ContextParallelSplitsRebuildTheGroups) {
  for (auto [w, tp, pp, cp] : std::vector<std::tuple<int, int, int, int>>{
           {16, 2, 2, 2}, {24, 2, 3, 2}, {8, 1, 1, 4}, {8, 2, 2, 1}}) {
    ProcessGroups g(w, tp, pp, 0, cp);
    using Of = std::vector<int> (ProcessGroups::*)(int) const;
    using Split = triad::SplitSpec (ProcessGroups::*)(int) const;
    const std::vector<std::pair<Of, Split>> kinds = {
        {&ProcessGroups::tp_group, &ProcessGroups::tp_split},
        {&ProcessGroups::cp_group, &ProcessGroups::cp_split},
        {&ProcessGroups::dp_group, &ProcessGroups::dp_split},
        {&ProcessGroups::pp_group, &ProcessGroups::pp_split},
        {&ProcessGroups::dp_cp_group, &ProcessGroups::dp_cp_split}};
    for (size_t kind = 0; kind < kinds.size(); ++kind) {
      std::map<int, std::vector<std::pair<int, int>>> by_color;
      for (int r = 0; r < w; ++r) {
        auto s = (g.*kinds[kind].second)(r);
        by_color[s.color].push_back({s.key, r});
      }
      for (auto& [color, members] : by_color) {
        std::sort(members.begin(), members.end());
        std::vector<int> ranks;
        for (auto& m : members) ranks.push_back(m.second);
        EXPECT_EQ(ranks, (g.*kinds[kind].first)(ranks.front()))
            << g.describe() << " kind " << kind << " color " << color;
      }
    }
  }
  ProcessGroups three(8, 2, 2, 0, 1);
  EXPECT_EQ(three.describe(), "world 8 = tp 2 x pp 2 x dp 2");
  EXPECT_EQ(three.dp_cp_groups(), three.dp_groups());
  EXPECT_EQ(three.cp_groups().size(), 8u);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(three.dp_cp_split(r).color, three.dp_split(r).color);
    EXPECT_EQ(three.dp_cp_split(r).key, three.dp_split(r).key);
  }
}

TEST(ProcessGroups, ContextParallelSizesThatDoNotDivideAreRefused) {
  try {
    ProcessGroups g(8, 2, 1, 0, 3);
    FAIL() << "accepted world 8 with tp 2 x cp 3";
  } catch (const triad::UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("context_parallel_size 3"), std::string::npos) << m;
    EXPECT_NE(m.find("world size 8"), std::string::npos) << m;
  }
  EXPECT_THROW(ProcessGroups(8, 2, 1, 0, 0), triad::UserError);
}
