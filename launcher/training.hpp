// Training as the launcher runs it: in this process for a world of one, or as one rank of a
// launch (--worker), plus the --dry-run report.
#pragma once

#include <optional>

#include "cli.hpp"
#include "run_lock.hpp"
#include "triad/core/config/config.hpp"

namespace triad::launch {

// The transport section: its plugin loads, its parameters resolve against the plugin's table
// and an instance starts (where the plugin checks their values). A world of one never
// connects but checks the section all the same when it has parameters, so a bad transport
// key fails alike at every world size.
void check_transport(const Config& cfg, int world_size);

// Why a CPU run cannot start here for memory, "" when it can (or this machine's memory is
// unknown): its estimated peak per rank (memory_plan.hpp) exceeds this machine's available
// memory shared by the local_ranks ranks it starts here. One line with the estimate, the limit
// and the cheapest change that fits. The launch refuses it (check_memory), the dry run says it.
std::string memory_refusal_here(const Config& cfg, int world_size, int local_ranks);
// Refuses such a run before any allocation: UserError with memory_refusal_here's line.
void check_memory(const Config& cfg, int world_size, int local_ranks);

// The folders a run writes, locked for its life by the launcher that runs rank 0: output.dir,
// and checkpoint.save when it is another folder (released, save first, when this goes).
struct RunFolderLocks {
  std::optional<FolderLock> output, save;
};
// Takes them, last of the checks before a run starts (a folder it had to create is removed
// again if the run leaves it empty). UserError when another run holds one of them.
void lock_run_folders(const Config& cfg, RunFolderLocks& locks);

// The config of a launch: CONFIG with --set and --deepspeed_config, or --megatron-args.
Config load_launch_config(const LaunchArgs& a, int world_size);

// Logs, once per job, the keys of an imported configuration (a ds_config.json) that have no
// effect in Triad, each with why.
void log_import_notes(const Config& cfg);

// Prints the resolved config and the cost of one step for a world of world_size ranks, of which
// local_ranks would run here, and whether the run would start here.
int print_dry_run(const LaunchArgs& args, int world_size, int local_ranks);
// The whole job in this process (world of one).
int train_in_process(const LaunchArgs& args);
// One rank: its place comes from the environment the launcher set (DistEnv).
int train_as_worker(const LaunchArgs& args);

}  // namespace triad::launch
