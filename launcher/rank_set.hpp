// The ranks one launcher started: their processes (each its own process group) and their
// output pipes, read into "[rank N] "-prefixed lines.
#pragma once

#include <poll.h>

#include <functional>
#include <memory>
#include <vector>

#include "output.hpp"
#include "plan.hpp"
#include "spawn.hpp"
#include "triad/core/dist/rank_status.hpp"

namespace triad::launch {

class RankSet {
 public:
  struct Rank {
    RankSlot slot;
    Child child;
    std::unique_ptr<LinePrefixer> out, err;  // null without prefixing
    bool running = true;
    bool stopped_by_us = false;  // its end is the launcher's doing, not a failure
  };

  RankSet() = default;
  RankSet(const RankSet&) = delete;
  RankSet& operator=(const RankSet&) = delete;
  // Kills what still runs: only reached on an error's way out of the launcher.
  ~RankSet();

  // Starts one process per slot from spec (RANK and LOCAL_RANK added to its environment).
  // err_filter, when given, makes each rank's stderr filter (with prefixing only). With a
  // board, slot i's rank gets the board's slot i (TRIAD_RANK_STATUS).
  void start(ChildSpec spec, const std::vector<RankSlot>& slots, bool prefix,
             const std::function<LinePrefixer::Filter(const RankSlot&)>& err_filter = {},
             const triad::RankStatusBoard* board = nullptr);
  // Sends sig to every running rank's process group; as_stop marks their end as ours.
  void signal(int sig, bool as_stop);
  // Collects the ranks that ended and calls on_exit(rank, wait status) for each.
  void reap(const std::function<void(Rank&, int)>& on_exit);

  void add_pollfds(std::vector<pollfd>& fds) const;
  void on_readable(int fd);   // reads a pipe poll() flagged, to its EOF if it ended
  void read_output(Rank& r);  // reads what r's pipes hold now (r ended: its last lines)
  void close_pipes();         // flushes partial lines too

  bool running() const;
  bool pipes_open() const;
  const std::vector<Rank>& ranks() const { return ranks_; }

 private:
  std::vector<Rank> ranks_;
};

}  // namespace triad::launch
