#include "transport_watch.hpp"

#include <string_view>

#include "triad/core/dist/rank_status.hpp"

namespace triad::detail {

std::string op_text(const char* op, uint64_t count, DLDataType t) {
  const char* dt = t.code == kDLBfloat                  ? "bf16"
                   : t.code == kDLInt                   ? "int"
                   : t.code == kDLUInt                  ? "uint"
                   : t.code == kDLFloat && t.bits == 16 ? "fp16"
                   : t.code == kDLFloat && t.bits == 32 ? "fp32"
                                                        : "dtype";
  std::string s = op;  // appended, not concatenated: GCC 12 misreads the latter (-Wrestrict)
  s += "(";
  s += std::to_string(count);
  s += " x ";
  s += dt;
  if (t.code == kDLInt || t.code == kDLUInt) s += std::to_string(t.bits);
  s += ")";
  return s;
}

namespace {

WatchedTransport& self(void* h) {
  return *static_cast<WatchedTransport*>(h);
}

// "over the data-parallel group (world ranks 0, 2)" and, for a peer, its world rank.
std::string over(WatchedTransport& w, const void* comm) {
  auto it = w.comms.find(comm);
  if (it == w.comms.end()) return "over a communicator";
  std::string s = "over " + it->second.label;
  if (!it->second.world.empty()) {
    s += " (world ranks ";
    for (size_t i = 0; i < it->second.world.size(); ++i)
      s += (i ? ", " : "") + std::to_string(it->second.world[i]);
    s += ")";
  }
  return s;
}
std::string peer(WatchedTransport& w, const void* comm, int32_t p) {
  auto it = w.comms.find(comm);
  if (it != w.comms.end() && p >= 0 && size_t(p) < it->second.world.size())
    return "rank " + std::to_string(it->second.world[size_t(p)]);
  return "member " + std::to_string(p) + " of a communicator";
}

// What a pending operation does: "all_reduce(4096 x fp32) over the data-parallel group (world
// ranks 0, 1)", "send(8 x fp32) to rank 3 over the pipeline group (...)", "barrier over ...".
// Called with the lock held.
std::string text(WatchedTransport& w, const WatchedTransport::Pending& p) {
  if (std::string_view(p.op) == "barrier") return std::string(p.op) + " " + over(w, p.comm);
  std::string s = op_text(p.op, p.count, p.dtype);
  if (p.dir) s += p.dir + peer(w, p.comm, p.peer);
  return s + " " + over(w, p.comm);
}

// Issues one operation and remembers what it does under its request.
template <class F>
int issue(void* h, void** request, F&& call, const WatchedTransport::Pending& what) {
  int rc = call(self(h).inner);
  if (rc == TRIAD_OK && *request) {
    std::lock_guard<std::mutex> lock(self(h).mu);
    self(h).requests[*request] = what;
  }
  return rc;
}
WatchedTransport::Pending collective(const char* op, const void* comm, uint64_t n, DLDataType t) {
  return {op, nullptr, comm, n, t, -1};
}

int w_capabilities(void* h, triad_transport_caps_v1* caps) {
  return self(h).real->capabilities(self(h).inner, caps);
}
int w_init_world(void* h, int32_t rank, int32_t size, const triad_rendezvous_v1* r, void** comm) {
  RankWaitScope waiting("connecting to the other " + std::to_string(size - 1) + " ranks");
  int rc = self(h).real->init_world(self(h).inner, rank, size, r, comm);
  if (rc == TRIAD_OK && *comm) {
    std::vector<int> world(static_cast<size_t>(size));
    for (int32_t i = 0; i < size; ++i) world[size_t(i)] = i;
    self(h).label(*comm, "the world", size <= 16 ? world : std::vector<int>{});
  }
  return rc;
}
int w_split(void* h, void* comm, int32_t color, int32_t key, void** nc) {
  std::string what;
  {
    std::lock_guard<std::mutex> lock(self(h).mu);
    what = "split " + over(self(h), comm);
  }
  RankWaitScope waiting(what);
  return self(h).real->split(self(h).inner, comm, color, key, nc);
}
int w_comm_destroy(void* h, void* comm) {
  {
    std::lock_guard<std::mutex> lock(self(h).mu);
    self(h).comms.erase(comm);
  }
  return self(h).real->comm_destroy(self(h).inner, comm);
}
int w_comm_info(void* h, void* comm, int32_t* rank, int32_t* size) {
  return self(h).real->comm_info(self(h).inner, comm, rank, size);
}
int w_all_reduce(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t, DLDevice d,
                 int32_t op, void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->all_reduce(in, comm, s, r, n, t, d, op, q); },
      collective("all_reduce", comm, n, t));
}
int w_reduce_scatter(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                     DLDevice d, int32_t op, void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->reduce_scatter(in, comm, s, r, n, t, d, op, q); },
      collective("reduce_scatter", comm, n, t));
}
int w_all_gather(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t, DLDevice d,
                 void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->all_gather(in, comm, s, r, n, t, d, q); },
      collective("all_gather", comm, n, t));
}
int w_broadcast(void* h, void* comm, void* b, uint64_t n, DLDataType t, DLDevice d, int32_t root,
                void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->broadcast(in, comm, b, n, t, d, root, q); },
      collective("broadcast", comm, n, t));
}
int w_send(void* h, void* comm, const void* b, uint64_t n, DLDataType t, DLDevice d, int32_t p,
           uint32_t tag, void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->send(in, comm, b, n, t, d, p, tag, q); },
      WatchedTransport::Pending{"send", " to ", comm, n, t, p});
}
int w_recv(void* h, void* comm, void* b, uint64_t n, DLDataType t, DLDevice d, int32_t p,
           uint32_t tag, void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->recv(in, comm, b, n, t, d, p, tag, q); },
      WatchedTransport::Pending{"recv", " from ", comm, n, t, p});
}
int w_barrier(void* h, void* comm, void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->barrier(in, comm, q); },
      WatchedTransport::Pending{"barrier", nullptr, comm, 0, DLDataType{}, -1});
}
int w_all_to_all(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t, DLDevice d,
                 void** q) {
  return issue(
      h, q, [&](void* in) { return self(h).real->all_to_all(in, comm, s, r, n, t, d, q); },
      collective("all_to_all", comm, n, t));
}
int w_progress(void* h) {
  return self(h).real->progress(self(h).inner);
}
int w_test(void* h, void* q, int32_t* done) {
  return self(h).real->test(self(h).inner, q, done);
}
int w_wait(void* h, void* q, int64_t timeout_ms) {
  std::string what;
  {
    std::lock_guard<std::mutex> lock(self(h).mu);
    auto it = self(h).requests.find(q);
    what = it == self(h).requests.end() ? "a transport operation" : text(self(h), it->second);
  }
  RankWaitScope waiting(what);
  return self(h).real->wait(self(h).inner, q, timeout_ms);
}
int w_request_free(void* h, void* q) {
  {
    std::lock_guard<std::mutex> lock(self(h).mu);
    self(h).requests.erase(q);
  }
  return self(h).real->request_free(self(h).inner, q);
}

}  // namespace

void WatchedTransport::label(const void* comm, std::string l, std::vector<int> world_ranks) {
  std::lock_guard<std::mutex> lock(mu);
  comms[comm] = CommInfo{std::move(l), std::move(world_ranks)};
}

const triad_transport_ops_v2 WatchedTransport::kOps = {.capabilities = w_capabilities,
                                                       .init_world = w_init_world,
                                                       .split = w_split,
                                                       .comm_destroy = w_comm_destroy,
                                                       .comm_info = w_comm_info,
                                                       .all_reduce = w_all_reduce,
                                                       .reduce_scatter = w_reduce_scatter,
                                                       .all_gather = w_all_gather,
                                                       .broadcast = w_broadcast,
                                                       .send = w_send,
                                                       .recv = w_recv,
                                                       .barrier = w_barrier,
                                                       .test = w_test,
                                                       .wait = w_wait,
                                                       .request_free = w_request_free,
                                                       .progress = w_progress,
                                                       .all_to_all = w_all_to_all};

}  // namespace triad::detail
