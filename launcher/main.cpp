// triad-launch: trains a GPT from a YAML config, in this process (one rank) or by starting
// ranks (--nproc-per-node, --nnodes, or under srun / mpirun), or runs any program per rank
// (--exec). See docs/launching.md.
//   triad-launch [--nproc-per-node N] [--nnodes M --node-rank R --master-addr A --master-port P]
//                CONFIG [--set key.path=value ...] [--dry-run] [-q]
//   triad-launch [options] --exec PROGRAM [ARGS...]
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "agent.hpp"
#include "cli.hpp"
#include "plan.hpp"
#include "spawn.hpp"
#include "training.hpp"
#include "triad/core/cli.hpp"
#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/train/checkpoint.hpp"
#include "triad/core/train/engine.hpp"
#include "triad/core/train/run.hpp"
#include "triad/core/train/stop_signals.hpp"

namespace {

using namespace triad::launch;

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

// OpenMP threads that sleep when they wait, rather than spin, lose far less when another
// process shares the cores, and cost little alone (docs/performance.md). An OpenMP runtime
// reads OMP_WAIT_POLICY once, as it loads before main, so a launcher started without it sets
// it and starts itself again; ranks inherit it. A policy the user set is kept.
void wait_passively_by_default(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only if it failed: then go on as started
}

int run(int argc, char** argv) {
  LaunchArgs a;
  if (auto code = parse_args(argc, argv, a)) return *code;
  if (a.worker) {
    triad::take_stop_signals();  // before any thread: see stop_signals.hpp
    return train_as_worker(a);
  }

  const Environment env = current_environment();
  JobPlan plan = make_plan(a, env);
  ChildSpec program;
  RunFolderLocks locks;  // held until the run ends
  std::chrono::milliseconds collective_timeout{0};
  if (a.exec.empty()) {
    if (a.dry_run) {
      if (plan.agent == 0) return print_dry_run(a, plan.world_size, int(plan.ranks.size()));
      std::fprintf(stderr, "triad-launch: dry run: %s's launcher prints the report\n",
                   plan.agent_name(0).c_str());
      return 0;
    }
    if (plan.world_size == 1) {
      // In one process nobody sends SIGKILL after the grace: the process keeps it itself.
      triad::take_stop_signals(ms(a.stop_grace_s));
      return train_in_process(a);
    }
    // Checked here once, rather than failing the same way in every rank. Rank 0 alone writes
    // the output folders; every node's ranks read the data.
    const triad::Config cfg = load_launch_config(a, plan.world_size);
    log_import_notes(cfg);
    for (const std::string& note : triad::preflight(cfg)) spdlog::info("{}", note);
    check_transport(cfg, plan.world_size);
    triad::check_runnable(cfg);
    bool runs_rank0 = false;
    for (const RankSlot& r : plan.ranks) runs_rank0 = runs_rank0 || r.rank == 0;
    // The checkpoint first: a --resume of a complete run ends here (exit 0, nothing written),
    // and another trainer's checkpoint folder is named as such.
    if (!triad::check_checkpoint_to_load(cfg)) return 0;
    triad::check_run_paths(cfg, runs_rank0);
    check_memory(cfg, plan.world_size, int(plan.ranks.size()));
    collective_timeout = triad::collective_timeout_ms(cfg.training);
    if (runs_rank0) lock_run_folders(cfg, locks);
    program.path = self_executable();
    program.argv = {program.path, "--worker"};
    if (a.megatron_args.empty())
      program.argv.push_back(a.config_path);
    else
      program.argv.push_back("--megatron-args=" + a.megatron_args);
    for (const auto& s : a.sets) program.argv.push_back("--set=" + s);
    if (a.quiet) program.argv.push_back("--quiet");
  } else {
    auto path = env.find("PATH");
    program.path = resolve_program(a.exec[0], path == env.end() ? "/usr/bin:/bin" : path->second);
    program.argv = a.exec;
  }
  program.env = env;
  assign_token(plan, env);

  AgentSettings s;
  s.rdzv_timeout = ms(a.rdzv_timeout_s);
  s.heartbeat_timeout = ms(a.heartbeat_timeout_s);
  s.stop_grace = ms(a.stop_grace_s);
  s.prefix = !a.no_prefix;
  s.training = a.exec.empty();
  s.collective_timeout = collective_timeout;
  return run_agent(plan, program, s);
}

}  // namespace

int main(int argc, char** argv) {
  wait_passively_by_default(argv);
  spdlog::set_pattern("[%H:%M:%S] %v");
  return triad::cli::run_main("triad-launch", [&] { return run(argc, argv); });
}
