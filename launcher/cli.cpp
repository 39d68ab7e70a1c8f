// Command-line parsing. Everything after --exec belongs to the program, so argv is split
// there before CLI11 sees it (a program's own --set or -q must not be taken as ours).
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "triad/core/cli.hpp"
#include "triad/core/error.hpp"

namespace triad::launch {

namespace {

// CLI11's own checks word a bad value as "Value 0 not in range 0.000000 to 1.797...e308"; these
// say what the flag takes in words. CLI11 prefixes the flag's name ("--nproc-per-node: ...").
CLI::Validator whole_number(long long lo, long long hi, const std::string& words,
                            const std::string& desc) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        long long v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        const bool whole = end == text.data() + text.size() && !text.empty();
        if (ec == std::errc() && whole && v >= lo && v <= hi) return "";
        if (whole && hi == INT_MAX && text[0] != '-' &&
            (ec == std::errc::result_out_of_range || v > hi))
          return "'" + text + "' is too large; give " + words;
        return "'" + text + "' is not " + words;
      },
      desc);
}

// Seconds up to a week: longer is no bound, and past what milliseconds count. A bound that may
// not be 0 is at least a millisecond (0.0001 would round to 0 ms, which turns a watch off).
CLI::Validator seconds(bool zero_ok) {
  const std::string words = zero_ok ? "a number of seconds from 0 to 604800 (a week)"
                                    : "a number of seconds from 0.001 to 604800 (a week)";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) &&
            v >= (zero_ok ? 0 : 0.001) && v <= 604800)
          return "";
        return "'" + text + "' is not " + words;
      },
      zero_ok ? "NONNEGATIVE" : "POSITIVE");
}

CLI::Validator one_of(const std::vector<std::string>& names) {
  std::string list, set;
  for (const auto& n : names) {
    list += (list.empty() ? "" : ", ") + n;
    set += (set.empty() ? "" : ",") + n;
  }
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        if (std::find(names.begin(), names.end(), text) != names.end()) return "";
        return "'" + text + "' is not one of " + list;
      },
      "{" + set + "}");
}

// A CLI11 error as one line: "--nproc-per-node: '0' is not a whole number of at least 1".
std::string one_line(std::string msg) {
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  while (!msg.empty() && msg.back() == ' ') msg.pop_back();
  if (!msg.empty() && msg[0] != '-')
    msg[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(msg[0])));
  return msg;
}

// What the launch runs: a CONFIG, --megatron-args, or a program (--exec), exactly one, and
// the flags that go with each.
void check_what_runs(const LaunchArgs& a, bool exec_seen) {
  if (exec_seen) {
    if (a.exec.empty())
      throw UserError("--exec needs a program: triad-launch [options] --exec PROGRAM [ARGS...]");
    if (!a.config_path.empty() || !a.sets.empty() || a.dry_run || a.quiet || a.worker ||
        !a.deepspeed_config.empty() || !a.megatron_args.empty())
      throw UserError("--exec runs '" + a.exec[0] +
                      "' instead of training, so a CONFIG, --megatron-args, --set, "
                      "--deepspeed_config, --dry-run or --quiet before "
                      "it has no meaning; drop them (or drop --exec to train)");
  } else if (!a.config_path.empty() && !a.megatron_args.empty()) {
    throw UserError("both a CONFIG ('" + a.config_path +
                    "') and --megatron-args are given; give one of them (triad-config "
                    "from-megatron prints the YAML the arguments make)");
  } else if (a.config_path.empty() && a.megatron_args.empty()) {
    throw UserError(
        "no CONFIG given; use 'triad-launch [options] CONFIG' (or --megatron-args \"ARGS\") to "
        "train or 'triad-launch "
        "[options] --exec PROGRAM [ARGS...]' to run a program per rank (see --help)");
  }
  if (a.strict && a.megatron_args.empty())
    throw UserError(
        "--strict checks what --megatron-args carries over, and no --megatron-args is given; "
        "drop --strict (a YAML CONFIG's unknown keys are always refused)");
}

}  // namespace

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
  app.add_option("--set", a.sets, "override a key: --set training.train_iters=10 (repeatable)")
      ->allow_extra_args(false);  // one value each: `--set k=v CONFIG` leaves CONFIG positional
  app.add_option("--megatron-args", a.megatron_args,
                 "Megatron(-DeepSpeed)'s arguments in one quoted text, instead of a CONFIG (see "
                 "triad-config from-megatron)");
  app.add_flag("--strict", a.strict,
               "with --megatron-args: refuse any argument not carried over (an argument Triad "
               "does not know, a feature it lacks), as triad-config from-megatron --strict");
  app.add_option("--deepspeed_config,--deepspeed-config", a.deepspeed_config,
                 "DeepSpeed's ds_config.json, read into the config (deepspeed_config: in YAML); "
                 "a key it gives with another value than the YAML is an error");
  app.add_flag("--dry-run", a.dry_run,
               "print the resolved config, parameter count, memory per rank and FLOPs per step");
  app.add_flag("-q,--quiet", a.quiet, "no per-step lines, only the summary");
  app.add_option("--nproc-per-node,--nproc_per_node", a.nproc_per_node,
                 "ranks to start on this node (torchrun's spelling too)")
      ->check(whole_number(1, INT_MAX, "a whole number of at least 1", "POSITIVE"));
  app.add_option("--nnodes", a.nnodes, "number of nodes")
      ->check(whole_number(1, INT_MAX, "a whole number of at least 1", "POSITIVE"));
  app.add_option("--node-rank", a.node_rank, "this node's index, 0..nnodes-1")
      ->check(whole_number(0, INT_MAX, "a whole number of at least 0", "NONNEGATIVE"));
  app.add_option("--master-addr", a.master_addr,
                 "address of node 0, where the rendezvous runs (default 127.0.0.1; under "
                 "SLURM the first host of the job)");
  app.add_option("--master-port", a.master_port,
                 "rendezvous port (default 29500; a free one when this launcher runs the "
                 "whole job; 0: a free one)")
      ->check(whole_number(0, 65535, "a port number from 0 to 65535", "0..65535"));
  app.add_option("--scheduler", a.scheduler,
                 "where the layout comes from: auto (SLURM under srun, Open MPI under "
                 "mpirun, else the flags), none, slurm, mpi")
      ->check(one_of({"auto", "none", "slurm", "mpi"}));
  app.add_option("--rdzv-timeout", a.rdzv_timeout_s,
                 "seconds to wait for every node's launcher to arrive")
      ->capture_default_str()
      ->check(seconds(false));
  app.add_option("--heartbeat-timeout", a.heartbeat_timeout_s,
                 "seconds of silence after which a node's launcher is presumed dead")
      ->capture_default_str()
      ->check(seconds(false));
  app.add_option("--collective-timeout", a.collective_timeout_s,
                 "seconds one collective or point-to-point wait of a rank may take before the "
                 "job is stopped, naming what it waited for (training.collective_timeout; "
                 "default 300)")
      ->check(seconds(false));
  app.add_option("--profile-steps", a.profile_steps,
                 "record a step trace of these steps (3-4, or 3,5) into OUTPUT/trace.json "
                 "(training.profile_steps; training.profile_dir for another folder); read it "
                 "with tools/triad-trace");
  app.add_option("--tensorboard-dir", a.tensorboard_dir,
                 "write TensorBoard event files (Megatron's scalar tags) into this folder "
                 "(logging.tensorboard_dir; logging.tensorboard_log_interval for how often)");
  app.add_flag("--resume", a.resume,
               "continue from the newest checkpoint in checkpoint.load (or checkpoint.save), or "
               "from the start when there is none; metrics are appended (checkpoint.resume)");
  app.add_flag("--overwrite", a.overwrite,
               "train into an output.dir that already holds a run, replacing its metrics "
               "(output.overwrite)");
  app.add_option("--stop-grace", a.stop_grace_s,
                 "seconds the ranks (or the one process) get after a SIGTERM/SIGINT to finish "
                 "the step and save a checkpoint before they are killed")
      ->capture_default_str()
      ->check(seconds(true));
  app.add_flag("--no-prefix", a.no_prefix, "do not prefix output lines with '[rank N] '");
  // Internal: the launcher starts its ranks as this same executable with --worker.
  app.add_flag("--worker", a.worker, "")->group("");
  app.footer(
      "--exec PROGRAM [ARGS...] runs PROGRAM in every rank instead of training; it must come "
      "last.\nEvery rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, "
      "MASTER_PORT, TRIAD_JOB_TOKEN.\nAcross nodes, under srun with one task per rank, and under "
      "mpirun, export a shared token first:\n  export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | "
      "xxd -p)");

  const std::vector<std::string> given = ours;  // app.parse consumes `ours`
  std::reverse(ours.begin(), ours.end());       // CLI11 takes the vector form reversed
  try {
    app.parse(ours);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, like every other error of the launcher (CLI11 adds "Run with --help ...").
    std::string msg = one_line(triad::cli::reworded(e.what()));
    // "--nproc-per-node: 1 required INT missing": the flag came last, without its value.
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && msg.find(" missing") != std::string::npos)
      msg = msg.substr(0, msg.find(':')) + " needs a value";
    // Other launchers' names for the ranks per node (mpirun's -n, DeepSpeed's --num_gpus).
    if (dynamic_cast<const CLI::ExtrasError*>(&e))
      for (const char* other : {"-n", "-np", "--nproc", "--num_gpus", "--num-gpus"})
        if (std::find(given.begin(), given.end(), other) != given.end()) {
          msg += std::string("; the ranks per node are --nproc-per-node N, not ") + other;
          break;
        }
    std::fprintf(stderr, "triad-launch: error: %s; see triad-launch --help\n", msg.c_str());
    return kExitUserError;
  }
  triad::cli::refuse_empty_values(app);
  a.nproc_given = app.count("--nproc-per-node") > 0;
  a.nnodes_given = app.count("--nnodes") > 0;
  a.node_rank_given = app.count("--node-rank") > 0;

  check_what_runs(a, exec_seen);
  if (!a.deepspeed_config.empty() && !exec_seen)
    a.sets.push_back("deepspeed_config=" + a.deepspeed_config);
  if (a.collective_timeout_s && !exec_seen)  // last, so it wins over a --set of the same key
    a.sets.push_back("training.collective_timeout=" + std::to_string(*a.collective_timeout_s));
  if (a.profile_steps && !exec_seen) a.sets.push_back("training.profile_steps=" + *a.profile_steps);
  if (a.tensorboard_dir && !exec_seen)
    a.sets.push_back("logging.tensorboard_dir=" + *a.tensorboard_dir);
  if (a.resume && !exec_seen) a.sets.push_back("checkpoint.resume=true");
  if (a.overwrite && !exec_seen) a.sets.push_back("output.overwrite=true");
  return std::nullopt;
}

}  // namespace triad::launch
