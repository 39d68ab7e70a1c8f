// triad-launch: reads a YAML config, validates it, and runs the training job.
//   triad-launch [--nproc-per-node N] [--nnodes M --node-rank R --master-addr A --master-port P]
//                CONFIG [--set key.path=value ...] [--dry-run]
// One process for now; the flags of the multi-process launcher are accepted so scripts keep
// working when it arrives.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <numeric>

#include "triad/core/config.hpp"
#include "triad/core/engine.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugin_loader.hpp"

namespace {

std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

int run(int argc, char** argv) {
  CLI::App app{"triad-launch: train a GPT from a YAML config"};
  std::string config_path;
  std::vector<std::string> sets;
  bool dry_run = false, quiet = false;
  int nproc_per_node = 1, nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1";
  app.add_option("config", config_path, "YAML config file")->required();
  app.add_option("--set", sets, "override a key: --set training.train_iters=10 (repeatable)");
  app.add_flag("--dry-run", dry_run,
               "print the resolved config, parameter count, memory per rank and FLOPs per step");
  app.add_flag("-q,--quiet", quiet, "no per-step lines, only the summary");
  app.add_option("--nproc-per-node", nproc_per_node, "ranks to start on this node")
      ->check(CLI::PositiveNumber);
  app.add_option("--nnodes", nnodes, "number of nodes")->check(CLI::PositiveNumber);
  app.add_option("--node-rank", node_rank, "this node's index")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", master_addr, "address of node 0 (rendezvous)");
  app.add_option("--master-port", master_port, "rendezvous port")->check(CLI::Range(1, 65535));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : triad::kExitUserError;
  }
  if (nproc_per_node * nnodes != 1)
    throw triad::UserError("--nproc-per-node " + std::to_string(nproc_per_node) + " x --nnodes " +
                           std::to_string(nnodes) +
                           " asks for several ranks; this build trains in one process (the "
                           "distributed runtime is not in it yet); use --nproc-per-node 1");

  triad::Config cfg = triad::load_config(config_path, sets, /*world_size=*/1);
  if (dry_run) {
    // Resolve the plugin choice too, so a dry run catches a bad plugin name or parameter.
    triad::PluginLoader loader;
    auto plugin = loader.load("attention", cfg.attention.name);
    triad::resolve_params(plugin->descriptor(), cfg.attention.params, cfg.attention.yaml_path);
    const triad::RunPlan p = triad::plan_run(cfg);
    std::cout << "# resolved config (" << config_path << ")\n" << triad::to_yaml(cfg) << "\n";
    std::cout << "parameters:          " << p.num_params << "\n";
    std::cout << "memory per rank:     " << mib(p.total_bytes()) << " (parameters "
              << mib(p.param_bytes) << ", gradients " << mib(p.grad_bytes) << ", Adam moments "
              << mib(p.optimizer_bytes) << ", activations " << mib(p.activation_bytes) << ")\n";
    std::printf("FLOPs per step:      %.4g (%.4g per token)\n", p.flops_per_step,
                p.flops_per_step / (double(cfg.training.global_batch_size) * cfg.model.seq_length));
    return 0;
  }
  triad::TrainOptions opts;
  opts.quiet = quiet;
  const triad::RunResult r = triad::train(cfg, opts);
  // Summary: throughput excludes step 1 (warm-up: first touches of every buffer).
  const auto& s = r.steps;
  double tok = 0, tfl = 0, ms = 0;
  size_t n = 0;
  for (size_t i = s.size() > 1 ? 1 : 0; i < s.size(); ++i, ++n) {
    tok += s[i].tokens_per_s;
    tfl += s[i].tflops;
    ms += s[i].ms;
  }
  spdlog::info("done: {} steps | loss {:.4f} -> {:.4f} | {:.1f} ms/step | {:.0f} tokens/s | "
               "{:.3f} TFLOP/s | peak {} | output {}",
               s.size(), s.front().loss, s.back().loss, ms / n, tok / n, tfl / n,
               mib(s.back().peak_bytes), r.output_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_pattern("[%H:%M:%S] %v");
  try {
    return run(argc, argv);
  } catch (const triad::UserError& e) {
    std::fprintf(stderr, "triad-launch: error: %s\n", e.what());
    return triad::kExitUserError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "triad-launch: internal error: %s\n", e.what());
    return 1;
  }
}
