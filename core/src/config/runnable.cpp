// What a run needs of its device beyond a valid config. load_config accepts any layout on any
// device so that --dry-run and triad-estimate can plan it; the launcher (and each rank) asks
// check_runnable before training. Every layout of the CPU runs on device: cuda (tools/gpu-check
// verified tp, pp, interleaving, ZeRO 1-3 and offload on an H200 and an H100, 2026-11-26); what
// is refused here is what is not built, or built but not yet verified on a GPU.
#include <cstdlib>
#include <string>

#include "triad/core/config/config.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"

namespace triad {

namespace {

// Built on device: cuda but not yet run on a GPU: refused until tools/gpu-check's row for it has
// passed, unless the user asks for it with TRIAD_UNVERIFIED_GPU_LAYOUTS=1.
std::string unverified_on_gpu(const std::string& what) {
  const char* asked = std::getenv("TRIAD_UNVERIFIED_GPU_LAYOUTS");
  if (asked && std::string(asked) == "1") return "";
  return what +
         " is built for device: cuda but not yet verified on a GPU (tools/gpu-check); set "
         "TRIAD_UNVERIFIED_GPU_LAYOUTS=1 to try it anyway";
}

}  // namespace

std::string runnable_refusal(const Config& c) {
  const std::string in = c.source_path.empty() ? "" : " (" + c.source_path + ")";
  if (c.device != "cuda") return "";
  if (!cuda_device_built())
    return "device 'cuda'" + in +
           " is not available in this build: no CUDA toolkit (nvcc) was found when it was "
           "built; rebuild where nvcc is on PATH, or use device: cpu (--dry-run and "
           "triad-estimate plan cuda runs in any build)";
  // Every CUDA kernel has its fp16 instantiation, and context parallelism's layout moves and
  // lse merge are device kernels; neither has run on a GPU yet.
  if (c.precision == "fp16") {
    const std::string why = unverified_on_gpu("precision 'fp16'" + in);
    if (!why.empty()) return why + ", or use precision: bf16 (no loss scaling needed)";
  }
  if (const int cp = c.parallel.context_parallel_size; cp > 1) {
    const std::string why =
        unverified_on_gpu("parallel.context_parallel_size " + std::to_string(cp) + in);
    if (!why.empty()) return why + ", or use device: cpu";
  }
  // The tensor group's ring (parallel.tp_comm_overlap): GEMMs per rank's tokens beside nccl's
  // grouped send/recv, started by progress(); not yet run on a GPU.
  const auto& par = c.parallel;
  if (par.tp_comm_overlap && par.sequence_parallel && par.tensor_model_parallel_size > 1) {
    const std::string why = unverified_on_gpu("parallel.tp_comm_overlap" + in);
    if (!why.empty()) return why + ", or set parallel.tp_comm_overlap: false";
  }
  return "";
}

void check_runnable(const Config& c) {
  const std::string why = runnable_refusal(c);
  if (!why.empty()) throw UserError(why);
}

}  // namespace triad
