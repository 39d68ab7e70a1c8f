// One launcher of a job (an "agent"): it joins the others through the rendezvous store
// (node 0's launcher hosts it), starts its ranks, prefixes their output, forwards signals,
// and stops everything when any rank anywhere fails.
#pragma once

#include <chrono>

#include "plan.hpp"
#include "spawn.hpp"

namespace triad::launch {

struct AgentSettings {
  std::chrono::milliseconds rdzv_timeout{300000};
  std::chrono::milliseconds heartbeat_timeout{5000};
  std::chrono::milliseconds stop_grace{3000};
  bool prefix = true;
  // The ranks train (triad-launch --worker), so a bad input is a rank's one line
  // "triad-launch: error: ..." and exit code 2: the job shows the first such line once (the
  // same line from other ranks is dropped) and adds no line of its own about that exit.
  bool training = false;
  // Training ranks' collective timeout: the launcher watches their status (rank_status.hpp)
  // and stops the job, naming the rank the others wait for, once a wait runs this long.
  std::chrono::milliseconds collective_timeout{0};
};

// program: what every rank runs, and the environment it starts from (the rank's variables
// are added). Returns the launcher's exit status: 0, or the job's first failure's code.
int run_agent(const JobPlan& plan, const ChildSpec& program, const AgentSettings& settings);

}  // namespace triad::launch
