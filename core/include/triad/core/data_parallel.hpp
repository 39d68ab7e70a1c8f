// Core-side handle to one data-parallel plugin instance ("zero", a PluginInstance): the engine
// reports gradient ranges as backward finishes them, and the plugin reduces them over the
// data-parallel communicator lent to it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "triad/core/gpt_layout.hpp"
#include "triad/core/plugin_instance.hpp"
#include "triad/sdk/data_v1.h"

namespace triad {

class DataParallelBackend {
 public:
  DataParallelBackend(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                      const triad_services_v1* services);
  DataParallelBackend(const DataParallelBackend&) = delete;
  DataParallelBackend& operator=(const DataParallelBackend&) = delete;

  const triad_data_caps_v1& capabilities() const { return caps_; }
  void setup(const GptLayout& layout, DLDevice device, int dp_rank, int dp_size,
             const triad_comm_ref_v1& comm, int64_t timeout_ms);
  void grads_ready(float* grads, size_t offset, size_t count);
  void finish_grads(float* grads);
  void owned_range(size_t* offset, size_t* count);
  void after_step(float* params);

 private:
  void check(int status, const char* what) const;
  PluginInstance instance_;
  const triad_data_ops_v1& ops_;
  triad_data_caps_v1 caps_{};
  std::vector<uint64_t> offsets_, sizes_;  // the arena's tensors, kept alive for the plugin
};

}  // namespace triad
