// A machine description for the performance model (triad-simulate): what one device computes
// and holds, how fast its links move bytes, and what a step costs beyond its passes. Written by
// `triad-simulate calibrate` (measured on this machine) or by hand from a datasheet; the shipped
// ones are in configs/machines/. The format (YAML; every rate positive):
//
//   name: h100-dgx
//   source: where the numbers come from (free text, printed with every prediction)
//   devices_per_node: 8          # ranks a node runs without sharing a device
//   device:
//     memory: 80GiB              # per device (a rank's memory limit)
//     peak_tflops: {bf16: 989, fp16: 989, tf32: 495, fp32: 67}  # dense matrix peak; fp32 alone
//                                # is enough; tf32 is fp32 with allow_tf32
//     efficiency: [[1e9, 0.3], [1e12, 0.75]]   # achieved share of the peak by a pass's FLOPs
//     attention: {flash2: [[1e9, 0.2], [1e12, 0.6]]}  # per plugin, by its FLOPs (optional)
//     memory_bandwidth_gbs: 3350 # element-wise work (layernorm, GeLU, softmax, the optimizer)
//     backward_ratio: 2          # a pass's backward time / its forward's (optional, default 2)
//     attention_backward_ratio: {naive: 2.5}  # the attention's own, per plugin (optional,
//                                # default backward_ratio)
//     blocks:                    # measured (calibrate), per attention plugin: a whole block's
//       naive: {efficiency: [[2.5e7, 0.6], [4e8, 0.9]], backward_ratio: 1.8}   # forward by its
//                                # FLOPs (dense and attention together; element-wise work in
//                                # it), its backward / forward; where given, it replaces the
//                                # split into products, attention and element-wise work
//     cores: 1                   # ranks sharing a device run on this many cores side by side
//                                # (a CPU node's cores; optional, default 1)
//     waiting_share: 0           # the share of a core a rank keeps while it waits for a message
//                                # or its turn (0: none, 1: it spins; optional, default 0)
//     share_efficiency: 1        # ranks beyond devices_per_node share a device: each gets
//                                # rate / sharers x this (optional, default 1; above 1 where a
//                                # rank on one core of a CPU uses it better than one rank on all)
//   links:
//     intra_node: {bandwidth_gbs: 450, latency_us: 3}   # per direction, per device
//     inter_node: {bandwidth_gbs: 50, latency_us: 6}
//     host: {bandwidth_gbs: 50}                        # device <-> host (offloaded optimizer)
//     # per collective, where measured: intra_node: {..., all_gather: {bandwidth_gbs, latency_us}}
//   host_memory_bandwidth_gbs: 200   # the offloaded optimizer's step (optional: memory_bandwidth)
//   overlap: {data_parallel: 0.9}    # share of data-parallel traffic hidden behind compute
//                                    # tensor_parallel: the same for a column GEMM's backward
//                                    # collectives (optional, default data_parallel's)
//   overheads: {per_step_ms: 0, per_micro_batch_ms: 0, per_pass_us: 0}   # optional
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace triad {

// A curve of (x, y) points, interpolated linearly in log x and held flat beyond its ends.
struct Curve {
  std::vector<std::pair<double, double>> points;  // x ascending
  double at(double x) const;
  bool empty() const { return points.empty(); }
};

// A link's cost model: a message of n bytes takes latency + n / bandwidth (Hockney's α-β).
struct Link {
  double bandwidth = 0;  // bytes per second
  double latency = 0;    // seconds
  // A collective's own measured α-β where the calibration had one: all_reduce, all_gather,
  // reduce_scatter, p2p (bus bandwidth: bytes each rank moves, ring accounting).
  std::map<std::string, std::pair<double, double>> ops;  // op -> (bandwidth, latency)
  // (bandwidth, latency) for `op`: its own where measured, else the link's.
  std::pair<double, double> of(const std::string& op) const;
};

struct Machine {
  std::string name, source, path;
  int devices_per_node = 1;
  double memory = 0;                       // bytes per device
  std::map<std::string, double> peak;      // dtype -> FLOP/s
  Curve efficiency;                        // share of the peak by FLOPs of a pass
  std::map<std::string, Curve> attention;  // plugin -> share of the peak by its FLOPs
  double memory_bandwidth = 0;             // bytes per second
  double host_memory_bandwidth = 0;        // bytes per second
  double backward_ratio = 2;
  std::map<std::string, double> attention_backward_ratio;  // plugin -> its own ratio
  struct Block {
    Curve efficiency;
    double backward_ratio = 2;
  };
  std::map<std::string, Block> blocks;  // plugin -> a whole block, measured
  double cores = 1;
  double waiting_share = 0;
  double share_efficiency = 1;
  Link intra_node, inter_node, host;
  double overlap_data_parallel = 0;
  // The share of a tensor-parallel collective hidden behind the GEMM it runs beside
  // (parallel.overlap_tensor_comm); the data-parallel share unless given.
  double overlap_tensor_parallel = 0;
  double per_step = 0, per_micro_batch = 0, per_pass = 0;  // seconds

  // The dense matrix peak for a precision ("fp32", "bf16", "fp16"; fp32 with allow_tf32 takes
  // tf32's where given); fp32's when the precision has none. Throws UserError when neither is
  // given.
  double peak_for(const std::string& precision, bool allow_tf32 = false) const;
};

// Reads and checks a description: a missing field, a non-positive rate, an efficiency outside
// (0, 1] or a curve out of order is a UserError naming the file, the key and the fix.
Machine load_machine(const std::string& path);

}  // namespace triad
