// The `nccl` transport: CUDA memory through NCCL. Every operation is enqueued on the stream
// the core passed in (services.stream; a stream of its own when none), and its request is
// a CUDA event recorded after it. Messages match in order (no tags), as in NCCL.
// Uneven blocks (count % n != 0) use grouped reduce / broadcast calls, since NCCL's
// reduce_scatter and all_gather take equal blocks only.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "triad/sdk/transport.hpp"

namespace triad::nccl {

using sdk::invalid;
using sdk::unsupported;

namespace {

const triad_param_spec_v1 kParams[] = {
    {"setup_timeout_ms", TRIAD_PARAM_INT, "120000", "limit for the unique-id exchange at init"},
};

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw sdk::Error(TRIAD_ERR_INTERNAL, std::string(what) + ": " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw sdk::Error(
        r == ncclInvalidArgument || r == ncclInvalidUsage ? TRIAD_ERR_INVALID : TRIAD_ERR_INTERNAL,
        what + ": " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")");
}

class NcclComm : public sdk::TransportComm {
 public:
  NcclComm(ncclComm_t c, int rank, int size) : comm(c), rank_(rank), size_(size) {}
  ~NcclComm() override {
    if (comm) ncclCommDestroy(comm);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  ncclComm_t comm;

 private:
  int rank_, size_;
};

class Event : public sdk::TransportRequest {
 public:
  Event(std::string w, ncclComm_t c) : what(std::move(w)), comm(c) {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Event() override { cudaEventDestroy(event); }
  std::string what;
  ncclComm_t comm;
  cudaEvent_t event{};
};

// ncclDataType for a reduction (nullopt-like -1 when not reducible).
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
  }
  ~Nccl() override {
    if (barrier_buf_) cudaFree(barrier_buf_);
    if (own_stream_) cudaStreamDestroy(own_stream_);
  }

  triad_transport_caps_v1 capabilities() const override {
    return sdk::full_float_caps(TRIAD_MEM_BIT_CUDA);
  }

  sdk::TransportComm* init_world(int rank, int world, const triad_rendezvous_v1& rdv) override {
    stream_ = static_cast<cudaStream_t>(services_.stream());
    if (!stream_) {
      check_cuda(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate");
      stream_ = own_stream_;
    }
    check_cuda(cudaMalloc(&barrier_buf_, sizeof(float)), "cudaMalloc");
    ncclUniqueId id;
    if (rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      int rc = rdv.set(rdv.ctx, "unique_id", &id, sizeof(id));
      if (rc != TRIAD_OK) throw sdk::Error(rc, "publishing the NCCL unique id: " + rdv_error(rdv));
    } else {
      size_t len = 0;
      int rc = rdv.get(rdv.ctx, "unique_id", &id, sizeof(id), &len, setup_timeout_ms_);
      if (rc != TRIAD_OK) throw sdk::Error(rc, "no NCCL unique id from rank 0: " + rdv_error(rdv));
      if (len != sizeof(id)) throw invalid("the NCCL unique id from rank 0 has the wrong size");
    }
    ncclComm_t c = nullptr;
    check_nccl(ncclCommInitRank(&c, world, id, rank), "ncclCommInitRank");
    return new NcclComm(c, rank, world);
  }

  sdk::TransportComm* split(sdk::TransportComm& base, int color, int key) override {
    auto& c = comm(base);
    ncclComm_t nc = nullptr;
    check_nccl(ncclCommSplit(c.comm, color == TRIAD_COMM_SPLIT_NONE ? NCCL_SPLIT_NOCOLOR : color,
                             key, &nc, nullptr),
               "ncclCommSplit");
    if (!nc) return nullptr;
    int r = 0, n = 0;
    check_nccl(ncclCommUserRank(nc, &r), "ncclCommUserRank");
    check_nccl(ncclCommCount(nc, &n), "ncclCommCount");
    return new NcclComm(nc, r, n);
  }

  sdk::TransportRequest* all_reduce(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d, int op) override {
    auto& c = comm(base);
    auto dt = reduction("all_reduce", t, d, op);
    check_nccl(ncclAllReduce(send, recv, count, dt, redop(op), c.comm, stream_), "ncclAllReduce");
    return record("all_reduce", c);
  }

  sdk::TransportRequest* reduce_scatter(sdk::TransportComm& base, const void* send, void* recv,
                                        uint64_t count, DLDataType t, DLDevice d, int op) override {
    auto& c = comm(base);
    auto dt = reduction("reduce_scatter", t, d, op);
    const int n = c.size();
    const size_t es = sdk::dtype_bytes(t);
    if (count % uint64_t(n) == 0) {
      check_nccl(ncclReduceScatter(send, recv, count / uint64_t(n), dt, redop(op), c.comm, stream_),
                 "ncclReduceScatter");
    } else {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int j = 0; j < n; ++j) {
        sdk::Block b = sdk::block_of(count, n, j);
        check_nccl(ncclReduce(static_cast<const char*>(send) + b.offset * es, recv, b.size, dt,
                              redop(op), j, c.comm, stream_),
                   "ncclReduce");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    }
    return record("reduce_scatter", c);
  }

  sdk::TransportRequest* all_gather(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d) override {
    auto& c = comm(base);
    size_t es = movement("all_gather", t, d);
    const int n = c.size();
    if (count % uint64_t(n) == 0) {
      check_nccl(ncclAllGather(send, recv, count / uint64_t(n) * es, ncclUint8, c.comm, stream_),
                 "ncclAllGather");
    } else {
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int j = 0; j < n; ++j) {
        sdk::Block b = sdk::block_of(count, n, j);
        check_nccl(ncclBroadcast(send, static_cast<char*>(recv) + b.offset * es, b.size * es,
                                 ncclUint8, j, c.comm, stream_),
                   "ncclBroadcast");
      }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    }
    return record("all_gather", c);
  }

  sdk::TransportRequest* broadcast(sdk::TransportComm& base, void* buf, uint64_t count,
                                   DLDataType t, DLDevice d, int root) override {
    auto& c = comm(base);
    size_t es = movement("broadcast", t, d);
    peer_check(c, root, "broadcast root");
    check_nccl(ncclBroadcast(buf, buf, count * es, ncclUint8, root, c.comm, stream_),
               "ncclBroadcast");
    return record("broadcast", c);
  }

  sdk::TransportRequest* send(sdk::TransportComm& base, const void* buf, uint64_t count,
                              DLDataType t, DLDevice d, int peer, uint32_t tag) override {
    auto& c = comm(base);
    size_t es = movement("send", t, d);
    peer_check(c, peer, "send peer");
    if (tag != 0) throw unsupported("send: nccl matches messages in order; use tag 0");
    check_nccl(ncclSend(buf, count * es, ncclUint8, peer, c.comm, stream_), "ncclSend");
    return record("send", c);
  }

  sdk::TransportRequest* recv(sdk::TransportComm& base, void* buf, uint64_t count, DLDataType t,
                              DLDevice d, int peer, uint32_t tag) override {
    auto& c = comm(base);
    size_t es = movement("recv", t, d);
    peer_check(c, peer, "recv peer");
    if (tag != 0) throw unsupported("recv: nccl matches messages in order; use tag 0");
    check_nccl(ncclRecv(buf, count * es, ncclUint8, peer, c.comm, stream_), "ncclRecv");
    return record("recv", c);
  }

  sdk::TransportRequest* barrier(sdk::TransportComm& base) override {
    auto& c = comm(base);
    // NCCL has no barrier: an all-reduce of one float is the cheapest collective.
    check_nccl(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, c.comm, stream_),
               "ncclAllReduce (barrier)");
    return record("barrier", c);
  }

  bool test(sdk::TransportRequest& req) override {
    auto& e = static_cast<Event&>(req);
    cudaError_t st = cudaEventQuery(e.event);
    if (st == cudaErrorNotReady) {
      async_error(e);
      return false;
    }
    check_cuda(st, e.what.c_str());
    return true;
  }

  void wait(sdk::TransportRequest& req, int64_t timeout_ms) override {
    auto& e = static_cast<Event&>(req);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!test(e)) {
      if (timeout_ms >= 0 && std::chrono::steady_clock::now() >= deadline)
        throw sdk::timeout_error(e.what + " did not finish within " + std::to_string(timeout_ms) +
                                 " ms (a peer may have stopped calling it)");
      std::this_thread::yield();
    }
  }

 private:
  NcclComm& comm(sdk::TransportComm& c) { return static_cast<NcclComm&>(c); }

  static std::string rdv_error(const triad_rendezvous_v1& rdv) {
    const char* e = rdv.last_error ? rdv.last_error(rdv.ctx) : nullptr;
    return e && *e ? e : "no reason given";
  }

  static ncclRedOp_t redop(int op) { return op == TRIAD_REDUCE_MAX ? ncclMax : ncclSum; }

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

  Event* record(const char* what, NcclComm& c) {
    auto* e = new Event(what, c.comm);
    cudaError_t st = cudaEventRecord(e->event, stream_);
    if (st != cudaSuccess) {
      delete e;
      check_cuda(st, "cudaEventRecord");
    }
    return e;
  }

  void async_error(const Event& e) const {
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(e.comm, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
      throw sdk::Error(TRIAD_ERR_INTERNAL, e.what + ": " + ncclGetErrorString(r));
  }

  sdk::Services services_;
  long long setup_timeout_ms_ = 120000;
  cudaStream_t stream_ = nullptr, own_stream_ = nullptr;
  void* barrier_buf_ = nullptr;
};

}  // namespace
}  // namespace triad::nccl

TRIAD_TRANSPORT_PLUGIN(triad::nccl::Nccl, "nccl", "1.0",
                       "CUDA memory through NCCL (all-reduce, reduce-scatter, all-gather, "
                       "broadcast, send/recv)",
                       TRIAD_PARAMS(triad::nccl::kParams))
