// The `interleaved` pipeline plugin: Megatron-LM's interleaved 1F1B
// (forward_backward_pipelining_with_interleaving, Narayanan et al. 2021). Each stage holds v
// model chunks; the step's m·v chunk passes are numbered k = 0, 1, ... in groups of p·v: within a
// group, p consecutive micro-batches go through chunk 0, then the same p through chunk 1, ...
// (backwards through the chunks in reverse). Stage s runs 2(p - s - 1) + (v - 1)p warm-up
// forwards (all of them when m = p), then one forward one backward, then the rest of the
// backwards. The bubble shrinks to (p-1)/(v·m + p - 1) of the step, at the price of v times the
// point-to-point messages and up to (v + 1)p - 1 chunk activations in flight on the first stage.
// Megatron's rules: m must be a multiple of p when v > 1, and interleaving needs p >= 2. At v = 1
// it is the 1f1b schedule.
#include <algorithm>
#include <string>

#include "triad/sdk/pipeline.hpp"

namespace {

class Interleaved final : public triad::sdk::PipelinePlugin {
 public:
  Interleaved(triad::sdk::Services, triad::sdk::Params) {}

  triad_pipe_caps_v1 capabilities() const override { return {0}; }

  std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& l) const override {
    const int32_t p = l.stages, v = l.virtual_stages, m = l.micro_batches;
    // The reason only: the core names the layout and the keys to change.
    if (v > 1 && p < 2)
      throw triad::sdk::unsupported("interleaving needs at least 2 stages (Megatron's rule), not " +
                                    std::to_string(p));
    if (v > 1 && m % p != 0)
      throw triad::sdk::unsupported("the number of micro-batches (" + std::to_string(m) +
                                    ") must be a multiple of the number of stages (" +
                                    std::to_string(p) +
                                    ") with virtual stages > 1 (Megatron's rule)");
    const int32_t total = m * v;
    int32_t warmup = p - l.stage - 1;  // v = 1: 1F1B
    if (v > 1) warmup = m == p ? total : 2 * (p - l.stage - 1) + (v - 1) * p;
    warmup = std::min(warmup, total);
    // Chunk pass k: its micro-batch and its chunk (forward order; backwards reverse the chunks).
    auto micro_batch = [&](int32_t k) { return k / (p * v) * p + k % p; };
    auto chunk = [&](int32_t k, bool forward) {
      const int32_t c = k % (p * v) / p;
      return forward ? c : v - 1 - c;
    };
    triad::sdk::PipeStream s(l);
    for (int32_t k = 0; k < warmup; ++k) s.forward(micro_batch(k), chunk(k, true));
    for (int32_t k = 0; k < total - warmup; ++k) {
      s.forward(micro_batch(warmup + k), chunk(warmup + k, true));
      s.backward(micro_batch(k), chunk(k, false));
    }
    for (int32_t k = total - warmup; k < total; ++k) s.backward(micro_batch(k), chunk(k, false));
    return s.finish();
  }
};

}  // namespace

TRIAD_PIPELINE_PLUGIN(Interleaved, "interleaved", "1.0",
                      "Megatron-LM's interleaved 1F1B: v model chunks per stage, bubble "
                      "(p-1)/(v*m+p-1); m a multiple of p when v > 1; 1f1b at v = 1",
                      TRIAD_NO_PARAMS)
