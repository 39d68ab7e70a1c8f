// Test helpers: weights with no tensor left at GPT-2's constant initial values (biases 0,
// layernorm weights 1), so that a forward which dropped a bias or ignored a layernorm's scale
// or shift no longer agrees with a reference. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/model.hpp"

namespace triad::test {

// Biases and layernorm weights start constant: they get an O(0.1) spread. Matmul weights and
// embeddings are random draws already; a small shift keeps them so.
inline void perturb(const GptLayout& layout, float* host, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& p : layout.params) {
    const bool constant_init = p.name.ends_with(".bias") || p.name.find("ln_") != std::string::npos;
    const float scale = constant_init ? 0.1f : 0.005f;
    float* w = host + p.offset;
    for (size_t i = 0; i < p.numel; ++i) w[i] += scale * nd(rng);
  }
}

// Perturbs the model's weights where they are (through the host).
inline void perturb_weights(GPT& model, uint64_t seed) {
  std::vector<float> host = model.params_to_full();
  perturb(model.full_layout(), host.data(), seed);
  model.params_from_full(host.data());
}

// GPT-2-shaped weights of the test's own making (independent of GPT::init_weights, so a change
// there leaves a test's numbers alone): N(0, 0.02) matmul weights and embeddings, then
// perturbed: biases N(0, 0.1), layernorm weights 1 + N(0, 0.1).
inline std::vector<float> random_weights(const GptLayout& layout, uint64_t seed) {
  std::vector<float> host(layout.total, 0.0f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (const auto& p : layout.params) {
    float* w = host.data() + p.offset;
    const bool ln_weight = p.name.find("ln_") != std::string::npos && p.name.ends_with(".weight");
    for (size_t i = 0; i < p.numel; ++i)
      w[i] = ln_weight ? 1.0f : (p.name.ends_with(".bias") ? 0.0f : nd(rng));
  }
  perturb(layout, host.data(), seed + 1);
  return host;
}

}  // namespace triad::test
