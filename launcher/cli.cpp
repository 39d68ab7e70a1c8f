// Command-line parsing. Everything after --exec belongs to the program, so argv is split
// there before CLI11 sees it (a program's own --set or -q must not be taken as ours).
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>

#include "triad/core/error.hpp"

namespace triad::launch {

std::optional<int> parse_args(int argc, char** argv, LaunchArgs& a) {
  std::vector<std::string> ours;
  int i = 1;
  bool exec_seen = false;
  for (; i < argc; ++i) {
    if (std::strcmp(argv[i], "--exec") == 0) {
      exec_seen = true;
      ++i;
      break;
    }
    ours.emplace_back(argv[i]);
  }
  for (; i < argc; ++i) a.exec.emplace_back(argv[i]);

  CLI::App app{
      "triad-launch: train a GPT from a YAML config, in one process or many\n"
      "  triad-launch [options] CONFIG [--set key=value ...]\n"
      "  triad-launch [options] --exec PROGRAM [ARGS...]   (run any program per rank)\n"
      "Under srun or mpirun the layout comes from SLURM / Open MPI."};
  app.name("triad-launch");
  app.add_option("config", a.config_path, "YAML config file");
  app.add_option("--set", a.sets, "override a key: --set training.train_iters=10 (repeatable)");
  app.add_flag("--dry-run", a.dry_run,
               "print the resolved config, parameter count, memory per rank and FLOPs per step");
  app.add_flag("-q,--quiet", a.quiet, "no per-step lines, only the summary");
  app.add_option("--nproc-per-node", a.nproc_per_node, "ranks to start on this node")
      ->check(CLI::PositiveNumber);
  app.add_option("--nnodes", a.nnodes, "number of nodes")->check(CLI::PositiveNumber);
  app.add_option("--node-rank", a.node_rank, "this node's index, 0..nnodes-1")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", a.master_addr,
                 "address of node 0, where the rendezvous runs (default 127.0.0.1; under "
                 "SLURM the first host of the job)");
  app.add_option("--master-port", a.master_port,
                 "rendezvous port (default 29500; a free one when this launcher runs the "
                 "whole job; 0: a free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--scheduler", a.scheduler,
                 "where the layout comes from: auto (SLURM under srun, Open MPI under "
                 "mpirun, else the flags), none, slurm, mpi")
      ->check(CLI::IsMember({"auto", "none", "slurm", "mpi"}));
  app.add_option("--rdzv-timeout", a.rdzv_timeout_s,
                 "seconds to wait for every node's launcher to arrive")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-timeout", a.heartbeat_timeout_s,
                 "seconds of silence after which a node's launcher is presumed dead")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--stop-grace", a.stop_grace_s,
                 "seconds between SIGTERM and SIGKILL when ranks are stopped")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-prefix", a.no_prefix, "do not prefix output lines with '[rank N] '");
  // Internal: the launcher starts its ranks as this same executable with --worker.
  app.add_flag("--worker", a.worker, "")->group("");
  app.footer(
      "--exec PROGRAM [ARGS...] runs PROGRAM in every rank instead of training; it must come "
      "last.\nEvery rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, "
      "MASTER_PORT, TRIAD_JOB_TOKEN.\nAcross nodes, under srun with one task per rank, and under "
      "mpirun, export a shared token first:\n  export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | "
      "xxd -p)");

  std::reverse(ours.begin(), ours.end());  // CLI11 takes the vector form reversed
  try {
    app.parse(ours);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUserError;
  }
  a.nproc_given = app.count("--nproc-per-node") > 0;
  a.nnodes_given = app.count("--nnodes") > 0;
  a.node_rank_given = app.count("--node-rank") > 0;

  if (exec_seen) {
    if (a.exec.empty())
      throw UserError("--exec needs a program: triad-launch [options] --exec PROGRAM [ARGS...]");
    if (!a.config_path.empty() || !a.sets.empty() || a.dry_run || a.quiet || a.worker)
      throw UserError("--exec runs '" + a.exec[0] +
                      "' instead of training, so a CONFIG, --set, --dry-run or --quiet before "
                      "it has no meaning; drop them (or drop --exec to train)");
  } else if (a.config_path.empty()) {
    throw UserError(
        "no CONFIG given; use 'triad-launch [options] CONFIG' to train or 'triad-launch "
        "[options] --exec PROGRAM [ARGS...]' to run a program per rank (see --help)");
  }
  return std::nullopt;
}

}  // namespace triad::launch
