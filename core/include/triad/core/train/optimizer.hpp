// The optimizer step: the global gradient norm over the pieces this rank owns, clipping, AdamW
// on the training device or on the offload host, and the data plugin's after-step. The one place
// that knows which pieces of the arenas a ZeRO stage leaves on this rank.
#pragma once

#include <cstddef>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/model_state.hpp"
#include "triad/core/model/param_spec.hpp"

namespace triad {

struct DistributedRun;

class Optimizer {
 public:
  // Where this rank sits in the tensor and pipeline groups (which copies of a tensor it counts).
  struct Place {
    int tp_rank = 0, tp_size = 1, stage = 0, stages = 1;
  };
  // dist: null in a single-process run.
  Optimizer(ModelState& state, const ParamSpec& spec, const GptLayout& arena,
            const OptimizerConfig& cfg, const Place& place, DistributedRun* dist);

  // The global gradient norm (before clipping): every split tensor's slices, each replicated
  // tensor once per tensor group, the tied word embedding once (on the first stage). With
  // ZeRO-2/3 this rank holds its slices of those tensors only (summed over the data-parallel
  // group); otherwise the whole arena. The gradients hold `grad_scale` times the true ones
  // (fp16's loss scale): the true norm comes back, unscaled before any sum over ranks, so no
  // large scale overflows the floats the sums travel in.
  double grad_norm(double grad_scale = 1);
  // The gradients hold `grad_scale` times the true gradients (fp16's loss scale; 1 otherwise),
  // whose norm is `norm`: unscales them and clips to optimizer.clip_grad in one pass, then AdamW
  // step `t` at learning rate `lr` over the pieces whose moments this rank keeps, then the data
  // plugin's after-step.
  void step(double norm, double lr, int t, double grad_scale = 1);
  // A step skipped (fp16 overflow): weights and moments stay; the data plugin's after-step still
  // runs, as after every step.
  void skip();
  // Bytes the offloaded steps moved each way so far (0 without offload).
  size_t offloaded_bytes() const { return offloaded_bytes_; }

 private:
  void adamw(double lr, int t);
  void offloaded_adamw(double lr, int t);
  void after_step();
  void start_gathers();

  ModelState& state_;
  const ParamSpec& spec_;
  const GptLayout& arena_;
  const OptimizerConfig cfg_;  // a copy: callers may pass a temporary
  Place place_;
  DistributedRun* dist_;
  // The data plugin leaves the parameter gathers after the step in flight (data_v4.h), one per
  // unit: the model state waits for each where the layers read it.
  bool gathers_deferred_ = false;
  std::vector<ArenaRange> units_;
  std::vector<std::pair<size_t, size_t>> slices_;  // this rank's (arena offset, count) per unit
  size_t offloaded_bytes_ = 0;
};

}  // namespace triad
