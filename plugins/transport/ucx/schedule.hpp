// The engine under every UCX operation. A schedule is a set of lanes; a lane is a list of
// steps run in order; a step posts its sends and receives together and, when all are done,
// runs its `after` (e.g. reduce the received chunk). Up to `window` lanes run at once, so a
// large message streams as a pipeline of chunks. Each active lane borrows one slot of
// scratch memory. Nothing blocks: progress() does what can be done and returns.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm.hpp"

namespace triad::ucx {

// Set once this process has abandoned a transfer still in flight (a wait that failed or ran
// out, a request freed before it finished). UCX then finds the abandoned requests still out
// at cleanup and warns once per object ("object 0x... was not returned to mpool"): after a
// failure this rank has already reported, those lines are dropped (ucx_transport.cpp).
extern std::atomic<bool> g_abandoned_transfers;

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

// Scratch memory kept across operations: a fresh allocation per collective would be
// mapped and zeroed page by page every time, which costs as much as the copies themselves
// for messages of a few MiB. Buffers are not initialised.
class ScratchPool {
 public:
  using Buffer = std::unique_ptr<char[]>;
  // A buffer of at least `bytes` (the smallest kept one that fits, else a new one).
  std::pair<Buffer, size_t> take(size_t bytes);
  void give(Buffer b, size_t bytes);

 private:
  static constexpr size_t kMaxKeptBytes = size_t(256) << 20;
  std::multimap<size_t, Buffer> free_;
  size_t kept_ = 0;
};

// Where a schedule sends: the worker and the endpoints of the world ranks; and where it
// borrows scratch memory from.
struct Wire {
  ucp_worker_h worker = nullptr;
  const std::vector<ucp_ep_h>* eps = nullptr;
  ScratchPool* pool = nullptr;
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
  ScratchPool::Buffer scratch_;  // the slots, slot_bytes apart
  size_t scratch_bytes_ = 0;
  std::vector<int> free_slots_;
  std::list<Active> active_;
  size_t next_lane_ = 0;
  bool started_ = false;
  bool overlapped_ = false;
  bool finished_ = false;
  std::string error_;
};

}  // namespace triad::ucx
