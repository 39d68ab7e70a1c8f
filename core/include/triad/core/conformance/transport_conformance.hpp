// The transport conformance suite: runs a transport plugin in real processes (fork) for
// world sizes 1..N, with a rendezvous server in the parent on 127.0.0.1 (random port and
// token), and checks every operation against exact expected values (integer-valued floats,
// so every sum is exact in fp32, bf16 and fp16), on the world communicator and on split
// sub-communicators. A rank that hangs is killed and reported.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "triad/core/conformance/conformance.hpp"

namespace triad::conformance {

struct TransportSuiteOptions {
  int max_world_size = 4;                     // runs world sizes 1..max_world_size
  bool quick = false;                         // element counts up to 1 MiB (else up to 64 MiB)
  std::map<std::string, std::string> params;  // the plugin's parameters (key -> value)
  long long op_timeout_ms = 60000;            // every wait
  long long world_timeout_ms = 0;             // a whole world size; 0: from quick
  std::function<void(const CaseResult&)> on_case;
};

// Throws UserError when the file is not a usable transport plugin.
Summary run_transport_suite(const std::string& so_path, const TransportSuiteOptions& options);

// Prints PASS/FAIL/SKIP lines and "N passed, M failed, K skipped"; returns the exit code
// (0 all passed, 1 a case failed, 2 the plugin could not be used).
int run_transport_conformance(const std::string& so_path, int world_sizes_max, bool quick);

}  // namespace triad::conformance
