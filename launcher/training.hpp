// Training as the launcher runs it: in this process for a world of one, or as one rank of a
// launch (--worker), plus the --dry-run report.
#pragma once

#include "cli.hpp"

namespace triad::launch {

// Prints the resolved config and the cost of one step for a world of world_size ranks.
int print_dry_run(const LaunchArgs& args, int world_size);
// The whole job in this process (world of one).
int train_in_process(const LaunchArgs& args);
// One rank: its place comes from the environment the launcher set (DistEnv).
int train_as_worker(const LaunchArgs& args);

}  // namespace triad::launch
