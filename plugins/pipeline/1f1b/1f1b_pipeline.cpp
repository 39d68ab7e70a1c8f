// The `1f1b` pipeline plugin: PipeDream-flush, the non-interleaved schedule of Megatron-LM
// (forward_backward_pipelining_without_interleaving) and DeepSpeed's TrainSchedule. Stage s runs
// min(p - s - 1, m) warm-up forwards, then alternates one forward and one backward, then the
// remaining backwards: at most p - s micro-batches are in flight, so it needs min(p - s, m)
// activation buffers instead of GPipe's m, with the same bubble (p-1)/(m+p-1). With one stage it
// is plain gradient accumulation: load, forward, backward per micro-batch in buffer 0.
#include <algorithm>

#include "triad/sdk/pipeline.hpp"

namespace {

class OneFOneB final : public triad::sdk::PipelinePlugin {
 public:
  OneFOneB(triad::sdk::Services, triad::sdk::Params) {}

  triad_pipe_caps_v1 capabilities() const override { return {1}; }

  std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& l) const override {
    const int32_t m = l.micro_batches, warmup = std::min(l.stages - l.stage - 1, m);
    triad::sdk::PipeStream s(l);
    for (int32_t mb = 0; mb < warmup; ++mb) s.forward(mb);
    for (int32_t mb = 0; mb < m - warmup; ++mb) {
      s.forward(warmup + mb);
      s.backward(mb);
    }
    for (int32_t mb = m - warmup; mb < m; ++mb) s.backward(mb);
    return s.finish();
  }

  int32_t num_buffers(const triad_pipe_layout_v1& l) const override {
    return std::min(l.stages - l.stage, l.micro_batches);
  }
};

}  // namespace

TRIAD_PIPELINE_PLUGIN(OneFOneB, "1f1b", "1.0",
                      "1F1B (PipeDream-flush, Megatron-LM / DeepSpeed): warm-up, one forward one "
                      "backward, cool-down; at most p - stage activation buffers",
                      TRIAD_NO_PARAMS)
