// The performance model: machine descriptions (read, refused), the timed pipeline streams, the
// ring collectives, and predictions of a 2-stage pipeline and a 2-rank data-parallel step on a
// toy machine against the same steps computed by hand (ZeRO's parameter gathers after the step
// or behind the next forward, overlap_param_gather).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/perf/machine.hpp"
#include "triad/core/perf/simulate.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/train/engine.hpp"

namespace {

namespace fs = std::filesystem;
using triad::PipeSchedule;

fs::path scratch() {
  const fs::path d =
      fs::temp_directory_path() /
      ("triad-test-simulate-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(d);
  return d;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p) << text;
  return p.string();
}

// A toy machine: 1 TFLOP/s at every size, memory and the host so fast that element-wise work
// and the optimizer cost nothing measurable, links of 1 GB/s and 10 µs, no overheads.
const char* kToy = R"(name: toy
source: a test's own numbers
devices_per_node: 2
device:
  memory: 1TiB
  peak_tflops: {fp32: 1}
  efficiency: [[1, 1.0]]
  memory_bandwidth_gbs: 1.0e15
links:
  intra_node: {bandwidth_gbs: 1, latency_us: 10}
  inter_node: {bandwidth_gbs: 1, latency_us: 10}
  host: {bandwidth_gbs: 1}
)";

// A 2-layer GPT (h 64, 2 heads, 32 tokens, vocabulary 256), micro-batch 2, 2 micro-batches.
std::string toy_config(const std::string& parallel) {
  return write("toy-" + std::to_string(parallel.size()) + ".yaml",
               "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 2, seq_length: 32, "
               "vocab_size: 256}\n"
               "training: {train_iters: 1, micro_batch_size: 2, gradient_accumulation_steps: 2}\n" +
                   parallel);
}

TEST(Curve, InterpolatesInLogAndHoldsItsEnds) {
  triad::Curve c{{{1e6, 0.2}, {1e8, 0.6}}};
  EXPECT_DOUBLE_EQ(c.at(1e3), 0.2);
  EXPECT_DOUBLE_EQ(c.at(1e6), 0.2);
  EXPECT_NEAR(c.at(1e7), 0.4, 1e-12);
  EXPECT_DOUBLE_EQ(c.at(1e9), 0.6);
}

TEST(Collectives, RingAllReduceAndGather) {
  triad::Link l;
  l.bandwidth = 1e9;
  l.latency = 1e-6;
  // 4 ranks, 4 MB: 2(n-1) = 6 latencies and 2(n-1)/n = 1.5 times the bytes.
  EXPECT_DOUBLE_EQ(triad::collective_time(l, "all_reduce", 4e6, 4), 6e-6 + 6e-3);
  EXPECT_DOUBLE_EQ(triad::collective_time(l, "all_gather", 4e6, 4), 3e-6 + 3e-3);
  EXPECT_DOUBLE_EQ(triad::collective_time(l, "p2p", 4e6, 2), 1e-6 + 4e-3);
  EXPECT_EQ(triad::collective_time(l, "all_reduce", 4e6, 1), 0.0);
  l.ops["all_reduce"] = {2e9, 0.0};  // a calibrated collective of its own
  EXPECT_DOUBLE_EQ(triad::collective_time(l, "all_reduce", 4e6, 4), 3e-3);
}

// Two stages, two micro-batches, all forwards then all backwards; stage 0's passes take 1 and 2,
// stage 1's 3 and 4, a message 0.5.
TEST(PipelineTiming, HandComputedTwoStages) {
  enum { L = TRIAD_PIPE_LOAD_MICRO_BATCH, F = TRIAD_PIPE_FORWARD, B = TRIAD_PIPE_BACKWARD };
  enum { SA = TRIAD_PIPE_SEND_ACTIVATION, RA = TRIAD_PIPE_RECV_ACTIVATION };
  enum { SG = TRIAD_PIPE_SEND_GRAD, RG = TRIAD_PIPE_RECV_GRAD };
  const triad_pipe_instr_v1 end[] = {{TRIAD_PIPE_REDUCE_TIED_GRADS, -1, -1, 0},
                                     {TRIAD_PIPE_REDUCE_GRADS, -1, -1, 0},
                                     {TRIAD_PIPE_OPTIMIZER_STEP, -1, -1, 0}};
  PipeSchedule s0{2,
                  {{L, 0, 0, 0},
                   {F, 0, 0, 0},
                   {SA, 0, 0, 0},
                   {L, 1, 1, 0},
                   {F, 1, 1, 0},
                   {SA, 1, 1, 0},
                   {RG, 0, 0, 0},
                   {B, 0, 0, 0},
                   {RG, 1, 1, 0},
                   {B, 1, 1, 0}}};
  PipeSchedule s1{2,
                  {{L, 0, 0, 0},
                   {RA, 0, 0, 0},
                   {F, 0, 0, 0},
                   {L, 1, 1, 0},
                   {RA, 1, 1, 0},
                   {F, 1, 1, 0},
                   {B, 0, 0, 0},
                   {SG, 0, 0, 0},
                   {B, 1, 1, 0},
                   {SG, 1, 1, 0}}};
  for (auto* s : {&s0, &s1}) s->instrs.insert(s->instrs.end(), std::begin(end), std::end(end));
  triad::PipeCosts costs;
  costs.pass = [](int stage, int, bool backward) {
    return stage == 0 ? (backward ? 2.0 : 1.0) : (backward ? 4.0 : 3.0);
  };
  costs.transfer = [](int, int, bool) { return 0.5; };
  const triad::PipeTiming t = triad::pipeline_timing({s0, s1}, 2, 1, costs);
  // Stage 0: F0 0-1 (arrives 1.5), F1 1-2 (2.5). Stage 1: F0 1.5-4.5, F1 4.5-7.5, B0 7.5-11.5
  // (its gradient arrives 12), B1 11.5-15.5 (16). Stage 0: B0 12-14, B1 16-18.
  EXPECT_DOUBLE_EQ(t.makespan, 18.0);
  EXPECT_DOUBLE_EQ(t.end[0], 18.0);
  EXPECT_DOUBLE_EQ(t.end[1], 15.5);
  EXPECT_DOUBLE_EQ(t.busy[0], 6.0);
  EXPECT_DOUBLE_EQ(t.busy[1], 14.0);
  // The unit costs are triad-schedule's timeline.
  EXPECT_EQ(triad::pipeline_timeline({s0, s1}, 2, 1).makespan, 9);

  // Stage 1 splits its backwards (input half, send, weight half): by default each half takes
  // half of its backward, so the gradients leave earlier. Stage 1: B0 7.5-9.5 (arrives 10), W0
  // 9.5-11.5, B1 11.5-13.5 (14), W1 13.5-15.5. Stage 0: B0 10-12, B1 14-16.
  enum { BI = TRIAD_PIPE_BACKWARD_INPUT, BW = TRIAD_PIPE_BACKWARD_WEIGHT };
  PipeSchedule split = s1;
  split.instrs.resize(6);
  for (int32_t mb : {0, 1})
    for (int32_t op : {int32_t(BI), int32_t(SG), int32_t(BW)})
      split.instrs.push_back({op, mb, mb, 0});
  split.instrs.insert(split.instrs.end(), std::begin(end), std::end(end));
  triad::PipeTiming h = triad::pipeline_timing({s0, split}, 2, 1, costs);
  EXPECT_DOUBLE_EQ(h.makespan, 16.0);
  EXPECT_DOUBLE_EQ(h.end[1], 15.5);
  EXPECT_DOUBLE_EQ(h.busy[1], 14.0);
  // A cost for the halves: input 3, weight 1. B0 7.5-10.5 (11), W0, B1 11.5-14.5 (15), W1 to
  // 15.5; stage 0's B1 15-17.
  costs.half = [](int, int, bool weight) { return weight ? 1.0 : 3.0; };
  h = triad::pipeline_timing({s0, split}, 2, 1, costs);
  EXPECT_DOUBLE_EQ(h.makespan, 17.0);
  EXPECT_DOUBLE_EQ(h.end[1], 15.5);
}

// The toy GPT's passes on the toy machine: a block's forward is 24·t·h² + 4·b·s²·h FLOPs, the
// head's 2·t·h·V, each at 1 TFLOP/s; backward twice the forward; element-wise work is free.
constexpr double kTokens = 2 * 32, kH = 64;
constexpr double kBlock = (24 * kTokens * kH * kH + 4 * 2 * 32.0 * 32 * kH) / 1e12;
constexpr double kHead = 2 * kTokens * kH * 256 / 1e12;

// GPipe's step on 2 stages of 2 micro-batches, as triad-schedule prints it (every forward, then
// the backwards last micro-batch first), from each stage's forward and backward pass times and
// one transfer's.
double gpipe_two_stages(double f0, double b0, double f1, double b1, double msg) {
  const double s1_f0 = f0 + msg + f1, s1_f1 = std::max(s1_f0, 2 * f0 + msg) + f1;
  const double s1_b1 = s1_f1 + b1, s1_b0 = s1_b1 + b1;
  const double s0_b1 = s1_b1 + msg + b0;
  return std::max(s0_b1, s1_b0 + msg) + b0;
}

TEST(Predict, TwoStagePipelineByHand) {
  const triad::Machine mc = triad::load_machine(write("toy.yaml", kToy));
  const triad::Config cfg = triad::load_config(
      toy_config("parallel: {pipeline_model_parallel_size: 2}\npipeline: gpipe\n"), {}, 2);
  const triad::Prediction p = triad::predict(cfg, 2, 1, mc);
  const double f0 = kBlock, b0 = 2 * f0, f1 = kBlock + kHead, b1 = 2 * f1;
  const double msg = 10e-6 + kTokens * kH * 4 / 1e9;
  const double step = gpipe_two_stages(f0, b0, f1, b1, msg);
  EXPECT_NEAR(p.step_s, step, step * 1e-9);
  EXPECT_EQ(p.slowest_stage, 0);
  EXPECT_NEAR(p.breakdown.compute, 2 * (f0 + b0), 1e-9 * step);
  EXPECT_NEAR(p.breakdown.pipeline, step - 2 * (f0 + b0), 1e-9 * step);
  EXPECT_EQ(p.breakdown.data_parallel, 0.0);
  EXPECT_NEAR(p.samples_per_s, 4 / step, 1e-9 * 4 / step);
}

// Tensor parallelism 2 with sequence parallelism, 2 stages on 2 nodes of 2: each tensor rank
// sends its half of the tokens to its peer on the other node. Passes: a block's FLOPs halved and
// two all-reduces of (b, s, h) per direction, and backward the two layernorm outputs gathered
// again (two all-gathers, one all-reduce's time); the embedding's forward all-reduce; the head's
// FLOPs halved, its cross-entropy's three per-token all-reduces forward and one backward.
TEST(Predict, SequenceParallelStagesSendTheirSliceByHand) {
  const triad::Machine mc = triad::load_machine(write("toy.yaml", kToy));
  const triad::Config cfg = triad::load_config(
      toy_config("parallel: {pipeline_model_parallel_size: 2, tensor_model_parallel_size: 2, "
                 "sequence_parallel: true}\npipeline: gpipe\n"),
      {}, 4);
  const triad::Prediction p = triad::predict(cfg, 4, 2, mc);
  const double a = 10e-6, ar = 2 * a + kTokens * kH * 4 / 1e9, ce = 2 * a + kTokens * 4 / 1e9;
  const double f0 = kBlock / 2 + 3 * ar, b0 = kBlock + 3 * ar;
  const double f1 = kBlock / 2 + 2 * ar + kHead / 2 + 3 * ce, b1 = kBlock + kHead + 4 * ar;
  const double msg = a + kTokens * kH * 4 / 2 / 1e9;
  const double step = gpipe_two_stages(f0, b0, f1, b1, msg);
  EXPECT_NEAR(p.step_s, step, step * 1e-9);
}

// The same layout on a machine that hides a tensor-parallel collective wholly behind the GEMM
// beside it (overlap.tensor_parallel 1): in each block's backward the layernorm outputs' gathers
// run behind the qkv and fc input-gradient GEMMs, the input gradients' reduce-scatters behind
// their weight-gradient GEMMs, each GEMM (3·t·h² and 4·t·h² FLOPs per rank) far shorter than its
// collective, so two of each GEMM's time is hidden; the head's input-gradient all-reduce behind
// its weight GEMM (t·h·V FLOPs per rank). parallel.overlap_tensor_comm false hides nothing.
TEST(Predict, TensorCommOverlapHidesTheColumnBackwardCollectivesByHand) {
  const std::string toy = kToy;
  const triad::Machine mc = triad::load_machine(
      write("toy-tp-overlap.yaml", toy + "overlap: {data_parallel: 0, tensor_parallel: 1}\n"));
  EXPECT_EQ(mc.overlap_data_parallel, 0.0);
  EXPECT_EQ(mc.overlap_tensor_parallel, 1.0);
  for (const bool overlap : {true, false}) {
    const triad::Config cfg = triad::load_config(
        toy_config(std::string("parallel: {pipeline_model_parallel_size: 2, "
                               "tensor_model_parallel_size: 2, sequence_parallel: true, "
                               "overlap_tensor_comm: ") +
                   (overlap ? "true" : "false") + "}\npipeline: gpipe\n"),
        {}, 4);
    const triad::Prediction p = triad::predict(cfg, 4, 2, mc);
    const double a = 10e-6, ar = 2 * a + kTokens * kH * 4 / 1e9, ce = 2 * a + kTokens * 4 / 1e9;
    const double block_hidden = overlap ? 2 * (3 + 4) * kTokens * kH * kH / 1e12 : 0.0;
    const double head_hidden = overlap ? kHead / 2 : 0.0;
    const double f0 = kBlock / 2 + 3 * ar, b0 = kBlock + 3 * ar - block_hidden;
    const double f1 = kBlock / 2 + 2 * ar + kHead / 2 + 3 * ce;
    const double b1 = kBlock + kHead + 4 * ar - block_hidden - head_hidden;
    const double msg = a + kTokens * kH * 4 / 2 / 1e9;
    const double step = gpipe_two_stages(f0, b0, f1, b1, msg);
    EXPECT_NEAR(p.step_s, step, step * 1e-9) << "overlap_tensor_comm " << overlap;
  }
  // A share above 1 is refused, naming the key.
  try {
    triad::load_machine(write("toy-bad-overlap.yaml", toy + "overlap: {tensor_parallel: 1.5}\n"));
    ADD_FAILURE() << "overlap.tensor_parallel 1.5 accepted";
  } catch (const triad::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("overlap.tensor_parallel"), std::string::npos) << e.what();
  }
}

// parallel.tp_comm_overlap on the same layout and machine: the forward's gathers (before qkv and
// fc) and reduce-scatters (after the projections) and the backward's gathers of the projections'
// output gradients go around a ring of t = 2 ranks, one GEMM per rank's tokens. The toy's GEMMs
// run at one speed whatever their size and its element-wise work is free, so the ring costs
// nothing more, and each GEMM (qkv 3·t·h², proj t·h², fc and its projection 4·t·h² per rank) is
// far shorter than a collective: each hides the GEMMs of all its steps but one, (t-1)/t of the
// GEMM. Forward: 1/2·(3 + 4 + 1 + 4); backward, behind the projections' input gradients:
// 1/2·(1 + 4).
TEST(Predict, TpCommOverlapHidesTheChunkedCollectivesByHand) {
  const std::string toy = kToy;
  const triad::Machine mc = triad::load_machine(
      write("toy-tp-chunks.yaml", toy + "overlap: {data_parallel: 0, tensor_parallel: 1}\n"));
  for (const bool chunks : {true, false}) {
    const triad::Config cfg = triad::load_config(
        toy_config(std::string("parallel: {pipeline_model_parallel_size: 2, "
                               "tensor_model_parallel_size: 2, sequence_parallel: true, "
                               "tp_comm_overlap: ") +
                   (chunks ? "true" : "false") + "}\npipeline: gpipe\n"),
        {}, 4);
    const triad::Prediction p = triad::predict(cfg, 4, 2, mc);
    const double a = 10e-6, ar = 2 * a + kTokens * kH * 4 / 1e9, ce = 2 * a + kTokens * 4 / 1e9;
    const double th2 = kTokens * kH * kH / 1e12;
    const double fwd_hidden = chunks ? 0.5 * (3 + 4 + 1 + 4) * th2 : 0.0;
    const double input_hidden = chunks ? 0.5 * (1 + 4) * th2 : 0.0;
    const double block_hidden = 2 * (3 + 4) * th2 + input_hidden, head_hidden = kHead / 2;
    const double f0 = kBlock / 2 + 3 * ar - fwd_hidden, b0 = kBlock + 3 * ar - block_hidden;
    const double f1 = kBlock / 2 + 2 * ar + kHead / 2 + 3 * ce - fwd_hidden;
    const double b1 = kBlock + kHead + 4 * ar - block_hidden - head_hidden;
    const double msg = a + kTokens * kH * 4 / 2 / 1e9;
    const double step = gpipe_two_stages(f0, b0, f1, b1, msg);
    EXPECT_NEAR(p.step_s, step, step * 1e-9) << "tp_comm_overlap " << chunks;
  }
}

TEST(Predict, DataParallelRingAllReduceByHand) {
  const triad::Machine mc = triad::load_machine(write("toy.yaml", kToy));
  const triad::Config cfg = triad::load_config(toy_config("pipeline: gpipe\n"), {}, 2);
  const triad::Prediction p = triad::predict(cfg, 2, 1, mc);
  const double psi = double(triad::plan_run(cfg).stage_params[0]);
  // Two micro-batches of two blocks and the head, forward and backward; then one bucket's ring
  // all-reduce of the fp32 gradients over 2 ranks: 2 latencies and the bytes once, none hidden
  // (the machine overlaps nothing).
  const double compute = 2 * 3 * (2 * kBlock + kHead);
  const double all_reduce = 2 * 10e-6 + psi * 4 / 1e9;
  EXPECT_NEAR(p.breakdown.compute, compute, 1e-9 * compute);
  EXPECT_NEAR(p.breakdown.data_parallel, all_reduce, 1e-9 * all_reduce);
  EXPECT_NEAR(p.step_s, compute + all_reduce, 1e-6 * (compute + all_reduce));
}

// The parameters' gather waited for after the step (overlap_param_gather false): the model as it
// was before that flag, unchanged.
TEST(Predict, ZeroStage1ReduceScattersThenGathersByHand) {
  const triad::Machine mc = triad::load_machine(write("toy.yaml", kToy));
  for (const bool scatter : {true, false}) {
    const triad::Config cfg =
        triad::load_config(toy_config(std::string("pipeline: gpipe\nzero_optimization: {stage: 1, "
                                                  "overlap_param_gather: false, reduce_scatter: ") +
                                      (scatter ? "true" : "false") + "}\n"),
                           {}, 2);
    const triad::Prediction p = triad::predict(cfg, 2, 1, mc);
    const double psi = double(triad::plan_run(cfg).stage_params[0]);
    // 2Ψ: the gradients' ring reduce-scatter and the parameters' all-gather over 2 ranks, one
    // latency and half the bytes each, once per unit (the embedding, 2 blocks, the head; the
    // machine hides nothing); 3Ψ: the all-reduce (2 latencies, the bytes once), then one gather
    // of the whole arena.
    auto half = [&](double count) { return count * 10e-6 + psi * 4 / 2 / 1e9; };
    const double want = scatter ? 2 * half(4) : 2 * 10e-6 + psi * 4 / 1e9 + half(1);
    EXPECT_NEAR(p.breakdown.data_parallel, want, 1e-9 * want) << "reduce_scatter " << scatter;
  }
}

// What each ZeRO stage moves in bf16 on a toy machine whose memory moves 1 GB/s: gradients
// reduce in fp32; stages 1 and 2 gather the fp32 master weights after the step, unit by unit,
// and then write the bf16 compute copy from the whole arena (4 bytes read, 2 written per
// element; overlap_param_gather false); stage 3 gathers the bf16 compute copy per unit and
// zeroes only the fp32 gradient windows.
TEST(Predict, ZeroStagesMoveWhatTheEngineMovesInBf16) {
  const std::string toy = kToy;
  const size_t bandwidth = toy.find("1.0e15");
  const std::string slow = toy.substr(0, bandwidth) + "1" + toy.substr(bandwidth + 6);
  const triad::Machine mc = triad::load_machine(write("toy-slow-memory.yaml", slow));
  for (const int z : {1, 2, 3}) {
    const triad::Config cfg = triad::load_config(
        toy_config("pipeline: gpipe\nprecision: bf16\ndevice: cuda\nzero_optimization: {stage: " +
                   std::to_string(z) + ", overlap_param_gather: false}\n"),
        {}, 2);
    const triad::Prediction p = triad::predict(cfg, 2, 1, mc);
    const double psi = double(triad::plan_run(cfg).stage_params[0]), a = 10e-6;
    // Over 2 ranks a gather or a reduce-scatter is one latency and half the bytes; 4 units (the
    // embedding, 2 blocks, the head) share each micro-batch's, each paying its latency.
    auto half = [&](double bytes, double count) { return count * a + bytes / 2 / 1e9; };
    const double gather_after = half(psi * 4, 4) + psi * 6 / 1e9;
    const double windows = 2 * psi * 4 / 1e9;
    const double want = z == 1   ? half(psi * 4, 4) + gather_after
                        : z == 2 ? 2 * half(psi * 4, 4) + gather_after + windows
                                 : 2 * (2 * half(psi * 2, 4) + half(psi * 4, 4)) + windows;
    EXPECT_NEAR(p.breakdown.data_parallel, want, 1e-9 * want) << "stage " << z;
  }
}

// The toy machine with links of `gbs` GB/s and `latency_us`, memory of `memory_gbs` GB/s, and
// `overlap` of the data-parallel traffic under compute hidden.
triad::Machine link_toy(const std::string& name, double gbs, double latency_us, double memory_gbs,
                        double overlap) {
  std::string t = kToy;
  for (const char* link : {"intra_node", "inter_node"}) {
    const std::string from = std::string(link) + ": {bandwidth_gbs: 1, latency_us: 10}";
    t.replace(t.find(from), from.size(),
              std::string(link) + ": {bandwidth_gbs: " + std::to_string(gbs) +
                  ", latency_us: " + std::to_string(latency_us) + "}");
  }
  t.replace(t.find("1.0e15"), 6, std::to_string(memory_gbs));
  return triad::load_machine(write(
      "opg-" + name + ".yaml", t + "overlap: {data_parallel: " + std::to_string(overlap) + "}\n"));
}

// The toy machine with links of 100 GB/s and 1 µs that hides all the data-parallel traffic it
// can: a block's reduce-scatter over 2 ranks (about 2 µs) takes less than its backward (13.6 µs).
triad::Machine fast_toy() {
  return link_toy("toy-fast", 100, 1, 1.0e15, 1);
}

// The toy GPT's units per rank: the embedding (wte 256 × 64 and wpe 32 × 64), a block (12·h² +
// 13·h), the head's final layernorm (2·h, and the tied wte copy on a pipeline's last stage).
constexpr double kWte = 256 * kH, kEmbedding = kWte + 32 * kH, kUnitBlock = 12 * kH * kH + 13 * kH;
constexpr double kLnF = 2 * kH;
constexpr double kAlpha = 1e-6, kBw = 100e9;
// A ring reduce-scatter or all-gather of `elements` fp32 values over 2 ranks.
double over2(double elements, double count = 1) {
  return count * kAlpha + elements * 4 / 2 / kBw;
}

// ZeRO-1 by unit, 2 data-parallel ranks, 4 layers: the last micro-batch's backward finishes the
// head, blocks 3, 2, 1, 0 and the embedding in that order, and each unit's reduce-scatter starts
// then, one after another. Those of the head and blocks 3 to 1 end under the backward of the
// blocks still to go; block 0's starts when only the embedding's backward (free here: the toy's
// memory) is left, and the embedding's once block 0's is done: those two are exposed. After the
// step the fp32 weights are gathered unit by unit, nothing hidden (overlap_param_gather false:
// ZeroParamGatherBehindTheNextForwardByHand hides them). With overlap_comm off, every
// reduce-scatter waits for the backward's end. (The engine before the partitioning by unit
// reduce-scattered the whole arena after the backward: 1 latency and all the bytes.)
TEST(Predict, ZeroStage1ReduceScattersEachUnitBehindTheBackwardByHand) {
  const triad::Machine mc = fast_toy();
  for (const bool overlap : {true, false}) {
    const triad::Config cfg =
        triad::load_config(toy_config(std::string("pipeline: gpipe\nzero_optimization: {stage: 1, "
                                                  "overlap_param_gather: false, overlap_comm: ") +
                                      (overlap ? "true" : "false") + "}\n"),
                           {"model.num_layers=4"}, 2);
    const triad::RunPlan plan = triad::plan_run(cfg);
    const size_t block = size_t(kUnitBlock);
    ASSERT_EQ(plan.stage_units[0],
              (std::vector<size_t>{size_t(kEmbedding), block, block, block, block, size_t(kLnF)}));
    const double psi = kEmbedding + 4 * kUnitBlock + kLnF;
    ASSERT_EQ(double(plan.stage_params[0]), psi);
    const triad::Prediction p = triad::predict(cfg, 2, 1, mc);
    ASSERT_LT(over2(kUnitBlock), 2 * kBlock);  // a block's fits under the next one's backward
    const double scatter = overlap ? over2(kUnitBlock) + over2(kEmbedding) : over2(psi, 6);
    const double want = scatter + over2(psi, 6);
    EXPECT_NEAR(p.breakdown.data_parallel, want, 1e-9 * want) << "overlap_comm " << overlap;
  }
}

// 2 stages on 2 nodes (a rank per device), 2 data-parallel ranks in each, 4 layers: stage 0
// holds the embedding and 2 blocks, stage 1 2 blocks and the head with its copy of wte. Stage 0
// ends last; then the end stages all-reduce the tied wte gradient (2 latencies, its bytes once),
// queued on the transport behind the reduce-scatters launched before it, and only then may the
// embedding's reduce-scatter start. One chunk per stage: block 1's reduce-scatter ends under
// block 0's backward, block 0's starts at the backward's end (the embedding's is free here),
// then the tied sum, then the embedding's. Two interleaved chunks per stage: nothing starts
// before the backward's end, so the tied sum and every reduce-scatter are exposed. The weights'
// gather after the step is waited for there (overlap_param_gather false).
TEST(Predict, ZeroStage1PipelineTiedEmbeddingAndInterleavedChunksByHand) {
  const triad::Machine mc = fast_toy();
  for (const int chunks : {1, 2}) {
    const triad::Config cfg =
        triad::load_config(toy_config(std::string("zero_optimization: {stage: 1, "
                                                  "overlap_param_gather: false}\npipeline: ") +
                                      (chunks == 1 ? "1f1b" : "interleaved") +
                                      "\nparallel: {pipeline_model_parallel_size: 2, "
                                      "virtual_pipeline_model_parallel_size: " +
                                      std::to_string(chunks) + "}\n"),
                           {"model.num_layers=4"}, 4);
    ASSERT_EQ(triad::plan_run(cfg).stage_units[0],
              (std::vector<size_t>{size_t(kEmbedding), size_t(kUnitBlock), size_t(kUnitBlock)}));
    const triad::Prediction p = triad::predict(cfg, 4, 2, mc);
    ASSERT_EQ(p.slowest_stage, 0);
    const double tied = 2 * kAlpha + kWte * 4 / kBw;
    const double psi = kEmbedding + 2 * kUnitBlock;
    const double scatter =
        chunks == 1 ? over2(kUnitBlock) + tied + over2(kEmbedding) : tied + over2(psi, 3);
    const double want = scatter + over2(psi, 3);
    EXPECT_NEAR(p.breakdown.data_parallel, want, 1e-9 * want) << chunks << " chunks per stage";
  }
}

// The toy GPT with `layers` blocks, micro-batch 2, 2 micro-batches, `zero` its
// zero_optimization and `rest` the rest of the layout, in a file of its own (`name`).
std::string zero_config(const std::string& name, const std::string& zero, int layers,
                        const std::string& rest = "pipeline: gpipe\n") {
  return write("opg-" + name + ".yaml",
               "model: {num_layers: " + std::to_string(layers) +
                   ", hidden_size: 64, num_attention_heads: 2, seq_length: 32, vocab_size: 256}\n"
                   "training: {train_iters: 1, micro_batch_size: 2, "
                   "gradient_accumulation_steps: 2}\n"
                   "zero_optimization: " +
                   zero + "\n" + rest);
}

// overlap_param_gather: ZeRO-1 by unit, 2 data-parallel ranks, 1 block: 3 units, the embedding,
// the block and the head's layernorm. After the step their fp32 gathers start one after another;
// the next step's first forward waits for each unit's before it reads it. The embedding's is
// always exposed (nothing computes before it), the block's behind only the embedding's forward
// (next to nothing: the toy's memory), the head's behind the block's forward (6.8 µs): hidden on
// links of 100 GB/s (1 µs of latency), 3.4 µs of it exposed on links of 1 GB/s (10 µs). The
// machine hides all the traffic it overlaps; the reduce-scatters are as without the flag.
TEST(Predict, ZeroParamGatherBehindTheNextForwardByHand) {
  for (const double gbs : {100.0, 1.0}) {
    const double alpha = gbs == 1 ? 10e-6 : 1e-6, bw = gbs * 1e9;
    const triad::Machine mc =
        link_toy("hide-" + std::to_string(int(gbs)), gbs, alpha * 1e6, 1.0e15, 1);
    triad::Prediction p[2];
    for (const bool on : {false, true}) {
      const triad::Config cfg = triad::load_config(
          zero_config(std::string("unit3-") + (on ? "on" : "off"),
                      std::string("{stage: 1, overlap_param_gather: ") + (on ? "true}" : "false}"),
                      1),
          {}, 2);
      ASSERT_EQ(triad::plan_run(cfg).stage_units[0],
                (std::vector<size_t>{size_t(kEmbedding), size_t(kUnitBlock), size_t(kLnF)}));
      p[on] = triad::predict(cfg, 2, 1, mc);
    }
    auto over = [&](double elements) { return alpha + elements * 4 / 2 / bw; };
    const double g_embedding = over(kEmbedding), g_block = over(kUnitBlock), g_head = over(kLnF);
    // The embedding's forward and backward: its (b, s, h) bytes three times, at 1e15 GB/s.
    const double embedding = 3 * kTokens * kH * 4 / 1e24, block = kBlock;
    ASSERT_GT(g_block, embedding);
    double stall = g_embedding + g_block - embedding;
    if (gbs == 1) {
      ASSERT_GT(g_head, block);
      stall += g_head - block;
    } else {
      ASSERT_LT(g_head, block);
    }
    // The head's reduce-scatter ends under the block's backward; the block's starts when only
    // the embedding's backward is left, the embedding's after it.
    ASSERT_LT(g_head, 2 * block);
    const double scatter = over(kUnitBlock) + over(kEmbedding) - embedding;
    const double gathers = g_embedding + g_block + g_head;
    EXPECT_NEAR(p[0].breakdown.data_parallel, scatter + gathers, 1e-9 * gathers) << gbs;
    EXPECT_NEAR(p[1].breakdown.data_parallel, scatter + stall, 1e-9 * gathers) << gbs;
    EXPECT_EQ(p[1].breakdown.compute, p[0].breakdown.compute) << "fp32: nothing to convert";
    EXPECT_NEAR(p[0].step_s - p[1].step_s, gathers - stall, 1e-9 * gathers) << gbs;
  }
}

// In bf16 with overlap_param_gather the compute copy itself is gathered (2 bytes an element,
// nothing to convert). ZeRO-2, 1 block, links of 1 GB/s and 10 µs: the embedding's gather
// (28 µs) is exposed; the block's (60 µs) outlasts the embedding's forward (25 µs) by its stall;
// the head's (10 µs) ends under the block's forward (the memory's 1 GB/s makes it long). Of the
// gathers' time under compute (the embedding's forward and the head's gather) half is charged
// (the machine hides half of the traffic it overlaps). Without the flag the fp32 gathers and
// then the whole arena's conversion come after the step.
TEST(Predict, ZeroParamGatherInTheComputeDtypeByHand) {
  const triad::Machine mc = link_toy("convert", 1, 10, 1, 0.5);
  triad::Prediction p[2];
  for (const bool on : {false, true}) {
    const triad::Config cfg = triad::load_config(
        zero_config(std::string("convert-") + (on ? "on" : "off"),
                    std::string("{stage: 2, overlap_param_gather: ") + (on ? "true}" : "false}"), 1,
                    "pipeline: gpipe\nprecision: bf16\ndevice: cuda\n"),
        {}, 2);
    ASSERT_EQ(double(triad::plan_run(cfg).stage_params[0]), kEmbedding + kUnitBlock + kLnF);
    p[on] = triad::predict(cfg, 2, 1, mc);
  }
  const double a = 10e-6, bw = 1e9, psi = kEmbedding + kUnitBlock + kLnF;
  auto over = [&](double elements, double bytes) { return a + elements * bytes / 2 / bw; };
  const double fp32 = over(kEmbedding, 4) + over(kUnitBlock, 4) + over(kLnF, 4);
  const double g_embedding = over(kEmbedding, 2), g_block = over(kUnitBlock, 2);
  const double g_head = over(kLnF, 2);
  const double embedding = 3 * kTokens * kH * 2 / bw;  // its forward: (b, s, h) in bf16, 3 times
  ASSERT_GT(g_block, embedding);
  const double waited = g_embedding + (g_block - embedding);
  const double exposed = waited + 0.5 * (embedding + g_head);
  const double off = fp32 + psi * 6 / bw;  // the gathers, then the conversion (4 + 2 bytes)
  EXPECT_NEAR(p[0].breakdown.data_parallel - p[1].breakdown.data_parallel, off - exposed,
              1e-9 * off);
  EXPECT_EQ(p[1].breakdown.compute, p[0].breakdown.compute) << "nothing converted in the forward";
  EXPECT_NEAR(p[0].step_s - p[1].step_s, off - exposed, 1e-9 * off);
}

// The flag moves only the per-unit gathers of ZeRO-1 by unit and ZeRO-2: stage 0, stage 1 with
// reduce_scatter off (one owned block, the whole arena gathered) and stage 3 predict the same
// step with it on or off, to the last bit.
TEST(Predict, ZeroParamGatherFlagLeavesOtherStagesAsTheyWere) {
  const triad::Machine mc = link_toy("other", 1, 10, 1, 0.9);
  for (const std::string zero : {"stage: 0", "stage: 1, reduce_scatter: false", "stage: 3"}) {
    triad::Prediction p[2];
    for (const bool on : {false, true}) {
      const triad::Config cfg = triad::load_config(
          zero_config(std::string("other-") + (on ? "on" : "off"),
                      "{" + zero + ", overlap_param_gather: " + (on ? "true}" : "false}"), 4,
                      "pipeline: gpipe\nprecision: bf16\ndevice: cuda\n"),
          {}, 2);
      p[on] = triad::predict(cfg, 2, 1, mc);
    }
    EXPECT_EQ(p[1].step_s, p[0].step_s) << zero;
    EXPECT_EQ(p[1].breakdown.data_parallel, p[0].breakdown.data_parallel) << zero;
    EXPECT_EQ(p[1].breakdown.compute, p[0].breakdown.compute) << zero;
  }
}

// Overlapping the gathers never predicts a slower step: ZeRO-1 by unit and ZeRO-2, fp32 and
// bf16, one stage or two (one chunk or two interleaved), links that hide the gathers or not,
// machines that hide none, most or all of the overlapped traffic. Where the links are fast and
// the machine hides it all, the step is shorter.
TEST(Predict, ZeroParamGatherOverlapIsNeverSlower) {
  const triad::Machine machines[] = {link_toy("never-slow", 1, 10, 1, 0),
                                     link_toy("never-mid", 10, 5, 100, 0.9),
                                     link_toy("never-fast", 100, 1, 1.0e15, 1)};
  const char* layouts[] = {"pipeline: gpipe\n",
                           "pipeline: 1f1b\nparallel: {pipeline_model_parallel_size: 2}\n",
                           "pipeline: interleaved\nparallel: {pipeline_model_parallel_size: 2, "
                           "virtual_pipeline_model_parallel_size: 2}\n"};
  int shorter = 0;
  for (size_t m = 0; m < std::size(machines); ++m)
    for (size_t l = 0; l < std::size(layouts); ++l)
      for (const std::string zero : {"stage: 1", "stage: 2"})
        for (const std::string precision : {"fp32", "bf16"}) {
          const int world = l == 0 ? 2 : 4;
          double step[2];
          for (const bool on : {false, true}) {
            const triad::Config cfg = triad::load_config(
                zero_config(
                    std::string("never-") + (on ? "on" : "off"),
                    "{" + zero + ", overlap_param_gather: " + (on ? "true}" : "false}"), 4,
                    std::string(layouts[l]) + "precision: " + precision + "\ndevice: cuda\n"),
                {}, world);
            step[on] = triad::predict(cfg, world, world / 2, machines[m]).step_s;
          }
          EXPECT_LE(step[1], step[0] * (1 + 1e-12))
              << "machine " << m << ", layout " << l << ", " << zero << ", " << precision;
          shorter += step[1] < step[0] * (1 - 1e-6);
        }
  EXPECT_GE(shorter, 8);
}

// A curve that rises with size: each of a block's four matrix products (qkv 6·t·h², the
// projection 2·t·h², fc and its projection 8·t·h² each) reaches its own share, not the share of
// their sum; the attention products (4·b·s²·h) and the head (2·t·h·V) theirs.
TEST(Predict, EachMatrixProductOnTheCurveByItsOwnSize) {
  const std::string toy = kToy;
  const size_t at = toy.find("[[1, 1.0]]");
  const triad::Machine mc = triad::load_machine(write(
      "toy-curve.yaml", toy.substr(0, at) + "[[1.0e5, 0.1], [1.0e7, 1.0]]" + toy.substr(at + 10)));
  const triad::Config cfg = triad::load_config(toy_config("pipeline: gpipe\n"), {}, 1);
  const triad::Prediction p = triad::predict(cfg, 1, 1, mc);
  auto time = [&](double flops) { return flops / (1e12 * mc.efficiency.at(flops)); };
  const double th2 = kTokens * kH * kH;
  const double block =
      time(6 * th2) + time(2 * th2) + 2 * time(8 * th2) + time(4 * 2 * 32.0 * 32 * kH);
  // Two micro-batches of two blocks and the head, forward and twice that backward.
  const double compute = 2 * 3 * (2 * block + time(kHead * 1e12));
  EXPECT_NEAR(p.breakdown.compute, compute, 1e-9 * compute);
}

// Triad's unfused CUDA attention on a datasheet machine whose memory moves 10 GB/s: per batch
// element and score element (2 heads × 32 × 32), the forward's GEMMs write the fp32 scores (4
// bytes) and read P (4), its softmax reads the causal half (2) and writes P (4); the backward
// recomputes the scores (4), exponentiates them (2 read, 4 written), reads P for dV (4), writes
// dP (4), reads P and dP's causal halves and writes dS (4 + 4), and reads dS twice (8). At these
// sizes every kernel is bound by its bytes (a GEMM's 131072 FLOPs take 0.13 µs, its 8 KiB 0.8).
TEST(Predict, NaiveCudaAttentionMovesItsScoresByHand) {
  const std::string toy = kToy;
  const size_t at = toy.find("1.0e15");
  const triad::Machine mc =
      triad::load_machine(write("toy-10gbs.yaml", toy.substr(0, at) + "10" + toy.substr(at + 6)));
  const triad::Config cfg =
      triad::load_config(toy_config("pipeline: gpipe\ndevice: cuda\nattention: naive\n"), {}, 1);
  const triad::Prediction p = triad::predict(cfg, 1, 1, mc);
  const double bw = 10e9, scores = 2 * 2 * 32.0 * 32;  // micro-batch 2, 2 heads, 32 × 32
  const double dense = 24 * kTokens * kH * kH / 1e12, elementwise = kTokens * 4 * 26 * kH / bw;
  const double fwd = dense + elementwise + scores * 14 / bw;
  const double bwd = 2 * (dense + elementwise) + scores * 34 / bw;
  const double vocab = double(triad::plan_run(cfg).padded_vocab_size);
  const double head = kHead + (kTokens * vocab * 12 + kTokens * kH * 8) / bw;
  const double embedding = 2 * 3 * kTokens * kH * 4 / bw;
  const double compute = 2 * (2 * (fwd + bwd) + 3 * head + embedding);
  EXPECT_NEAR(p.breakdown.compute, compute, 1e-9 * compute);
}

TEST(Machine, RefusesWhatIsMissingOrWrong) {
  const std::string base = kToy;
  auto refused = [&](const std::string& text, const std::string& want) {
    const std::string path = write("bad.yaml", text);
    try {
      triad::load_machine(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const triad::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  refused(replaced("source: a test's own numbers\n", ""), "source is missing");
  refused(replaced("latency_us: 10}\n  inter", "latency_us: -1}\n  inter"),
          "links.intra_node.latency_us is -1; give a rate above zero");
  refused(replaced("[[1, 1.0]]", "[[1, 0]]"), "device.efficiency[0] has share 0");
  refused(replaced("{fp32: 1}", "{fp8: 1}"), "device.peak_tflops.fp8 is not a precision");
  refused(replaced("devices_per_node: 2", "devices_per_node: 2.5"),
          "devices_per_node is not whole");
  refused(replaced("  host: {bandwidth_gbs: 1}\n", ""), "links.host is missing");
}

}  // namespace
