// A thread that keeps this launcher in touch with the others through the store: it beats
// its heart, watches for the job's first failure and, on the launcher that hosts the store,
// notices launchers that went silent and tells when every other launcher has finished.
// It wakes the main loop through an eventfd.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "job_store.hpp"
#include "triad/core/dist/rank_status.hpp"

namespace triad::launch {

class JobMonitor {
 public:
  JobMonitor(JobStore& store, const JobPlan& plan, std::chrono::milliseconds heartbeat_timeout);
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  int fd() const { return event_fd_; }  // readable when failure() or others_finished() changed
  void clear();
  std::optional<Failure> failure() const;
  bool others_finished() const;  // host only: every other launcher marked itself finished
  void stop();

  // From now on also watches this launcher's ranks through board (slot i is ranks[i]'s) and
  // makes it the job's failure when a rank has waited longer than collective_timeout
  // (watchdog.hpp).
  struct WatchedRank {
    int rank = 0;
    std::string who;  // "rank 1 (pid 123 on node 0, host a)"
  };
  void watch_ranks(const triad::RankStatusBoard* board, std::vector<WatchedRank> ranks,
                   std::chrono::milliseconds collective_timeout);

  static constexpr std::chrono::milliseconds kPoll{250};

 private:
  void loop();
  void poll_once();
  void check_agents();
  void check_ranks();
  void notify();

  JobStore& store_;
  const JobPlan& plan_;
  std::chrono::milliseconds heartbeat_timeout_;
  int event_fd_ = -1;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<Failure> failure_;
  bool others_finished_ = false;

  // Host only, touched by the thread alone.
  struct Peer {
    bool finished = false;
    int64_t beats = -1;
    std::chrono::steady_clock::time_point changed;
  };
  std::vector<Peer> peers_;
  // The ranks' watch, set once by watch_ranks (under mu_), then read by the thread alone.
  const triad::RankStatusBoard* board_ = nullptr;
  std::vector<WatchedRank> watched_;
  std::chrono::milliseconds collective_timeout_{0};
  std::thread thread_;
};

}  // namespace triad::launch
