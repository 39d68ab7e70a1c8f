// The engine on the CUDA device: the same loss sequence as the CPU in fp32, bit-identical
// reruns, Hugging Face weights in and out, and a clear refusal of what the GPU cannot run.
// Every test skips where no GPU is visible.
#include <gtest/gtest.h>

#include <cstdlib>

#include <unistd.h>
#include <cmath>

#include <filesystem>

#include "triad/core/config/config.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/train/engine.hpp"

using namespace triad;
namespace fs = std::filesystem;

namespace {

bool gpu_visible() {
  try {
    make_device("cuda");
    return true;
  } catch (const UserError&) {
    return false;
  }
}

#define REQUIRE_GPU()                                          \
  do {                                                         \
    if (!gpu_visible()) GTEST_SKIP() << "no CUDA GPU visible"; \
  } while (0)

Config config(std::vector<std::string> sets) {
  std::vector<std::string> all = {"training.train_iters=20", "model.num_layers=2",
                                  "data.kind=synthetic"};
  all.insert(all.end(), sets.begin(), sets.end());
  // The source tree: TRIAD_SOURCE_DIR in the environment when the test runs from a build carried
  // to another machine (tools/gpu-check sets it), else where it was built.
  const char* src = std::getenv("TRIAD_SOURCE_DIR");
  return load_config(std::string(src ? src : TRIAD_SOURCE_DIR) + "/configs/gpt-tiny.yaml", all, 1);
}

RunResult run(std::vector<std::string> sets) {
  TrainOptions o;
  o.quiet = true;
  o.write_output = false;
  return train(config(std::move(sets)), o);
}

}  // namespace

// fp32 on the GPU (no TF32) computes what the CPU computes, up to the order of summation.
TEST(GpuTraining, Fp32ReproducesCpuLosses) {
  REQUIRE_GPU();
  for (const char* pos : {"learned", "rope"}) {
    const std::string p = std::string("model.position_embedding=") + pos;
    const auto cpu = run({p, "device=cpu"});
    const auto gpu = run({p, "device=cuda"});
    ASSERT_EQ(gpu.steps.size(), 20u);
    double worst = 0;
    for (size_t i = 0; i < cpu.steps.size(); ++i) {
      const double rel = std::abs(gpu.steps[i].loss - cpu.steps[i].loss) / cpu.steps[i].loss;
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-4) << pos << " step " << i + 1 << ": cpu " << cpu.steps[i].loss << " gpu "
                           << gpu.steps[i].loss;
      EXPECT_NEAR(gpu.steps[i].grad_norm, cpu.steps[i].grad_norm, 1e-3 * cpu.steps[i].grad_norm)
          << pos << " step " << i + 1;
    }
    std::printf("%s positions: worst relative loss difference GPU vs CPU over 20 steps %.3g\n", pos,
                worst);
  }
}

TEST(GpuTraining, SameSeedSameLossesBitForBit) {
  REQUIRE_GPU();
  const auto a = run({"device=cuda"}), b = run({"device=cuda"});
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << i + 1;
  }
}

// Weights exported from a GPU run load into a CPU run (and back) with the same first loss.
TEST(GpuTraining, HuggingFaceRoundTripAcrossDevices) {
  REQUIRE_GPU();
  const fs::path dir = fs::temp_directory_path() / ("triad-gpu-hf-" + std::to_string(getpid()));
  fs::remove_all(dir);
  run({"device=cuda", "training.train_iters=3", "output.export_hf=" + dir.string()});
  const auto cpu =
      run({"device=cpu", "training.train_iters=1", "output.init_from_hf=" + dir.string()});
  const auto gpu =
      run({"device=cuda", "training.train_iters=1", "output.init_from_hf=" + dir.string()});
  EXPECT_NEAR(gpu.steps[0].loss, cpu.steps[0].loss, 1e-5 * cpu.steps[0].loss);
  fs::remove_all(dir);
}

TEST(GpuTraining, GradientAccumulationOnTheGpu) {
  REQUIRE_GPU();
  // global 16 as 1 x 16 and as 4 x 4: the same losses up to rounding.
  const auto one = run({"device=cuda", "training.micro_batch_size=16",
                        "training.gradient_accumulation_steps=1", "training.train_iters=5"});
  const auto four = run({"device=cuda", "training.micro_batch_size=4",
                         "training.gradient_accumulation_steps=4", "training.train_iters=5"});
  for (size_t i = 0; i < one.steps.size(); ++i)
    EXPECT_NEAR(four.steps[i].loss, one.steps[i].loss, 1e-5 * one.steps[i].loss) << i + 1;
}

// Mixed precision (fp32 master weights, Adam and gradients; bf16 or fp16 activations and GEMMs,
// fp16 with the dynamic loss scaler) follows the fp32 loss curve within the usual
// mixed-precision envelope: per-step losses within 2% over 20 steps. Head dim 64 so that the
// tensor-core flash kernels apply too. fp16 is refused until verified on a GPU; this test asks
// for it (TRIAD_UNVERIFIED_GPU_LAYOUTS=1), as tools/gpu-check does.
TEST(GpuTraining, HalfPrecisionFollowsFp32) {
  REQUIRE_GPU();
  const std::vector<std::string> shape = {"model.hidden_size=256", "model.num_attention_heads=4",
                                          "device=cuda"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), shape.begin(), shape.end());
    return run(more);
  };
  const auto fp32 = with({"precision=fp32"});
  // Unset again however the test leaves (an ASSERT returns early).
  struct Unverified {
    Unverified() { setenv("TRIAD_UNVERIFIED_GPU_LAYOUTS", "1", 1); }
    ~Unverified() { unsetenv("TRIAD_UNVERIFIED_GPU_LAYOUTS"); }
  } unverified;
  for (const char* precision : {"bf16", "fp16"})
    for (const char* attn : {"naive", "flash2", "flash1"}) {
      const auto half =
          with({std::string("precision=") + precision, std::string("attention=") + attn});
      ASSERT_EQ(half.steps.size(), fp32.steps.size());
      double worst = 0;
      int skipped = 0;
      for (size_t i = 0; i < fp32.steps.size(); ++i) {
        const double rel = std::abs(half.steps[i].loss - fp32.steps[i].loss) / fp32.steps[i].loss;
        worst = std::max(worst, rel);
        skipped += half.steps[i].skipped;
        EXPECT_LE(rel, 0.02) << precision << " " << attn << " step " << i + 1 << ": fp32 "
                             << fp32.steps[i].loss << " " << precision << " " << half.steps[i].loss;
      }
      // gpt-tiny's gradients are far from fp16's range at the initial scale 2^16.
      EXPECT_EQ(skipped, 0) << precision << " " << attn;
      std::printf(
          "%s (%s) vs fp32 over 20 steps: worst relative loss difference %.3g; "
          "losses fp32 %.4f -> %.4f, %s %.4f -> %.4f; %d steps skipped\n",
          precision, attn, worst, fp32.steps.front().loss, fp32.steps.back().loss, precision,
          half.steps.front().loss, half.steps.back().loss, skipped);
    }
}

// The GPU refuses what it cannot run before anything starts, naming the fix.
TEST(GpuTraining, RefusesFlashInFp32OnTheGpu) {
  REQUIRE_GPU();
  try {
    run({"model.hidden_size=256", "model.num_attention_heads=4", "device=cuda",
         "attention=flash2"});
    FAIL() << "flash2 in fp32 on the GPU was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("use precision: bf16"), std::string::npos) << e.what();
  }
}
