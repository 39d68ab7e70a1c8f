// Multi-process plumbing shared by the conformance suites that need real communicators
// (transport, tensor, data): fork one process per rank around a rendezvous server in the parent,
// let each rank report "P|name|detail" lines through its own pipe, merge the ranks' verdicts
// (a case passes when every rank passed it) and kill ranks that hang.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "triad/core/conformance/conformance.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/plugins/services.hpp"

namespace triad::conformance::ranks {

using Clock = std::chrono::steady_clock;

// Thrown inside a rank whose communicators may be out of step: it stops that rank's cases.
struct Abort {};

// Writes one verdict line for the parent; exits the process when the parent is gone.
void report(int fd, Outcome outcome, const std::string& name, std::string detail);

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string partial;
  bool exited = false;
  int status = 0;
};

// Runs body(fd) in a forked child with its stdout/stderr untouched and `fd` a pipe to the
// parent; its return value is the exit code. An exception becomes an "F|setup_case|what" line
// (Abort: exit code 1 alone).
Child spawn(const std::string& setup_case, const std::function<int(int fd)>& body);

// Reads what the children write, line by line, until all have exited or the deadline passes.
void collect(std::vector<Child>& kids, Clock::time_point deadline,
             const std::function<void(const std::string&)>& on_line);

// What a rank gets: its rank, the pipe to report on, and the rendezvous server to join.
struct RankContext {
  int rank = 0, world_size = 1, fd = -1;
  uint16_t port = 0;
  std::string token;
};

// A rank's world communicator over a transport plugin from the plugin search path, joined
// through the parent's rendezvous server (keys under `scope`, waits up to `timeout`).
class RankWorld {
 public:
  RankWorld(const RankContext& c, const std::string& transport,
            const std::map<std::string, std::string>& params, const std::string& scope,
            std::chrono::milliseconds timeout);
  Communicator& world() { return world_; }

 private:
  CoreServices services_;
  RendezvousClient store_;  // outlives the communicator
  std::unique_ptr<Transport> transport_;
  Communicator world_;
};

// Runs body in `n` forked ranks around a rendezvous server on 127.0.0.1 (random port, fresh
// token). Emits each case the ranks reported, in first-reported order, merged over the ranks
// (one that not every rank reported fails), then "<label> ranks": all exited cleanly, or which
// rank hung (killed after timeout_ms), died of a signal or exited non-zero.
void run_world(int n, const std::string& label, long long timeout_ms,
               const std::function<int(const RankContext&)>& body,
               const std::function<void(const CaseResult&)>& emit);

}  // namespace triad::conformance::ranks
