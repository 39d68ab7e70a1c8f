// triad-schedule --stages P --micro-batches M --schedule S [--virtual V] [--png FILE
// [--overwrite]]: loads the
// pipeline plugin S by name, asks it for every stage's stream of one step, checks them (each
// stream's rules, then all of them run together) and prints the step's timeline with every
// forward taking one time unit, every backward two (a split one: its input half B one, its weight
// half W one) and communication free: one row per stage, one column per time unit (F3 / B3 / W3:
// micro-batch 3's forward / backward / weight half, F3b its chunk 1 when interleaved, '.' idle);
// then the bubble next to its formula (and 1F1B's, for split backwards), the micro-batches in
// flight and the buffers per stage. --png draws the same timeline with tools/plot_schedule.py
// (matplotlib).
// Exit 0, or 2 when the plugin, the layout or the picture cannot be had (one line saying why).
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/plot.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

namespace {

constexpr const char* kTool = "triad-schedule";
// The most (stage, micro-batch, chunk) cells a timeline is computed for: 16 stages x 512
// micro-batches x 8 chunks, a second or so; far past what a terminal or a picture shows.
constexpr long long kMaxCells = 65536;

// Refused before anything is computed or drawn: a timeline too large to compute in moments, and
// a --png that cannot be written.
void check_request(int p, int m, int v, const std::string& png, bool overwrite) {
  if (static_cast<long long>(p) * m * v > kMaxCells)
    throw triad::UserError("--stages " + std::to_string(p) + " x --micro-batches " +
                           std::to_string(m) + " x --virtual " + std::to_string(v) + " = " +
                           std::to_string(static_cast<long long>(p) * m * v) +
                           " cells, more than the " + std::to_string(kMaxCells) +
                           " a timeline is drawn for; use fewer stages or micro-batches");
  if (!png.empty()) triad::check_png_path(png, overwrite);
}

// Draws the timeline into `png` with plot_schedule.py; returns the exit code.
int draw(const std::string& png, bool overwrite, const std::string& schedule, int p, int m, int v,
         const triad::PipeTimeline& t) {
  nlohmann::json j = {{"schedule", schedule},
                      {"stages", p},
                      {"micro_batches", m},
                      {"virtual_stages", v},
                      {"makespan", t.makespan},
                      {"bubble", t.bubble},
                      {"formula", double(p - 1) / (v * m + p - 1)},
                      {"split", t.split},
                      {"max_in_flight", t.max_in_flight},
                      {"buffers", t.peak_buffers},
                      {"boxes", nlohmann::json::array()}};
  for (const triad::PipeBox& b : t.boxes)
    j["boxes"].push_back({{"stage", b.stage},
                          {"start", b.start},
                          {"length", b.length},
                          {"pass", std::string(1, b.pass)},
                          {"micro_batch", b.micro_batch},
                          {"chunk", b.chunk}});
  return triad::draw_png(kTool, "plot_schedule.py", TRIAD_PLOT_SCHEDULE_SCRIPT, j, png, overwrite);
}

int run(const std::string& schedule, int p, int m, int v, const std::string& png, bool overwrite) {
  check_request(p, m, v, png, overwrite);
  triad::PluginLoader loader;
  auto plugin = loader.load("pipeline", schedule);
  triad::CoreServices services;
  triad::PipelineBackend be(plugin, triad::resolve_params(plugin->descriptor(), {}, "pipeline"),
                            services.c_services());
  be.name_layout_keys("--micro-batches", "--virtual", "--schedule");
  const std::vector<triad::PipeSchedule> streams = be.schedules(p, m, v);
  const triad::PipeTimeline t = triad::pipeline_timeline(streams, m, v);

  std::cout << "triad-schedule: " << be.name() << ", " << p << (p == 1 ? " stage, " : " stages, ")
            << m << (m == 1 ? " micro-batch, " : " micro-batches, ") << v
            << (v == 1 ? " virtual stage" : " virtual stages")
            << " (forward 1 time unit, backward 2"
            << (t.split ? ": its input half B 1, its weight half W 1" : "")
            << ", communication free)\n";
  std::cout << "cells: F3 / B3 " << (t.split ? "/ W3 " : "") << "forward / backward "
            << (t.split ? "(input half) / weight half " : "") << "of micro-batch 3"
            << (v > 1 ? " (F3b: of its chunk 1)" : "") << ", . idle\n";
  const int label = int(std::to_string(p - 1).size());
  for (int s = 0; s < p; ++s) {
    std::string n = std::to_string(s);
    std::cout << "stage " << std::string(size_t(label) - n.size(), ' ') << n << " | "
              << t.rows[size_t(s)] << "\n";
  }
  std::cout << "bubble: " << triad::pipe_bubble_text(t, m, v) << "\n";
  std::cout << "makespan: " << t.makespan << " time units; each stage busy " << 3 * m * v << "\n";
  std::cout << "in flight: at most " << t.max_in_flight
            << " micro-batches (per stage: " << triad::pipe_counts_text(t.in_flight) << ")\n";
  std::cout << "buffers per stage: " << triad::pipe_counts_text(t.peak_buffers) << std::endl;
  return png.empty() ? 0 : draw(png, overwrite, be.name(), p, m, v, t);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Prints (and draws) the timeline of one training step of a pipeline schedule."};
  int stages = 0, micro_batches = 0, virtual_stages = 1;
  std::string schedule, png;
  app.add_option("--stages", stages, "pipeline stages p")
      ->required()
      ->check(triad::cli::at_least(1));
  app.add_option("--micro-batches", micro_batches, "micro-batches per step m")
      ->required()
      ->check(triad::cli::at_least(1));
  app.add_option("--schedule", schedule, "pipeline plugin: gpipe, 1f1b, interleaved, ...")
      ->required();
  app.add_option("--virtual", virtual_stages, "model chunks per stage v (interleaved schedules)")
      ->check(triad::cli::at_least(1));
  app.add_option("--png", png, "also draw the timeline into this PNG (python3 + matplotlib)");
  bool overwrite = false;
  app.add_flag("--overwrite", overwrite, "replace an existing --png file");
  return triad::cli::run_main(kTool, app, [&] {
    triad::cli::parse(app, argc, argv);
    return run(schedule, stages, micro_batches, virtual_stages, png, overwrite);
  });
}
