// The `zb-h1` pipeline plugin: ZB-H1 of Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR
// 2024), one virtual stage. Each backward is split into B (BACKWARD_INPUT: the input gradient the
// previous stage waits for) and W (BACKWARD_WEIGHT: the weight gradients nobody waits for).
//
// Stage s runs 1F1B's order with B in place of the backward: min(p - s - 1, m) warm-up forwards,
// then one forward and one B at a time, then the remaining Bs. Each W follows the B of the
// micro-batch s later (W(i) right after B(i + s)); the last s Ws close the step, before the
// gradients are reduced. The stage nearest the loss thus runs its Bs back to back with the
// forwards, so the gradients reach the first stages as early as the forwards allow; the Ws
// postponed on stage s fill the s time units it would otherwise wait in the cool-down. With
// F = B = W a stage idles (p-1)(F+B-W) = p-1 units for m >= p, against 1F1B's (p-1)(F+B+W): a
// third of its bubble.
//
// A micro-batch holds its buffer until its W, so stage s holds up to min(p, m) micro-batches: on
// stage 0 as many as 1F1B (p), on the later stages more than 1F1B's p - s but never more than its
// first stage, so the peak over the pipeline is 1F1B's (the paper's ZB-H1 memory bound).
#include <algorithm>

#include "triad/sdk/pipeline.hpp"

namespace {

class ZeroBubbleH1 final : public triad::sdk::PipelinePlugin {
 public:
  ZeroBubbleH1(triad::sdk::Services, triad::sdk::Params) {}

  triad_pipe_caps_v1 capabilities() const override { return {1}; }

  std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& l) const override {
    const int32_t m = l.micro_batches, delay = l.stage,
                  warmup = std::min(l.stages - l.stage - 1, m);
    triad::sdk::PipeStream s(l);
    int32_t weights = 0;  // Ws run so far, in micro-batch order
    auto input = [&](int32_t mb) {
      s.backward_input(mb);
      if (mb - delay >= 0) s.backward_weight(weights++);
    };
    for (int32_t mb = 0; mb < warmup; ++mb) s.forward(mb);
    for (int32_t mb = 0; mb < m - warmup; ++mb) {
      s.forward(warmup + mb);
      input(mb);
    }
    for (int32_t mb = m - warmup; mb < m; ++mb) input(mb);
    while (weights < m) s.backward_weight(weights++);
    return s.finish();
  }

  int32_t num_buffers(const triad_pipe_layout_v1& l) const override {
    return std::min(l.stages, l.micro_batches);
  }
};

}  // namespace

TRIAD_PIPELINE_PLUGIN(ZeroBubbleH1, "zb-h1", "1.0",
                      "ZB-H1 (zero bubble, Qi et al. 2024): 1F1B with each backward split into "
                      "input and weight halves, the weight halves postponed into the cool-down; "
                      "a third of 1F1B's bubble, at most p activation buffers per stage",
                      TRIAD_NO_PARAMS)
