// Training as the launcher runs it: in this process for a world of one, or as one rank of a
// launch (--worker), plus the --dry-run report.
#pragma once

#include "cli.hpp"
#include "triad/core/config/config.hpp"

namespace triad::launch {

// The transport section: its plugin loads, its parameters resolve against the plugin's table
// and an instance starts (where the plugin checks their values). A world of one never
// connects but checks the section all the same when it has parameters, so a bad transport
// key fails alike at every world size.
void check_transport(const Config& cfg, int world_size);

// Refuses, before any allocation, a CPU run whose estimated peak per rank (memory_plan.hpp)
// exceeds this machine's available memory shared by the local_ranks ranks it starts here:
// one line with the estimate, the limit and the cheapest change that fits.
void check_memory(const Config& cfg, int world_size, int local_ranks);

// The config of a launch: CONFIG with --set and --deepspeed_config, or --megatron-args.
Config load_launch_config(const LaunchArgs& a, int world_size);

// Logs, once per job, the keys of an imported configuration (a ds_config.json) that have no
// effect in Triad, each with why.
void log_import_notes(const Config& cfg);

// Prints the resolved config and the cost of one step for a world of world_size ranks.
int print_dry_run(const LaunchArgs& args, int world_size);
// The whole job in this process (world of one).
int train_in_process(const LaunchArgs& args);
// One rank: its place comes from the environment the launcher set (DistEnv).
int train_as_worker(const LaunchArgs& args);

}  // namespace triad::launch
