// A pipeline-schedule plugin written against the Triad SDK only: GPipe's order. Each stage runs
// the forward pass of every micro-batch, then the backward pass of every micro-batch, then the
// step-wide reductions and the optimizer step. A schedule is data: the plugin returns the
// instruction stream of one stage and the core checks and executes it. PipeStream adds the
// loads, receives, sends and activation buffers around each pass, so only the order of the
// passes is written here.
#include "triad/sdk/pipeline.hpp"

namespace {

class ExamplePipeline final : public triad::sdk::PipelinePlugin {
 public:
  ExamplePipeline(triad::sdk::Services, triad::sdk::Params) {}

  // One model chunk per stage: no interleaving.
  triad_pipe_caps_v1 capabilities() const override { return {1}; }

  std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& l) const override {
    triad::sdk::PipeStream s(l);
    for (int32_t mb = 0; mb < l.micro_batches; ++mb) s.forward(mb);
    // Backward in the order of the forwards: stage p-1 starts micro-batch 0's backward first
    // and every stage before it receives the gradients in that order.
    for (int32_t mb = 0; mb < l.micro_batches; ++mb) s.backward(mb);
    return s.finish();  // reduce tied grads, reduce grads, optimizer step
  }
  // num_buffers() is left to the base class: the buffers the stream uses, here one per
  // micro-batch, as every activation lives until its backward.
};

}  // namespace

TRIAD_PIPELINE_PLUGIN(ExamplePipeline, "example", "0.1",
                      "example out-of-tree schedule: GPipe (all forwards, then all backwards)",
                      TRIAD_NO_PARAMS)
