// A transport ops table in front of a plugin's that reaches host memory only (the Debian UCX
// build): an operation on device memory runs on host buffers instead. The data is copied down
// before the operation is posted (what it sends), and up once it completes (what it received);
// each request owns its host buffers until freed. With it, several ranks can share one GPU over
// a host transport (NCCL refuses that), which is how a one-GPU machine runs multi-rank layouts.
// Costs a copy each way and a wait on the device's stream per operation: a fallback, never the
// path of a transport that reads device memory itself. Parallelism plugins that talk to the
// transport through a comm_ref go through it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "triad/sdk/transport_v2.h"

namespace triad::detail {

// How to move bytes between the run's device memory and the host (the device's to_host and
// to_device: each waits for the device's stream, so the data is the finished data).
struct HostStaging {
  std::function<void(void* host, const void* device_src, size_t bytes)> to_host;
  std::function<void(void* device_dst, const void* host, size_t bytes)> to_device;
  // Stage host memory too (a test double: the CPU device runs the staged path).
  bool stage_host = false;
};

struct StagedTransport {
  StagedTransport(const triad_transport_ops_v2* ops, void* handle, HostStaging staging)
      : real(ops), inner(handle), how(std::move(staging)) {}

  const triad_transport_ops_v2* real;
  void* inner;
  HostStaging how;

  bool stages(DLDevice d) const { return d.device_type != kDLCPU || how.stage_host; }
  // The memory a plugin reaching `memory` reaches through this table: CUDA too, when host.
  static uint32_t reach(uint32_t memory) {
    return memory & TRIAD_MEM_BIT_HOST ? memory | TRIAD_MEM_BIT_CUDA : memory;
  }

  static const triad_transport_ops_v2 kOps;
};

}  // namespace triad::detail
