// One training step of this rank: the schedule's instruction stream through the executor, with
// the data plugin's reductions and the optimizer at the instructions that call for them; then
// the loss, the stop signal and the pipeline's efficiency agreed over the job. Evaluation runs
// the forward-only stream through the same executor.
#pragma once

#include <cmath>
#include <vector>

#include "triad/core/train/loss_scaler.hpp"
#include "triad/core/train/optimizer.hpp"
#include "triad/core/train/pipeline_executor.hpp"
#include "triad/core/train/run.hpp"

namespace triad {

// What a step measured, as every rank agrees on it.
struct StepOutcome {
  int step = 0;
  double loss = 0, lr = 0, grad_norm = 0, ms = 0;
  bool stop_requested = false;  // a stop signal reached some rank during the step
  // Pipelines: the stages' compute time over stages x the step time, the same over stages x the
  // span of the passes (the step less what follows the last stage's last pass: the schedule's
  // share, which m/(m+p-1) models), and each stage's peak.
  double efficiency = 0, pass_efficiency = 0;
  std::vector<double> stage_peak;
  // Each stage's compute time in the step (ms): the slowest one's over the passes' span is the
  // bottleneck stage's efficiency, which m/(m+p-1) bounds from below when stages are unequal.
  std::vector<double> stage_busy_ms;
  double valid_loss = std::nan("");
  // Megatron's end-of-training evaluation, after the last step when that step also evaluated
  // (every eval_interval): the next validation batches (NaN otherwise).
  double valid_loss_end = std::nan("");
  // fp16: the loss scale this step ran with, whether its gradients overflowed and it was skipped,
  // and the steps skipped so far in the run.
  bool scaled = false, skipped = false;
  double loss_scale = 1;
  int64_t skipped_total = 0;
};

class TrainingStep final : public StepHooks {
 public:
  TrainingStep(Run& run, Optimizer& optimizer);
  StepOutcome run(int step);
  // The validation loss after `step` when training.eval_interval calls for one (NaN otherwise).
  double evaluate_after(int step);
  // Megatron evaluates once more when training ends, on the next validation batches, also when
  // the last step has just evaluated (its pretrain()'s evaluation "on validation set" after
  // train()); the loss of that second evaluation after `step`, NaN where there is none (not the
  // last step, or the last step did not evaluate: then evaluate_after() was the end's).
  double evaluate_at_end(int step);

  // StepHooks: the instructions that are the data plugin's and the optimizer's.
  GPT::GradsReady grads_ready(bool last) override;
  void reduce_tied_grads() override;
  void reduce_grads() override;
  void optimizer_step() override;

 private:
  double evaluate(int64_t round);
  bool grads_overflowed();            // collective
  Buffer<float> whole_grads() const;  // collective over the data-parallel group under ZeRO-1
  bool is_tied(size_t off, size_t n) const {
    return tied_split_ && off == tied_range_.begin && n == tied_range_.size();
  }

  Run& run_;
  Optimizer& optimizer_;
  PipelineExecutor executor_;
  bool partitioned_, overlap_, tied_split_;
  ArenaRange tied_range_;
  size_t wte_off_ = 0, wte_n_ = 0;
  LossScaler scaler_;
  // Steps at which this rank puts an inf into its gradients (TRIAD_INJECT_OVERFLOW, a test hook).
  std::vector<int> inject_overflow_;
  int step_ = 0;           // the step in progress
  double lr_ = 0;          // its learning rate (of the optimizer step it would take)
  double norm_ = 0;        // its gradient norm, before clipping (NaN when skipped)
  double step_scale_ = 1;  // its loss scale
  bool skipped_ = false;   // its gradients overflowed: no update
};

}  // namespace triad
