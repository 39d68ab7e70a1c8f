// PipelineBackend (streams, checks, refusals, names), simulate_pipeline / pipeline_timeline, the
// pipeline conformance suite against the planted defects of the test plugin `hostile`, and the
// tools triad-schedule and triad-info on pipeline plugins.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_helpers.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/services.hpp"

namespace triad {
namespace {

using test::run_command;
using test::user_error;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kHostile = TRIAD_TEST_PLUGIN_DIR "/libtriad-pipeline-hostile.so";
constexpr const char* kVersion1 = TRIAD_TEST_PLUGIN_DIR "/libtriad-pipeline-v1old.so";

constexpr int32_t LOAD = TRIAD_PIPE_LOAD_MICRO_BATCH, F = TRIAD_PIPE_FORWARD,
                  B = TRIAD_PIPE_BACKWARD, SA = TRIAD_PIPE_SEND_ACTIVATION,
                  RA = TRIAD_PIPE_RECV_ACTIVATION, SG = TRIAD_PIPE_SEND_GRAD,
                  RG = TRIAD_PIPE_RECV_GRAD, TIED = TRIAD_PIPE_REDUCE_TIED_GRADS,
                  GRADS = TRIAD_PIPE_REDUCE_GRADS, STEP = TRIAD_PIPE_OPTIMIZER_STEP,
                  BI = TRIAD_PIPE_BACKWARD_INPUT, BW = TRIAD_PIPE_BACKWARD_WEIGHT;

struct Backend {
  CoreServices services;
  std::unique_ptr<PipelineBackend> be;
  Backend(const std::string& path, const std::map<std::string, std::string>& params = {}) {
    auto p = PluginLoader().load_file(path, "pipeline");
    be = std::make_unique<PipelineBackend>(p, resolve_params(p->descriptor(), params, "pipeline"),
                                           services.c_services());
  }
  PipelineBackend* operator->() { return be.get(); }
};

// "F0 B0 ..." of a stream's forwards and backwards ("b0" / "W0" for the halves of a split one;
// chunk letters when `chunks`).
std::string passes(const PipeSchedule& s, bool chunks = false) {
  std::string out;
  for (const auto& i : s.instrs) {
    if (i.op != F && i.op != B && i.op != BI && i.op != BW) continue;
    if (!out.empty()) out += ' ';
    out += i.op == F ? 'F' : i.op == B ? 'B' : i.op == BI ? 'b' : 'W';
    out += std::to_string(i.micro_batch);
    if (chunks) out += char('a' + i.chunk);
  }
  return out;
}

std::vector<std::vector<int32_t>> rows(const PipeSchedule& s) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& i : s.instrs) out.push_back({i.op, i.micro_batch, i.buffer, i.chunk});
  return out;
}

TEST(PipelineBackend, OneStage1F1BIsPlainGradientAccumulation) {
  Backend be(TRIAD_1F1B_PLUGIN);
  EXPECT_EQ(be->name(), "1f1b");
  EXPECT_EQ(be->capabilities().max_virtual_stages, 1);
  const PipeSchedule s = be->schedule(0, 1, 3);
  EXPECT_EQ(s.buffers, 1);
  const std::vector<std::vector<int32_t>> want = {
      {LOAD, 0, 0, 0}, {F, 0, 0, 0},      {B, 0, 0, 0},       {LOAD, 1, 0, 0},
      {F, 1, 0, 0},    {B, 1, 0, 0},      {LOAD, 2, 0, 0},    {F, 2, 0, 0},
      {B, 2, 0, 0},    {TIED, -1, -1, 0}, {GRADS, -1, -1, 0}, {STEP, -1, -1, 0}};
  EXPECT_EQ(rows(s), want);
}

TEST(PipelineBackend, OneFOneBWarmsUpThenAlternates) {
  Backend be(TRIAD_1F1B_PLUGIN);
  const auto all = be->schedules(4, 8);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(passes(all[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(passes(all[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  std::vector<int> buffers;
  for (const auto& s : all) buffers.push_back(s.buffers);
  EXPECT_EQ(buffers, (std::vector<int>{4, 3, 2, 1}));
  // A middle stage: load, receive, forward, send; receive the gradient, backward, send it.
  const std::vector<std::vector<int32_t>> head = {
      {LOAD, 0, 0, 0}, {RA, 0, 0, 0}, {F, 0, 0, 0},  {SA, 0, 0, 0},   {LOAD, 1, 1, 0},
      {RA, 1, 1, 0},   {F, 1, 1, 0},  {SA, 1, 1, 0}, {LOAD, 2, 2, 0}, {RA, 2, 2, 0},
      {F, 2, 2, 0},    {SA, 2, 2, 0}, {RG, 0, 0, 0}, {B, 0, 0, 0},    {SG, 0, 0, 0}};
  const auto r = rows(all[1]);
  EXPECT_EQ(std::vector<std::vector<int32_t>>(r.begin(), r.begin() + long(head.size())), head);
  // Fewer micro-batches than stages: every forward, then every backward.
  EXPECT_EQ(passes(be->schedule(0, 4, 2)), "F0 F1 B0 B1");
}

// The send staging copies come from the streams alone (causality, not timing): a send stays
// unknown to its stage until a message the peer sent after posting its receive arrives.
// 1F1B's first stage sends its p warm-up activations before it hears from stage 1; the last
// stage learns a gradient was received only from the activation after next, so two are in
// flight. GPipe hears nothing back before its backward (first stage) or at all (later stages:
// their peer then sends the other way): m copies. One stage sends nothing.
TEST(PipelineBackend, SendCopiesFollowFromTheStreams) {
  Backend one(TRIAD_1F1B_PLUGIN), gpipe(TRIAD_GPIPE_PLUGIN), zb(TRIAD_ZBH1_PLUGIN);
  EXPECT_EQ(pipeline_send_copies(one->schedules(4, 8)), (std::vector<int>{4, 4, 3, 2}));
  EXPECT_EQ(pipeline_send_copies(one->schedules(2, 4)), (std::vector<int>{2, 2}));
  EXPECT_EQ(pipeline_send_copies(gpipe->schedules(3, 5)), (std::vector<int>{5, 5, 5}));
  EXPECT_EQ(pipeline_send_copies(zb->schedules(4, 8)), (std::vector<int>{4, 4, 3, 2}));
  EXPECT_EQ(pipeline_send_copies(one->schedules(1, 4)), (std::vector<int>{0}));
}

// A transport without tags (nccl) matches messages in the order they are posted: every shipped
// schedule sends to each stage in the order that stage receives (so each runs there), and a
// stream that does not is named by its first message out of order.
TEST(PipelineBackend, ShippedSchedulesSendInTheOrderTheirPeersReceive) {
  for (const char* path : {TRIAD_1F1B_PLUGIN, TRIAD_GPIPE_PLUGIN, TRIAD_ZBH1_PLUGIN}) {
    Backend be(path);
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 9; ++m)
        EXPECT_EQ(pipeline_order_mismatch(be->schedules(p, m)), "")
            << path << " p " << p << " m " << m;
  }
  Backend il(TRIAD_INTERLEAVED_PLUGIN);
  for (int p = 2; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m = p; m <= 3 * p; m += p)
        EXPECT_EQ(pipeline_order_mismatch(il->schedules(p, m, v)), "")
            << "interleaved p " << p << " v " << v << " m " << m;
  // Stage 1 receiving micro-batch 1's activation before micro-batch 0's.
  Backend one(TRIAD_1F1B_PLUGIN);
  std::vector<PipeSchedule> swapped = one->schedules(2, 2);
  auto& instrs = swapped[1].instrs;
  std::vector<size_t> recvs;
  for (size_t i = 0; i < instrs.size(); ++i)
    if (instrs[i].op == TRIAD_PIPE_RECV_ACTIVATION) recvs.push_back(i);
  ASSERT_EQ(recvs.size(), 2u);
  std::swap(instrs[recvs[0]].micro_batch, instrs[recvs[1]].micro_batch);
  EXPECT_EQ(pipeline_order_mismatch(swapped),
            "stage 0 sends the activation of micro-batch 0 (chunk 0) as its message 1 to stage 1, "
            "which receives the activation of micro-batch 1 (chunk 0) there");
}

TEST(PipelineBackend, GPipeRunsEveryForwardThenEveryBackwardInReverse) {
  Backend be(TRIAD_GPIPE_PLUGIN);
  for (const PipeSchedule& s : be->schedules(3, 4)) {
    EXPECT_EQ(passes(s), "F0 F1 F2 F3 B3 B2 B1 B0");
    EXPECT_EQ(s.buffers, 4);
  }
}

TEST(PipelineBackend, InterleavedIs1F1BAtOneVirtualStage) {
  Backend one(TRIAD_1F1B_PLUGIN), il(TRIAD_INTERLEAVED_PLUGIN);
  EXPECT_EQ(il->capabilities().max_virtual_stages, 0);
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 8; ++m)
      for (int s = 0; s < p; ++s) {
        const PipeSchedule a = one->schedule(s, p, m), b = il->schedule(s, p, m);
        EXPECT_EQ(rows(a), rows(b)) << "stage " << s << " of " << p << ", m " << m;
        EXPECT_EQ(a.buffers, b.buffers);
      }
}

TEST(PipelineBackend, InterleavedFollowsMegatron) {
  Backend be(TRIAD_INTERLEAVED_PLUGIN);
  const auto all = be->schedules(2, 4, 2);
  // Stage 0: 2(p-1) + (v-1)p = 4 warm-up forwards of chunk passes 0..3, then 1F1B; backwards go
  // through the chunks in reverse.
  EXPECT_EQ(passes(all[0], true),
            "F0a F1a F0b F1b F2a B0b F3a B1b F2b B0a F3b B1a B2b B3b B2a B3a");
  EXPECT_EQ(all[0].buffers, 5);  // (v+1)p - 1
  EXPECT_EQ(all[1].buffers, 3);
  // The first stage loads before chunk 0's forward, the last before chunk 1's.
  for (const auto& i : all[1].instrs)
    if (i.op == LOAD) {
      EXPECT_EQ(i.chunk, 1);
    }
  EXPECT_THAT(
      user_error([&] { be->schedule(0, 4, 6, 2); }),
      AllOf(HasSubstr("pipeline plugin 'interleaved' cannot schedule stage 0 of 4, 6 "
                      "micro-batches, 2 virtual stages"),
            HasSubstr("micro-batches, 2 virtual stages: the number of micro-batches (6) must be "
                      "a multiple of the number of stages (4)"),
            HasSubstr("; set training.gradient_accumulation_steps to 8 or "
                      "parallel.virtual_pipeline_model_parallel_size to 1"),
            Not(HasSubstr("UNSUPPORTED")), Not(HasSubstr("num_buffers"))));
  EXPECT_THAT(user_error([&] { be->schedule(0, 1, 2, 2); }),
              AllOf(HasSubstr("interleaving needs at least 2 stages"),
                    HasSubstr("set parallel.virtual_pipeline_model_parallel_size to 1")));
}

TEST(PipelineBackend, RefusalsNameTheLayoutAndTheFix) {
  Backend be(TRIAD_GPIPE_PLUGIN);
  const std::string msg = user_error([&] { be->schedule(1, 4, 8, 2); });
  EXPECT_THAT(msg, AllOf(HasSubstr("pipeline plugin 'gpipe' cannot schedule stage 1 of 4, 8 "
                                   "micro-batches, 2 virtual stages"),
                         HasSubstr("it schedules up to 1 virtual stage"),
                         HasSubstr("set pipeline: interleaved")));
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_THAT(user_error([&] { be->schedule(4, 4, 8); }), HasSubstr("is malformed"));
  EXPECT_THAT(user_error([&] { be->schedule(0, 2, 0); }), HasSubstr("is malformed"));
  // The raw calls: UNSUPPORTED with a message, INVALID for a malformed layout.
  int32_t buffers = 0;
  EXPECT_EQ(be->try_num_buffers({0, 2, 2, 2}, &buffers), TRIAD_ERR_UNSUPPORTED);
  EXPECT_THAT(be->last_error(), HasSubstr("it schedules up to 1 virtual stage"));
  EXPECT_EQ(be->try_num_buffers({2, 2, 2, 1}, &buffers), TRIAD_ERR_INVALID);
  size_t count = 0;
  EXPECT_EQ(be->try_schedule_call({0, 2, 2, 1}, nullptr, 4, &count), TRIAD_ERR_INVALID);
}

TEST(PipelineBackend, BrokenStreamsAreRefusedBeforeARun) {
  Backend overuse(kHostile, {{"bug", "buffer_overuse"}});
  EXPECT_THAT(user_error([&] { overuse->schedule(0, 4, 8); }),
              AllOf(HasSubstr("pipeline plugin 'hostile' cannot schedule stage 0 of 4"),
                    HasSubstr("buffer 3 is outside the 3 buffers it declares"),
                    HasSubstr("triad-plugin-test pipeline"),
                    HasSubstr("set pipeline: 1f1b (or gpipe, interleaved, zb-h1)")));
  // Each stage's stream is fine on its own; together they deadlock.
  Backend deadlock(kHostile, {{"bug", "deadlock"}});
  EXPECT_NO_THROW(deadlock->schedule(0, 2, 4));
  EXPECT_NO_THROW(deadlock->schedule(1, 2, 4));
  EXPECT_THAT(user_error([&] { deadlock->schedules(2, 4); }),
              AllOf(HasSubstr("cannot schedule 2 stages, 4 micro-batches, 1 virtual stage"),
                    HasSubstr("deadlock: stage 0 waits at instruction 3 (recv-grad of "
                              "micro-batch 0 in buffer 0) for stage 1; stage 1 waits at "
                              "instruction 4 (recv-activation of micro-batch 1 in buffer 1) for "
                              "stage 0"),
                    HasSubstr("set pipeline: 1f1b")));
}

TEST(PipelineBackend, OnlyTakesPipelinePlugins) {
  EXPECT_THAT(user_error([] { Backend be(TRIAD_NAIVE_PLUGIN); }),
              HasSubstr("a plugin of kind 'pipeline' is needed here"));
  EXPECT_THAT(user_error([] {
                Backend be(kHostile, {{"bug", "x"}});
              }),
              AllOf(HasSubstr("pipeline plugin 'hostile'"), HasSubstr("failed to start (INVALID)"),
                    HasSubstr("unknown bug 'x'")));
}

// Hand-written streams of a one-stage pipeline with one micro-batch.
PipeSchedule one_stage(std::vector<triad_pipe_instr_v1> body, int buffers = 1) {
  for (int32_t op : {TIED, GRADS, STEP}) body.push_back({op, -1, -1, 0});
  return {buffers, std::move(body)};
}

TEST(SimulatePipeline, NamesWhatIsWrong) {
  auto sim = [](const PipeSchedule& s) { return simulate_pipeline({s}, 1, 1); };
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {B, 0, 0, 0}})), "");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {B, 0, 0, 0}, {F, 0, 0, 0}})),
            "stage 0: instruction 1 (backward of micro-batch 0 in buffer 0): it comes before the "
            "forward of micro-batch 0");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {F, 0, 0, 0}, {B, 0, 0, 0}})),
            "stage 0: instruction 2 (forward of micro-batch 0 in buffer 0): a second forward of "
            "micro-batch 0 (each pass runs each of its instructions once)");
  EXPECT_EQ(sim(one_stage({{F, 0, 0, 0}, {B, 0, 0, 0}})),
            "stage 0: micro-batch 0 is never loaded (the first stage loads its tokens before the "
            "forward)");
  // Two micro-batches, so that two buffers may be declared.
  EXPECT_EQ(simulate_pipeline({one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {B, 0, 1, 0}}, 2)}, 2, 1),
            "stage 0: instruction 2 (backward of micro-batch 0 in buffer 1): micro-batch 0 started "
            "in buffer 0; all its instructions use that buffer");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {B, 0, 0, 0}}, 2)),
            "stage 0: it declares 2 buffers, more than the 1 pass of its step can use");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {B, 0, 0, 0}, {B, 0, 0, 0}})),
            "stage 0: instruction 3 (backward of micro-batch 0 in buffer 0): a second backward of "
            "micro-batch 0 (each pass runs each of its instructions once)");
  EXPECT_EQ(sim(one_stage({{9, 0, 0, 0}})),
            "stage 0: instruction 0 (optimizer-step): a step-wide op has micro_batch -1 and "
            "buffer -1, not 0 and 0");
  EXPECT_EQ(sim(one_stage({{12, 0, 0, 0}})),
            "stage 0: instruction 0 has op 12, not a triad_pipe_op");
  PipeSchedule late = one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}});
  late.instrs.push_back({B, 0, 0, 0});
  EXPECT_EQ(sim(late),
            "stage 0: instruction 5 (backward of micro-batch 0 in buffer 0): it comes after "
            "optimizer-step; the step ends with reduce-tied-grads, reduce-grads, optimizer-step, "
            "once each and in that order");
  EXPECT_EQ(simulate_pipeline({}, 1, 1), "no stages");
}

// A split backward: the input half (with the gradient's receive before it and its send after
// it), then the weight half, which frees the buffer; every weight half before the step ends.
TEST(SimulatePipeline, SplitBackwardRules) {
  auto sim = [](const PipeSchedule& s) { return simulate_pipeline({s}, 1, 1); };
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {BI, 0, 0, 0}, {BW, 0, 0, 0}})), "");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {BW, 0, 0, 0}, {BI, 0, 0, 0}})),
            "stage 0: instruction 2 (backward-weight of micro-batch 0 in buffer 0): it comes "
            "before the backward-input of micro-batch 0");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {BI, 0, 0, 0}})),
            "stage 0: micro-batch 0 has no backward-weight");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}})),
            "stage 0: micro-batch 0 has no backward or backward-input");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {BI, 0, 0, 0}, {B, 0, 0, 0}})),
            "stage 0: instruction 3 (backward of micro-batch 0 in buffer 0): micro-batch 0 "
            "already ran a backward-input; a pass runs one backward, or a backward-input and "
            "later a backward-weight");
  EXPECT_EQ(sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {B, 0, 0, 0}, {BW, 0, 0, 0}})),
            "stage 0: instruction 3 (backward-weight of micro-batch 0 in buffer 0): micro-batch 0 "
            "already ran its whole backward; a pass runs one backward, or a backward-input and "
            "later a backward-weight");
  EXPECT_EQ(
      sim(one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {BI, 0, 0, 0}, {BW, 0, 0, 0}, {BW, 0, 0, 0}})),
      "stage 0: instruction 4 (backward-weight of micro-batch 0 in buffer 0): a second "
      "backward-weight of micro-batch 0 (each pass runs each of its instructions once)");
  PipeSchedule late = one_stage({{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {BI, 0, 0, 0}});
  late.instrs.push_back({BW, 0, 0, 0});
  EXPECT_THAT(sim(late), HasSubstr("stage 0: instruction 6 (backward-weight of micro-batch 0 in "
                                   "buffer 0): it comes after optimizer-step"));
  // The buffer stays held until the weight half: micro-batch 1 may not take it before.
  EXPECT_EQ(simulate_pipeline({one_stage({{LOAD, 0, 0, 0},
                                          {F, 0, 0, 0},
                                          {BI, 0, 0, 0},
                                          {LOAD, 1, 0, 0},
                                          {F, 1, 0, 0},
                                          {BI, 1, 0, 0},
                                          {BW, 0, 0, 0},
                                          {BW, 1, 0, 0}})},
                              2, 1),
            "stage 0: instruction 3 (load of micro-batch 1 in buffer 0): buffer 0 still holds "
            "micro-batch 0, whose backward has not finished");

  // Two stages: stage 1's send of the gradient may come before or after its weight half; stage 0
  // cannot receive it before stage 1's input half, whatever comes between.
  auto two = [](std::vector<triad_pipe_instr_v1> tail1, std::vector<triad_pipe_instr_v1> tail0) {
    std::vector<triad_pipe_instr_v1> s0 = {{LOAD, 0, 0, 0}, {F, 0, 0, 0}, {SA, 0, 0, 0}};
    std::vector<triad_pipe_instr_v1> s1 = {{LOAD, 0, 0, 0}, {RA, 0, 0, 0}, {F, 0, 0, 0}};
    s0.insert(s0.end(), tail0.begin(), tail0.end());
    s1.insert(s1.end(), tail1.begin(), tail1.end());
    return simulate_pipeline({one_stage(s0), one_stage(s1)}, 1, 1);
  };
  const std::vector<triad_pipe_instr_v1> stage0 = {{RG, 0, 0, 0}, {BI, 0, 0, 0}, {BW, 0, 0, 0}};
  EXPECT_EQ(two({{BI, 0, 0, 0}, {SG, 0, 0, 0}, {BW, 0, 0, 0}}, stage0), "");
  EXPECT_EQ(two({{BI, 0, 0, 0}, {BW, 0, 0, 0}, {SG, 0, 0, 0}}, stage0), "");
  EXPECT_EQ(two({{BI, 0, 0, 0}, {BW, 0, 0, 0}, {SG, 0, 0, 0}}, {{RG, 0, 0, 0}, {B, 0, 0, 0}}), "");
  EXPECT_EQ(two({{SG, 0, 0, 0}, {BI, 0, 0, 0}, {BW, 0, 0, 0}}, stage0),
            "stage 1: instruction 3 (send-grad of micro-batch 0 in buffer 0): it comes before the "
            "backward or backward-input of micro-batch 0");
  EXPECT_EQ(two({{BI, 0, 0, 0}, {SG, 0, 0, 0}, {BW, 0, 0, 0}}, {{BI, 0, 0, 0}, {RG, 0, 0, 0}}),
            "stage 0: instruction 3 (backward-input of micro-batch 0 in buffer 0): it comes before "
            "the recv-grad of micro-batch 0");
}

TEST(PipelineTimeline, BubbleMatchesTheFormula) {
  Backend one(TRIAD_1F1B_PLUGIN), gpipe(TRIAD_GPIPE_PLUGIN), il(TRIAD_INTERLEAVED_PLUGIN);
  const PipeTimeline t = pipeline_timeline(one->schedules(4, 8), 8, 1);
  EXPECT_EQ(t.makespan, 33);
  EXPECT_DOUBLE_EQ(t.bubble, 3.0 / 11.0);
  EXPECT_EQ(t.max_in_flight, 4);
  EXPECT_EQ(t.peak_buffers, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(t.in_flight, (std::vector<int>{4, 3, 2, 1}));
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[3].substr(0, 26), ".  .  .  F0 B0 B0 F1 B1 B1");
  EXPECT_EQ(t.rows[0].substr(0, 41), "F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 F4 B1");
  EXPECT_EQ(t.boxes.size(), 4u * 16u);
  for (int m : {4, 16, 32}) {
    const double formula = 3.0 / (m + 3);
    EXPECT_DOUBLE_EQ(pipeline_timeline(one->schedules(4, m), m, 1).bubble, formula) << m;
    const PipeTimeline g = pipeline_timeline(gpipe->schedules(4, m), m, 1);
    EXPECT_DOUBLE_EQ(g.bubble, formula) << m;
    EXPECT_EQ(g.max_in_flight, m);
  }
  // Interleaving divides the bubble: (p-1)/(v·m + p-1).
  EXPECT_DOUBLE_EQ(pipeline_timeline(il->schedules(4, 8, 2), 8, 2).bubble, 3.0 / 19.0);
  EXPECT_THAT(user_error([&] {
                Backend h(kHostile, {{"bug", "swapped_order"}});
                std::vector<PipeSchedule> all;
                for (int s = 0; s < 2; ++s) all.push_back(h->schedule(s, 2, 2));
                pipeline_timeline(all, 2, 1);
              }),
              HasSubstr("arrive in the order they were sent"));
}

// ZB-H1 at p = 4, m = 8: 1F1B's order with each backward split, stage s's weight halves s
// micro-batches behind its input halves; a third of 1F1B's bubble, (p-1)(F+B-W) = 3 units per
// stage against (p-1)(F+B+W) = 9.
TEST(ZeroBubbleH1, SplitsAndPostponesTheWeightHalves) {
  Backend be(TRIAD_ZBH1_PLUGIN);
  EXPECT_EQ(be->name(), "zb-h1");
  EXPECT_EQ(be->capabilities().max_virtual_stages, 1);
  const auto all = be->schedules(4, 8);
  EXPECT_EQ(passes(all[0]),
            "F0 F1 F2 F3 b0 W0 F4 b1 W1 F5 b2 W2 F6 b3 W3 F7 b4 W4 b5 W5 b6 W6 b7 W7");
  EXPECT_EQ(passes(all[3]),
            "F0 b0 F1 b1 F2 b2 F3 b3 W0 F4 b4 W1 F5 b5 W2 F6 b6 W3 F7 b7 W4 W5 W6 W7");
  // A middle stage: receive the gradient, the input half, send it on, later the weight half.
  const auto r = rows(all[1]);
  const std::vector<std::vector<int32_t>> first_backward = {
      {RG, 0, 0, 0}, {BI, 0, 0, 0}, {SG, 0, 0, 0}};
  EXPECT_EQ(std::vector<std::vector<int32_t>>(r.begin() + 12, r.begin() + 15), first_backward);
  const PipeTimeline t = pipeline_timeline(all, 8, 1);
  EXPECT_TRUE(t.split);
  EXPECT_EQ(t.makespan, 27);
  EXPECT_DOUBLE_EQ(t.bubble, 3.0 / 27.0);
  EXPECT_EQ(t.in_flight, (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(t.peak_buffers, (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(t.rows[0].substr(0, 29), "F0 F1 F2 F3 .  .  .  B0 W0 F4");
  EXPECT_EQ(t.rows[3].substr(0, 29), ".  .  .  F0 B0 F1 B1 F2 B2 F3");
  int weights = 0;
  for (const PipeBox& b : t.boxes) {
    EXPECT_EQ(b.length, 1);
    weights += b.pass == 'W';
    EXPECT_NE(b.pass, 'B');
  }
  EXPECT_EQ(weights, 4 * 8);
  EXPECT_EQ(pipe_bubble_text(t, 8, 1),
            "0.111 of the step (formula (p-1)/(3m+p-1) = 3/27 = 0.111 with a split backward; "
            "1F1B's (p-1)/(m+p-1) = 3/11 = 0.273)");
  // One stage: gradient accumulation with split backwards.
  EXPECT_EQ(passes(be->schedule(0, 1, 2)), "F0 b0 W0 F1 b1 W1");
}

// Every layout of p 1..4 and m in {1, 2, 3, 4, 8, 16}: valid streams that run together; the
// bubble at most half of 1F1B's (whole backward 2) where p >= 2 and m >= p, whether counted over
// the step or as each stage's idle time between its first and last pass; at most one micro-batch
// more in flight than 1F1B holds (its p on the first stage), none on any stage beyond p.
TEST(ZeroBubbleH1, HalvesTheBubbleOf1F1BWithItsMemory) {
  Backend zb(TRIAD_ZBH1_PLUGIN), one(TRIAD_1F1B_PLUGIN);
  // Per stage, the idle time between its first and last pass.
  auto between = [](const PipeTimeline& t) {
    std::vector<int> first(t.rows.size(), 1 << 30), last(t.rows.size(), 0), busy(t.rows.size());
    for (const PipeBox& b : t.boxes) {
      first[size_t(b.stage)] = std::min(first[size_t(b.stage)], b.start);
      last[size_t(b.stage)] = std::max(last[size_t(b.stage)], b.start + b.length);
      busy[size_t(b.stage)] += b.length;
    }
    int idle = 0;
    for (size_t s = 0; s < t.rows.size(); ++s) idle += last[s] - first[s] - busy[s];
    return idle;
  };
  for (int p = 1; p <= 4; ++p)
    for (int m : {1, 2, 3, 4, 8, 16}) {
      const std::string at = "p " + std::to_string(p) + ", m " + std::to_string(m);
      std::vector<PipeSchedule> streams;
      ASSERT_NO_THROW(streams = zb->schedules(p, m)) << at;
      EXPECT_EQ(simulate_pipeline(streams, m, 1), "") << at;
      const PipeTimeline z = pipeline_timeline(streams, m, 1);
      const PipeTimeline o = pipeline_timeline(one->schedules(p, m), m, 1);
      EXPECT_LE(z.max_in_flight, o.max_in_flight + 1) << at;
      for (int s = 0; s < p; ++s) {
        EXPECT_LE(z.in_flight[size_t(s)], std::min(p, m)) << at << ", stage " << s;
        EXPECT_EQ(streams[size_t(s)].buffers, std::min(p, m)) << at << ", stage " << s;
      }
      EXPECT_LE(z.makespan, o.makespan) << at;
      if (p >= 2 && m >= p) {
        EXPECT_LE(z.bubble, 0.5 * o.bubble) << at;
        EXPECT_LE(between(z), 0.5 * between(o)) << at;
        // The paper's (p-1)(F+B-W) per stage: the step lasts 3m + p - 1 units.
        EXPECT_EQ(z.makespan, 3 * m + p - 1) << at;
      }
    }
}

// A plugin built against pipeline_v1.h (GPipe) loads through the adapter and passes the suite.
TEST(PipelineSuite, VersionOnePluginPassesThroughTheAdapter) {
  Backend be(kVersion1);
  EXPECT_EQ(be->name(), "v1old");
  EXPECT_EQ(passes(be->schedule(0, 2, 3)), "F0 F1 F2 B2 B1 B0");
  std::string out;
  EXPECT_EQ(run_command(std::string(TRIAD_PLUGIN_TEST_EXE) + " pipeline " + kVersion1 +
                            " --expect-pass 11 --expect-skip 0",
                        &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("PASS v1old p=8 (32 layouts of m 1..32 run together"));
}

TEST(PipelineBackend, Names) {
  EXPECT_STREQ(pipe_op_name(LOAD), "load");
  EXPECT_STREQ(pipe_op_name(SA), "send-activation");
  EXPECT_STREQ(pipe_op_name(STEP), "optimizer-step");
  EXPECT_STREQ(pipe_op_name(BI), "backward-input");
  EXPECT_STREQ(pipe_op_name(BW), "backward-weight");
  EXPECT_STREQ(pipe_op_name(TRIAD_PIPE_OP_COUNT_V2), "unknown");
  EXPECT_EQ(pipe_layout_text({1, 4, 1, 2}), "stage 1 of 4, 1 micro-batch, 2 virtual stages");
  EXPECT_EQ(describe_capabilities(triad_pipe_caps_v1{1}), "not interleaved (1 virtual stage)");
  EXPECT_EQ(describe_capabilities(triad_pipe_caps_v1{0}),
            "interleaved, any number of virtual stages");
}

int run_suite(const std::string& args, std::string* out) {
  return run_command(std::string(TRIAD_PLUGIN_TEST_EXE) + " pipeline " + args, out);
}

TEST(PipelineSuite, CorrectHostilePluginPasses) {
  std::string out;
  EXPECT_EQ(run_suite(std::string(kHostile) + " --param bug=none --expect-pass 11", &out), 0)
      << out;
}

// Each planted defect fails the suite (exit 1) at the first layout that shows it.
TEST(PipelineSuite, CatchesEachPlantedDefect) {
  const std::pair<const char*, const char*> bugs[] = {
      {"deadlock",
       "FAIL hostile p=2: m=2: deadlock: stage 0 waits at instruction 3 (recv-grad of "
       "micro-batch 0 in buffer 0) for stage 1; stage 1 waits at instruction 4 (recv-activation "
       "of micro-batch 1 in buffer 1) for stage 0"},
      {"missing_backward", "FAIL hostile p=1: m=1: stage 0: micro-batch 0 has no backward"},
      {"buffer_overuse",
       "FAIL hostile p=1: m=1: stage 0: instruction 0 (load of micro-batch 0 in buffer 0): buffer "
       "0 is outside the 0 buffers it declares"},
      {"buffer_reuse",
       "FAIL hostile p=2: m=2: stage 0: instruction 3 (load of micro-batch 1 in buffer 0): buffer "
       "0 still holds micro-batch 0, whose backward has not finished"},
      {"send_without_receive",
       "FAIL hostile p=2: m=1: stage 1: instruction 3 (send-activation of micro-batch 0 in "
       "buffer 0): the last virtual stage sends an activation that no stage receives"},
      {"recv_without_send",
       "FAIL hostile p=1: m=1: stage 0: instruction 1 (recv-activation of micro-batch 0 in "
       "buffer 0): the first virtual stage receives an activation that no stage sends"},
      {"forward_before_recv",
       "FAIL hostile p=2: m=1: stage 1: instruction 1 (forward of micro-batch 0 in buffer 0): it "
       "comes before the recv-activation of micro-batch 0"},
      {"swapped_order",
       "FAIL hostile p=2: m=2: stage 1 receives at instruction 1 (recv-activation of micro-batch "
       "1 in buffer 0), but the next activation stage 0 sent it is for micro-batch 0"},
      {"no_optimizer_step",
       "FAIL hostile p=1: m=1: stage 0: the stream has no optimizer-step at its end"},
      {"weight_before_input",
       "FAIL hostile p=1: m=1: stage 0: instruction 2 (backward-weight of micro-batch 0 in buffer "
       "0): it comes before the backward-input of micro-batch 0"},
      {"missing_weight", "FAIL hostile p=1: m=1: stage 0: micro-batch 0 has no backward-weight"},
      {"weight_after_step",
       "FAIL hostile p=1: m=1: stage 0: instruction 6 (backward-weight of micro-batch 0 in buffer "
       "0): it comes after optimizer-step"},
  };
  for (const auto& [bug, expect] : bugs) {
    std::string out;
    EXPECT_EQ(run_suite(std::string(kHostile) + " --quick --param bug=" + bug, &out), 1)
        << bug << "\n"
        << out;
    EXPECT_THAT(out, HasSubstr(expect)) << bug;
  }
}

TEST(PipelineSuite, UserErrorsExitWithTwo) {
  std::string out;
  EXPECT_EQ(run_suite(TRIAD_NAIVE_PLUGIN, &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("a plugin of kind 'pipeline' is needed"));
  out.clear();
  EXPECT_EQ(run_suite(std::string(kHostile) + " --param bug=nope", &out), 2) << out;
}

TEST(ScheduleTool, PrintsTheTimelineAndRefusesWithOneLine) {
  std::string out;
  ASSERT_EQ(run_command(std::string(TRIAD_SCHEDULE_EXE) +
                            " --stages 2 --micro-batches 4 --schedule interleaved --virtual 2",
                        &out),
            0)
      << out;
  EXPECT_THAT(out, AllOf(HasSubstr("interleaved, 2 stages, 4 micro-batches, 2 virtual stages"),
                         HasSubstr("stage 0 | F0a F1a F0b F1b F2a"),
                         HasSubstr("formula (p-1)/(v*m+p-1) = 1/9 = 0.111)"),
                         HasSubstr("buffers per stage: 5 3")));
  out.clear();
  EXPECT_EQ(run_command(std::string(TRIAD_SCHEDULE_EXE) +
                            " --stages 4 --micro-batches 6 --schedule interleaved --virtual 2",
                        &out),
            2);
  EXPECT_THAT(out, AllOf(HasSubstr("triad-schedule: error: pipeline plugin 'interleaved' cannot "
                                   "schedule stage 0 of 4, 6 micro-batches, 2 virtual stages"),
                         HasSubstr("must be a multiple"),
                         HasSubstr("set --micro-batches to 8 or --virtual to 1")));
  out.clear();
  ASSERT_EQ(
      run_command(
          std::string(TRIAD_SCHEDULE_EXE) + " --stages 2 --micro-batches 4 --schedule zb-h1", &out),
      0)
      << out;
  EXPECT_THAT(out, AllOf(HasSubstr("zb-h1, 2 stages, 4 micro-batches, 1 virtual stage (forward 1 "
                                   "time unit, backward 2: its input half B 1, its weight half W "
                                   "1, communication free)"),
                         HasSubstr("cells: F3 / B3 / W3 forward / backward (input half) / weight "
                                   "half of micro-batch 3, . idle"),
                         HasSubstr("stage 0 | F0 F1 .  B0 W0 F2 B1 W1 F3 B2 W2 B3 W3\n"),
                         HasSubstr("stage 1 | .  F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3\n"),
                         HasSubstr("bubble: 0.077 of the step (formula (p-1)/(3m+p-1) = 1/13 = "
                                   "0.077 with a split backward; 1F1B's (p-1)/(m+p-1) = 1/5 = "
                                   "0.200)"),
                         HasSubstr("in flight: at most 2 micro-batches (per stage: 2 2)")));
  out.clear();
  EXPECT_EQ(
      run_command(std::string(TRIAD_SCHEDULE_EXE) + " --stages 4 --micro-batches 8 --schedule 1fb1",
                  &out),
      2);
  EXPECT_THAT(out, HasSubstr("did you mean '1f1b'"));
}

// Draws p = 4, m = 8 of `schedule`: a picture when python3 has matplotlib, otherwise one line and
// exit 2.
void draws_or_says_what_is_missing(const std::string& schedule) {
  const auto png = test_tmp_dir() / "schedule.png";
  std::string out;
  const int rc =
      run_command(std::string(TRIAD_SCHEDULE_EXE) + " --stages 4 --micro-batches 8 --schedule " +
                      schedule + " --png " + png.string(),
                  &out);
  // The python3 the tool runs: Debian's where there is one, else PATH's.
  std::string probe;
  const std::string python =
      std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const bool matplotlib = run_command(python + " -c 'import matplotlib'", &probe) == 0;
  if (matplotlib) {
    EXPECT_EQ(rc, 0) << out;
    EXPECT_GT(std::filesystem::file_size(png), 1000u);
  } else {
    EXPECT_EQ(rc, 2) << out;
    EXPECT_THAT(out, HasSubstr("--png needs"));
    EXPECT_FALSE(std::filesystem::exists(png));
  }
  std::filesystem::remove(png);
}

// --png: a picture when python3 has matplotlib, otherwise one line and exit 2 (1F1B's whole
// backwards and ZB-H1's halves alike).
TEST(ScheduleTool, DrawsOrSaysWhatIsMissing) {
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    SCOPED_TRACE(schedule);
    draws_or_says_what_is_missing(schedule);
  }
}

TEST(InfoTool, ListsPipelinePluginsWithCapabilities) {
  std::string out;
  ASSERT_EQ(run_command(std::string(TRIAD_INFO_EXE) + " --kind pipeline", &out), 0);
  EXPECT_THAT(out, AllOf(HasSubstr("pipeline gpipe\n"), HasSubstr("pipeline 1f1b\n"),
                         HasSubstr("pipeline interleaved\n"), HasSubstr("pipeline zb-h1\n"),
                         HasSubstr("abi:          plugin 1, pipeline 2\n"),
                         HasSubstr("capabilities: not interleaved (1 virtual stage)\n"),
                         HasSubstr("capabilities: interleaved, any number of virtual stages\n")));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("\ntensor ")));
}

}  // namespace
}  // namespace triad
