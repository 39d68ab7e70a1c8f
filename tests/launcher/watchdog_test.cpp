// The launchers' verdict on stuck ranks (launcher/watchdog.hpp) and the rank status board
// the ranks write (core rank_status.hpp).
#include "watchdog.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "triad/core/dist/rank_status.hpp"

namespace triad::launch {
namespace {

RankReport rank(int r, double beat, double wait, std::string what = "") {
  RankReport x;
  x.rank = r;
  x.who = "rank " + std::to_string(r) + " (pid " + std::to_string(100 + r) + ")";
  x.heartbeat_age = beat;
  x.step = 7;
  x.wait_age = wait;
  x.what = std::move(what);
  return x;
}

TEST(Watchdog, NothingWhileNoWaitIsOverTheTimeout) {
  EXPECT_FALSE(diagnose_stuck({rank(0, 0.1, 3.9, "a"), rank(1, 9, -1)}, 4));
  EXPECT_FALSE(diagnose_stuck({}, 4));
}

TEST(Watchdog, ASilentRankIsNamedWithWhatTheOthersWaitFor) {
  auto v = diagnose_stuck({rank(0, 0.1, 4.5, "all_reduce(8 x fp32) over the world"),
                           rank(2, 0.2, 4.2, "recv(8 x fp32) from rank 1"), rank(1, 5.0, -1)},
                          4);
  ASSERT_TRUE(v);
  EXPECT_EQ(
      v->find("rank 1 (pid 101) stopped making progress: no sign of life for 5.0 s at step 7"), 0u)
      << *v;
  EXPECT_NE(v->find("rank 0 has waited 4.5 s for all_reduce(8 x fp32) over the world; rank 2 has "
                    "waited 4.2 s for recv(8 x fp32) from rank 1"),
            std::string::npos)
      << *v;
}

TEST(Watchdog, ARankStoppedInsideAWaitIsStillTheOneNamed) {
  // Rank 1 was stopped while it waited itself: its wait ages too, but it is the silent one.
  auto v = diagnose_stuck({rank(0, 0.1, 4.1, "x"), rank(1, 6.0, 6.0, "y")}, 4);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->find("rank 1 (pid 101) stopped making progress"), 0u) << *v;
  EXPECT_EQ(v->find("rank 1 has waited"), std::string::npos) << *v;
}

TEST(Watchdog, ABusyRankOutsideAnyWaitIsNamedInARing) {
  // Ring order: rank 3 waits for 2, rank 0 for 3 (which waits too): 2 is the one not waiting.
  auto v =
      diagnose_stuck({rank(0, 0.1, 4.4, "recv from rank 3"), rank(3, 0.1, 4.3, "recv from rank 2"),
                      rank(1, 0.1, 4.2, "recv"), rank(2, 0.2, -1)},
                     4);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->find("rank 2 (pid 102) is in no transport operation at step 7"), 0u) << *v;
}

TEST(Watchdog, EveryRankWaitingIsADeadlock) {
  auto v = diagnose_stuck(
      {rank(0, 0.1, 4.4, "recv from rank 1"), rank(1, 0.1, 4.3, "recv from rank 0")}, 4);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->find("every rank is waiting for the others: rank 0 has waited 4.4 s for recv from "
                    "rank 1; rank 1"),
            0u)
      << *v;
}

TEST(Watchdog, LongListsAreCut) {
  std::vector<RankReport> r{rank(0, 9, -1)};
  for (int i = 1; i < 10; ++i) r.push_back(rank(i, 0.1, 5, "w"));
  auto v = diagnose_stuck(r, 4);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("(and 6 more ranks waiting)"), std::string::npos) << *v;
}

TEST(Watchdog, ReportsSurviveTheStore) {
  std::vector<RankReport> r{rank(3, 0.25, -1), rank(4, 1.5, 2.75, "send\tto rank 5\nover x")};
  auto back = decode_reports(encode_reports(r) + "garbage line\n1\t2\n");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].rank, 4);
  EXPECT_DOUBLE_EQ(back[1].wait_age, 2.75);
  EXPECT_EQ(back[1].what, "send to rank 5 over x");
  EXPECT_EQ(back[0].who, "rank 3 (pid 103)");
  EXPECT_LT(back[0].wait_age, 0);
}

TEST(RankStatusBoard, ASlotReadsWhatTheRankWrote) {
  triad::RankStatusBoard board(3);
  EXPECT_FALSE(board.read(1).attached);
  // The rank's side, in this process: attach through the variable the launcher sets.
  ASSERT_EQ(setenv("TRIAD_RANK_STATUS", board.env_value(1).c_str(), 1), 0);
  triad::attach_rank_status_from_env();
  ASSERT_TRUE(triad::rank_status_watched());
  triad::rank_status_step(12);
  {
    triad::RankWaitScope w("all_reduce(4 x fp32) over the world");
    triad::RankWaitScope inner("ignored: the outer wait counts");
    auto v = board.read(1);
    EXPECT_TRUE(v.attached);
    EXPECT_EQ(v.step, 12);
    EXPECT_GE(v.wait_age, 0);
    EXPECT_LT(v.heartbeat_age, 5);
    EXPECT_EQ(v.what, "all_reduce(4 x fp32) over the world");
  }
  EXPECT_LT(board.read(1).wait_age, 0);
  EXPECT_FALSE(board.read(0).attached);
  EXPECT_FALSE(board.read(7).attached);
}

}  // namespace
}  // namespace triad::launch
