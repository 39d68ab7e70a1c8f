// Loss scaling for fp16 mixed precision (DeepSpeed's fp16 section): the loss is multiplied by the
// scale before backward so that small gradients survive in fp16; a step whose gradients overflowed
// anywhere in the job is skipped. The dynamic scale halves after `hysteresis` overflows and
// doubles after loss_scale_window steps without one, as DeepSpeed's DynamicLossScaler does; a
// static scale (fp16.loss_scale > 0) never moves. Device-independent: it sees one agreed
// overflow flag per step.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "triad/core/config/config.hpp"

namespace triad {

class LossScaler {
 public:
  // What a checkpoint keeps of it (metadata.json's "loss_scaler").
  struct State {
    double scale = 1;
    int hysteresis_left = 1;     // overflows still tolerated before the scale halves
    int64_t iter = 0;            // steps seen
    int64_t last_overflow = -1;  // the step index (from 0) of the latest overflow
    int64_t skipped = 0;         // steps skipped so far
  };

  // Disabled (scale 1, never skips) unless cfg.enabled.
  explicit LossScaler(const Fp16Config& cfg);

  bool enabled() const { return enabled_; }
  bool dynamic() const { return enabled_ && cfg_.loss_scale == 0; }
  double scale() const { return state_.scale; }
  const State& state() const { return state_; }
  // A checkpoint's state, its hysteresis_left at most this run's fp16.hysteresis (a run resumed
  // with a smaller one tolerates no more overflows than it says).
  void restore(const State& s);

  // One step's verdict: whether its gradients overflowed (the flag every rank agreed on).
  // Returns whether the step is skipped, and moves the scale. Throws UserError when a dynamic
  // scale overflows at fp16.min_loss_scale with no hysteresis left (the run has diverged).
  bool update(bool overflow, int step);

  // A checkpoint's "loss_scaler", and back (throws nlohmann::json::exception when damaged).
  static nlohmann::json to_json(const State& s);
  static State from_json(const nlohmann::json& j);

 private:
  Fp16Config cfg_;
  bool enabled_;
  State state_;
};

}  // namespace triad
