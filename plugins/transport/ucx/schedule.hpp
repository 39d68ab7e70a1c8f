// The engine under every UCX operation. A schedule is a set of lanes; a lane is a list of
// steps run in order; a step posts its sends and receives together and, when all are done,
// runs its `after` (e.g. reduce the received chunk). Up to `window` lanes run at once, so a
// large message streams as a pipeline of chunks. Each active lane borrows one slot of
// scratch memory. Nothing blocks: progress() does what can be done and returns.
#pragma once

#include <ucp/api/ucp.h>

#include <functional>
#include <list>
#include <string>
#include <vector>

#include "comm.hpp"

namespace triad::ucx {

struct Xfer {
  bool is_send = false;
  int peer = 0;  // rank in the communicator
  void* buf = nullptr;
  size_t bytes = 0;
  uint64_t tag = 0;
};

struct Step {
  std::vector<Xfer> xfers;
  std::function<void()> after;
};

using Lane = std::vector<Step>;

struct Plan {
  size_t num_lanes = 0;
  size_t window = 1;
  size_t slot_bytes = 0;
  std::function<void()> before;   // runs once, before any lane
  std::function<void()> overlap;  // runs once, right after the first transfers are posted
  std::function<Lane(size_t lane, char* slot)> make_lane;
};

// Where a schedule sends: the worker and the endpoints of the world ranks.
struct Wire {
  ucp_worker_h worker = nullptr;
  const std::vector<ucp_ep_h>* eps = nullptr;
};

class Schedule : public sdk::TransportRequest {
 public:
  Schedule(Wire wire, const UcxComm& comm, std::string what, Plan plan);
  ~Schedule() override;

  // Advances without blocking; true once finished (done or failed).
  bool progress();
  bool finished() const { return finished_; }
  const std::string& error() const { return error_; }
  // "all_reduce(...) on communicator 3 (rank 1 of 4): waiting for rank 2".
  std::string describe() const;
  // Abandons the operation: cancels posted receives and releases UCX requests.
  void cancel();

 private:
  struct Active {
    size_t index = 0;
    Lane lane;
    size_t step = 0;
    bool posted = false;
    std::vector<void*> reqs;
    int slot = -1;
  };
  bool advance(Active& a);
  void post(Active& a);
  bool complete(Active& a);  // true when every transfer of the current step is done
  void fail(const std::string& msg);

  Wire wire_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  uint32_t comm_id_ = 0;
  std::string what_;
  Plan plan_;
  std::vector<std::vector<char>> slots_;
  std::vector<int> free_slots_;
  std::list<Active> active_;
  size_t next_lane_ = 0;
  bool started_ = false;
  bool overlapped_ = false;
  bool finished_ = false;
  std::string error_;
};

}  // namespace triad::ucx
