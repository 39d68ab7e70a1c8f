// The `nccl` transport: CUDA memory through NCCL. With `stream: own` (the default) every
// operation is enqueued on its communicator's own stream, after an event recorded
// on the compute stream the core passed in (services.stream, the run device's stream) when the
// operation was issued: it reads and writes what the compute stream had done by then, and the
// compute stream's later kernels run beside it (a layer's gradient reduce-scatter beside the
// next layer's backward). `stream: compute` enqueues on the compute stream itself, in order
// with the kernels. Either way its request is a CUDA event recorded after it, and a test or
// wait that sees it done means the results may be read by anything enqueued after. The CUDA
// device must be current (cudaSetDevice, as the core's CUDA device does) when init_world is
// called.
//
// Messages match in order (no tags), as in NCCL. A send or recv is not started at once: it
// is held until the next call that needs the stream (a test or wait, a collective, a split)
// and then every held send/recv starts in one ncclGroupStart/End, so that a ring of
// send + recv (or a rank sending to itself) does not deadlock on the one stream.
// Uneven blocks (count % n != 0) use grouped reduce / broadcast calls, since NCCL's
// reduce_scatter and all_gather take equal blocks only. all_to_all is one group of a send and a
// receive per peer (itself included: NCCL copies that block). NCCL progresses on its own
// stream, so progress() has only the held send/recv to start (a ring step the core posts and
// then computes beside, parallel.tp_comm_overlap).
//
// A wait that passes its timeout aborts the communicator (ncclCommAbort: NCCL cannot cancel
// one operation, and a kernel waiting for a peer would hold the stream forever); so does an
// asynchronous NCCL error. Every later call on that communicator fails with the reason, and
// destroying it is all that is left to do.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "triad/sdk/transport.hpp"

namespace triad::nccl {

using sdk::invalid;
using sdk::unsupported;

namespace {

const triad_param_spec_v1 kParams[] = {
    {"setup_timeout_ms", TRIAD_PARAM_INT, "120000", "limit for the unique-id exchange at init"},
    {"stream", TRIAD_PARAM_STRING, "own",
     "own: collectives and send/recv on a stream of their own, ordered after the compute "
     "stream's work with events, so they overlap the kernels enqueued after them; compute: on "
     "the compute stream, in order with the kernels"},
};

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw sdk::Error(TRIAD_ERR_INTERNAL, what + ": " + cudaGetErrorString(e));
}

int status_of(ncclResult_t r) {
  return r == ncclInvalidArgument || r == ncclInvalidUsage ? TRIAD_ERR_INVALID : TRIAD_ERR_INTERNAL;
}

std::string nccl_message(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw sdk::Error(status_of(r), what + ": " + nccl_message(r));
}

// One NCCL communicator, shared by its handle and the requests made on it, so that a request
// can see that its communicator was aborted.
struct CommState {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 0;
  // Where its operations are enqueued: a stream of its own (`stream: own`), so that one
  // communicator's traffic (ZeRO's reductions over the data-parallel group) does not queue ahead
  // of another's (the tensor group's collectives, the pipeline's sends); or the compute stream.
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  ~CommState() {
    if (owns_stream) cudaStreamDestroy(stream);  // freed once its work is done
  }
  std::string aborted;     // why it was aborted; empty while usable
  bool abandoned = false;  // a request was freed before it finished: destroy must abort

  void abort(const std::string& why) {
    if (!aborted.empty()) return;
    aborted = why;
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
  }
  void usable(const std::string& what) const {
    if (!aborted.empty())
      throw sdk::Error(TRIAD_ERR_INTERNAL,
                       what + ": this NCCL communicator was aborted (" + aborted + ")");
  }
};
using StatePtr = std::shared_ptr<CommState>;

class NcclComm : public sdk::TransportComm {
 public:
  explicit NcclComm(StatePtr s) : state(std::move(s)) {}
  ~NcclComm() override {
    if (!state->comm) return;  // aborted
    // An operation that was abandoned may never finish: only abort frees such a comm.
    if (state->abandoned)
      ncclCommAbort(state->comm);
    else
      ncclCommDestroy(state->comm);
    state->comm = nullptr;
  }
  int rank() const override { return state->rank; }
  int size() const override { return state->size; }
  StatePtr state;
};

class Request : public sdk::TransportRequest {
 public:
  Request(std::string w, StatePtr s) : what(std::move(w)), state(std::move(s)) {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
               what + ": cudaEventCreate");
  }
  ~Request() override { cudaEventDestroy(event); }
  std::string what;
  StatePtr state;
  cudaEvent_t event{};
  bool started = false;  // false while a send/recv is held for the next group
  int error_status = TRIAD_OK;
  std::string error;  // why its group failed to start
};

// A send or recv held until the next flush.
struct P2p {
  bool send;
  void* buf;
  size_t bytes;
  int peer;
  Request* req;
};

// ncclDataType for a reduction (-1 when not reducible).
int reduce_type(DLDataType t) {
  switch (sdk::dtype_bit(t)) {
    case TRIAD_DTYPE_BIT_FP32:
      return ncclFloat32;
    case TRIAD_DTYPE_BIT_BF16:
      return ncclBfloat16;
    case TRIAD_DTYPE_BIT_FP16:
      return ncclFloat16;
    default:
      return -1;
  }
}

class Nccl final : public sdk::TransportPlugin {
 public:
  Nccl(sdk::Services services, sdk::Params params) : services_(services) {
    if (params.has("setup_timeout_ms")) setup_timeout_ms_ = params.get_int("setup_timeout_ms");
    const std::string stream = params.has("stream") ? params.get_string("stream") : "own";
    if (stream != "own" && stream != "compute")
      throw invalid("stream '" + stream +
                    "' is not own or compute; set transport: {name: nccl, "
                    "stream: own} (overlap the kernels) or stream: compute (in order with them)");
    own_ = stream == "own";
  }
  ~Nccl() override {
    if (barrier_buf_) cudaFree(barrier_buf_);
    if (issued_) cudaEventDestroy(issued_);
    if (own_stream_) cudaStreamDestroy(own_stream_);
  }

  triad_transport_caps_v1 capabilities() const override {
    return sdk::full_float_caps(TRIAD_MEM_BIT_CUDA, TRIAD_TRANSPORT_OP_ALL_TO_ALL);
  }

  sdk::TransportComm* init_world(int rank, int world, const triad_rendezvous_v1& rdv) override {
    if (!stream_) {
      compute_ = static_cast<cudaStream_t>(services_.stream());
      stream_ = compute_;
      if (!stream_) {  // no compute stream to order against: one stream for every operation
        check_cuda(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking),
                   "init_world: cudaStreamCreate");
        stream_ = own_stream_;
      }
      if (own_)
        check_cuda(cudaEventCreateWithFlags(&issued_, cudaEventDisableTiming),
                   "init_world: cudaEventCreate");
    }
    if (!barrier_buf_) {
      check_cuda(cudaMalloc(&barrier_buf_, sizeof(float)), "init_world: cudaMalloc");
      check_cuda(cudaMemset(barrier_buf_, 0, sizeof(float)), "init_world: cudaMemset");
    }
    ncclUniqueId id;
    if (rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "init_world: ncclGetUniqueId");
      int rc = rdv.set(rdv.ctx, "unique_id", &id, sizeof(id));
      if (rc != TRIAD_OK) throw sdk::Error(rc, "publishing the NCCL unique id: " + rdv_error(rdv));
    } else {
      size_t len = 0;
      int rc = rdv.get(rdv.ctx, "unique_id", &id, sizeof(id), &len, setup_timeout_ms_);
      if (rc != TRIAD_OK) throw sdk::Error(rc, "no NCCL unique id from rank 0: " + rdv_error(rdv));
      if (len != sizeof(id)) throw invalid("the NCCL unique id from rank 0 has the wrong size");
    }
    auto s = new_state("init_world");
    check_nccl(ncclCommInitRank(&s->comm, world, id, rank), "init_world: ncclCommInitRank (rank " +
                                                                std::to_string(rank) + " of " +
                                                                std::to_string(world) + ")");
    s->rank = rank;
    s->size = world;
    return new NcclComm(std::move(s));
  }

  sdk::TransportComm* split(sdk::TransportComm& base, int color, int key) override {
    auto& c = comm(base);
    c.state->usable("split");
    if (color < 0 && color != TRIAD_COMM_SPLIT_NONE)
      throw invalid("split: color " + std::to_string(color) + " is negative");
    flush();
    ncclComm_t nc = nullptr;
    check_nccl(
        ncclCommSplit(c.state->comm, color == TRIAD_COMM_SPLIT_NONE ? NCCL_SPLIT_NOCOLOR : color,
                      key, &nc, nullptr),
        "split: ncclCommSplit");
    if (!nc) return nullptr;
    auto s = new_state("split");
    s->comm = nc;
    check_nccl(ncclCommUserRank(nc, &s->rank), "split: ncclCommUserRank");
    check_nccl(ncclCommCount(nc, &s->size), "split: ncclCommCount");
    return new NcclComm(std::move(s));
  }

  void comm_destroy(sdk::TransportComm* base) override {
    auto* c = static_cast<NcclComm*>(base);
    drop_pending(*c->state, "its communicator was destroyed before it started");
    delete c;
  }

  sdk::TransportRequest* all_reduce(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d, int op) override {
    auto& c = comm(base);
    auto dt = reduction("all_reduce", t, d, op);
    ready(c, "all_reduce");
    check_nccl(ncclAllReduce(send, recv, count, dt, redop(op), c.state->comm, c.state->stream),
               "all_reduce: ncclAllReduce");
    return record("all_reduce", c);
  }

  sdk::TransportRequest* reduce_scatter(sdk::TransportComm& base, const void* send, void* recv,
                                        uint64_t count, DLDataType t, DLDevice d, int op) override {
    auto& c = comm(base);
    auto dt = reduction("reduce_scatter", t, d, op);
    ready(c, "reduce_scatter");
    const int n = c.size();
    const size_t es = sdk::dtype_bytes(t);
    if (count % uint64_t(n) == 0) {
      check_nccl(ncclReduceScatter(send, recv, count / uint64_t(n), dt, redop(op), c.state->comm,
                                   c.state->stream),
                 "reduce_scatter: ncclReduceScatter");
    } else {
      // Block j is reduced onto rank j; recv is used on the root only.
      group("reduce_scatter", [&] {
        for (int j = 0; j < n; ++j) {
          sdk::Block b = sdk::block_of(count, n, j);
          check_nccl(ncclReduce(static_cast<const char*>(send) + b.offset * es, recv, b.size, dt,
                                redop(op), j, c.state->comm, c.state->stream),
                     "reduce_scatter: ncclReduce");
        }
      });
    }
    return record("reduce_scatter", c);
  }

  sdk::TransportRequest* all_gather(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d) override {
    auto& c = comm(base);
    size_t es = movement("all_gather", t, d);
    ready(c, "all_gather");
    const int n = c.size();
    if (count % uint64_t(n) == 0) {
      check_nccl(ncclAllGather(send, recv, count / uint64_t(n) * es, ncclUint8, c.state->comm,
                               c.state->stream),
                 "all_gather: ncclAllGather");
    } else {
      // Block j is broadcast from rank j (in place when send == recv + offset(rank)).
      group("all_gather", [&] {
        for (int j = 0; j < n; ++j) {
          sdk::Block b = sdk::block_of(count, n, j);
          check_nccl(ncclBroadcast(send, static_cast<char*>(recv) + b.offset * es, b.size * es,
                                   ncclUint8, j, c.state->comm, c.state->stream),
                     "all_gather: ncclBroadcast");
        }
      });
    }
    return record("all_gather", c);
  }

  sdk::TransportRequest* broadcast(sdk::TransportComm& base, void* buf, uint64_t count,
                                   DLDataType t, DLDevice d, int root) override {
    auto& c = comm(base);
    size_t es = movement("broadcast", t, d);
    peer_check(c, root, "broadcast root");
    ready(c, "broadcast");
    check_nccl(ncclBroadcast(buf, buf, count * es, ncclUint8, root, c.state->comm, c.state->stream),
               "broadcast: ncclBroadcast");
    return record("broadcast", c);
  }

  sdk::TransportRequest* all_to_all(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d) override {
    auto& c = comm(base);
    const size_t es = movement("all_to_all", t, d), block = count * es;
    ready(c, "all_to_all");
    if (block) {
      group("all_to_all", [&] {
        for (int j = 0; j < c.size(); ++j) {
          check_nccl(ncclSend(static_cast<const char*>(send) + size_t(j) * block, block, ncclUint8,
                              j, c.state->comm, c.state->stream),
                     "all_to_all: ncclSend");
          check_nccl(ncclRecv(static_cast<char*>(recv) + size_t(j) * block, block, ncclUint8, j,
                              c.state->comm, c.state->stream),
                     "all_to_all: ncclRecv");
        }
      });
    }
    return record("all_to_all", c);
  }

  sdk::TransportRequest* send(sdk::TransportComm& base, const void* buf, uint64_t count,
                              DLDataType t, DLDevice d, int peer, uint32_t tag) override {
    return p2p(true, base, const_cast<void*>(buf), count, t, d, peer, tag);
  }

  sdk::TransportRequest* recv(sdk::TransportComm& base, void* buf, uint64_t count, DLDataType t,
                              DLDevice d, int peer, uint32_t tag) override {
    return p2p(false, base, buf, count, t, d, peer, tag);
  }

  sdk::TransportRequest* barrier(sdk::TransportComm& base) override {
    auto& c = comm(base);
    ready(c, "barrier");
    // NCCL has no barrier: an all-reduce of one float is the cheapest collective.
    check_nccl(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, c.state->comm,
                             c.state->stream),
               "barrier: ncclAllReduce");
    return record("barrier", c);
  }

  // The held send/recv start now, beside the compute that follows.
  void progress() override { flush(); }

  bool test(sdk::TransportRequest& req) override {
    flush();
    auto& r = static_cast<Request&>(req);
    if (!r.error.empty()) throw sdk::Error(r.error_status, r.what + ": " + r.error);
    r.state->usable(r.what);
    const cudaError_t st = cudaEventQuery(r.event);
    if (st == cudaSuccess) return true;
    if (st != cudaErrorNotReady) check_cuda(st, r.what);
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(r.state->comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      const std::string why = r.what + " failed: " + nccl_message(async);
      r.state->abort(why);
      throw sdk::Error(status_of(async), why + "; the NCCL communicator was aborted");
    }
    return false;
  }

  void wait(sdk::TransportRequest& req, int64_t timeout_ms) override {
    auto& r = static_cast<Request&>(req);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
    while (!test(r)) {
      const auto now = std::chrono::steady_clock::now();
      if (timeout_ms >= 0 && now >= deadline) {
        const std::string why = r.what + " did not finish within " + std::to_string(timeout_ms) +
                                " ms (a peer may have stopped calling it)";
        r.state->abort(why);
        throw sdk::timeout_error(why +
                                 "; the NCCL communicator was aborted, since NCCL cannot cancel "
                                 "one operation: destroy it");
      }
      // Spin briefly (collectives usually finish within microseconds), then back off.
      if (now - start < std::chrono::milliseconds(2))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void request_free(sdk::TransportRequest* req) override {
    auto* r = static_cast<Request*>(req);
    const auto held =
        std::find_if(pending_.begin(), pending_.end(), [&](const P2p& p) { return p.req == r; });
    if (held != pending_.end()) {
      pending_.erase(held);  // never started: nothing to abandon
    } else if (r->started && r->error.empty() && r->state->comm &&
               cudaEventQuery(r->event) == cudaErrorNotReady) {
      r->state->abandoned = true;
    }
    delete r;
  }

 private:
  NcclComm& comm(sdk::TransportComm& c) { return static_cast<NcclComm&>(c); }

  static std::string rdv_error(const triad_rendezvous_v1& rdv) {
    const char* e = rdv.last_error ? rdv.last_error(rdv.ctx) : nullptr;
    return e && *e ? e : "no reason given";
  }

  static ncclRedOp_t redop(int op) { return op == TRIAD_REDUCE_MAX ? ncclMax : ncclSum; }

  // Before a collective: the communicator is usable and the held send/recv go first.
  void ready(NcclComm& c, const char* op) {
    c.state->usable(op);
    flush();
    after_compute(op, c.state->stream);
  }

  // With a stream of its own: what is enqueued next on it waits for the compute stream's work
  // issued so far (without blocking the host or the compute stream).
  void after_compute(const std::string& op, cudaStream_t stream) {
    if (!own_ || stream == compute_) return;
    check_cuda(cudaEventRecord(issued_, compute_), op + ": cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream, issued_, 0), op + ": cudaStreamWaitEvent");
  }

  // A communicator's state, with its stream: its own with `stream: own`, else the one stream.
  StatePtr new_state(const std::string& op) {
    auto s = std::make_shared<CommState>();
    s->stream = stream_;
    if (own_ && compute_) {
      check_cuda(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                 op + ": cudaStreamCreate");
      s->owns_stream = true;
    }
    return s;
  }

  // Runs `body` (NCCL calls) inside one group; the group is closed even when body throws.
  template <class F>
  void group(const char* op, F body) {
    check_nccl(ncclGroupStart(), std::string(op) + ": ncclGroupStart");
    try {
      body();
    } catch (...) {
      ncclGroupEnd();
      throw;
    }
    check_nccl(ncclGroupEnd(), std::string(op) + ": ncclGroupEnd");
  }

  sdk::TransportRequest* p2p(bool is_send, sdk::TransportComm& base, void* buf, uint64_t count,
                             DLDataType t, DLDevice d, int peer, uint32_t tag) {
    const char* op = is_send ? "send" : "recv";
    auto& c = comm(base);
    size_t es = movement(op, t, d);
    peer_check(c, peer, is_send ? "send peer" : "recv peer");
    if (tag != 0)
      throw unsupported(std::string(op) + ": nccl matches messages in order; use tag 0");
    c.state->usable(op);
    // One group holds one communicator's send/recv, in the order they were issued.
    if (!pending_.empty() && pending_.front().req->state != c.state) flush();
    auto* r = new Request(
        std::string(op) + (is_send ? " to rank " : " from rank ") + std::to_string(peer), c.state);
    pending_.push_back(P2p{is_send, buf, count * es, peer, r});
    return r;
  }

  // Starts every held send/recv in one group. Never throws: a failure is kept in the requests
  // and reported by their test/wait.
  void flush() {
    if (pending_.empty()) return;
    std::vector<P2p> ops;
    ops.swap(pending_);
    CommState& s = *ops.front().req->state;
    try {
      after_compute("send/recv", s.stream);
    } catch (const sdk::Error& e) {
      for (const P2p& p : ops) {
        p.req->error = e.what();
        p.req->error_status = TRIAD_ERR_INTERNAL;
      }
      return;
    }
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) {
      for (const P2p& p : ops) {
        ncclResult_t e = p.send ? ncclSend(p.buf, p.bytes, ncclUint8, p.peer, s.comm, s.stream)
                                : ncclRecv(p.buf, p.bytes, ncclUint8, p.peer, s.comm, s.stream);
        if (e != ncclSuccess && r == ncclSuccess) r = e;
      }
      const ncclResult_t end = ncclGroupEnd();
      if (r == ncclSuccess) r = end;
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string why = "NCCL refused the grouped send/recv: " + nccl_message(r);
      for (const P2p& p : ops) {
        p.req->error = why;
        p.req->error_status = status_of(r);
      }
      return;
    }
    for (const P2p& p : ops) {
      const cudaError_t e = cudaEventRecord(p.req->event, s.stream);
      if (e != cudaSuccess) {
        p.req->error = std::string("cudaEventRecord: ") + cudaGetErrorString(e);
        p.req->error_status = TRIAD_ERR_INTERNAL;
      }
      p.req->started = true;
    }
  }

  void drop_pending(const CommState& s, const std::string& why) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->req->state.get() == &s) {
        it->req->error = why;
        it->req->error_status = TRIAD_ERR_INVALID;
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void device_check(const char* op, DLDevice d) const {
    if (sdk::memory_bit(d) != TRIAD_MEM_BIT_CUDA)
      throw unsupported(std::string(op) +
                        ": nccl moves CUDA memory only; use the ucx transport for host memory");
  }

  ncclDataType_t reduction(const char* op, DLDataType t, DLDevice d, int redop_) const {
    device_check(op, d);
    int dt = reduce_type(t);
    if (dt < 0) throw unsupported(std::string(op) + ": cannot reduce " + sdk::dtype_name(t));
    if (redop_ != TRIAD_REDUCE_SUM && redop_ != TRIAD_REDUCE_MAX)
      throw unsupported(std::string(op) + ": reduce op " + std::to_string(redop_) +
                        " is not sum or max");
    return ncclDataType_t(dt);
  }

  size_t movement(const char* op, DLDataType t, DLDevice d) const {
    device_check(op, d);
    size_t es = sdk::dtype_bytes(t);
    if (!es)
      throw invalid(std::string(op) + ": dtype " + sdk::dtype_name(t) + " is not whole bytes");
    return es;
  }

  static void peer_check(const NcclComm& c, int peer, const char* what) {
    if (peer < 0 || peer >= c.size())
      throw invalid(std::string(what) + " " + std::to_string(peer) + " is not a rank of this " +
                    std::to_string(c.size()) + "-rank communicator");
  }

  Request* record(const char* what, NcclComm& c) {
    auto r = std::make_unique<Request>(what, c.state);
    check_cuda(cudaEventRecord(r->event, c.state->stream), std::string(what) + ": cudaEventRecord");
    r->started = true;
    return r.release();
  }

  sdk::Services services_;
  long long setup_timeout_ms_ = 120000;
  bool own_ = true;  // `stream: own`
  // stream_: the compute stream (own_stream_ when the core passed none), where `stream: compute`
  // enqueues; compute_: the core's stream; issued_: the compute stream's progress when an
  // operation was issued. With `stream: own` each communicator has its own (CommState).
  cudaStream_t stream_ = nullptr, own_stream_ = nullptr, compute_ = nullptr;
  cudaEvent_t issued_ = nullptr;
  void* barrier_buf_ = nullptr;
  std::vector<P2p> pending_;  // held send/recv, all on one communicator
};

}  // namespace
}  // namespace triad::nccl

TRIAD_TRANSPORT_PLUGIN(triad::nccl::Nccl, "nccl", "1.0",
                       "CUDA memory through NCCL (all-reduce, reduce-scatter, all-gather, "
                       "broadcast, send/recv)",
                       TRIAD_PARAMS(triad::nccl::kParams))
