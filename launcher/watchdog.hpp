// The launchers' verdict on a job whose ranks stopped making progress. Each launcher reads
// its own ranks' status (core rank_status.hpp) and, in a job of several launchers, shares it
// through the store; once any rank has waited longer than the collective timeout, the
// launcher that sees it names the rank the others wait for:
//   1. a rank with no heartbeat for kSilentSeconds: stopped or frozen;
//   2. else a rank in no transport wait at all: busy or hung in its own work;
//   3. else every rank waits: for each other (operations issued in different orders, or a
//      transport fault);
// and what the waiting ranks wait for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace triad::launch {

struct RankReport {
  int rank = 0;
  std::string who;           // "rank 1 (pid 123 on node 0, host a)"
  double heartbeat_age = 0;  // seconds
  int64_t step = 0;
  double wait_age = -1;  // seconds; < 0: in no transport wait
  std::string what;      // what it waits for
};

inline constexpr double kSilentSeconds = 3;  // heartbeats come every 0.25 s

// The failure text, or nothing while no rank has waited longer than timeout_s.
std::optional<std::string> diagnose_stuck(std::vector<RankReport> ranks, double timeout_s);

// One line per rank, for the store; decode skips what it cannot read.
std::string encode_reports(const std::vector<RankReport>& ranks);
std::vector<RankReport> decode_reports(const std::string& text);

}  // namespace triad::launch
