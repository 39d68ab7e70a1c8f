// The performance model behind triad-simulate: one training step of a config's layout on a
// described machine (machine.hpp), predicted without running it.
//
// - Each pipeline stage's passes (forward and backward of its chunks, per micro-batch) cost their
//   FLOPs at the device's peak times its efficiency at that size (the attention plugin's own
//   curve for the attention products), plus their element-wise bytes at the memory bandwidth,
//   plus the tensor-parallel collectives at the plan's region boundaries (on the critical path,
//   as Megatron's are); recomputation adds its forward again.
// - The schedule plugin's real instruction streams are timed with those costs and the
//   point-to-point transfers (PipeCosts, pipeline_backend.hpp): the bubble is what it leaves.
// - Data-parallel traffic of the ZeRO stage (ring accounting, per bucket or per unit), the part
//   the machine overlaps with compute hidden (with overlap_param_gather, stages 1 and 2 gather
//   each unit's weights behind the next step's first forward, only the waits exposed); the
//   optimizer's step at the memory bandwidth (and the host link and host memory when offloaded);
//   the machine's overheads.
// - Memory per rank from the memory plan (memory_plan.hpp), against the device's memory.
#pragma once

#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/perf/machine.hpp"

namespace triad {

// Where one step's time goes on the stage that finishes last (seconds; they add up to the step).
struct StepBreakdown {
  double compute = 0;        // passes' FLOPs and element-wise work
  double tensor = 0;         // tensor-parallel collectives inside the passes
  double pipeline = 0;       // waiting for other stages: the bubble and point-to-point transfers
  double data_parallel = 0;  // exposed data-parallel (ZeRO) traffic
  double optimizer = 0;      // the optimizer's step (with offload: the host link and host)
  double other = 0;          // the machine's per-step and per-micro-batch overheads
  double total() const { return compute + tensor + pipeline + data_parallel + optimizer + other; }
};

struct Prediction {
  int world = 1, nodes = 1;
  double step_s = 0, samples_per_s = 0, tokens_per_s = 0;
  double tflops = 0;     // per device, Megatron's model FLOPs (no recomputation)
  double tflops_hw = 0;  // per device, counting recomputed forwards as Megatron prints them
  double mfu = 0;        // tflops / the device's peak for the run's precision
  double memory = 0;     // the memory plan's peak per rank (bytes; host memory too on a CPU)
  double memory_limit = 0;
  bool fits = true;
  int slowest_stage = 0;
  StepBreakdown breakdown;
};

// One collective's time under the α-β ring model on `link`, for n ranks: all_reduce of `bytes`
// takes 2(n-1)·α + 2(n-1)/n·bytes/β, all_gather and reduce_scatter (bytes: the whole buffer)
// (n-1)·α + (n-1)/n·bytes/β, p2p α + bytes/β; 0 when n is 1.
double collective_time(const Link& link, const std::string& op, double bytes, int n);

// Predicts one step of `cfg` (loaded for `world` ranks) on `nodes` nodes of `machine`. Loads the
// plugins the config names (the schedule's streams, the tensor plan, the memory plan). Throws
// UserError as they do, or when the ranks do not spread evenly over the nodes.
Prediction predict(const Config& cfg, int world, int nodes, const Machine& machine);

}  // namespace triad
