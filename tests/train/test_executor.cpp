// The pipeline executor on one process: a hand-written instruction stream gives the losses and
// gradients of the same calls made directly on the model, hands the step-wide instructions to
// its hooks in order, and refuses what it does not know; evaluation's forward-only streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/model.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/train/pipeline_executor.hpp"
#include "triad/sdk/pipeline_v2.h"

using namespace triad;

namespace {

Config small_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets{
      "model.num_layers=2",          "model.hidden_size=32",
      "model.num_attention_heads=2", "model.seq_length=16",
      "training.micro_batch_size=2", "training.gradient_accumulation_steps=3",
      "data.kind=synthetic"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config(std::string(TRIAD_SOURCE_DIR) + "/configs/gpt-tiny.yaml", sets, 1);
}

struct Fixture {
  explicit Fixture(std::vector<std::string> extra = {}) : cfg(small_config(std::move(extra))) {
    auto p = loader.load("attention", "naive");
    attn = std::make_unique<AttentionBackend>(p, resolve_params(p->descriptor(), {}, "attention"),
                                              services.c_services());
  }
  Config cfg;
  std::unique_ptr<Device> dev = make_device("cpu");
  PluginLoader loader;
  CoreServices services{1};
  std::unique_ptr<AttentionBackend> attn;
  int B() const { return cfg.training.micro_batch_size; }
  std::unique_ptr<GPT> model() {
    auto m = std::make_unique<GPT>(cfg.model, *dev, *attn, B());
    m->init_weights(cfg.training.seed);
    return m;
  }
  std::unique_ptr<DataLoader> data() {
    return make_data_loader(cfg.data, cfg.model, B(), cfg.training.global_batch_size,
                            cfg.training.seed, 0, 1);
  }
  PipelineExecutor executor(GPT& m, float grad_scale, int buffers = 1) {
    PipelineExecutor::Place p;
    p.buffers = buffers;
    p.micro_batch = B();
    p.seq_length = cfg.model.seq_length;
    return PipelineExecutor({&m}, p, *dev, DType::f32, nullptr, std::chrono::seconds(5), grad_scale,
                            "hand");
  }
};

// Records the step-wide instructions as they come.
struct Recorder final : StepHooks {
  std::vector<std::string> calls;
  GPT::GradsReady grads_ready(bool last) override {
    calls.push_back(last ? "grads_ready(last)" : "grads_ready");
    return nullptr;
  }
  void reduce_tied_grads() override { calls.push_back("reduce_tied_grads"); }
  void reduce_grads() override { calls.push_back("reduce_grads"); }
  void optimizer_step() override { calls.push_back("optimizer_step"); }
};

triad_pipe_instr_v1 op(int code, int mb = -1, int buffer = -1) {
  return {code, mb, buffer, 0};
}

}  // namespace

TEST(PipelineExecutor, HandWrittenStreamEqualsDirectCalls) {
  Fixture f;
  auto a = f.model(), b = f.model();
  auto data_a = f.data(), data_b = f.data();
  const float scale = 1.0f / 3;
  std::vector<triad_pipe_instr_v1> stream;
  for (int mb = 0; mb < 3; ++mb) {
    stream.push_back(op(TRIAD_PIPE_LOAD_MICRO_BATCH, mb, 0));
    stream.push_back(op(TRIAD_PIPE_FORWARD, mb, 0));
    stream.push_back(op(TRIAD_PIPE_BACKWARD, mb, 0));
  }
  stream.push_back(op(TRIAD_PIPE_REDUCE_TIED_GRADS));
  stream.push_back(op(TRIAD_PIPE_REDUCE_GRADS));
  stream.push_back(op(TRIAD_PIPE_OPTIMIZER_STEP));
  Recorder hooks;
  a->zero_grad();
  PipelineExecutor exec = f.executor(*a, scale);
  const StreamWork work = exec.run(stream, *data_a, /*batch=*/4, &hooks);

  // The same micro-batches of global batch 4, forward and backward by hand.
  b->zero_grad();
  double loss = 0;
  std::vector<int32_t> in(size_t(f.B()) * f.cfg.model.seq_length), tg(in.size());
  for (int mb = 0; mb < 3; ++mb) {
    data_b->micro_batch(4, mb, in.data(), tg.data());
    loss += b->forward(in.data(), tg.data(), f.B(), 0);
    b->backward(scale, nullptr, mb == 2, 0);
  }
  EXPECT_EQ(work.loss, loss);
  EXPECT_GT(work.busy_ms, 0);
  const std::vector<float> ga = a->grads_to_full(), gb = b->grads_to_full();
  ASSERT_EQ(ga.size(), gb.size());
  size_t differ = 0, nonzero = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    differ += ga[i] != gb[i];
    nonzero += ga[i] != 0;
  }
  EXPECT_EQ(differ, 0u);
  EXPECT_GT(nonzero, ga.size() / 2);
  EXPECT_EQ(hooks.calls,
            (std::vector<std::string>{"grads_ready", "grads_ready", "grads_ready(last)",
                                      "reduce_tied_grads", "reduce_grads", "optimizer_step"}));
}

// A zero-bubble stream (pipeline_v2.h): each backward in its two halves, the weight half of a
// micro-batch after later micro-batches' forward and input half, three activation sets. The
// halves add the same gradients in the same order as whole backwards, so the bits are equal,
// without recomputation and with either kind, learned and rotary positions; the hooks hear of
// the ranges at the weight halves.
TEST(PipelineExecutor, SplitBackwardEqualsWholeBackward) {
  for (const char* recompute : {"none", "selective", "full"})
    for (const char* pos : {"learned", "rope"}) {
      Fixture f({std::string("training.recompute_granularity=") + recompute,
                 std::string("model.position_embedding=") + pos});
      const std::string what = std::string(recompute) + " " + pos;
      // Micro-batch m in buffer m; the whole stream runs the same forwards in the same buffers.
      std::vector<triad_pipe_instr_v1> whole, split;
      for (auto* s : {&whole, &split})
        for (int mb = 0; mb < 2; ++mb) {
          s->push_back(op(TRIAD_PIPE_LOAD_MICRO_BATCH, mb, mb));
          s->push_back(op(TRIAD_PIPE_FORWARD, mb, mb));
        }
      for (triad_pipe_instr_v1 i : std::vector<triad_pipe_instr_v1>{
               op(TRIAD_PIPE_BACKWARD_INPUT, 0, 0), op(TRIAD_PIPE_LOAD_MICRO_BATCH, 2, 2),
               op(TRIAD_PIPE_FORWARD, 2, 2), op(TRIAD_PIPE_BACKWARD_INPUT, 1, 1),
               op(TRIAD_PIPE_BACKWARD_WEIGHT, 0, 0), op(TRIAD_PIPE_BACKWARD_INPUT, 2, 2),
               op(TRIAD_PIPE_BACKWARD_WEIGHT, 1, 1), op(TRIAD_PIPE_BACKWARD_WEIGHT, 2, 2)})
        split.push_back(i);
      for (triad_pipe_instr_v1 i : std::vector<triad_pipe_instr_v1>{
               op(TRIAD_PIPE_BACKWARD, 0, 0), op(TRIAD_PIPE_LOAD_MICRO_BATCH, 2, 2),
               op(TRIAD_PIPE_FORWARD, 2, 2), op(TRIAD_PIPE_BACKWARD, 1, 1),
               op(TRIAD_PIPE_BACKWARD, 2, 2)})
        whole.push_back(i);
      for (auto* s : {&whole, &split})
        for (int code :
             {TRIAD_PIPE_REDUCE_TIED_GRADS, TRIAD_PIPE_REDUCE_GRADS, TRIAD_PIPE_OPTIMIZER_STEP})
          s->push_back(op(code));
      std::vector<std::vector<float>> grads;
      std::vector<double> losses;
      const GptLayout layout = gpt_layout(f.cfg.model);
      for (auto* s : {&whole, &split}) {
        ModelState state(build_param_spec(f.cfg.model, Placement{}), *f.dev, DType::f32, false);
        GPT m(f.cfg.model, state, TensorParallel{}, *f.attn, f.B(), 3, StageChunk{},
              recompute_of(f.cfg.training));
        m.init_weights(f.cfg.training.seed);
        m.zero_grad();
        auto data = f.data();
        Recorder hooks;
        PipelineExecutor exec = f.executor(m, 1.0f / 3, 3);
        losses.push_back(exec.run(*s, *data, 4, &hooks).loss);
        grads.push_back(m.grads_to_full());
        EXPECT_EQ(hooks.calls,
                  (std::vector<std::string>{"grads_ready", "grads_ready", "grads_ready(last)",
                                            "reduce_tied_grads", "reduce_grads", "optimizer_step"}))
            << what;
      }
      EXPECT_EQ(losses[0], losses[1]) << what;
      ASSERT_EQ(grads[0].size(), grads[1].size());
      // The tied word embedding sums the LM head's part and the lookup's in another order (the
      // head's waits for the weight half): equal to rounding. Every other tensor: the same bits.
      size_t differ = 0, nonzero = 0;
      for (const auto& t : layout.params) {
        const bool tied = t.name == "wte.weight";
        float largest = 0;
        for (size_t i = t.offset; i < t.offset + t.numel; ++i)
          largest = std::max(largest, std::abs(grads[0][i]));
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
          nonzero += grads[0][i] != 0;
          if (tied)
            differ += std::abs(grads[0][i] - grads[1][i]) > 1e-6f * largest;
          else
            differ += grads[0][i] != grads[1][i];
        }
      }
      EXPECT_EQ(differ, 0u) << what;
      EXPECT_GT(nonzero, grads[0].size() / 2) << what;
    }
}

TEST(PipelineExecutor, StreamsAddUpAsOne) {
  Fixture f;
  auto m = f.model();
  auto data = f.data();
  PipelineExecutor exec = f.executor(*m, 1.0f);
  const std::vector<triad_pipe_instr_v1> one = forward_only_stream(0, 1, 1, 1);
  const StreamWork first = exec.run(one, *data, 0, nullptr);
  const StreamWork second = exec.run(one, *data, 1, nullptr);
  const StreamWork both = exec.run(one, *data, 1, nullptr, 0, first);
  EXPECT_NE(first.loss, second.loss);  // two batches
  EXPECT_EQ(both.loss, first.loss + second.loss);
}

TEST(PipelineExecutor, RefusesAnUnknownInstruction) {
  Fixture f;
  auto m = f.model();
  auto data = f.data();
  Recorder hooks;
  PipelineExecutor exec = f.executor(*m, 1.0f);
  try {
    exec.run({op(TRIAD_PIPE_LOAD_MICRO_BATCH, 0, 0), op(42, 0, 0)}, *data, 0, &hooks);
    FAIL() << "instruction 42 was accepted";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(),
                 "pipeline plugin 'hand' sent instruction 42, which this executor does not know");
  }
  // A step-wide instruction in a stream run without hooks (evaluation's) is the core's bug.
  EXPECT_THROW(exec.run({op(TRIAD_PIPE_OPTIMIZER_STEP)}, *data, 0, nullptr), std::logic_error);
}

TEST(PipelineExecutor, ForwardOnlyStreams) {
  const auto text = [](const std::vector<triad_pipe_instr_v1>& s) {
    static const char* names[] = {"L", "F", "B", "SA", "RA", "SG", "RG", "T", "R", "O"};
    std::string out;
    for (const auto& i : s)
      out += std::string(out.empty() ? "" : " ") + names[i.op] + std::to_string(i.micro_batch) +
             (i.chunk ? "c" + std::to_string(i.chunk) : "");
    return out;
  };
  EXPECT_EQ(text(forward_only_stream(0, 1, 1, 2)), "L0 F0 L1 F1");
  EXPECT_EQ(text(forward_only_stream(0, 2, 1, 2)), "L0 F0 SA0 L1 F1 SA1");
  EXPECT_EQ(text(forward_only_stream(1, 3, 1, 1)), "RA0 F0 SA0");
  EXPECT_EQ(text(forward_only_stream(2, 3, 1, 1)), "L0 RA0 F0");
  // Interleaved, 2 stages x 2 chunks: stage 0 holds virtual stages 0 and 2, stage 1 holds 1, 3.
  EXPECT_EQ(text(forward_only_stream(0, 2, 2, 1)), "L0 F0 SA0 RA0c1 F0c1 SA0c1");
  EXPECT_EQ(text(forward_only_stream(1, 2, 2, 1)), "RA0 F0 SA0 L0c1 RA0c1 F0c1");
  for (const auto& i : forward_only_stream(1, 2, 2, 3)) EXPECT_EQ(i.buffer, 0);
}

namespace {

triad_pipe_instr_v1 pass(int code, int mb, int chunk = 0) {
  return {code, mb, mb % 2, chunk};
}

// Slot of boundary b at each instruction of `s` (-1: none live there).
std::vector<int> slots_of(const BoundarySlots& s, Boundary b) {
  std::vector<int> out;
  for (const auto& at : s.at) out.push_back(at[size_t(b)]);
  return out;
}

}  // namespace

// A pass's boundary tensors hold a slot from the first to the last instruction that touches
// them; tensors whose intervals do not meet share one. 1F1B's first stage (embedding chunk):
// each output is sent at once, each received gradient read by the next BACKWARD: one slot.
TEST(BoundarySlots, FirstStageOneFOneBHoldsOne) {
  const std::vector<triad_pipe_instr_v1> s = {
      pass(TRIAD_PIPE_FORWARD, 0),   pass(TRIAD_PIPE_SEND_ACTIVATION, 0),
      pass(TRIAD_PIPE_FORWARD, 1),   pass(TRIAD_PIPE_SEND_ACTIVATION, 1),
      pass(TRIAD_PIPE_RECV_GRAD, 0), pass(TRIAD_PIPE_BACKWARD, 0),
      pass(TRIAD_PIPE_RECV_GRAD, 1), pass(TRIAD_PIPE_BACKWARD, 1),
      op(TRIAD_PIPE_OPTIMIZER_STEP)};
  const BoundarySlots b = boundary_slots(s, {{true, true, false, false}});
  EXPECT_EQ(b.slots, 1);
  EXPECT_EQ(slots_of(b, Boundary::output), (std::vector<int>{0, 0, 0, 0, -1, -1, -1, -1, -1}));
  EXPECT_EQ(slots_of(b, Boundary::output_grad), (std::vector<int>{-1, -1, -1, -1, 0, 0, 0, 0, -1}));
  EXPECT_EQ(slots_of(b, Boundary::input_grad), std::vector<int>(9, -1));  // nothing before
}

// A middle stage's BACKWARD reads the received gradient and writes the one it sends: two
// slots; the head reads its output in its backward; a chunk without a stage boundary none.
TEST(BoundarySlots, MiddleStageHeadAndWholeModel) {
  const std::vector<triad_pipe_instr_v1> s = {
      pass(TRIAD_PIPE_FORWARD, 0),   pass(TRIAD_PIPE_SEND_ACTIVATION, 0),
      pass(TRIAD_PIPE_RECV_GRAD, 0), pass(TRIAD_PIPE_BACKWARD, 0),
      pass(TRIAD_PIPE_SEND_GRAD, 0), pass(TRIAD_PIPE_FORWARD, 1)};
  const BoundarySlots mid = boundary_slots(s, {{true, false, false, false}});
  EXPECT_EQ(mid.slots, 2);
  EXPECT_EQ(slots_of(mid, Boundary::output_grad), (std::vector<int>{-1, -1, 0, 0, -1, -1}));
  EXPECT_EQ(slots_of(mid, Boundary::input_grad), (std::vector<int>{-1, -1, -1, 1, 1, -1}));
  EXPECT_EQ(slots_of(mid, Boundary::output), (std::vector<int>{0, 0, -1, -1, -1, 0}));
  const BoundarySlots head = boundary_slots(
      {pass(TRIAD_PIPE_FORWARD, 0), pass(TRIAD_PIPE_FORWARD, 1), pass(TRIAD_PIPE_BACKWARD, 0),
       pass(TRIAD_PIPE_SEND_GRAD, 0), pass(TRIAD_PIPE_BACKWARD, 1)},
      {{true, false, true, false}});
  EXPECT_EQ(head.slots, 3);  // outputs of 0 and 1, then 0's sent gradient beside 1's output
  EXPECT_EQ(slots_of(head, Boundary::output), (std::vector<int>{0, 1, 0, -1, 1}));
  EXPECT_EQ(slots_of(head, Boundary::input_grad), (std::vector<int>{-1, -1, 2, 2, 0}));
  EXPECT_EQ(boundary_slots(s, {{false, true, true, false}}).slots, 0);
}

// The split backward (zb-h1) without full recomputation keeps the last block's output gradient
// in the output until BACKWARD_WEIGHT; evaluation's stream holds one slot.
TEST(BoundarySlots, SplitBackwardAndEvaluation) {
  const std::vector<triad_pipe_instr_v1> s = {
      pass(TRIAD_PIPE_FORWARD, 0), pass(TRIAD_PIPE_SEND_ACTIVATION, 0),
      pass(TRIAD_PIPE_RECV_GRAD, 0), pass(TRIAD_PIPE_BACKWARD_INPUT, 0),
      pass(TRIAD_PIPE_BACKWARD_WEIGHT, 0)};
  EXPECT_EQ(slots_of(boundary_slots(s, {{true, true, false, true}}), Boundary::output),
            (std::vector<int>{0, 0, 0, 0, 0}));
  EXPECT_EQ(slots_of(boundary_slots(s, {{true, true, false, false}}), Boundary::output),
            (std::vector<int>{0, 0, -1, -1, -1}));
  const std::vector<BoundaryUse> two = {{true, true, false, false}, {true, false, false, false}};
  EXPECT_EQ(boundary_slots(forward_only_stream(0, 2, 2, 4), two).slots, 1);
}
