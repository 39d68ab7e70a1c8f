// What a run needs of its device beyond a valid config. load_config accepts any layout on any
// device so that --dry-run and triad-estimate can plan it; the launcher (and each rank) asks
// check_runnable before training.
#include <cstdlib>
#include <string>

#include "triad/core/config/config.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"

namespace triad {

namespace {

bool unverified_gpu_layouts_allowed() {
  const char* v = std::getenv("TRIAD_UNVERIFIED_GPU_LAYOUTS");
  return v && std::string(v) == "1";
}

}  // namespace

std::string runnable_refusal(const Config& c) {
  if (c.device != "cuda") return "";
  const std::string in = c.source_path.empty() ? "" : " (" + c.source_path + ")";
  if (!cuda_device_built())
    return "device 'cuda'" + in +
           " is not available in this build: no CUDA toolkit (nvcc) was found when it was "
           "built; rebuild where nvcc is on PATH, or use device: cpu (--dry-run and "
           "triad-estimate plan cuda runs in any build)";
  if (c.precision == "fp16")
    return "precision 'fp16'" + in +
           " is not built for device: cuda yet: the CUDA kernels compute in fp32 and bf16; use "
           "precision: bf16 (no loss scaling needed), or fp32 (fp16.enabled: true then runs the "
           "loss scaler over fp32 math)";
  const ParallelConfig& p = c.parallel;
  if (unverified_gpu_layouts_allowed()) return "";
  const std::string unverified =
      " is built for device: cuda but not yet verified on a GPU (tools/gpu-check has not passed "
      "it); set TRIAD_UNVERIFIED_GPU_LAYOUTS=1 to try it anyway, or ";
  if (p.tensor_model_parallel_size > 1)
    return "parallel.tensor_model_parallel_size " + std::to_string(p.tensor_model_parallel_size) +
           in + unverified + "use tensor_model_parallel_size: 1 there, or device: cpu";
  if (p.pipeline_model_parallel_size > 1)
    return "parallel.pipeline_model_parallel_size " +
           std::to_string(p.pipeline_model_parallel_size) + in + unverified +
           "use pipeline_model_parallel_size: 1 there, or device: cpu";
  if (c.zero_optimization.stage >= 2)
    return "zero_optimization.stage " + std::to_string(c.zero_optimization.stage) + in +
           unverified + "use stage 0 or 1 there, or device: cpu";
  return "";
}

void check_runnable(const Config& c) {
  const std::string why = runnable_refusal(c);
  if (!why.empty()) throw UserError(why);
}

}  // namespace triad
