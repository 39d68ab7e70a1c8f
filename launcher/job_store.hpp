// The launchers' shared state in the rendezvous store: who has arrived, the job's first
// failure, heartbeats and who has finished. Keys live under "triad-launch/"; the ranks'
// own keys (transport addresses) are elsewhere in the same store.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan.hpp"
#include "triad/core/dist/rendezvous.hpp"

namespace triad::launch {

struct Failure {
  int code = 1;      // what every launcher exits with
  std::string desc;  // "rank 2 (pid 123, node 0 on host a) exited with code 3"
};

class JobStore {
 public:
  JobStore(RendezvousClient& client, const JobPlan& plan) : c_(client), plan_(plan) {}

  // Publishes this launcher's view of the job (world size, launcher count) and where it runs.
  void announce(const std::string& host, int pid);
  // One bounded wait for every launcher's announcement; returns those still missing.
  std::vector<int> wait_for_agents(std::chrono::milliseconds limit);
  // Throws UserError when another launcher was started for a different job layout.
  void check_agreement();
  // "host a pid 123" as announced by launcher a.
  std::string where(int agent);

  // Records f as the job's failure unless one was recorded first; returns the first.
  Failure publish_failure(const Failure& f);
  // A rank's death as this launcher saw it, at died_ns (CLOCK_REALTIME), offered for the job's
  // failure; earliest_candidate() is the first of those offered so far by any launcher: a
  // death by a signal before any exit with a code, then by time (ties: the lower launcher).
  // So the job blames the death that caused the others, not the first report: a peer's death
  // makes the survivors exit with an error too, often before the dead rank's launcher has
  // published it, and within milliseconds, less than two launchers' reaping can tell apart.
  void offer_candidate(const Failure& f, int64_t died_ns, bool by_signal);
  std::optional<Failure> earliest_candidate();
  std::optional<Failure> failure();

  void heartbeat();
  int64_t heartbeat_of(int agent);
  // This launcher's ranks' status lines (watchdog.hpp), and another launcher's ("" if none).
  void set_rank_reports(const std::string& text);
  std::string rank_reports_of(int agent);
  void mark_finished(bool ok);
  bool finished(int agent);

 private:
  std::string key(const std::string& what, int agent) const;
  std::string view() const;
  RendezvousClient& c_;
  const JobPlan& plan_;
};

// "node 1", "nodes 1, 3" (the plan's agent kind).
std::string describe_agents(const JobPlan& plan, const std::vector<int>& agents);

}  // namespace triad::launch
