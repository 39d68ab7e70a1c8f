// The memory estimator: what one rank of each pipeline stage will hold at its peak, for any ZeRO
// stage of a layout, computed without allocating anything by replaying the engine's allocations
// (core/src/model/memory_plan.cpp says which). triad-estimate prints it, --dry-run and plan_run use
// it, and check_memory_fits refuses a run that cannot fit before anything is allocated.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/sdk/tensor_v1.h"

namespace triad {

// Bytes one rank of one pipeline stage holds on its training device, by what they are for. The
// columns are the step's peak (they sum to step()); setup is the peak before the first step
// (the engine builds the whole weights before the data plugin partitions them, so at ZeRO 3 with
// a large data-parallel group this can be the larger one); export_hf the end of the run when it
// gathers the whole model. The measured peak_memory_bytes of a run is total().
struct MemoryEstimate {
  int zero_stage = 0;      // the stage modelled (0 whenever the job is one process)
  size_t elements = 0;     // Ψ: this rank's arena (its tensor slice of its pipeline stage)
  size_t params = 0;       // fp32 master weights held for the step (whole or owned shard) and
                           // their compute copy in mixed precision
  size_t grads = 0;        // the gradient arena (whole or owned shard)
  size_t optimizer = 0;    // AdamW's two moments (whole, the owned block or the owned shard)
  size_t activations = 0;  // every activation set, recomputation's work space, backward scratch
  size_t workspace = 0;    // the attention plugin's workspace (one per model chunk)
  // Communication: ZeRO windows at the step's peak (a unit's whole gradient while backward
  // writes it and while it is reduced; ZeRO-3's gathered weights), the pipeline's send staging
  // copies, the tensor-parallel exchange buffers, context parallelism's attention buffers
  // (Ulysses' all-to-all buffers, ring's key/value blocks in flight) and the collectives' scalars.
  size_t grad_windows = 0, param_windows = 0, pipeline_sends = 0, tensor_exchange = 0,
         context_exchange = 0, scalars = 0;
  size_t setup = 0;      // the peak before the first step (whole weights, partitioning)
  size_t export_hf = 0;  // the peak while output.export_hf gathers the model; 0 without it
  // ZeRO-Offload (offload_optimizer.device cpu): the host device's memory (Adam's moments, the
  // fp32 master weights and the gradients of the shard), counted apart from the training
  // device's (not in total()); on a CPU run both are this machine's memory.
  size_t host = 0;
  // The ZeRO paper's model states for this stage: fp32 16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N (N
  // the data-parallel size), plus the compute copy (2Ψ, or 2Ψ/N at stage 3) in bf16.
  double paper_model_states = 0;
  std::string paper_formula;  // "16Ψ", "8Ψ+8Ψ/N", ...

  size_t buffers() const {
    return grad_windows + param_windows + pipeline_sends + tensor_exchange + context_exchange +
           scalars;
  }
  size_t model_states() const { return params + grads + optimizer; }
  size_t step() const { return model_states() + activations + workspace + buffers(); }
  size_t total() const {
    size_t t = step();
    if (setup > t) t = setup;
    if (export_hf > t) t = export_hf;
    return t;
  }
  // "step", "setup" or "export_hf": which phase total() is.
  const char* peak_phase() const;
};

// The staging copies each pipeline stage's executor keeps for its sends: the most sends in
// flight whose receive the stage cannot yet know its peer has posted, over the streams of one
// step (every stage's, from PipelineBackend::schedules). The executor makes this many and waits
// for one to come back when all are in flight, which the bound makes safe.
std::vector<int> pipeline_send_copies(const std::vector<PipeSchedule>& streams);
// Whether every stage sends its messages to each other stage in the order that stage posts
// their receives, as a transport whose messages carry no tags (nccl) needs: "" if so, else the
// first message out of order, in words.
std::string pipeline_order_mismatch(const std::vector<PipeSchedule>& streams);
// The floats of the buffer the distributed run reduces its scalars in, two per value
// (DistributedRun::sum): the loss and the stop request; with pipeline stages each stage's peak
// memory, tail and busy time.
size_t collective_scalars(int stages);

// One estimate per pipeline stage (a rank of that stage with tensor- and data-parallel rank 0,
// the ranks whose peaks the metrics report), for the config's ZeRO stage or `zero_stage`.
// Loads the attention, tensor and pipeline plugins the config names (their workspace, plan and
// schedule decide allocations). world_size: the job's ranks (one process never partitions).
// Throws UserError as the plugins' checks do.
std::vector<MemoryEstimate> estimate_memory(const Config& cfg, int world_size,
                                            std::optional<int> zero_stage = std::nullopt);
// The tensor plugin's split of each role (triad_tensor_role) for the config's layout.
std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> planned_splits(const Config& cfg);
// The same layout under every ZeRO stage 0-3: [stage][pipeline stage].
std::array<std::vector<MemoryEstimate>, 4> estimate_memory_zero_stages(const Config& cfg,
                                                                       int world_size);
// The largest total() over the pipeline stages; with_host adds the host device's memory
// (ZeRO-Offload), which a CPU run takes from the same memory.
size_t peak_per_rank(const std::vector<MemoryEstimate>& stages, bool with_host = false);

// A change to the config that makes it fit: the --set overrides, in words, and what it then needs
// per rank.
struct MemoryFix {
  std::vector<std::string> sets;  // "zero_optimization.stage=2", ...
  std::string text;               // "ZeRO stage 2", "micro-batch 4 (accumulation 8)", ...
  size_t bytes = 0;
};
// The cheapest change that brings the peak per rank under limit_bytes, trying in this order: a
// higher ZeRO stage (1 and 2 add no communication; 3 gathers the weights), a smaller micro-batch
// at the same global batch (the largest that fits), recomputation (selective: one more attention
// forward per block; full: one more forward per step), then their pairs and all three. nullopt
// when none of them fits.
std::optional<MemoryFix> cheapest_memory_fix(const Config& cfg, int world_size, size_t limit_bytes);

// Refuses a model or micro-batch so large that its byte counts would pass what 64-bit sizes hold
// (the estimates and the engine count bytes in size_t): UserError naming the key that makes it
// so, e.g. model.hidden_size 2147483644. Every estimate checks it first; sane sizes, far below,
// are untouched.
void check_sizes_fit(const Config& cfg);

// Why a run whose estimated peak per rank exceeds limit_bytes (the memory one rank may use; on a
// CPU run an offloaded optimizer state counts too) cannot run, "" when it fits: the estimate
// (its worst pipeline stage and what it holds), the limit and the cheapest change that fits with
// its --set overrides (or that none of them does).
std::string memory_refusal(const Config& cfg, int world_size, size_t limit_bytes);
// The same refusal as a UserError, before anything is allocated.
void check_memory_fits(const Config& cfg, int world_size, size_t limit_bytes);

// The memory this machine can give the job now: MemAvailable, or the memory cgroup's limit less
// its usage where that is lower. *how says which ("MemAvailable", "cgroup limit"). 0 if unknown.
size_t host_memory_available(std::string* how = nullptr);

// "16GiB", "16G", "80GB", "512 MiB", "1.5e9": binary units for K/M/G/T and KiB..TiB, decimal for
// KB..TB, bytes without a unit; at least a byte and below 8 EiB. Throws UserError naming `what`
// ("--memory-per-device '16X' is not a size; give ...").
size_t parse_bytes(const std::string& text, const std::string& what);

// "54.9 MiB", "3.20 GiB"
std::string memory_text(double bytes);

}  // namespace triad
