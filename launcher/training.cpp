#include "training.hpp"

#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "triad/core/config/config.hpp"
#include "triad/core/config/megatron.hpp"
#include "triad/core/crash_signals.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/dist/dist_env.hpp"
#include "triad/core/dist/process_groups.hpp"
#include "triad/core/dist/rank_status.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/train/checkpoint.hpp"
#include "triad/core/train/engine.hpp"
#include "triad/core/units.hpp"

namespace triad::launch {

namespace {

int train(const LaunchArgs& a, const Config& cfg, const DistEnv& dist) {
  TrainOptions opts;
  opts.quiet = a.quiet;
  opts.dist = dist;
  const RunResult r = triad::train(cfg, opts);
  // A run stopped by a signal ends with 128 + the signal (it did not finish), one stopped by
  // training.exit_interval with 0 (it did what was asked), each rank alike.
  const int code = r.stop_signal ? 128 + r.stop_signal : 0;
  if (r.stopped_at && dist.rank == 0)
    spdlog::info(
        "stopped after step {} of {} ({}); {}", r.stopped_at, cfg.training.train_iters,
        r.stop_signal ? "on " + std::string(r.stop_signal == SIGINT ? "SIGINT" : "SIGTERM")
                      : "training.exit_interval " + std::to_string(cfg.training.exit_interval),
        r.checkpoint.empty()
            ? std::string("no checkpoint.save is set, so nothing was saved")
            : "checkpoint saved: " + r.checkpoint + " (continue with --resume or checkpoint.load)");
  // Every rank sees the same loss; one summary is enough.
  const auto& s = r.steps;
  if (dist.rank != 0 || s.empty()) return code;
  // Summary: throughput excludes step 1 (warm-up: first touches of every buffer).
  double tok = 0, tfl = 0, ms = 0;
  size_t n = 0;
  for (size_t i = s.size() > 1 ? 1 : 0; i < s.size(); ++i, ++n) {
    tok += s[i].tokens_per_s;
    tfl += s[i].tflops;
    ms += s[i].ms;
  }
  spdlog::info(
      "done: {} steps | loss {:.4f} -> {:.4f}{} | {:.1f} ms/step | {:.0f} tokens/s | "
      "{:.3f} TFLOP/s | peak {} | output {}",
      s.size(), s.front().loss, s.back().loss,
      std::isfinite(r.valid_loss) ? fmt::format(" | validation loss {:.4f}", r.valid_loss)
                                  : std::string(),
      ms / double(n), tok / double(n), tfl / double(n), mib(r.peak_bytes), r.output_dir);
  return code;
}

}  // namespace

void check_transport(const Config& cfg, int world_size) {
  // One process never connects: the default transport without parameters (which a build
  // without UCX lacks) has nothing to check there. A transport named otherwise is loaded even
  // then, so that a misspelt name is refused before a run that only grows to several ranks later.
  if (world_size == 1 && cfg.transport.params.empty() &&
      cfg.transport.name == Config{}.transport.name)
    return;
  PluginLoader loader;
  CoreServices services(1, nullptr);
  auto plugin = loader.load("transport", cfg.transport.name);
  Transport transport(
      plugin, resolve_params(plugin->descriptor(), cfg.transport.params, cfg.transport.yaml_path),
      services.c_services());
  check_context_parallel_transport(transport, cfg.parallel.context_parallel_size,
                                   cfg.parallel.context_parallel_method);
}

Config load_launch_config(const LaunchArgs& a, int world_size) {
  if (a.megatron_args.empty()) return load_config(a.config_path, a.sets, world_size);
  return load_megatron_config(split_arguments(a.megatron_args), a.sets, world_size, a.strict);
}

void log_import_notes(const Config& cfg) {
  for (const std::string& note : cfg.import_notes) spdlog::info("{}", note);
}

int print_dry_run(const LaunchArgs& a, int world_size, int local_ranks) {
  Config cfg = load_launch_config(a, world_size);
  // Resolve the plugin choices too, so a dry run catches a bad plugin name, parameter or plan.
  const std::vector<std::string> plugin_notes = preflight(cfg);
  check_transport(cfg, world_size);
  const RunPlan p = plan_run(cfg);
  const auto& par = cfg.parallel;
  std::cout << "# resolved config ("
            << (a.megatron_args.empty() ? a.config_path : "--megatron-args") << ")\n"
            << to_yaml(cfg) << "\n";
  const int cp = par.context_parallel_size;
  std::cout << "layout:              world " << world_size << " = tp "
            << par.tensor_model_parallel_size << (cp > 1 ? " x cp " + std::to_string(cp) : "")
            << " x pp " << par.pipeline_model_parallel_size << " x dp " << par.data_parallel_size
            << (par.sequence_parallel && par.tensor_model_parallel_size > 1 ? ", sequence parallel"
                                                                            : "")
            << (cp > 1 ? ", context parallel " + par.context_parallel_method + " (" +
                             std::to_string(cfg.model.seq_length / cp) +
                             " tokens per rank; ZeRO over dp x cp = " +
                             std::to_string(zero_shards(par)) + ")"
                       : "")
            << "\n";
  std::cout << "parameters:          " << p.num_params << " (vocabulary " << cfg.model.vocab_size
            << " padded to " << p.padded_vocab_size << ")\n";
  std::cout << "parameters per rank: " << p.params_per_rank
            << (p.padded_vocab_size != cfg.model.vocab_size
                    ? " (stage 0's tensor slice, its vocabulary rows padded)"
                    : " (stage 0's tensor slice)")
            << "\n";
  if (par.pipeline_model_parallel_size > 1) {
    int first = 0;
    for (size_t st = 0; st < p.stage_layers.size(); ++st) {
      const int v = par.virtual_pipeline_model_parallel_size, pp = par.pipeline_model_parallel_size;
      std::string runs;  // the stage's layers; with interleaving one run per model chunk
      if (v == 1) {
        runs = std::to_string(first) + "-" + std::to_string(first + p.stage_layers[st] - 1);
      } else {
        const int cl = cfg.model.num_layers / (pp * v);
        for (int c = 0; c < v; ++c) {
          const int f = (c * pp + int(st)) * cl;
          runs += (c ? ", " : "") + std::to_string(f) + "-" + std::to_string(f + cl - 1);
        }
      }
      std::cout << "  stage " << st << ": layers " << runs << (st == 0 ? " + embedding" : "")
                << (st + 1 == p.stage_layers.size() ? " + head" : "") << ", " << p.stage_params[st]
                << " parameters per rank, " << mib(p.stage_bytes[st]) << " per rank\n";
      first += p.stage_layers[st];
    }
  }
  // The largest stage's: what every rank must have room for.
  size_t top = 0;
  for (size_t st = 1; st < p.stage_memory.size(); ++st)
    if (p.stage_memory[st].total() > p.stage_memory[top].total()) top = st;
  const MemoryEstimate& m = p.stage_memory[top];
  std::cout << "memory per rank:     " << mib(m.total())
            << (p.stage_memory.size() > 1 ? " at stage " + std::to_string(top) : "")
            << " (parameters " << mib(m.params) << ", gradients " << mib(m.grads)
            << ", Adam moments " << mib(m.optimizer) << ", activations " << mib(m.activations)
            << ", workspace and buffers " << mib(m.workspace + m.buffers())
            << (m.peak_phase() == std::string("step") ? ""
                                                      : std::string("; peak at ") + m.peak_phase())
            << ")\n";
  std::printf("FLOPs per step:      %.4g (%.4g per token)\n", p.flops_per_step,
              p.flops_per_step / (double(cfg.training.global_batch_size) * cfg.model.seq_length));
  if (par.tensor_model_parallel_size > 1) {
    const TensorTraffic& t = p.tensor_traffic;
    std::printf(
        "tensor-parallel traffic per step per rank: %.0f B (activations %.0f, logits %.0f, "
        "replicated grads %.0f; Megatron's formula, ring accounting)\n",
        t.total(), t.activations, t.logits, t.replicated_grads);
  }
  for (const std::string& note : cfg.import_notes)
    std::cout << "no effect:           " << note << "\n";
  for (const std::string& note : plugin_notes) std::cout << "no effect:           " << note << "\n";
  // The verdict last: whether this build and this machine would start the run.
  std::string refusal = runnable_refusal(cfg);
  if (refusal.empty() && cfg.device == "cuda" && cuda_devices_visible() == 0)
    refusal = "device 'cuda': no CUDA GPU is visible on this machine";
  if (refusal.empty()) refusal = memory_refusal_here(cfg, world_size, local_ranks);
  std::cout << "runs here:           " << (refusal.empty() ? "yes" : "no: " + refusal) << "\n";
  return 0;
}

std::string memory_refusal_here(const Config& cfg, int world_size, int local_ranks) {
  // The training device's memory is the host's on the CPU; a GPU's is checked by its rank (engine).
  if (cfg.device != "cpu") return "";
  const size_t available = host_memory_available();
  if (available == 0) return "";  // unknown: nothing to compare with
  return memory_refusal(cfg, world_size, available / size_t(std::max(1, local_ranks)));
}

void check_memory(const Config& cfg, int world_size, int local_ranks) {
  if (std::string refusal = memory_refusal_here(cfg, world_size, local_ranks); !refusal.empty())
    throw UserError(refusal);
}

void lock_run_folders(const Config& cfg, RunFolderLocks& locks) {
  locks.output.emplace("output.dir", cfg.output.dir);
  std::error_code ec;
  const std::string& save = cfg.checkpoint.save;
  if (!save.empty() && !std::filesystem::equivalent(save, cfg.output.dir, ec))
    locks.save.emplace("checkpoint.save", save);
}

// One process has no launcher to say how it ended: a crash says so in one line before the
// signal's default action ends it (exit 128 + the signal, and a core dump where enabled).
void say_crash(int sig) {
  for (const char* text : {"triad-launch: error: the run crashed with ", crash_signal_name(sig),
                           " (in the engine or a plugin; `triad-plugin-test KIND FILE` checks a "
                           "plugin)\n"})
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, text, std::strlen(text));
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int train_in_process(const LaunchArgs& a) {
  on_crash_signals(say_crash);
  // What the run would otherwise meet only after building the model: refused here, exit 2.
  const Config cfg = load_launch_config(a, 1);
  log_import_notes(cfg);
  for (const std::string& note : preflight(cfg)) spdlog::info("{}", note);
  check_runnable(cfg);
  check_transport(cfg, 1);
  // The checkpoint first: a --resume of a complete run ends here (exit 0, nothing written), and
  // another trainer's checkpoint folder is named as such.
  if (!check_checkpoint_to_load(cfg)) return 0;
  check_run_paths(cfg, /*writes_output=*/true);
  check_memory(cfg, 1, 1);
  RunFolderLocks locks;
  lock_run_folders(cfg, locks);
  return train(a, cfg, DistEnv{});
}

int train_as_worker(const LaunchArgs& a) {
  const DistEnv dist = DistEnv::from_environment();
  triad::attach_rank_status_from_env();  // the launcher's watch (rank_status.hpp)
  return train(a, load_launch_config(a, dist.world_size), dist);
}

}  // namespace triad::launch
