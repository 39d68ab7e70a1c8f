// Core-side handle to one data-parallel plugin instance ("zero", a PluginInstance): the engine
// reports gradient ranges as backward finishes them, and the plugin reduces them over the
// data-parallel communicator lent to it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/sdk/data_v4.h"

namespace triad {

class DataParallelBackend {
 public:
  DataParallelBackend(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                      const triad_services_v1* services);
  DataParallelBackend(const DataParallelBackend&) = delete;
  DataParallelBackend& operator=(const DataParallelBackend&) = delete;

  const triad_data_caps_v1& capabilities() const { return caps_; }
  // units: the arena's layers in order (they tile it), for stages that partition per unit.
  void setup(const GptLayout& layout, const std::vector<std::pair<size_t, size_t>>& units,
             DLDevice device, int dp_rank, int dp_size, const triad_comm_ref_v1& comm,
             int64_t timeout_ms);
  void grads_ready(float* grads, size_t offset, size_t count);
  void finish_grads(float* grads);
  void owned_range(size_t* offset, size_t* count);
  void after_step(float* params);
  // ZeRO-2/3 (data_v2.h) and ZeRO-1 by unit (data_v3.h): TRIAD_DATA_PARTITION_* of the
  // configured stage, and TRIAD_DATA_GATHER_DEFERRED (data_v4.h) where after_step only starts
  // the gathers (checked: a combination data_v4.h knows), the owned slice of each unit as
  // (arena offset, count), and the per-unit reduction and gather.
  uint32_t partitioning();
  std::vector<std::pair<size_t, size_t>> shard();
  void reduce_unit(size_t unit, float* grads, float* owned);
  void gather_unit(size_t unit, const void* owned, void* params, DLDataType dtype);
  void wait_unit(size_t unit);
  // Bytes this rank sent over the data-parallel group since the last call, with ring
  // accounting (the ZeRO paper's): an all-reduce of n elements 2(N-1)/N n, a reduce-scatter or
  // an all-gather (N-1)/N n, a broadcast n; counted as the plugin issues its collectives.
  double take_traffic();
  // Where a failed call's message gets the transport's own account (a timed-out wait names the
  // operation and the peer it waited for; the plugin only sees the status).
  void explain_failures_with(std::function<std::string()> transport_error) {
    transport_error_ = std::move(transport_error);
  }

 private:
  // The communicator the plugin borrows: the transport's, through a counting table.
  struct Counted {
    triad_comm_ref_v1 real{};
    int size = 1;
    double bytes = 0;
  };
  static const triad_transport_ops_v1 kCountingOps;
  void check(int status, const char* what) const;
  // Calls a slot of the plugin through its instance (which catches what escapes the plugin) and
  // turns a failure into a UserError naming the plugin, the slot and the status.
  template <class F>
  void run(const char* slot, F&& f) const {
    check(instance_.call(slot, std::forward<F>(f)), slot);
  }
  Counted counted_;
  std::function<std::string()> transport_error_;
  PluginInstance instance_;
  const triad_data_ops_v2& ops_;
  triad_data_caps_v1 caps_{};
  // The arena's tensors and units, kept alive for the plugin.
  std::vector<uint64_t> offsets_, sizes_, unit_offsets_, unit_sizes_;
};

}  // namespace triad
