// What a run needs of its device beyond a valid config. load_config accepts any layout on any
// device so that --dry-run and triad-estimate can plan it; the launcher (and each rank) asks
// check_runnable before training. Every layout of the CPU runs on device: cuda (tools/gpu-check
// verified tp, pp, interleaving, ZeRO 1-3 and offload on an H200, 2026-11-26); what is refused
// here is what is not built.
#include <cstdlib>
#include <string>

#include "triad/core/config/config.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"

namespace triad {

std::string runnable_refusal(const Config& c) {
  const std::string in = c.source_path.empty() ? "" : " (" + c.source_path + ")";
  // Context parallelism trains on the CPU (ContextAttention's layout moves and lse merges are
  // host loops), so in fp32.
  if (const int cp = c.parallel.context_parallel_size; cp > 1) {
    const std::string what = "parallel.context_parallel_size " + std::to_string(cp) + in;
    if (c.device != "cpu")
      return what +
             " trains on device: cpu only for now (its attention moves tensors with host "
             "loops); --dry-run and triad-estimate plan it for " +
             c.device + "; use device: cpu, or context_parallel_size: 1";
  }
  if (c.device != "cuda") return "";
  if (!cuda_device_built())
    return "device 'cuda'" + in +
           " is not available in this build: no CUDA toolkit (nvcc) was found when it was "
           "built; rebuild where nvcc is on PATH, or use device: cpu (--dry-run and "
           "triad-estimate plan cuda runs in any build)";
  // Built (every CUDA kernel has its fp16 instantiation) but not yet run on a GPU: refused until
  // tools/gpu-check's fp16 row has passed, unless the user asks for it.
  const char* unverified = std::getenv("TRIAD_UNVERIFIED_GPU_LAYOUTS");
  if (c.precision == "fp16" && !(unverified && std::string(unverified) == "1"))
    return "precision 'fp16'" + in +
           " is built for device: cuda but not yet verified on a GPU (tools/gpu-check); use "
           "precision: bf16 (no loss scaling needed), or set TRIAD_UNVERIFIED_GPU_LAYOUTS=1 to "
           "try it anyway";
  return "";
}

void check_runnable(const Config& c) {
  const std::string why = runnable_refusal(c);
  if (!why.empty()) throw UserError(why);
}

}  // namespace triad
