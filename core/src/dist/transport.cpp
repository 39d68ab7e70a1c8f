#include "triad/core/dist/transport.hpp"

#include <cstring>
#include <vector>

#include "transport_staging.hpp"
#include "transport_watch.hpp"
#include "triad/core/dist/rank_status.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/core/train/trace.hpp"
#include "triad/sdk/comm_ref_v1.h"

namespace triad {

namespace detail {

// One plugin instance. Everything made from it holds a shared_ptr, so the instance (and
// through it its .so) outlives its last communicator and request.
struct TransportInstance {
  TransportInstance(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                    const triad_services_v1* services)
      : instance(std::move(plugin), "transport", params, services),
        ops(&instance.ops<triad_transport_ops_v2>()),
        handle(instance.handle()),
        name(instance.name()),
        caps(instance.capabilities(ops->capabilities)) {
    // A bit version 1 did not define means nothing from a version-1 plugin.
    if (instance.plugin().kind_abi_version() < 2) caps.ops &= ~TRIAD_TRANSPORT_OP_ALL_TO_ALL;
    watch();
  }

  // The tables in front of the plugin's: staging (when asked for), then the watch (when a
  // launcher watches this rank).
  void watch() {
    if (!rank_status_watched()) return;
    watched = std::make_unique<WatchedTransport>(ops, handle);
    ops = &WatchedTransport::kOps;
    handle = watched.get();
  }
  void stage(HostStaging how) {
    if (staged) return;
    staged = std::make_unique<StagedTransport>(&instance.ops<triad_transport_ops_v2>(),
                                               instance.handle(), std::move(how));
    ops = &StagedTransport::kOps;
    handle = staged.get();
    watched.reset();
    watch();
    caps.memory = StagedTransport::reach(caps.memory);
  }

  PluginInstance instance;
  std::unique_ptr<StagedTransport> staged;    // device memory through host buffers, when asked
  std::unique_ptr<WatchedTransport> watched;  // in front of the plugin when a launcher watches
  const triad_transport_ops_v2* ops;
  void* handle;
  std::string name;
  triad_transport_caps_v1 caps;

  [[noreturn]] void fail(int status, const std::string& what) const {
    const std::string why = instance.last_error();
    if (status == TRIAD_TRANSPORT_ERR_TIMEOUT)
      throw TransportError(status, "transport '" + name + "': " + what + " timed out: " + why);
    if (status == TRIAD_ERR_UNSUPPORTED)
      throw TransportError(status, "transport '" + name + "' does not support " + what + ": " +
                                       why + "; choose a transport that does");
    throw TransportError(status, "transport '" + name + "': " + what + " failed: " + why);
  }
  void check(int status, const std::string& what) const {
    if (status != TRIAD_OK) fail(status, what);
  }
};

// The C callbacks a plugin uses to reach the job's store, scoped under `prefix`.
struct RendezvousBridge {
  RendezvousClient* client = nullptr;
  std::string prefix;
  std::chrono::milliseconds default_timeout{120000};
  std::string last_error;
  triad_rendezvous_v1 c{};

  static RendezvousBridge* self(void* ctx) { return static_cast<RendezvousBridge*>(ctx); }
  static int set(void* ctx, const char* key, const void* value, size_t len) {
    auto* b = self(ctx);
    try {
      b->client->set(b->prefix + key, std::string(static_cast<const char*>(value), len));
      return TRIAD_OK;
    } catch (const std::exception& e) {
      b->last_error = e.what();
      return TRIAD_ERR_INTERNAL;
    }
  }
  static int get(void* ctx, const char* key, void* value, size_t cap, size_t* len,
                 int64_t timeout_ms) {
    auto* b = self(ctx);
    try {
      auto t = timeout_ms < 0 ? b->default_timeout : std::chrono::milliseconds(timeout_ms);
      std::string v = b->client->get(b->prefix + key, t);
      *len = v.size();
      if (value && cap) std::memcpy(value, v.data(), std::min(cap, v.size()));
      return TRIAD_OK;
    } catch (const RendezvousTimeout& e) {
      b->last_error = e.what();
      return TRIAD_TRANSPORT_ERR_TIMEOUT;
    } catch (const std::exception& e) {
      b->last_error = e.what();
      return TRIAD_ERR_INTERNAL;
    }
  }
  static const char* error(void* ctx) { return self(ctx)->last_error.c_str(); }
};

}  // namespace detail

DLDataType dl_float32() {
  return DLDataType{kDLFloat, 32, 1};
}
DLDataType dl_bfloat16() {
  return DLDataType{kDLBfloat, 16, 1};
}
DLDataType dl_float16() {
  return DLDataType{kDLFloat, 16, 1};
}
DLDevice dl_cpu() {
  return DLDevice{kDLCPU, 0};
}

// ---------------------------------------------------------------------------------------

TransportRequest::TransportRequest(std::shared_ptr<detail::TransportInstance> inst, void* req,
                                   std::string what)
    : inst_(std::move(inst)), req_(req), what_(std::move(what)) {}

TransportRequest::~TransportRequest() {
  release();
}

TransportRequest::TransportRequest(TransportRequest&& o) noexcept
    : inst_(std::move(o.inst_)),
      req_(o.req_),
      what_(std::move(o.what_)),
      op_(o.op_),
      group_(o.group_),
      bytes_(o.bytes_),
      posted_(o.posted_) {
  o.req_ = nullptr;
}

TransportRequest& TransportRequest::operator=(TransportRequest&& o) noexcept {
  if (this != &o) {
    release();
    inst_ = std::move(o.inst_);
    req_ = o.req_;
    what_ = std::move(o.what_);
    describe(o.op_, o.group_, o.bytes_);
    posted_ = o.posted_;
    o.req_ = nullptr;
  }
  return *this;
}

void TransportRequest::release() {
  if (req_ && inst_) inst_->ops->request_free(inst_->handle, req_);
  req_ = nullptr;
}

bool TransportRequest::test() {
  if (!req_) return true;
  int32_t done = 0;
  inst_->check(inst_->ops->test(inst_->handle, req_, &done), what_);
  return done != 0;
}

void TransportRequest::wait(std::chrono::milliseconds timeout) {
  if (!req_) return;
  TraceSpan span(TraceKind::communication, op_);
  if (span) {
    span.arg("group", group_).arg("bytes", bytes_);
    if (posted_ != std::chrono::steady_clock::time_point{})
      span.arg("ahead_us", std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::steady_clock::now() - posted_)
                               .count());
  }
  inst_->check(inst_->ops->wait(inst_->handle, req_, timeout.count()), what_);
}

// ---------------------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<detail::TransportInstance> inst,
                           std::shared_ptr<detail::RendezvousBridge> bridge, void* comm)
    : inst_(std::move(inst)), bridge_(std::move(bridge)), comm_(comm) {
  int32_t r = 0, n = 0;
  inst_->check(inst_->ops->comm_info(inst_->handle, comm_, &r, &n), "comm_info");
  rank_ = r;
  size_ = n;
}

Communicator::~Communicator() {
  destroy();
}

Communicator::Communicator(Communicator&& o) noexcept
    : inst_(std::move(o.inst_)),
      bridge_(std::move(o.bridge_)),
      comm_(o.comm_),
      rank_(o.rank_),
      size_(o.size_),
      group_(o.group_) {
  o.comm_ = nullptr;
}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    destroy();
    inst_ = std::move(o.inst_);
    bridge_ = std::move(o.bridge_);
    comm_ = o.comm_;
    rank_ = o.rank_;
    size_ = o.size_;
    group_ = o.group_;
    o.comm_ = nullptr;
  }
  return *this;
}

void Communicator::destroy() {
  if (comm_ && inst_) inst_->ops->comm_destroy(inst_->handle, comm_);
  comm_ = nullptr;
}

triad_comm_ref_v1 Communicator::c_ref() const {
  triad_comm_ref_v1 r{};
  if (!comm_) return r;
  // A version-2 table begins with version 1's slots: borrowers see those (comm_ref_v1.h).
  r.ops = reinterpret_cast<const triad_transport_ops_v1*>(inst_->ops);
  r.transport = inst_->handle;
  r.comm = comm_;
  return r;
}

void Communicator::label(std::string name, std::vector<int> world_ranks) {
  if (comm_ && inst_->watched)
    inst_->watched->label(comm_, std::move(name), std::move(world_ranks));
}

Communicator Communicator::split(int color, int key) {
  void* nc = nullptr;
  inst_->check(inst_->ops->split(inst_->handle, comm_, color, key, &nc),
               "split(color " + std::to_string(color) + ", key " + std::to_string(key) + ")");
  if (!nc) return Communicator();
  return Communicator(inst_, bridge_, nc);
}

namespace {

// Every operation: issue it through the plugin's `call(&req)`, turn a failed status into
// a TransportError naming `what`, and wrap the request.
// op, group and the bytes moved (count elements of dtype) are what the step trace records.
template <class Call>
TransportRequest issue(const std::shared_ptr<detail::TransportInstance>& inst, std::string what,
                       Call call, const char* op, const char* group, uint64_t count = 0,
                       DLDataType dtype = dl_float32()) {
  void* req = nullptr;
  inst->check(call(&req), what);
  TransportRequest r(inst, req, std::move(what));
  r.describe(op, group, count * ((uint64_t(dtype.bits) * dtype.lanes + 7) / 8));
  if (active_trace()) r.mark_posted();
  return r;
}

}  // namespace

TransportRequest Communicator::all_reduce(const void* send, void* recv, uint64_t count,
                                          DLDataType dtype, int op, DLDevice device) {
  return issue(
      inst_, detail::op_text("all_reduce", count, dtype),
      [&](void** req) {
        return inst_->ops->all_reduce(inst_->handle, comm_, send, recv, count, dtype, device, op,
                                      req);
      },
      "all_reduce", group_, count, dtype);
}

TransportRequest Communicator::reduce_scatter(const void* send, void* recv, uint64_t count,
                                              DLDataType dtype, int op, DLDevice device) {
  return issue(
      inst_, detail::op_text("reduce_scatter", count, dtype),
      [&](void** req) {
        return inst_->ops->reduce_scatter(inst_->handle, comm_, send, recv, count, dtype, device,
                                          op, req);
      },
      "reduce_scatter", group_, count, dtype);
}

TransportRequest Communicator::all_gather(const void* send, void* recv, uint64_t count,
                                          DLDataType dtype, DLDevice device) {
  return issue(
      inst_, detail::op_text("all_gather", count, dtype),
      [&](void** req) {
        return inst_->ops->all_gather(inst_->handle, comm_, send, recv, count, dtype, device, req);
      },
      "all_gather", group_, count, dtype);
}

TransportRequest Communicator::broadcast(void* buf, uint64_t count, DLDataType dtype, int root,
                                         DLDevice device) {
  return issue(
      inst_, detail::op_text("broadcast", count, dtype),
      [&](void** req) {
        return inst_->ops->broadcast(inst_->handle, comm_, buf, count, dtype, device, root, req);
      },
      "broadcast", group_, count, dtype);
}

TransportRequest Communicator::send(const void* buf, uint64_t count, DLDataType dtype, int peer,
                                    uint32_t tag, DLDevice device) {
  return issue(
      inst_, detail::op_text("send", count, dtype) + " to rank " + std::to_string(peer),
      [&](void** req) {
        return inst_->ops->send(inst_->handle, comm_, buf, count, dtype, device, peer, tag, req);
      },
      "send", group_, count, dtype);
}

TransportRequest Communicator::recv(void* buf, uint64_t count, DLDataType dtype, int peer,
                                    uint32_t tag, DLDevice device) {
  return issue(
      inst_, detail::op_text("recv", count, dtype) + " from rank " + std::to_string(peer),
      [&](void** req) {
        return inst_->ops->recv(inst_->handle, comm_, buf, count, dtype, device, peer, tag, req);
      },
      "recv", group_, count, dtype);
}

TransportRequest Communicator::barrier() {
  return issue(
      inst_, "barrier", [&](void** req) { return inst_->ops->barrier(inst_->handle, comm_, req); },
      "barrier", group_);
}

TransportRequest Communicator::all_to_all(const void* send, void* recv, uint64_t count,
                                          DLDataType dtype, DLDevice device) {
  if (!(inst_->caps.ops & TRIAD_TRANSPORT_OP_ALL_TO_ALL))
    throw TransportError(TRIAD_ERR_UNSUPPORTED,
                         "transport '" + inst_->name +
                             "' has no all-to-all (its capabilities lack "
                             "TRIAD_TRANSPORT_OP_ALL_TO_ALL); set transport: ucx, or another "
                             "transport that offers it");
  return issue(
      inst_, detail::op_text("all_to_all", count, dtype),
      [&](void** req) {
        return inst_->ops->all_to_all(inst_->handle, comm_, send, recv, count, dtype, device, req);
      },
      "all_to_all", group_, count * uint64_t(size_), dtype);
}

// ---------------------------------------------------------------------------------------

Transport::Transport(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                     const triad_services_v1* services)
    : inst_(std::make_shared<detail::TransportInstance>(std::move(plugin), params, services)) {}

Transport::~Transport() = default;

std::string Transport::last_error() const {
  return inst_->instance.last_error();
}

const std::string& Transport::name() const {
  return inst_->name;
}
const triad_transport_caps_v1& Transport::capabilities() const {
  return inst_->caps;
}

void Transport::stage_through_host(HostCopy to_host, HostCopy to_device, bool stage_host) {
  inst_->stage({std::move(to_host), std::move(to_device), stage_host});
}
bool Transport::staged() const {
  return inst_->staged != nullptr;
}

void Transport::check_supported(uint32_t memory_bits, uint32_t dtype_bits, uint32_t op_bits) const {
  const auto& c = inst_->caps;
  std::vector<std::string> lack;
  if ((memory_bits & TRIAD_MEM_BIT_HOST) && !(c.memory & TRIAD_MEM_BIT_HOST))
    lack.push_back("host memory");
  if ((memory_bits & TRIAD_MEM_BIT_CUDA) && !(c.memory & TRIAD_MEM_BIT_CUDA))
    lack.push_back("CUDA memory");
  if ((dtype_bits & TRIAD_DTYPE_BIT_FP32) && !(c.dtypes & TRIAD_DTYPE_BIT_FP32))
    lack.push_back("fp32");
  if ((dtype_bits & TRIAD_DTYPE_BIT_BF16) && !(c.dtypes & TRIAD_DTYPE_BIT_BF16))
    lack.push_back("bf16");
  if ((dtype_bits & TRIAD_DTYPE_BIT_FP16) && !(c.dtypes & TRIAD_DTYPE_BIT_FP16))
    lack.push_back("fp16");
  static const std::pair<uint32_t, const char*> kOps[] = {
      {TRIAD_TRANSPORT_OP_ALL_REDUCE, "all_reduce"},
      {TRIAD_TRANSPORT_OP_REDUCE_SCATTER, "reduce_scatter"},
      {TRIAD_TRANSPORT_OP_ALL_GATHER, "all_gather"},
      {TRIAD_TRANSPORT_OP_BROADCAST, "broadcast"},
      {TRIAD_TRANSPORT_OP_SEND_RECV, "send/recv"},
      {TRIAD_TRANSPORT_OP_BARRIER, "barrier"},
      {TRIAD_TRANSPORT_OP_SPLIT, "split"},
      {TRIAD_TRANSPORT_OP_ALL_TO_ALL, "all_to_all"}};
  for (auto& [bit, n] : kOps)
    if ((op_bits & bit) && !(c.ops & bit)) lack.push_back(n);
  if (lack.empty()) return;
  std::string s;
  for (size_t i = 0; i < lack.size(); ++i) s += (i ? ", " : "") + lack[i];
  throw UserError("transport '" + inst_->name + "' lacks " + s +
                  ", which this run needs; choose another transport or change the run");
}

void Transport::progress() {
  inst_->check(inst_->ops->progress(inst_->handle), "progress");
}

Communicator Transport::init_world(int rank, int world_size, RendezvousClient& store,
                                   const std::string& scope,
                                   std::chrono::milliseconds rendezvous_timeout) {
  auto bridge = std::make_shared<detail::RendezvousBridge>();
  bridge->client = &store;
  bridge->prefix = scope;
  bridge->default_timeout = rendezvous_timeout;
  bridge->c = {bridge.get(), &detail::RendezvousBridge::set, &detail::RendezvousBridge::get,
               &detail::RendezvousBridge::error};
  const int32_t most = capabilities().max_world_size;
  if (most > 0 && world_size > most)
    throw UserError("transport '" + inst_->name + "' runs worlds of up to " + std::to_string(most) +
                    " ranks (its max_world_size) and this world has " + std::to_string(world_size) +
                    "; launch at most " + std::to_string(most) +
                    " ranks or choose another transport");
  void* comm = nullptr;
  inst_->check(
      inst_->ops->init_world(inst_->handle, rank, world_size, &bridge->c, &comm),
      "init_world(rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ")");
  return Communicator(inst_, bridge, comm);
}

}  // namespace triad
