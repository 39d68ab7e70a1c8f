// The command line of triad-launch, parsed into one struct (cli.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace triad::launch {

struct LaunchArgs {
  // What each rank runs: training from a config, or (--exec) any program.
  std::string config_path;
  std::vector<std::string> sets;
  // --deepspeed_config FILE: a --set of deepspeed_config (DeepSpeed's JSON merged into the YAML).
  std::string deepspeed_config;
  // --megatron-args "ARGS": Megatron(-DeepSpeed)'s arguments instead of a CONFIG (the YAML that
  // triad-config from-megatron prints, never written).
  std::string megatron_args;
  // --strict: with --megatron-args, an argument not carried over is refused.
  bool strict = false;
  bool dry_run = false;
  bool quiet = false;
  std::vector<std::string> exec;  // PROGRAM ARGS...; empty: train
  bool worker = false;            // internal: this process is one rank of a launch

  // Layout; the *_given flags tell a default from an explicit value (schedulers own them).
  int nproc_per_node = 1;
  bool nproc_given = false;
  int nnodes = 1;
  bool nnodes_given = false;
  int node_rank = 0;
  bool node_rank_given = false;
  std::string master_addr;         // empty: not given
  std::optional<int> master_port;  // absent: not given
  std::string scheduler = "auto";  // auto | none | slurm | mpi

  double rdzv_timeout_s = 300;     // peers must arrive within this
  double heartbeat_timeout_s = 5;  // a launcher silent this long is presumed dead
  double stop_grace_s = 30;        // SIGTERM, then SIGKILL after this
  // Seconds a rank's collective or point-to-point wait may take (training.collective_timeout;
  // the flag is a --set of it, so the YAML key and the flag are one setting).
  std::optional<double> collective_timeout_s;
  // --profile-steps: a --set of training.profile_steps (the steps of the step trace).
  std::optional<std::string> profile_steps;
  // --tensorboard-dir: a --set of logging.tensorboard_dir (Megatron's --tensorboard-dir).
  std::optional<std::string> tensorboard_dir;
  // --resume / --overwrite: checkpoint.resume / output.overwrite set to true.
  bool resume = false, overwrite = false;
  bool no_prefix = false;
};

// Parses argv. Returns the exit status when parsing alone ends the program (--help: 0, a
// usage error: 2, after printing); otherwise fills args.
std::optional<int> parse_args(int argc, char** argv, LaunchArgs& args);

}  // namespace triad::launch
