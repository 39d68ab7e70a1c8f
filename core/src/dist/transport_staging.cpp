#include "transport_staging.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <vector>

#include "triad/sdk/plugin_v1.h"

namespace triad::detail {

namespace {

// A request of the staged table: the plugin's request, the host buffer the operation runs on,
// and where its result goes once it completes.
struct StagedRequest {
  void* inner = nullptr;
  std::vector<uint8_t> host;
  void* result_to = nullptr;  // device memory to copy host[result_at, +result_bytes) into
  size_t result_at = 0, result_bytes = 0;
  bool delivered = false;
};

StagedTransport* self(void* h) {
  return static_cast<StagedTransport*>(h);
}
StagedRequest* req(void* r) {
  return static_cast<StagedRequest*>(r);
}
size_t bytes_of(uint64_t count, DLDataType t) {
  return size_t(count) * ((size_t(t.bits) * t.lanes + 7) / 8);
}
DLDevice host() {
  return DLDevice{kDLCPU, 0};
}

// The host copy of a whole buffer of n bytes: `src`'s bytes copied down (none for a receive),
// and, once done, copied up into `result` (none for a send).
void* host_copy(StagedTransport* t, StagedRequest* r, const void* src, void* result, size_t n) {
  r->host.resize(n);
  if (src && n) t->how.to_host(r->host.data(), src, n);
  r->result_to = result;
  r->result_bytes = n;
  return r->host.data();
}

// Host copies of two buffers one after the other: the input (n bytes of `src` copied down) and
// the result (m bytes, copied up into `result` once done). Returns the host input; the host
// result starts n bytes after it.
uint8_t* host_apart(StagedTransport* t, StagedRequest* r, const void* src, size_t n, void* result,
                    size_t m) {
  r->host.resize(n + m);
  if (n) t->how.to_host(r->host.data(), src, n);
  r->result_to = result;
  r->result_at = n;
  r->result_bytes = m;
  return r->host.data();
}

// Runs `post` (which posts the plugin's operation into r->inner) with copies around it turned
// into a status: a failed copy is the operation's failure, never an exception through C.
template <class Post>
int staged(StagedRequest* r, void** request, Post post) {
  try {
    const int st = post();
    if (st != TRIAD_OK) {
      delete r;
      return st;
    }
    *request = r;
    return TRIAD_OK;
  } catch (const std::exception& e) {
    spdlog::error("transport staging through host memory: {}", e.what());
    delete r;
    return TRIAD_ERR_INTERNAL;
  }
}

int s_capabilities(void* h, triad_transport_caps_v1* caps) {
  const int st = self(h)->real->capabilities(self(h)->inner, caps);
  if (st == TRIAD_OK) caps->memory = StagedTransport::reach(caps->memory);
  return st;
}
int s_init_world(void* h, int32_t rank, int32_t n, const triad_rendezvous_v1* rv, void** comm) {
  return self(h)->real->init_world(self(h)->inner, rank, n, rv, comm);
}
int s_split(void* h, void* comm, int32_t color, int32_t key, void** out) {
  return self(h)->real->split(self(h)->inner, comm, color, key, out);
}
int s_comm_destroy(void* h, void* comm) {
  return self(h)->real->comm_destroy(self(h)->inner, comm);
}
int s_comm_info(void* h, void* comm, int32_t* rank, int32_t* size) {
  return self(h)->real->comm_info(self(h)->inner, comm, rank, size);
}

int s_all_reduce(void* h, void* comm, const void* send, void* recv, uint64_t count, DLDataType dt,
                 DLDevice dev, int32_t op, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->all_reduce(t->inner, comm, send, recv, count, dt, dev, op, &r->inner);
    void* hb = host_copy(t, r, send, recv, bytes_of(count, dt));
    return t->real->all_reduce(t->inner, comm, hb, hb, count, dt, host(), op, &r->inner);
  });
}

int s_reduce_scatter(void* h, void* comm, const void* send, void* recv, uint64_t count,
                     DLDataType dt, DLDevice dev, int32_t op, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->reduce_scatter(t->inner, comm, send, recv, count, dt, dev, op, &r->inner);
    int32_t rank = 0, size = 1;
    const int st = t->real->comm_info(t->inner, comm, &rank, &size);
    if (st != TRIAD_OK) return st;
    uint64_t off = 0, mine = 0;
    triad_transport_block(count, size, rank, &off, &mine);
    // The whole input, then this rank's block of the result after it.
    const size_t n = bytes_of(count, dt);
    uint8_t* in = host_apart(t, r, send, n, recv, bytes_of(mine, dt));
    return t->real->reduce_scatter(t->inner, comm, in, in + n, count, dt, host(), op, &r->inner);
  });
}

int s_all_gather(void* h, void* comm, const void* send, void* recv, uint64_t count, DLDataType dt,
                 DLDevice dev, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->all_gather(t->inner, comm, send, recv, count, dt, dev, &r->inner);
    int32_t rank = 0, size = 1;
    const int st = t->real->comm_info(t->inner, comm, &rank, &size);
    if (st != TRIAD_OK) return st;
    uint64_t off = 0, mine = 0;
    triad_transport_block(count, size, rank, &off, &mine);
    // In place on the host: this rank's block at its offset of the whole.
    const size_t n = bytes_of(count, dt), at = bytes_of(off, dt), m = bytes_of(mine, dt);
    r->host.resize(n);
    if (m) t->how.to_host(r->host.data() + at, send, m);
    r->result_to = recv;
    r->result_bytes = n;
    return t->real->all_gather(t->inner, comm, r->host.data() + at, r->host.data(), count, dt,
                               host(), &r->inner);
  });
}

int s_broadcast(void* h, void* comm, void* buf, uint64_t count, DLDataType dt, DLDevice dev,
                int32_t root, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->broadcast(t->inner, comm, buf, count, dt, dev, root, &r->inner);
    void* hb = host_copy(t, r, buf, buf, bytes_of(count, dt));
    return t->real->broadcast(t->inner, comm, hb, count, dt, host(), root, &r->inner);
  });
}

int s_send(void* h, void* comm, const void* buf, uint64_t count, DLDataType dt, DLDevice dev,
           int32_t peer, uint32_t tag, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->send(t->inner, comm, buf, count, dt, dev, peer, tag, &r->inner);
    void* hb = host_copy(t, r, buf, nullptr, bytes_of(count, dt));
    return t->real->send(t->inner, comm, hb, count, dt, host(), peer, tag, &r->inner);
  });
}

int s_recv(void* h, void* comm, void* buf, uint64_t count, DLDataType dt, DLDevice dev,
           int32_t peer, uint32_t tag, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->recv(t->inner, comm, buf, count, dt, dev, peer, tag, &r->inner);
    void* hb = host_copy(t, r, nullptr, buf, bytes_of(count, dt));
    return t->real->recv(t->inner, comm, hb, count, dt, host(), peer, tag, &r->inner);
  });
}

int s_barrier(void* h, void* comm, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] { return t->real->barrier(t->inner, comm, &r->inner); });
}

// Both buffers on the host, apart (all_to_all is not in place).
int s_all_to_all(void* h, void* comm, const void* send, void* recv, uint64_t count, DLDataType dt,
                 DLDevice dev, void** request) {
  StagedTransport* t = self(h);
  auto* r = new StagedRequest;
  return staged(r, request, [&] {
    if (!t->stages(dev))
      return t->real->all_to_all(t->inner, comm, send, recv, count, dt, dev, &r->inner);
    int32_t rank = 0, size = 1;
    const int st = t->real->comm_info(t->inner, comm, &rank, &size);
    if (st != TRIAD_OK) return st;
    const size_t n = bytes_of(count * uint64_t(size), dt);
    uint8_t* in = host_apart(t, r, send, n, recv, n);
    return t->real->all_to_all(t->inner, comm, in, in + n, count, dt, host(), &r->inner);
  });
}

int s_progress(void* h) {
  return self(h)->real->progress(self(h)->inner);
}

// The result goes up once, when the operation is first seen done.
int deliver(StagedTransport* t, StagedRequest* r) {
  if (r->delivered) return TRIAD_OK;
  r->delivered = true;
  if (!r->result_to || !r->result_bytes) return TRIAD_OK;
  try {
    t->how.to_device(r->result_to, r->host.data() + r->result_at, r->result_bytes);
    return TRIAD_OK;
  } catch (const std::exception& e) {
    spdlog::error("transport staging through host memory: {}", e.what());
    return TRIAD_ERR_INTERNAL;
  }
}

int s_test(void* h, void* request, int32_t* done) {
  StagedRequest* r = req(request);
  const int st = self(h)->real->test(self(h)->inner, r->inner, done);
  if (st != TRIAD_OK || !*done) return st;
  return deliver(self(h), r);
}
int s_wait(void* h, void* request, int64_t timeout_ms) {
  StagedRequest* r = req(request);
  const int st = self(h)->real->wait(self(h)->inner, r->inner, timeout_ms);
  if (st != TRIAD_OK) return st;
  return deliver(self(h), r);
}
int s_request_free(void* h, void* request) {
  StagedRequest* r = req(request);
  const int st = r->inner ? self(h)->real->request_free(self(h)->inner, r->inner) : TRIAD_OK;
  delete r;
  return st;
}

}  // namespace

const triad_transport_ops_v2 StagedTransport::kOps = {.capabilities = s_capabilities,
                                                      .init_world = s_init_world,
                                                      .split = s_split,
                                                      .comm_destroy = s_comm_destroy,
                                                      .comm_info = s_comm_info,
                                                      .all_reduce = s_all_reduce,
                                                      .reduce_scatter = s_reduce_scatter,
                                                      .all_gather = s_all_gather,
                                                      .broadcast = s_broadcast,
                                                      .send = s_send,
                                                      .recv = s_recv,
                                                      .barrier = s_barrier,
                                                      .test = s_test,
                                                      .wait = s_wait,
                                                      .request_free = s_request_free,
                                                      .progress = s_progress,
                                                      .all_to_all = s_all_to_all};

}  // namespace triad::detail
