// The run's set-up and its metrics observer on their own: a Run refuses a job whose ranks do not
// match the layout before anything exists, builds a one-process run's parts (one chunk, the
// one-stage schedule, a whole-arena optimizer), and MetricsLog writes one record per step and
// refuses a non-finite loss.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/train/run.hpp"
#include "triad/core/train/step_observers.hpp"

using namespace triad;
namespace fs = std::filesystem;

namespace {

Config small_config(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.num_layers=2",
                                   "model.hidden_size=32",
                                   "model.num_attention_heads=2",
                                   "model.seq_length=16",
                                   "training.micro_batch_size=2",
                                   "training.train_iters=3",
                                   "training.gradient_accumulation_steps=2",
                                   "data.kind=synthetic",
                                   "output.dir=" + out};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config(std::string(TRIAD_SOURCE_DIR) + "/configs/gpt-tiny.yaml", sets, 1);
}

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("triad-test-run-" + name);
  fs::remove_all(p);
  return p.string();
}

}  // namespace

TEST(RunSetup, RefusesAJobOfAnotherSizeBeforeAnything) {
  const std::string out = fresh_dir("world");
  const Config cfg = small_config(out);  // a layout of one rank
  TrainOptions opts;
  opts.dist.world_size = 2;
  opts.dist.rank = 1;
  try {
    triad::Run run(cfg, opts);
    FAIL() << "a job of 2 ranks was accepted for a layout of 1";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "the job has 2 ranks but the config's layout is tp 1 x pp 1 x dp 1; load the "
                 "config with the job's world size");
  }
  EXPECT_FALSE(fs::exists(out));
}

TEST(RunSetup, OneProcessParts) {
  const std::string out = fresh_dir("parts");
  const Config cfg = small_config(out);
  triad::Run run(cfg, {});
  EXPECT_EQ(run.chunks.size(), 1u);
  EXPECT_EQ(run.dist, nullptr);
  EXPECT_EQ(run.start_step, 0);
  EXPECT_EQ(run.schedule.buffers, 1);  // plain gradient accumulation: one stage
  // LOAD, FORWARD, BACKWARD per micro-batch, then the step-wide instructions.
  EXPECT_EQ(run.schedule.instrs.size(), 2u * 3 + 3);
  EXPECT_EQ(run.state->opt_count(), run.state->size());  // AdamW over the whole arena
  EXPECT_EQ(run.model_state_bytes, 16.0 * double(run.state->size()));
  EXPECT_EQ(run.model_state_paper, run.model_state_bytes);
  EXPECT_FALSE(fs::exists(out));  // set-up writes nothing
}

TEST(MetricsLog, OneRecordPerStepAndANonFiniteLossRefused) {
  const std::string out = fresh_dir("metrics");
  const Config cfg = small_config(out);
  TrainOptions opts;
  opts.quiet = true;
  triad::Run run(cfg, opts);
  MetricsLog metrics(run);
  EXPECT_TRUE(fs::exists(fs::path(out) / "config.yaml"));
  StepOutcome s;
  s.step = 1;
  s.loss = 5.5;
  s.lr = 1e-3;
  s.grad_norm = 2.0;
  s.ms = 250;
  const StepRecord r = metrics.record(s);
  EXPECT_EQ(r.samples_per_s, cfg.training.global_batch_size / 0.25);
  EXPECT_EQ(r.tokens_per_s, r.samples_per_s * cfg.model.seq_length);
  s.step = 2;
  s.loss = std::nan("");
  try {
    metrics.record(s);
    FAIL() << "a NaN loss was recorded";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("loss is nan at step 2; lower optimizer.lr", 0), 0u)
        << e.what();
  }
  metrics.close();
  std::ifstream in(fs::path(out) / "metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("step"), 1);
    EXPECT_EQ(j.at("loss"), 5.5);
    EXPECT_EQ(j.at("grad_norm"), 2.0);
    EXPECT_TRUE(j.at("pipeline_efficiency").is_null());
    EXPECT_TRUE(j.at("pipeline_pass_efficiency").is_null());
    EXPECT_TRUE(j.at("stage_compute_ms").is_null());
    ++lines;
  }
  EXPECT_EQ(lines, 1);
  fs::remove_all(out);
}
