// The `gpipe` pipeline plugin (Huang et al., GPipe): each stage runs the forward of every
// micro-batch, then the backward of every micro-batch in reverse order, then the step-wide
// reductions and the optimizer step. Every micro-batch's activations live until its backward:
// m buffers, and a bubble of (p-1)/(m+p-1) of the step.
#include "triad/sdk/pipeline.hpp"

namespace {

class GPipe final : public triad::sdk::PipelinePlugin {
 public:
  GPipe(triad::sdk::Services, triad::sdk::Params) {}

  triad_pipe_caps_v1 capabilities() const override { return {1}; }

  std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& l) const override {
    triad::sdk::PipeStream s(l);
    for (int32_t mb = 0; mb < l.micro_batches; ++mb) s.forward(mb);
    for (int32_t mb = l.micro_batches - 1; mb >= 0; --mb) s.backward(mb);
    return s.finish();
  }

  int32_t num_buffers(const triad_pipe_layout_v1& l) const override { return l.micro_batches; }
};

}  // namespace

TRIAD_PIPELINE_PLUGIN(GPipe, "gpipe", "1.0",
                      "GPipe: all forwards, then all backwards in reverse; m activation buffers",
                      TRIAD_NO_PARAMS)
