// triad-estimate CONFIG [--world N] [--set key=value ...] [--memory-per-device SIZE] [--json]:
// the memory one rank of the config's layout needs, under every ZeRO stage 0-3, estimated
// without allocating (triad/core/model/memory_plan.hpp: the engine's allocations replayed). Prints
// one table per pipeline stage (rows: ZeRO stages 0-3, the configured one marked; columns:
// parameters, gradients, optimizer states, activations, attention workspace, communication buffers
// and windows, the total per rank, and the ZeRO paper's model-state formula), then the activations
// and total under each training.recompute_granularity (none, selective, full), and ends with one
// line: whether the configured run fits the memory limit per rank, and when it does not, the
// cheapest change that does (a higher ZeRO stage, a smaller micro-batch, recomputation).
// The limit: --memory-per-device, else what this machine has available (MemAvailable, or the
// memory cgroup's limit where lower) shared by the job's ranks.
// Exit 0 fits, 1 does not fit, 2 bad input (one line on stderr).
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/train/engine.hpp"

namespace {

using triad::MemoryEstimate;

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// The configured ZeRO stage under each recompute granularity: activations and total per rank,
// each the largest over the pipeline stages.
struct ByRecompute {
  std::string granularity;
  size_t activations = 0, peak = 0;
};

std::vector<ByRecompute> by_recompute(const triad::Config& cfg, int world, bool with_host) {
  std::vector<ByRecompute> out;
  for (const std::string g : {"none", "selective", "full"}) {
    triad::Config alt = cfg;
    alt.training.recompute_granularity = g;
    alt.training.checkpoint_activations = g == "full";
    alt.training.recompute_activations = g == "selective";
    const std::vector<MemoryEstimate> est = triad::estimate_memory(alt, world);
    ByRecompute r{g};
    for (const MemoryEstimate& e : est) r.activations = std::max(r.activations, e.activations);
    r.peak = triad::peak_per_rank(est, with_host);
    out.push_back(r);
  }
  return out;
}

nlohmann::json to_json(const MemoryEstimate& e) {
  return {{"zero_stage", e.zero_stage},
          {"elements", e.elements},
          {"params", e.params},
          {"grads", e.grads},
          {"optimizer", e.optimizer},
          {"activations", e.activations},
          {"workspace", e.workspace},
          {"buffers", e.buffers()},
          {"grad_windows", e.grad_windows},
          {"param_windows", e.param_windows},
          {"pipeline_sends", e.pipeline_sends},
          {"tensor_exchange", e.tensor_exchange},
          {"context_exchange", e.context_exchange},
          {"scalars", e.scalars},
          {"step", e.step()},
          {"setup", e.setup},
          {"export_hf", e.export_hf},
          {"host", e.host},
          {"total", e.total()},
          {"peak_phase", e.peak_phase()},
          {"paper_model_states", e.paper_model_states},
          {"paper_formula", e.paper_formula}};
}

triad::Config load(const std::string& path, const std::vector<std::string>& sets, int world,
                   bool world_given) {
  try {
    return triad::load_config(path, sets, world);
  } catch (const triad::UserError& e) {
    const std::string m = e.what();
    if (world_given || m.find("world size") == std::string::npos) throw;
    throw triad::UserError(m + " (triad-estimate --world N: the job's ranks, default 1)");
  }
}

// What run() decided: this rank's need against the limit, and what to do about it.
struct Verdict {
  size_t need = 0, limit = 0;
  std::string limit_text;
  bool fits = false, with_host = false;
  std::optional<triad::MemoryFix> fix;
  std::vector<ByRecompute> recompute;
};

// Per ZeRO stage, per pipeline stage.
using ZeroStages = std::array<std::vector<MemoryEstimate>, 4>;

int print_json(const std::string& path, int world, const triad::Config& cfg, const ZeroStages& all,
               const Verdict& v) {
  const auto& par = cfg.parallel;
  const int configured = cfg.zero_optimization.stage;
  const size_t need = v.need, limit = v.limit;
  const bool fits = v.fits, with_host = v.with_host;
  const std::vector<ByRecompute>& recompute = v.recompute;
  const std::optional<triad::MemoryFix>& fix = v.fix;
  nlohmann::json j{{"config", path},
                   {"world", world},
                   {"tensor_model_parallel_size", par.tensor_model_parallel_size},
                   {"pipeline_model_parallel_size", par.pipeline_model_parallel_size},
                   {"data_parallel_size", par.data_parallel_size},
                   {"context_parallel_size", par.context_parallel_size},
                   {"context_parallel_method", par.context_parallel_method},
                   {"zero_shards", triad::zero_shards(par)},
                   {"configured_stage", configured},
                   {"peak_per_rank", need},
                   {"limit_bytes", limit},
                   {"fits", fits},
                   {"fix", nullptr},
                   {"recompute_granularity", cfg.training.recompute_granularity},
                   {"by_recompute", nlohmann::json::object()},
                   {"zero_stages", nlohmann::json::array()}};
  for (const ByRecompute& r : recompute)
    j["by_recompute"][r.granularity] = {{"activations", r.activations}, {"peak", r.peak}};
  for (int s = 0; s < 4; ++s) {
    nlohmann::json stages = nlohmann::json::array();
    for (const MemoryEstimate& e : all[size_t(s)]) stages.push_back(to_json(e));
    j["zero_stages"].push_back({{"stage", s},
                                {"peak_per_rank", triad::peak_per_rank(all[size_t(s)], with_host)},
                                {"pipeline_stages", stages}});
  }
  if (fix) j["fix"] = {{"text", fix->text}, {"sets", fix->sets}, {"bytes", fix->bytes}};
  std::cout << j.dump(2) << std::endl;
  return fits ? 0 : 1;
}

// The table of every ZeRO stage for each pipeline stage.
void print_table(const std::string& path, int world, const triad::Config& cfg,
                 const ZeroStages& all) {
  const auto& par = cfg.parallel;
  const int configured = cfg.zero_optimization.stage;
  const int tp = par.tensor_model_parallel_size, pp = par.pipeline_model_parallel_size;
  const int cp = par.context_parallel_size;
  std::cout << "triad-estimate: " << path << " | world " << world << " = tp " << tp
            << (cp > 1 ? " x cp " + std::to_string(cp) : "") << " x pp " << pp << " x dp "
            << par.data_parallel_size
            << (par.sequence_parallel && tp > 1 ? " (sequence parallel)" : "")
            << (cp > 1 ? " (context parallel " + par.context_parallel_method + ")" : "")
            << " | micro-batch " << cfg.training.micro_batch_size << " x accumulation "
            << cfg.training.gradient_accumulation_steps << " | " << cfg.precision << " on "
            << cfg.device << " | pipeline " << cfg.pipeline.name << " | attention "
            << cfg.attention.name
            << (cfg.training.recompute_granularity != "none"
                    ? " | recompute " + cfg.training.recompute_granularity
                    : "")
            << "\n";
  std::cout << "memory per rank in MiB at the step's peak (buffers: ZeRO windows, pipeline send "
               "copies, tensor-parallel exchange"
            << (cp > 1 ? ", context attention's buffers" : "")
            << "); paper: the ZeRO paper's model states, N = dp "
            << (cp > 1 ? "x cp " + std::to_string(triad::zero_shards(par))
                       : std::to_string(par.data_parallel_size))
            << (world == 1 ? " (one process: nothing partitioned)" : "") << "\n";
  const std::vector<int> layers = triad::pipeline_partition(cfg);
  bool marked_setup = false, marked_export = false;
  int first = 0;
  for (int st = 0; st < pp; ++st) {
    const MemoryEstimate& e0 = all[0][size_t(st)];
    std::cout << "\n";
    if (pp > 1)
      std::cout << "pipeline stage " << st << " (layers " << first << "-"
                << first + layers[size_t(st)] - 1 << (st == 0 ? " + embedding" : "")
                << (st == pp - 1 ? " + head" : "") << "): ";
    first += layers[size_t(st)];
    std::cout << "Ψ = " << e0.elements << " parameters per rank\n";
    std::cout << "   ZeRO" << pad("params", 11) << pad("grads", 11) << pad("optimizer", 11)
              << pad("activations", 13) << pad("workspace", 11) << pad("buffers", 11)
              << pad("total", 13) << "   paper (model states)\n";
    for (int s = 0; s < 4; ++s) {
      const MemoryEstimate& e = all[size_t(s)][size_t(st)];
      std::string total = mib(e.total());
      const std::string phase = e.peak_phase();
      if (phase == "setup")
        total += " s", marked_setup = true;
      else if (phase == "export_hf")
        total += " e", marked_export = true;
      else
        total += "  ";
      std::cout << (s == configured ? " * " : "   ") << pad(std::to_string(s), 4)
                << pad(mib(e.params), 11) << pad(mib(e.grads), 11) << pad(mib(e.optimizer), 11)
                << pad(mib(e.activations), 13) << pad(mib(e.workspace), 11)
                << pad(mib(e.buffers()), 11) << pad(total, 13) << "   "
                << mib(size_t(e.paper_model_states)) << " (" << e.paper_formula << ")\n";
    }
  }
  std::cout << "\n* configured (zero_optimization.stage " << configured << ")";
  if (marked_setup)
    std::cout << "; s: the peak is at setup, when the whole weights exist before ZeRO "
                 "partitions them";
  if (marked_export) std::cout << "; e: the peak is output.export_hf gathering the model";
  std::cout << "\n";
}

// The recomputation line, the offload line and the verdict; the exit code.
int print_verdict(const triad::Config& cfg, const std::vector<MemoryEstimate>& mine,
                  const Verdict& v) {
  const int configured = cfg.zero_optimization.stage;
  const size_t need = v.need, limit = v.limit;
  const bool with_host = v.with_host;
  const std::optional<triad::MemoryFix>& fix = v.fix;
  const std::string& limit_text = v.limit_text;
  std::cout << "training.recompute_granularity at ZeRO stage " << configured
            << " (activations / total per rank, MiB):";
  for (const ByRecompute& r : v.recompute)
    std::cout << (r.granularity == "none" ? " " : ", ") << r.granularity
              << (r.granularity == cfg.training.recompute_granularity ? "*" : "") << " "
              << mib(r.activations) << " / " << mib(r.peak);
  std::cout << "\n";
  if (cfg.zero_optimization.offload_optimizer.device == "cpu") {
    size_t host = 0;
    for (const MemoryEstimate& e : mine) host = std::max(host, e.host);
    std::cout << "offload_optimizer: at stages 1-3 the optimizer states are on the host "
                 "(optimizer column 0): "
              << triad::memory_text(double(host))
              << " per rank of Adam moments, fp32 master weights and gradients of the shard"
              << (with_host ? ", counted in the need below (the same memory on a CPU run)"
                            : ", not in the device totals")
              << "\n";
  }
  if (v.fits) {
    std::cout << "fits: " << triad::memory_text(double(need)) << " per rank at ZeRO stage "
              << configured << ", limit " << triad::memory_text(double(limit)) << " per rank ("
              << limit_text << ")" << std::endl;
    return 0;
  }
  std::cout << "does not fit: " << triad::memory_text(double(need)) << " per rank at ZeRO stage "
            << configured << " > limit " << triad::memory_text(double(limit)) << " per rank ("
            << limit_text << "); ";
  if (fix) {
    std::cout << "cheapest change that fits: " << fix->text << ", "
              << triad::memory_text(double(fix->bytes)) << " per rank:";
    for (const std::string& set : fix->sets) std::cout << " --set " << set;
    std::cout << std::endl;
  } else {
    std::cout << "no higher ZeRO stage, smaller micro-batch or activation checkpointing fits: "
                 "use more ranks (tensor or pipeline parallelism) or a smaller model"
              << std::endl;
  }
  return 1;
}

int run(const std::string& path, int world, bool world_given, const std::vector<std::string>& sets,
        const std::string& memory, bool json) {
  const triad::Config cfg = load(path, sets, world, world_given);
  const int configured = cfg.zero_optimization.stage;
  const auto all = triad::estimate_memory_zero_stages(cfg, world);
  const std::vector<MemoryEstimate>& mine = all[size_t(std::clamp(configured, 0, 3))];
  // A CPU run's offloaded optimizer state (host device) lives in the same memory.
  const bool with_host = cfg.device == "cpu";
  Verdict v;
  v.with_host = with_host;
  v.need = triad::peak_per_rank(mine, with_host);
  size_t& limit = v.limit;
  std::string& limit_text = v.limit_text;
  if (!memory.empty()) {
    limit = triad::parse_bytes(memory, "--memory-per-device");
    limit_text = "--memory-per-device " + memory;
  } else {
    std::string how;
    const size_t host = triad::host_memory_available(&how);
    if (host == 0)
      throw triad::UserError(
          "cannot tell how much memory this machine has available (no MemAvailable in "
          "/proc/meminfo); give --memory-per-device");
    limit = host / size_t(world);
    limit_text = how + " " + triad::memory_text(double(host)) +
                 (world > 1 ? " shared by the job's " + std::to_string(world) + " ranks" : "") +
                 (cfg.device == "cuda" ? "; for GPU memory give --memory-per-device" : "");
  }
  v.fits = v.need <= limit;
  if (!v.fits) v.fix = triad::cheapest_memory_fix(cfg, world, limit);
  v.recompute = by_recompute(cfg, world, with_host);
  if (json) return print_json(path, world, cfg, all, v);
  print_table(path, world, cfg, all);
  return print_verdict(cfg, mine, v);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Estimates the memory per rank of a config's layout under ZeRO stages 0-3 and says whether "
      "it fits."};
  std::string config, memory;
  int world = 1;
  std::vector<std::string> sets;
  bool json = false;
  app.add_option("config", config, "YAML config file")->required();
  CLI::Option* world_opt =
      app.add_option("--world", world, "the job's ranks (tp x cp x pp x dp); default 1")
          ->check(triad::cli::at_least(1));
  app.add_option("--set", sets, "override a key: --set zero_optimization.stage=2 (repeatable)")
      ->allow_extra_args(false);  // one value each: `--set k=v CONFIG` leaves CONFIG positional
  app.add_option("--memory-per-device", memory,
                 "the limit per rank, e.g. 80GiB (default: this machine's available memory "
                 "shared by the ranks)");
  app.add_flag("--json", json, "print the estimates as JSON");
  return triad::cli::run_main("triad-estimate", app, [&] {
    triad::cli::parse(app, argc, argv);
    return run(config, world, world_opt->count() > 0, sets, memory, json);
  });
}
