// The memory estimator (memory_plan.hpp): a one-process run's measured peak, the ZeRO stages'
// model states against the paper's formulas, the fix search and check_memory_fits. The
// multi-process runs are checked by memory_estimate.sh.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/train/engine.hpp"

using namespace triad;

namespace {

Config tiny(int world, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.num_layers=4",
                                   "training.micro_batch_size=4",
                                   "training.gradient_accumulation_steps=1",
                                   "training.global_batch_size=0",
                                   "training.train_iters=2",
                                   "data.kind=synthetic"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config(std::string(TRIAD_SOURCE_DIR) + "/configs/gpt-tiny.yaml", sets, world);
}

}  // namespace

// One process allocates exactly what the estimator replays (the dist test covers the layouts).
TEST(MemoryPlan, OneProcessPeakIsTheEstimate) {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{},
                                                {"training.checkpoint_activations=true"},
                                                {"training.gradient_accumulation_steps=4"},
                                                {"attention.name=flash2"}}) {
    const Config cfg = tiny(1, extra);
    TrainOptions o;
    o.quiet = true;
    o.write_output = false;
    const RunResult r = train(cfg, o);
    const size_t measured = r.steps.back().peak_bytes;
    const size_t estimate = peak_per_rank(estimate_memory(cfg, 1));
    EXPECT_NEAR(double(estimate) / double(measured), 1.0, 0.02)
        << (extra.empty() ? "" : extra[0]) << ": estimate " << estimate << ", measured "
        << measured;
  }
}

// Each recompute granularity's estimate against one process's measured peak (within 2%, as
// above), and the activations the estimator gives each are what the model allocates: the
// measured peaks differ between none, selective and full by exactly the estimates' differences
// (tiny, 4 layers; naive and flash2, whose plugins keep nothing between forward and backward but
// the attention output and lse, so selective saves the same bytes for both).
TEST(MemoryPlan, RecomputeGranularitiesMeasuredAgainstTheEstimate) {
  for (const std::string attn : {"naive", "flash2"}) {
    std::map<std::string, size_t> measured, estimated, activations;
    for (const std::string g : {"none", "selective", "full"}) {
      const Config cfg = tiny(1, {"attention.name=" + attn, "training.recompute_granularity=" + g});
      TrainOptions o;
      o.quiet = true;
      o.write_output = false;
      measured[g] = train(cfg, o).steps.back().peak_bytes;
      const std::vector<MemoryEstimate> e = estimate_memory(cfg, 1);
      estimated[g] = peak_per_rank(e);
      activations[g] = e[0].activations;
    }
    for (const auto& [g, m] : measured)
      EXPECT_NEAR(double(estimated[g]) / double(m), 1.0, 0.02)
          << attn << " " << g << ": estimate " << estimated[g] << ", measured " << m;
    EXPECT_GT(activations["none"], activations["selective"]) << attn;
    EXPECT_GT(activations["selective"], activations["full"]) << attn;
    for (const std::string g : {"selective", "full"}) {
      EXPECT_EQ(measured["none"] - measured[g], estimated["none"] - estimated[g])
          << attn << " " << g;
      EXPECT_EQ(activations["none"] - activations[g], estimated["none"] - estimated[g])
          << attn << " " << g;
    }
  }
}

// The model states follow the paper's formulas: 16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N (to the
// rounding of each unit's slice), and every stage below needs more than the one above.
TEST(MemoryPlan, ZeroStagesMatchThePaper) {
  const Config cfg = tiny(4);  // dp 4
  const auto all = estimate_memory_zero_stages(cfg, 4);
  const double psi = double(all[0][0].elements), N = 4;
  const double paper[4] = {16 * psi, 8 * psi + 8 * psi / N, 4 * psi + 12 * psi / N, 16 * psi / N};
  const char* names[4] = {"16Ψ", "8Ψ+8Ψ/N", "4Ψ+12Ψ/N", "16Ψ/N"};
  for (int s = 0; s < 4; ++s) {
    const MemoryEstimate& e = all[size_t(s)][0];
    EXPECT_EQ(e.zero_stage, s);
    EXPECT_EQ(e.paper_formula, names[s]);
    EXPECT_DOUBLE_EQ(e.paper_model_states, paper[s]);
    EXPECT_NEAR(double(e.model_states()), paper[s], 256.0) << "stage " << s;
    if (s >= 2) {
      EXPECT_GT(e.grad_windows, 0u) << "stage " << s;
    }
    if (s == 3) {
      EXPECT_GT(e.param_windows, 0u);
    }
    if (s > 0) {
      EXPECT_LT(e.step(), all[size_t(s - 1)][0].step()) << "stage " << s;
    }
  }
  // ZeRO-3 builds the whole weights before partitioning them: its setup holds 4Ψ bytes of them
  // (the step then holds 16Ψ/N of model states and the windows).
  EXPECT_GE(all[3][0].setup, 4 * all[3][0].elements + all[3][0].activations);
  // One process partitions nothing: every stage is stage 0's memory.
  const auto one = estimate_memory_zero_stages(tiny(1), 1);
  for (int s = 1; s < 4; ++s) EXPECT_EQ(one[size_t(s)][0].total(), one[0][0].total());
}

TEST(MemoryPlan, CheapestFixTriesZeroStagesFirst) {
  const Config cfg = tiny(2, {"training.micro_batch_size=1"});  // dp 2, stage 0
  const auto all = estimate_memory_zero_stages(cfg, 2);
  // Between stage 1's and stage 0's need: stage 1 is the fix.
  const size_t limit = (all[0][0].total() + all[1][0].total()) / 2;
  const auto fix = cheapest_memory_fix(cfg, 2, limit);
  ASSERT_TRUE(fix);
  EXPECT_EQ(fix->sets, std::vector<std::string>{"zero_optimization.stage=1"});
  EXPECT_EQ(fix->bytes, all[1][0].total());
  // Nothing fits in a byte.
  EXPECT_FALSE(cheapest_memory_fix(cfg, 2, 1));
  // One process at micro-batch 4: a smaller micro-batch (same global batch) comes before
  // checkpointing.
  const Config one = tiny(1);
  const size_t need = peak_per_rank(estimate_memory(one, 1));
  const auto smaller = cheapest_memory_fix(one, 1, need - 1);
  ASSERT_TRUE(smaller);
  EXPECT_EQ(smaller->sets[0], "training.micro_batch_size=2");
  EXPECT_EQ(smaller->sets[1], "training.gradient_accumulation_steps=2");
  EXPECT_LT(smaller->bytes, need);
}

TEST(MemoryPlan, CheckMemoryFits) {
  const Config cfg = tiny(2, {"training.micro_batch_size=1"});
  const size_t need = peak_per_rank(estimate_memory(cfg, 2));
  EXPECT_NO_THROW(check_memory_fits(cfg, 2, need));
  try {
    check_memory_fits(cfg, 2, need - 1024);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(memory_text(double(need))), std::string::npos) << m;
    EXPECT_NE(m.find(memory_text(double(need - 1024))), std::string::npos) << m;
    EXPECT_NE(m.find("--set zero_optimization.stage=1"), std::string::npos) << m;
  }
  try {
    check_memory_fits(cfg, 2, 1);
    FAIL() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("use more ranks"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, DryRunPlanUsesTheEstimate) {
  const Config cfg =
      tiny(4, {"parallel.pipeline_model_parallel_size=2", "training.gradient_accumulation_steps=4",
               "zero_optimization.stage=2"});
  const RunPlan p = plan_run(cfg);
  const auto est = estimate_memory(cfg, 4);
  ASSERT_EQ(p.stage_bytes.size(), 2u);
  for (size_t s = 0; s < 2; ++s) EXPECT_EQ(p.stage_bytes[s], est[s].total());
  EXPECT_EQ(p.stage_memory[0].total(), est[0].total());
  EXPECT_EQ(p.stage_memory[0].optimizer, est[0].optimizer);
}

TEST(MemoryPlan, HostMemoryIsKnown) {
  std::string how;
  EXPECT_GT(host_memory_available(&how), 0u);
  EXPECT_FALSE(how.empty());
}

// Context parallelism: every activation of a block holds T / cp tokens per rank, so a one-layer
// gpt-tiny's activations at cp 2 and 4 are exactly 1/2 and 1/4 of cp 1's (T 4096 and 8192; all
// of them are linear in the tokens: the blocks' sets, the head's logits, recomputation's work
// and backward's scratch). Context attention's workspace comes on top, by hand (fp32,
// micro-batch 1, C 128, H 4, u = T/cp x C x 4 bytes), as ContextAttention allocates it: ulysses
// 10u (8 head-split tensors, the all-to-all's send and receive); ring 9.5u (two key/value
// blocks, two dk/dv blocks, a pair's partials 1.5u) + one lse (T/cp x H x 4); and the
// embedding's rows of the learned position table for the rank's tokens and their gradient
// (2u: fp32 activations and fp32 gradients).
TEST(MemoryPlan, ContextParallelActivationsHoldTokensOverCp) {
  for (const int T : {4096, 8192}) {
    auto cfg = [&](int cp, const std::string& method) {
      return tiny(cp, {"model.num_layers=1", "training.micro_batch_size=1",
                       "model.seq_length=" + std::to_string(T),
                       "model.max_position_embeddings=" + std::to_string(T),
                       "parallel.context_parallel_size=" + std::to_string(cp),
                       "parallel.context_parallel_method=" + method});
    };
    const MemoryEstimate one = estimate_memory(cfg(1, "ring"), 1)[0];
    EXPECT_EQ(one.context_exchange, 0u);
    for (const int cp : {2, 4})
      for (const std::string method : {"ring", "ulysses"}) {
        const MemoryEstimate e = estimate_memory(cfg(cp, method), cp)[0];
        const std::string what = method + " cp " + std::to_string(cp) + " T " + std::to_string(T);
        EXPECT_EQ(e.activations * size_t(cp), one.activations) << what;
        // ZeRO 0: the model states do not shrink with cp.
        EXPECT_EQ(e.params, one.params) << what;
        EXPECT_EQ(e.grads, one.grads) << what;
        EXPECT_EQ(e.optimizer, one.optimizer) << what;
        const size_t t = size_t(T / cp), u = t * 128 * 4;
        const size_t want = (method == "ulysses" ? 10 * u : 9 * u + u / 2 + t * 4 * 4) + 2 * u;
        EXPECT_EQ(e.context_exchange, want) << what;
        EXPECT_EQ(e.buffers(), want + e.scalars + e.pipeline_sends + e.tensor_exchange) << what;
      }
  }
}

// ZeRO shards over DP x CP: dp 2 x cp 2 holds the model states of dp 4 at every stage (N = 4),
// and half the activations of dp 2 (each rank has its data-parallel rank's samples, half of each
// sequence).
TEST(MemoryPlan, ContextParallelZeroShardsOverDpTimesCp) {
  const auto dp4 = estimate_memory_zero_stages(tiny(4), 4);
  const auto dp2cp2 = estimate_memory_zero_stages(tiny(4, {"parallel.context_parallel_size=2"}), 4);
  const auto dp2 = estimate_memory_zero_stages(tiny(2), 2);
  for (int s = 0; s < 4; ++s) {
    const MemoryEstimate &a = dp4[size_t(s)][0], &b = dp2cp2[size_t(s)][0];
    EXPECT_EQ(b.model_states(), a.model_states()) << "stage " << s;
    EXPECT_EQ(b.paper_formula, a.paper_formula) << "stage " << s;
    EXPECT_DOUBLE_EQ(b.paper_model_states, a.paper_model_states) << "stage " << s;
    EXPECT_EQ(b.activations * 2, dp2[size_t(s)][0].activations) << "stage " << s;
  }
  const double psi = double(dp2cp2[3][0].elements);
  EXPECT_DOUBLE_EQ(dp2cp2[3][0].paper_model_states, 16 * psi / 4);
}

// The chunks of an interleaved stage share its activation sets by buffer index (a buffer holds
// one pass at a time across the stage's chunks), so a stage holds the schedule's buffers, not
// that many per chunk: Megatron's 530B layout (Narayanan et al. 2021: tp 8, pp 35, 3 chunks per
// stage, full recomputation, fp16, 80 GB GPUs) fits its first stage in 80 GiB with the optimizer
// sharded (Triad's gradients are fp32); with sets per chunk its activations alone took 132 GiB.
TEST(MemoryPlan, InterleavedChunksShareTheStagesActivationSets) {
  const Config cfg = tiny(
      2520, {"model.num_layers=105", "model.hidden_size=20480", "model.num_attention_heads=128",
             "model.seq_length=2048", "model.vocab_size=51200", "training.micro_batch_size=1",
             "training.global_batch_size=2520", "training.gradient_accumulation_steps=280",
             "training.recompute_granularity=full", "parallel.tensor_model_parallel_size=8",
             "parallel.pipeline_model_parallel_size=35",
             "parallel.virtual_pipeline_model_parallel_size=3", "precision=fp16", "device=cuda",
             "pipeline=interleaved"});
  const auto all = estimate_memory_zero_stages(cfg, 2520);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  EXPECT_LT(double(all[0][0].activations) / gib, 50.0);
  EXPECT_LT(double(all[1][0].total()) / gib, 80.0);
}

// A stage holds its passes' boundary tensors (output, gradients sent and received) only while
// they are live, in slots coloured over its stream, not three per activation set: Megatron's 1T
// layout (tp 8, pp 64, 2 layers per stage, 1F1B) under full recomputation keeps 64 sets of its
// stage's inputs; with three boundary tensors per set its first stage's activations took 4.5 GiB.
TEST(MemoryPlan, StageBoundariesAreHeldOnlyWhileLive) {
  const Config cfg = load_config(
      std::string(TRIAD_SOURCE_DIR) + "/configs/published/megatron-gpt-1t.yaml",
      {"training.recompute_granularity=full", "training.recompute_activations=false"}, 512);
  const auto all = estimate_memory_zero_stages(cfg, 512);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  EXPECT_LT(double(all[0][0].activations) / gib, 2.2);
}
