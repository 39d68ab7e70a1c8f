// triad-simulate CONFIG --machine M.yaml [--nodes N] [--world W] [--set key=value ...]
//                [--grid key=v1,v2 ...] [--json] [--png FILE]
// Predicts one training step of the config's layout on a described machine without running it
// (triad/core/perf/simulate.hpp says how): step time, samples/s, tokens/s, TFLOP/s per device
// (Megatron's formula, and with recomputation as Megatron prints it), MFU, memory per rank and
// whether it fits, and where the step's time goes. With --grid, every combination of the listed
// values (any config key, and `world` / `nodes`) is one layout; they print as a table, fastest
// first, a layout the config checks refuse as one row saying why; --png draws them.
// `triad-simulate calibrate --out M.yaml` measures this machine into a description (run by
// tools/triad_calibrate.py).
// Exit 0, or 2 on bad input (one line on stderr).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <nlohmann/json.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/plot.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/perf/simulate.hpp"

namespace {

namespace fs = std::filesystem;
constexpr const char* kTool = "triad-simulate";

struct GridKey {
  std::string key;
  std::vector<std::string> values;
};

GridKey parse_grid(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw triad::UserError("--grid '" + text +
                           "' is not key=v1,v2; give e.g. --grid "
                           "parallel.tensor_model_parallel_size=1,2,4");
  GridKey g{text.substr(0, eq), {}};
  std::string rest = text.substr(eq + 1), item;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == ',') {
      if (item.empty())
        throw triad::UserError("--grid '" + text + "' has an empty value; list values as " + g.key +
                               "=v1,v2");
      g.values.push_back(item);
      item.clear();
    } else {
      item += rest[i];
    }
  }
  return g;
}

// One layout to predict: its grid values and the world and nodes it runs on.
struct Case {
  std::vector<std::string> sets;
  std::string label;
  int world = 0, nodes = 0;
};

std::vector<Case> cases(const std::vector<GridKey>& grid, int world, int nodes) {
  std::vector<Case> out{{{}, "", world, nodes}};
  for (const GridKey& g : grid) {
    std::vector<Case> next;
    for (const Case& c : out)
      for (const std::string& v : g.values) {
        Case n = c;
        const std::string kv = g.key + "=" + v;
        n.label += (n.label.empty() ? "" : ",") + kv;
        if (g.key == "world" || g.key == "nodes") {
          int x = 0;
          try {
            size_t used = 0;
            x = std::stoi(v, &used);
            if (used != v.size()) x = 0;
          } catch (const std::exception&) {
          }
          if (x < 1)
            throw triad::UserError("--grid " + g.key + " value '" + v +
                                   "' is not a whole number of at least 1");
          (g.key == "world" ? n.world : n.nodes) = x;
        } else {
          n.sets.push_back(kv);
        }
        next.push_back(n);
      }
    out = next;
  }
  return out;
}

struct Row {
  Case c;
  std::string refused;
  triad::Prediction p;
};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(double part, double whole) {
  return fixed(whole > 0 ? 100 * part / whole : 0, 0) + "%";
}

nlohmann::json to_json(const Row& r) {
  nlohmann::json j = {{"layout", r.c.label}, {"world", r.c.world}, {"nodes", r.c.nodes}};
  if (!r.refused.empty()) {
    j["refused"] = r.refused;
    return j;
  }
  const triad::Prediction& p = r.p;
  const triad::StepBreakdown& b = p.breakdown;
  j.update({{"ms_per_step", p.step_s * 1e3},
            {"samples_per_s", p.samples_per_s},
            {"tokens_per_s", p.tokens_per_s},
            {"tflops_per_device", p.tflops},
            {"tflops_per_device_with_recompute", p.tflops_hw},
            {"mfu", p.mfu},
            {"memory_per_rank_bytes", p.memory},
            {"memory_limit_bytes", p.memory_limit},
            {"fits", p.fits},
            {"slowest_stage", p.slowest_stage},
            {"breakdown_ms",
             {{"compute", b.compute * 1e3},
              {"tensor_parallel", b.tensor * 1e3},
              {"pipeline_bubble", b.pipeline * 1e3},
              {"data_parallel", b.data_parallel * 1e3},
              {"optimizer", b.optimizer * 1e3},
              {"other", b.other * 1e3}}}});
  return j;
}

void print_one(const Row& r, const triad::Machine& mc) {
  const triad::Prediction& p = r.p;
  const triad::StepBreakdown& b = p.breakdown;
  const double t = p.step_s;
  std::cout << "step: " << fixed(t * 1e3, 1) << " ms; " << fixed(p.samples_per_s, 2)
            << " samples/s; " << fixed(p.tokens_per_s, 0) << " tokens/s\n"
            << "TFLOP/s per device: " << fixed(p.tflops, 2) << " (with recomputation "
            << fixed(p.tflops_hw, 2) << "); MFU " << fixed(100 * p.mfu, 1) << "%\n"
            << "memory per rank: " << triad::memory_text(p.memory) << " of "
            << triad::memory_text(p.memory_limit) << (p.fits ? " (fits)" : " (does not fit)")
            << "\n"
            << "where the step goes (stage " << p.slowest_stage << "): compute "
            << fixed(b.compute * 1e3, 1) << " ms (" << pct(b.compute, t) << "), tensor-parallel "
            << fixed(b.tensor * 1e3, 1) << " ms (" << pct(b.tensor, t) << "), pipeline bubble "
            << fixed(b.pipeline * 1e3, 1) << " ms (" << pct(b.pipeline, t) << "), data-parallel "
            << fixed(b.data_parallel * 1e3, 1) << " ms (" << pct(b.data_parallel, t)
            << "), optimizer " << fixed(b.optimizer * 1e3, 1) << " ms (" << pct(b.optimizer, t)
            << "), other " << fixed(b.other * 1e3, 1) << " ms (" << pct(b.other, t) << ")\n"
            << "machine: " << mc.name << " (" << mc.source << ")" << std::endl;
}

std::string r_pad(const std::string& s, size_t n) {
  return s.size() >= n ? s : s + std::string(n - s.size(), ' ');
}

void print_table(std::vector<Row>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.refused.empty() != b.refused.empty()) return a.refused.empty();
    return a.refused.empty() && a.p.samples_per_s > b.p.samples_per_s;
  });
  size_t w = 6;
  for (const Row& r : rows) w = std::max(w, r.c.label.size());
  auto pad = [](const std::string& s, size_t n) {
    return s.size() >= n ? s : std::string(n - s.size(), ' ') + s;
  };
  std::cout << "rank  " << r_pad("layout", w) << "  " << pad("ms/step", 10) << pad("samples/s", 11)
            << pad("TFLOP/s", 9) << pad("MFU", 7) << pad("GiB/rank", 10) << "  fits"
            << "  compute/tp/bubble/dp/optimizer/other\n";
  int rank = 0;
  for (const Row& r : rows) {
    const std::string n = pad(std::to_string(++rank), 4) + "  " + r_pad(r.c.label, w) + "  ";
    if (!r.refused.empty()) {
      std::cout << n << "refused: " << r.refused << "\n";
      continue;
    }
    const triad::Prediction& p = r.p;
    const triad::StepBreakdown& b = p.breakdown;
    const double t = p.step_s;
    std::cout << n << pad(fixed(t * 1e3, 1), 10) << pad(fixed(p.samples_per_s, 2), 11)
              << pad(fixed(p.tflops, 2), 9) << pad(fixed(100 * p.mfu, 1) + "%", 7)
              << pad(fixed(p.memory / 0x1p30, 2), 10) << (p.fits ? "   yes" : "    no") << "  "
              << pct(b.compute, t) << "/" << pct(b.tensor, t) << "/" << pct(b.pipeline, t) << "/"
              << pct(b.data_parallel, t) << "/" << pct(b.optimizer, t) << "/" << pct(b.other, t)
              << "\n";
  }
  std::cout << std::flush;
}

struct Options {
  std::string config, machine;
  int nodes = 1, world = 0;
  std::vector<std::string> sets, grid;
  bool json = false;
  std::string png;
  bool overwrite = false;  // --png may replace an existing file
};

// A grid key the config does not have is bad input, not a refused layout.
void check_grid_keys(const Options& o, const std::vector<GridKey>& grid, int world) {
  for (size_t i = 0; i < grid.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (grid[i].key == grid[j].key)
        throw triad::UserError("--grid key '" + grid[i].key +
                               "' is given twice; give its values once, e.g. --grid " +
                               grid[i].key + "=1,2,4");
  for (const GridKey& g : grid) {
    if (g.key == "world" || g.key == "nodes") continue;
    std::vector<std::string> sets = o.sets;
    sets.push_back(g.key + "=" + g.values.front());
    try {
      triad::load_config(o.config, sets, world);
    } catch (const triad::UserError& e) {
      const std::string m = e.what();
      if (m.find("unknown key") != std::string::npos)
        throw triad::UserError("--grid key '" + g.key + "' is refused: " + m);
    }
  }
}

// --machine: a file, or the name of a shipped description (h100-80gb-dgx or
// h100-80gb-dgx.yaml): installed in <prefix>/share/triad/machines, or the source tree's
// configs/machines in a build.
std::string machine_path(const std::string& given) {
  if (given.find('/') != std::string::npos || fs::exists(given)) return given;
  const std::string file = given.size() > 5 && given.compare(given.size() - 5, 5, ".yaml") == 0
                               ? given
                               : given + ".yaml";
  std::vector<fs::path> dirs;
  if (const fs::path share = triad::installed_share_dir(); !share.empty())
    dirs.push_back(share / "machines");
  dirs.push_back(TRIAD_MACHINES_DIR);
  for (const fs::path& d : dirs)
    if (fs::is_regular_file(d / file)) return (d / file).string();
  std::string names;
  for (const fs::path& d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec) || !names.empty()) continue;
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".yaml") found.push_back(e.path().stem().string());
    std::sort(found.begin(), found.end());
    for (const std::string& n : found) names += (names.empty() ? "" : ", ") + n;
  }
  throw triad::UserError("--machine '" + given + "' is neither a file nor a shipped description" +
                         (names.empty() ? std::string() : " (" + names + ")") +
                         "; give a machine description's path, or write one with "
                         "`triad-simulate calibrate --out M.yaml`");
}

int run(const Options& o) {
  const triad::Machine mc = triad::load_machine(machine_path(o.machine));
  if (!o.png.empty()) triad::check_png_path(o.png, o.overwrite);
  std::vector<GridKey> grid;
  for (const std::string& g : o.grid) grid.push_back(parse_grid(g));
  const int world = o.world > 0 ? o.world : o.nodes * mc.devices_per_node;
  check_grid_keys(o, grid, world);
  std::vector<Row> rows;
  std::set<std::string> unmeasured;  // attention plugins the machine has neither curve nor block of
  for (Case c : cases(grid, world, o.nodes)) {
    if (c.world == world && o.world == 0) c.world = c.nodes * mc.devices_per_node;
    Row r{c, "", {}};
    std::vector<std::string> sets = o.sets;
    sets.insert(sets.end(), c.sets.begin(), c.sets.end());
    try {
      const triad::Config cfg = triad::load_config(o.config, sets, c.world);
      r.p = triad::predict(cfg, c.world, c.nodes, mc);
      const std::string& a = cfg.attention.name;
      if (!mc.attention.count(a) && !mc.blocks.count(a)) unmeasured.insert(a);
    } catch (const triad::UserError& e) {
      r.refused = e.what();
    }
    rows.push_back(r);
  }
  if (std::all_of(rows.begin(), rows.end(), [](const Row& r) { return !r.refused.empty(); }))
    throw triad::UserError(rows.front().refused);
  for (const std::string& a : unmeasured)
    std::cerr << kTool << ": note: " << mc.name << " has no measurements of attention plugin '" << a
              << "'; its products are priced on the matrix-product curve (measure it: " << kTool
              << " calibrate with the plugin installed)\n";
  nlohmann::json j = {{"machine", mc.name},
                      {"source", mc.source},
                      {"config", o.config},
                      {"layouts", nlohmann::json::array()}};
  for (const Row& r : rows) j["layouts"].push_back(to_json(r));
  if (o.json) {
    std::cout << j.dump(2) << std::endl;
  } else if (grid.empty()) {
    print_one(rows.front(), mc);
  } else {
    std::cout << kTool << ": " << rows.size() << " layouts of " << o.config << " on " << mc.name
              << " (" << mc.source << ")\n";
    print_table(rows);
  }
  return o.png.empty() ? 0
                       : triad::draw_png(kTool, "plot_simulate.py", TRIAD_PLOT_SIMULATE_SCRIPT, j,
                                         o.png, o.overwrite);
}

// `triad-simulate calibrate ...`: the Python calibration, installed beside the tools
// (<prefix>/share/triad) or in the source tree.
int calibrate(int argc, char** argv) {
  std::string script = TRIAD_CALIBRATE_SCRIPT;
  try {
    const fs::path bin = boost::dll::program_location().parent_path().string();
    const fs::path share = triad::installed_share_dir();
    if (!share.empty() && fs::is_regular_file(share / "triad_calibrate.py"))
      script = (share / "triad_calibrate.py").string();
    // The programs it runs are this build's (or installation's): the ones beside this one.
    ::setenv("TRIAD_BIN_DIR", bin.c_str(), 0);
  } catch (const std::exception&) {
  }
  // Debian's python3 (with python3-numpy and python3-yaml), as the Python tools' first line says.
  const char* python = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  std::vector<std::string> args{python, script};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> c;
  for (std::string& a : args) c.push_back(a.data());
  c.push_back(nullptr);
  ::execvp(python, c.data());
  return triad::cli::fail(kTool,
                          "calibrate needs python3 (Debian: apt-get install python3), and "
                          "it could not be started");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "calibrate") return calibrate(argc, argv);
  CLI::App app{
      "Predicts step time, TFLOP/s and memory of a config's layouts on a described machine "
      "(triad-simulate calibrate --out M.yaml describes this one)."};
  Options o;
  app.add_option("config", o.config, "YAML config file")->required();
  app.add_option("--machine", o.machine,
                 "machine description: a file, or a shipped one by name (h100-80gb-dgx, "
                 "a100-80gb-dgx, ...; configs/machines)")
      ->required();
  app.add_option("--nodes", o.nodes, "nodes of the machine; default 1")
      ->check(triad::cli::at_least(1));
  app.add_option("--world", o.world, "the job's ranks; default nodes x devices_per_node")
      ->check(triad::cli::at_least(1));
  app.add_option("--set", o.sets, "override a key: --set training.micro_batch_size=4 (repeatable)")
      ->allow_extra_args(false);  // one value each: `--set k=v CONFIG` leaves CONFIG positional
  app.add_option("--grid", o.grid,
                 "predict every value: --grid parallel.tensor_model_parallel_size=1,2 "
                 "(repeatable; also world=..., nodes=...)");
  app.add_flag("--json", o.json, "print the predictions as JSON");
  app.add_option("--png", o.png,
                 "also draw the predictions (step time by part, fastest first) into this PNG");
  app.add_flag("--overwrite", o.overwrite, "replace an existing --png file");
  return triad::cli::run_main(kTool, app, [&] {
    triad::cli::parse(app, argc, argv);
    return run(o);
  });
}
