#include "triad/core/train/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "triad/core/error.hpp"

namespace triad {

LossScaler::LossScaler(const Fp16Config& cfg) : cfg_(cfg), enabled_(cfg.enabled) {
  if (!enabled_) return;
  state_.scale = cfg.loss_scale > 0 ? cfg.loss_scale : std::ldexp(1.0, cfg.initial_scale_power);
  state_.hysteresis_left = cfg.hysteresis;
}

void LossScaler::restore(const State& s) {
  state_ = s;
  state_.hysteresis_left = std::min(s.hysteresis_left, cfg_.hysteresis);
}

bool LossScaler::update(bool overflow, int step) {
  if (!enabled_) return false;
  State& s = state_;
  if (!dynamic()) {  // a static scale skips the step and stays
    ++s.iter;
    s.skipped += overflow;
    return overflow;
  }
  if (overflow) {
    if (cfg_.hysteresis == 1 || s.hysteresis_left == 1) {
      if (s.scale <= cfg_.min_loss_scale && cfg_.raise_error_at_min_scale)
        throw UserError("the gradients overflowed at step " + std::to_string(step) +
                        " with the loss scale at fp16.min_loss_scale " +
                        std::to_string(cfg_.min_loss_scale) +
                        ": training has diverged; lower optimizer.lr, set optimizer.clip_grad, "
                        "or train in bf16 (precision: bf16)");
      s.scale = std::max(s.scale / 2, cfg_.min_loss_scale);
    } else {
      --s.hysteresis_left;
    }
    s.last_overflow = s.iter;
    ++s.skipped;
  } else {
    if (cfg_.consecutive_hysteresis) s.hysteresis_left = cfg_.hysteresis;
    if ((s.iter - s.last_overflow) % cfg_.loss_scale_window == 0) {
      if (!cfg_.consecutive_hysteresis) s.hysteresis_left = cfg_.hysteresis;
      s.scale *= 2;
    }
  }
  ++s.iter;
  return overflow;
}

nlohmann::json LossScaler::to_json(const State& s) {
  return {{"scale", s.scale},
          {"hysteresis_left", s.hysteresis_left},
          {"iter", s.iter},
          {"last_overflow", s.last_overflow},
          {"skipped", s.skipped}};
}

LossScaler::State LossScaler::from_json(const nlohmann::json& j) {
  State s;
  s.scale = j.at("scale").get<double>();
  s.hysteresis_left = j.at("hysteresis_left").get<int>();
  s.iter = j.at("iter").get<int64_t>();
  s.last_overflow = j.at("last_overflow").get<int64_t>();
  s.skipped = j.at("skipped").get<int64_t>();
  return s;
}

}  // namespace triad
