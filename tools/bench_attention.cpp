// bench-attention: times the attention plugins side by side (naive, flash1, flash2 by
// default) over sequence lengths, head dims and masks, through the same loader and backend
// the engine uses. Per shape and plugin: forward and forward+backward time (median after a
// warm-up), FLOP/s (forward 4*B*H*T^2*D, halved when causal; backward 2.5x forward), the
// workspace each pass asks for (all the extra memory a plugin uses), and ratios to naive.
// Prints a markdown table, checks the product targets, and writes JSON with --json FILE.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> plugins{"naive", "flash1", "flash2"};
  std::vector<int> seq_lens{256, 512, 1024, 2048, 4096, 8192};
  std::vector<int> head_dims{64, 128};
  int batch = 1, heads = 8;
  int max_naive_T = 8192;
  int repeats = 3;
  int threads = 0;
  bool quick = false;
  std::vector<std::string> params;  // plugin.key=value
  std::string json_path;
};

struct Shape {
  int B, H, T, D;
  bool causal;
  double fwd_flops() const { return 4.0 * B * H * double(T) * T * D * (causal ? 0.5 : 1.0); }
};

struct Result {
  std::string plugin;
  Shape shape;
  double fwd_s = 0, fwdbwd_s = 0;
  size_t ws_fwd = 0, ws_bwd = 0;
  double max_diff_vs_naive = -1;  // max |out - naive out|, -1 if naive did not run
  size_t peak() const { return std::max(ws_fwd, ws_bwd); }
};

// A contiguous (B,H,T,D) fp32 tensor, or (B,H,T) for lse.
struct Tensor {
  std::vector<float> data;
  std::vector<int64_t> shape;
  DLTensor t{};
  explicit Tensor(std::vector<int64_t> s) : shape(std::move(s)) {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    data.assign(n, 0.f);
    t.data = data.data();
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
  }
  Tensor(const Tensor&) = delete;
};

struct Buffers {
  Tensor q, k, v, out, dout, dq, dk, dv, lse;
  explicit Buffers(const Shape& s)
      : q({s.B, s.H, s.T, s.D}),
        k({s.B, s.H, s.T, s.D}),
        v({s.B, s.H, s.T, s.D}),
        out({s.B, s.H, s.T, s.D}),
        dout({s.B, s.H, s.T, s.D}),
        dq({s.B, s.H, s.T, s.D}),
        dk({s.B, s.H, s.T, s.D}),
        dv({s.B, s.H, s.T, s.D}),
        lse({s.B, s.H, s.T}) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (Tensor* x : {&q, &k, &v, &dout})
      for (auto& e : x->data) e = normal(rng);
  }
};

// Page-aligned scratch the plugin asked for; touched on the warm-up run, not timed.
struct Workspace {
  std::unique_ptr<char[]> mem;
  size_t bytes = 0;
  explicit Workspace(size_t n) : mem(n ? new char[n + 4096] : nullptr), bytes(n) {}
  void* ptr() const {
    if (!mem) return nullptr;
    auto p = reinterpret_cast<uintptr_t>(mem.get());
    return reinterpret_cast<void*>((p + 4095) / 4096 * 4096);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::map<std::string, std::map<std::string, std::string>> parse_params(
    const std::vector<std::string>& items) {
  std::map<std::string, std::map<std::string, std::string>> out;
  for (const auto& it : items) {
    const auto dot = it.find('.'), eq = it.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot == 0 || eq < dot + 2)
      throw triad::UserError("--param '" + it +
                             "': expected plugin.key=value, e.g. flash2.block_q=32");
    out[it.substr(0, dot)][it.substr(dot + 1, eq - dot - 1)] = it.substr(eq + 1);
  }
  return out;
}

class Bench {
 public:
  explicit Bench(const Options& o) : opt_(o), services_(o.threads) {
    const auto params = parse_params(o.params);
    for (const auto& [name, _] : params)
      if (std::find(o.plugins.begin(), o.plugins.end(), name) == o.plugins.end())
        throw triad::UserError("--param names plugin '" + name + "', which is not benchmarked");
    for (const auto& name : o.plugins) {
      auto plugin = loader_.load("attention", name);
      auto it = params.find(name);
      const auto resolved = triad::resolve_params(
          plugin->descriptor(),
          it == params.end() ? std::map<std::string, std::string>{} : it->second,
          "attention (" + name + ")");
      backends_.push_back(
          std::make_unique<triad::AttentionBackend>(plugin, resolved, services_.c_services()));
    }
  }

  std::vector<Result> run() {
    std::vector<Result> results;
    for (int D : opt_.head_dims)
      for (bool causal : {false, true})
        for (int T : opt_.seq_lens) {
          const Shape s{opt_.batch, opt_.heads, T, D, causal};
          for (auto& r : measure_shape(s)) {
            std::fprintf(stderr, "  %-7s T=%-5d D=%-3d %-10s fwd %9.2f ms  fwd+bwd %9.2f ms\n",
                         r.plugin.c_str(), T, D, causal ? "causal" : "non-causal", r.fwd_s * 1e3,
                         r.fwdbwd_s * 1e3);
            results.push_back(r);
          }
        }
    return results;
  }

 private:
  // One plugin's calls on one shape, with the workspaces it asked for.
  struct Runner {
    triad::AttentionBackend* be;
    Result r;
    std::unique_ptr<Workspace> fws, bws;
    triad_attention_fwd_args_v1 fa{};
    triad_attention_bwd_args_v1 ba{};
    std::vector<double> tf, tfb;
    void fwd() { be->forward(fa); }
    void fwdbwd() {
      be->forward(fa);
      be->backward(ba);
    }
  };

  // Every plugin on shape s. Their timed runs are interleaved (a round of each in turn,
  // starting with a different plugin each round), so a slow spell of a shared machine lands on
  // all of them alike and the ratios stay meaningful.
  std::vector<Result> measure_shape(const Shape& s) {
    triad_attention_shape_v1 shape{};
    shape.batch = s.B, shape.heads = s.H, shape.seq_len = s.T, shape.head_dim = s.D;
    shape.causal = s.causal;
    shape.dtype = {kDLFloat, 32, 1};
    shape.device = {kDLCPU, 0};
    const float scale = 1.f / std::sqrt(static_cast<float>(s.D));
    Buffers b(s);
    std::vector<std::unique_ptr<Runner>> runners;
    for (auto& be : backends_) {
      if (be->name() == "naive" && s.T > opt_.max_naive_T) continue;
      be->check_supported(shape);
      auto x = std::make_unique<Runner>();
      x->be = be.get();
      x->r = Result{be->name(), s};
      be->workspace_size(shape, &x->r.ws_fwd, &x->r.ws_bwd);
      x->fws = std::make_unique<Workspace>(x->r.ws_fwd);
      x->bws = std::make_unique<Workspace>(x->r.ws_bwd);
      x->fa = {&b.q.t,   &b.k.t, &b.v.t,        &b.out.t,   &b.lse.t,
               s.causal, scale,  x->fws->ptr(), x->r.ws_fwd};
      x->ba = {&b.q.t,  &b.k.t,  &b.v.t,   &b.out.t, &b.lse.t,      &b.dout.t,  &b.dq.t,
               &b.dk.t, &b.dv.t, s.causal, scale,    x->bws->ptr(), x->r.ws_bwd};
      runners.push_back(std::move(x));
    }
    // Warm-up (first touch of the workspaces, caches, thread pool), which also checks each
    // output against naive's.
    std::optional<std::vector<float>> naive_out;
    std::vector<int> rounds;
    for (auto& x : runners) {
      const double warm = seconds([&] { x->fwdbwd(); });
      // Quick plugins get more rounds (about 1.5 s of them, up to 30): a steadier median.
      rounds.push_back(
          std::clamp(static_cast<int>(std::ceil(1.5 / std::max(warm, 1e-6))), opt_.repeats, 30));
      if (x->r.plugin == "naive") {
        naive_out = b.out.data;
      } else if (naive_out) {
        double m = 0;
        for (size_t i = 0; i < naive_out->size(); ++i)
          m = std::max(m, double(std::abs(b.out.data[i] - (*naive_out)[i])));
        x->r.max_diff_vs_naive = m;
      }
    }
    const size_t n = runners.size();
    const int most = *std::max_element(rounds.begin(), rounds.end());
    for (int i = 0; i < most; ++i)
      for (size_t j = 0; j < n; ++j) {
        const size_t k = (i + j) % n;
        if (i >= rounds[k]) continue;
        Runner& x = *runners[k];
        x.tf.push_back(seconds([&] { x.fwd(); }));
        x.tfb.push_back(seconds([&] { x.fwdbwd(); }));
      }
    std::vector<Result> out;
    for (auto& x : runners) {
      x->r.fwd_s = median(x->tf);
      x->r.fwdbwd_s = median(x->tfb);
      out.push_back(x->r);
    }
    return out;
  }

  Options opt_;
  triad::PluginLoader loader_;
  triad::CoreServices services_;
  std::vector<std::unique_ptr<triad::AttentionBackend>> backends_;
};

const Result* find(const std::vector<Result>& rs, const std::string& plugin, const Shape& s) {
  for (const auto& r : rs)
    if (r.plugin == plugin && r.shape.T == s.T && r.shape.D == s.D && r.shape.causal == s.causal)
      return &r;
  return nullptr;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string mib(size_t bytes) {
  return fmt("%.2f", bytes / 1048576.0);
}

void print_table(const std::vector<Result>& rs) {
  std::printf(
      "| T | D | mask | plugin | fwd ms | fwd GFLOP/s | fwd+bwd ms | fwd+bwd GFLOP/s | "
      "ws fwd MiB | ws bwd MiB | speedup fwd | speedup fwd+bwd | peak mem / naive | "
      "max abs diff vs naive |\n");
  std::printf("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rs) {
    const Shape& s = r.shape;
    const Result* n = find(rs, "naive", s);
    const double ff = s.fwd_flops(), fbf = 3.5 * ff;
    std::printf("| %d | %d | %s | %s | %.2f | %.1f | %.2f | %.1f | %s | %s | %s | %s | %s | %s |\n",
                s.T, s.D, s.causal ? "causal" : "full", r.plugin.c_str(), r.fwd_s * 1e3,
                ff / r.fwd_s / 1e9, r.fwdbwd_s * 1e3, fbf / r.fwdbwd_s / 1e9, mib(r.ws_fwd).c_str(),
                mib(r.ws_bwd).c_str(), n ? fmt("%.2fx", n->fwd_s / r.fwd_s).c_str() : "-",
                n ? fmt("%.2fx", n->fwdbwd_s / r.fwdbwd_s).c_str() : "-",
                n && n->peak() ? fmt("%.4f", double(r.peak()) / n->peak()).c_str() : "-",
                r.max_diff_vs_naive >= 0 ? fmt("%.1e", r.max_diff_vs_naive).c_str() : "-");
  }
}

struct Target {
  explicit Target(std::string w) : what(std::move(w)) {}
  std::string what;
  bool checked = false, met = true;
  std::vector<std::string> misses;
  void check(bool ok, const std::string& where) {
    checked = true;
    if (!ok) {
      met = false;
      misses.push_back(where);
    }
  }
};

std::string where(const Shape& s, const char* pass) {
  return std::string(pass) + " T=" + std::to_string(s.T) + " D=" + std::to_string(s.D) +
         (s.causal ? " causal" : " full");
}

// The product owner's targets, checked on whatever this run measured.
std::vector<Target> check_targets(const std::vector<Result>& rs) {
  Target mem("flash2 peak extra memory at T=4096 <= 1/8 of naive");
  Target fast("flash2 faster than naive from T=1024 (fwd and fwd+bwd)");
  Target vs1("flash2 at least as fast as flash1 (fwd and fwd+bwd)");
  for (const auto& r : rs) {
    if (r.plugin != "flash2") continue;
    const Shape& s = r.shape;
    if (const Result* n = find(rs, "naive", s)) {
      if (s.T == 4096) mem.check(8 * r.peak() <= n->peak(), where(s, "memory"));
      if (s.T >= 1024) {
        fast.check(r.fwd_s < n->fwd_s, where(s, "fwd"));
        fast.check(r.fwdbwd_s < n->fwdbwd_s, where(s, "fwd+bwd"));
      }
    }
    if (const Result* f1 = find(rs, "flash1", s)) {
      vs1.check(r.fwd_s <= f1->fwd_s, where(s, "fwd"));
      vs1.check(r.fwdbwd_s <= f1->fwdbwd_s, where(s, "fwd+bwd"));
    }
  }
  return {mem, fast, vs1};
}

nlohmann::json to_json(const Options& o, const std::vector<Result>& rs,
                       const std::vector<Target>& targets) {
  nlohmann::json j;
  j["batch"] = o.batch;
  j["heads"] = o.heads;
  j["repeats"] = o.repeats;
  j["threads"] = o.threads;
  j["flop_count"] = "forward 4*B*H*T^2*D (x0.5 causal); fwd+bwd 3.5x forward";
  for (const auto& r : rs) {
    const double ff = r.shape.fwd_flops();
    nlohmann::json e{{"plugin", r.plugin},
                     {"B", r.shape.B},
                     {"H", r.shape.H},
                     {"T", r.shape.T},
                     {"D", r.shape.D},
                     {"causal", r.shape.causal},
                     {"fwd_ms", r.fwd_s * 1e3},
                     {"fwdbwd_ms", r.fwdbwd_s * 1e3},
                     {"fwd_gflops", ff / r.fwd_s / 1e9},
                     {"fwdbwd_gflops", 3.5 * ff / r.fwdbwd_s / 1e9},
                     {"workspace_fwd_bytes", r.ws_fwd},
                     {"workspace_bwd_bytes", r.ws_bwd}};
    if (const Result* n = find(rs, "naive", r.shape)) {
      e["speedup_fwd_vs_naive"] = n->fwd_s / r.fwd_s;
      e["speedup_fwdbwd_vs_naive"] = n->fwdbwd_s / r.fwdbwd_s;
      if (n->peak()) e["peak_memory_vs_naive"] = double(r.peak()) / n->peak();
    }
    if (r.max_diff_vs_naive >= 0) e["max_abs_diff_vs_naive"] = r.max_diff_vs_naive;
    j["results"].push_back(e);
  }
  for (const auto& t : targets)
    j["targets"].push_back({{"target", t.what},
                            {"checked", t.checked},
                            {"met", t.checked && t.met},
                            {"misses", t.misses}});
  return j;
}

int run(Options o) {
  if (o.quick) {
    o.seq_lens = {256, 1024, 4096};
    o.repeats = std::min(o.repeats, 2);
  }
  if (o.repeats < 1)
    throw triad::UserError("--repeats " + std::to_string(o.repeats) + " must be >= 1");
  Bench bench(o);
  std::fprintf(stderr, "bench-attention: B=%d H=%d, >= %d repeat(s) after a warm-up\n", o.batch,
               o.heads, o.repeats);
  const auto results = bench.run();
  std::printf(
      "\nB=%d H=%d, fp32, median of >= %d runs (more for short ones) after a warm-up, the "
      "plugins' runs interleaved. "
      "FLOP count: forward "
      "4*B*H*T^2*D (halved when causal), fwd+bwd 3.5x forward. Memory: workspace "
      "bytes each pass asks for.\n\n",
      o.batch, o.heads, o.repeats);
  print_table(results);
  const auto targets = check_targets(results);
  std::printf("\n");
  for (const auto& t : targets) {
    std::printf("%s: %s", t.what.c_str(), !t.checked ? "not measured" : t.met ? "MET" : "MISSED");
    for (size_t i = 0; i < t.misses.size(); ++i)
      std::printf("%s%s", i ? ", " : " (", t.misses[i].c_str());
    std::printf("%s\n", t.misses.empty() ? "" : ")");
  }
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    if (!f) throw triad::UserError("--json " + o.json_path + ": cannot open for writing");
    f << to_json(o, results, targets).dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times attention plugins side by side (naive, flash1, flash2)."};
  Options o;
  app.add_option("--plugins", o.plugins, "attention plugins to time")->delimiter(',');
  app.add_option("--T", o.seq_lens, "sequence lengths")->delimiter(',');
  app.add_option("--D", o.head_dims, "head dims")->delimiter(',');
  app.add_option("--batch", o.batch, "batch size B");
  app.add_option("--heads", o.heads, "heads H");
  app.add_option("--max-naive-T", o.max_naive_T,
                 "longest sequence naive runs at (its workspace is B*H*T^2*4 bytes)");
  app.add_option("--repeats", o.repeats,
                 "timed runs per measurement, at least (short ones run more; median reported)");
  app.add_option("--threads", o.threads, "CPU threads per plugin (0: the plugin's choice)");
  app.add_option("--param", o.params, "plugin parameter, plugin.key=value (repeatable)");
  app.add_flag("--quick", o.quick, "T in {256, 1024, 4096} and at most 2 repeats");
  app.add_option("--json", o.json_path, "also write the results as JSON to this file");
  return triad::cli::run_main("bench-attention", app, [&] {
    triad::cli::parse(app, argc, argv);
    return run(o);
  });
}
