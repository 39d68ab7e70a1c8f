// A transport ops table in front of a plugin's, used when a launcher watches this rank
// (rank_status.hpp): it forwards every call unchanged and marks each wait in the rank's status
// with what is waited for, so the launcher can name it. Plugins that talk to the transport
// through a comm_ref (the parallelism plugins) go through it too, as their comm_refs carry it.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "triad/sdk/transport_v2.h"

namespace triad::detail {

// "all_reduce(4096 x fp32)": an operation as errors and the rank's status name it.
std::string op_text(const char* op, uint64_t count, DLDataType t);

struct WatchedTransport {
  WatchedTransport(const triad_transport_ops_v2* ops, void* handle) : real(ops), inner(handle) {}

  const triad_transport_ops_v2* real;
  void* inner;

  struct CommInfo {
    std::string label;       // "the data-parallel group"
    std::vector<int> world;  // world rank of each member, when known
  };
  // A posted operation's parameters, kept under its request: the text is made only when a
  // wait on it begins, so the calls that are posted and waited on at once cost a map insert.
  struct Pending {
    const char* op;   // "all_reduce", "send", "barrier"
    const char* dir;  // " to " / " from " for a point-to-point operation, else nullptr
    const void* comm;
    uint64_t count;  // elements (not for a barrier)
    DLDataType dtype;
    int32_t peer;  // for a point-to-point operation
  };
  std::mutex mu;
  std::unordered_map<const void*, CommInfo> comms;
  std::unordered_map<const void*, Pending> requests;

  // Names a communicator for the messages: label and its members' world ranks.
  void label(const void* comm, std::string label, std::vector<int> world);

  static const triad_transport_ops_v2 kOps;
};

}  // namespace triad::detail
