// What a run does at step boundaries, apart from the step itself: the metrics (one log line and
// one JSONL record per step, TensorBoard's scalars), checkpoints, and the run's closing report
// (traffic against the formulas, the offloaded optimizer's bytes, the Hugging Face export).
#pragma once

#include <optional>
#include <string>

#include "triad/core/io/event_file.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/train/engine.hpp"
#include "triad/core/train/run.hpp"
#include "triad/core/train/trace.hpp"
#include "triad/core/train/training_step.hpp"

namespace triad {

class MetricsLog {
 public:
  // Rank 0 creates output.dir (kept up to the resumed step when resuming), writes the resolved
  // config.yaml and opens metrics.jsonl; the other ranks write nothing.
  explicit MetricsLog(const Run& run);
  // The step's record: refused when the loss is not finite; written to metrics.jsonl and, every
  // training.log_interval steps (and the first and last), logged.
  StepRecord record(const StepOutcome& s);
  void close();

 private:
  const Run& run_;
  double flops_per_step_;
  std::optional<RecordFile> jsonl_;
};

class TensorBoardLog {
 public:
  // With logging.tensorboard_dir, rank 0 opens a new event file there (a resumed run adds one,
  // earlier files are never opened); otherwise nothing.
  explicit TensorBoardLog(const Run& run);
  // The step's record (as MetricsLog::record made it) under Megatron's scalar tags.
  void record(const StepRecord& r);
  void close();

 private:
  const Run& run_;
  std::optional<EventFile> events_;
};

class CheckpointSaver {
 public:
  explicit CheckpointSaver(const Run& run);
  // Saves after `step` when checkpoint.save is set and the step is the last, one of every
  // save_interval, or the run stops after it (stopping). Collective.
  void after_step(int step, bool stopping);
  const std::string& last() const { return last_; }

 private:
  const Run& run_;
  CheckpointRank rank_;
  std::string last_;
  bool saved_ = false;  // this run has saved once
};

// The step trace's files (training.profile_steps): each rank's part, then rank 0's merged
// trace.json in training.profile_dir (default output.dir). Collective when a step was traced.
void write_step_trace(const Run& run, const StepTrace& trace);

// The run's closing report into `result`: the tensor group's and the data-parallel group's
// traffic per step against their formulas (logged), the offloaded optimizer's traffic, and the
// Hugging Face export of a run that trained every step.
void finish_run(const Run& run, const Optimizer& optimizer, RunResult& result);

}  // namespace triad
