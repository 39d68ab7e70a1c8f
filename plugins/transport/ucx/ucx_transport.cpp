// The `ucx` transport: host memory over UCP tagged messages on one worker per instance,
// with the collectives of algorithms.hpp on top. Progress happens inside test/wait, when an
// operation is issued and in progress() (one pass, never blocking); waiting on one request
// advances every pending one.
#include <sched.h>
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "algorithms.hpp"
#include "triad/sdk/transport.hpp"

namespace triad::ucx {

using sdk::invalid;
using sdk::unsupported;

namespace {

const triad_param_spec_v1 kParams[] = {
    {"chunk_bytes", TRIAD_PARAM_INT, "524288",
     "bytes per block that one pipeline lane of a ring or chain carries"},
    {"pipeline_depth", TRIAD_PARAM_INT, "4", "lanes (chunks) in flight per collective"},
    {"small_message_bytes", TRIAD_PARAM_INT, "65536",
     "messages up to this size use latency-bound algorithms (recursive doubling, direct, tree)"},
    {"direct_max_ranks", TRIAD_PARAM_INT, "8",
     "all_reduce, all_gather and broadcast send every block straight to every rank up to this "
     "many ranks (best within one node); above it they use a ring / chain"},
    {"tls", TRIAD_PARAM_STRING, "",
     "UCX transports, as UCX_TLS (e.g. 'sm,self' or 'tcp,self'); empty: UCX's choice"},
    {"spin_us", TRIAD_PARAM_INT, "0",
     "a waiting rank polls this long after the last message before it yields the CPU on every "
     "empty poll; 0 suits shared or oversubscribed cores, a few us may help on dedicated ones"},
    {"setup_timeout_ms", TRIAD_PARAM_INT, "120000",
     "limit for the blocking setup steps (address exchange, split)"},
    {"tags", TRIAD_PARAM_BOOL, "true",
     "send/recv matched by tag; false: tag 0 only, matched in the order posted, as nccl does "
     "(to check that a pipeline schedule runs on such a transport)"},
};

std::string failed_with(const char* what, ucs_status_t st) {
  return std::string(what) + " failed: " + ucs_status_string(st);
}

// UCX's log messages while a context starts, held back instead of printed: when `tls` selects
// nothing, they name what there is ("transport 'x' is not available, please use one or more
// of: ..."), and the plugin's one error says it instead. Messages of a start that succeeds are
// passed on to UCX's other handlers (its printing) afterwards.
struct HeldLog {
  const char* file;  // UCX's own strings, static
  unsigned line;
  const char* function;
  ucs_log_level_t level;
  const ucs_log_component_config_t* component;
  std::string text;
};
std::vector<HeldLog>* g_held_log = nullptr;  // set only while a context starts

ucs_log_func_rc_t hold_log(const char* file, unsigned line, const char* function,
                           ucs_log_level_t level, const ucs_log_component_config_t* component,
                           const char* format, va_list ap) {
  if (!g_held_log || level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, format, ap);
  g_held_log->push_back({file, line, function, level, component, buf});
  return UCS_LOG_FUNC_RC_STOP;
}

// UCX ends a process on a transport failure it has no error handler for: with error handling
// mode NONE (the shared-memory transports of UCX 1.13 offer no peer failure handling, so
// endpoints cannot ask for it), a copy from a peer process that has just died (CMA's
// process_vm_readv: "No such process") is FATAL, and UCX prints a 20-frame backtrace and aborts.
// The launcher already names the rank that died first; this rank ends with one line instead.
// It also drops UCX's per-object "was not returned to mpool" warnings once this process has
// abandoned transfers (schedule.hpp): the failure that made it abandon them is already
// reported in one line, and a genuine leak without one still shows.
ucs_log_func_rc_t end_on_fatal(const char* file, unsigned line, const char*, ucs_log_level_t level,
                               const ucs_log_component_config_t*, const char* format, va_list ap) {
  if (level == UCS_LOG_LEVEL_WARN && g_abandoned_transfers.load(std::memory_order_relaxed) &&
      std::strstr(format, "was not returned to mpool"))
    return UCS_LOG_FUNC_RC_STOP;
  if (level != UCS_LOG_LEVEL_FATAL) return UCS_LOG_FUNC_RC_CONTINUE;
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, format, ap);
  std::fprintf(stderr,
               "transport 'ucx': a transfer failed fatally (%s, at %s:%u): a peer process has "
               "most likely ended; this rank stops\n",
               buf, file, line);
  std::fflush(stderr);
  std::_Exit(1);
}

// The UCP context with the environment's UCX_* settings and, when given, tls as UCX_TLS. A tls
// that selects no transport here is an invalid parameter: the message names the value and
// UCX's list of what is available.
ucp_context_h start_context(const std::string& tls) {
  ucp_config_t* cfg = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) throw sdk::Error(TRIAD_ERR_INTERNAL, failed_with("ucp_config_read", st));
  if (!tls.empty()) {
    st = ucp_config_modify(cfg, "TLS", tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(cfg);
      throw invalid("transport.tls '" + tls + "' is not a valid UCX_TLS value (" +
                    ucs_status_string(st) +
                    "); give UCX transport names separated by commas, e.g. tcp,self");
    }
  }
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_TAG;
  ucp_context_h ctx = nullptr;
  std::vector<HeldLog> held;
  g_held_log = &held;
  ucs_log_push_handler(hold_log);
  st = ucp_init(&p, cfg, &ctx);
  ucs_log_pop_handler();
  g_held_log = nullptr;
  ucp_config_release(cfg);
  if (st == UCS_OK) {
    static const bool once = (ucs_log_push_handler(end_on_fatal), true);
    (void)once;
    for (const HeldLog& m : held)
      ucs_log_dispatch(m.file, m.line, m.function, m.level,
                       const_cast<ucs_log_component_config_t*>(m.component), "%s", m.text.c_str());
    return ctx;
  }
  std::string said;
  for (const HeldLog& m : held) said += (said.empty() ? "" : "; ") + m.text;
  if (tls.empty())
    throw sdk::Error(TRIAD_ERR_INTERNAL,
                     failed_with("ucp_init", st) + (said.empty() ? "" : " (" + said + ")"));
  // UCX: "transport 'x' is not available, please use one or more of: cma, mm, ..., tcp".
  const std::string marker = "is not available, please use one or more of: ";
  for (const HeldLog& m : held) {
    const size_t at = m.text.find(marker);
    if (!m.text.starts_with("transport '") || at == std::string::npos) continue;
    throw invalid("transport.tls '" + tls + "' names a transport UCX does not have here; use " +
                  "one or more of " + m.text.substr(at + marker.size()) +
                  " (comma-separated, as UCX_TLS), or leave tls empty for UCX's choice");
  }
  // Known names that find no device here, e.g. under UCX_NET_DEVICES.
  throw invalid("transport.tls '" + tls + "' leaves UCX no usable transport here (" +
                ucs_status_string(st) + (said.empty() ? "" : ": " + said) +
                "); check tls and the UCX_* variables (ucx_info -d lists what this machine has), "
                "or leave tls empty for UCX's choice");
}

class Ucx final : public sdk::TransportPlugin {
 public:
  Ucx(sdk::Services services, sdk::Params params) : services_(services) {
    auto positive = [&](const char* name) {
      long long v = params.has(name) ? params.get_int(name) : 0;
      if (v <= 0)
        throw invalid(std::string("parameter ") + name + " must be positive, got " +
                      std::to_string(v));
      return v;
    };
    if (params.has("chunk_bytes")) tuning_.chunk_bytes = size_t(positive("chunk_bytes"));
    if (params.has("pipeline_depth")) tuning_.window = size_t(positive("pipeline_depth"));
    if (params.has("small_message_bytes"))
      tuning_.small_bytes = size_t(std::max<long long>(0, params.get_int("small_message_bytes")));
    if (params.has("direct_max_ranks"))
      tuning_.direct_max_ranks = int(std::max<long long>(0, params.get_int("direct_max_ranks")));
    if (params.has("spin_us"))
      spin_ = std::chrono::microseconds(std::max<long long>(0, params.get_int("spin_us")));
    if (params.has("tls")) tls_ = params.get_string("tls");
    if (params.has("setup_timeout_ms")) setup_timeout_ms_ = positive("setup_timeout_ms");
    if (params.has("tags")) tags_ = params.get_bool("tags");
    // A tls that selects nothing is refused now, when the launcher checks the config, rather
    // than by every rank's init_world; the context is kept for init_world.
    if (!tls_.empty()) ctx_ = start_context(tls_);
  }

  ~Ucx() override { shutdown(); }

  triad_transport_caps_v1 capabilities() const override {
    const uint32_t tags = tags_ ? uint32_t(TRIAD_TRANSPORT_OP_TAGS) : 0u;
    auto c = sdk::full_float_caps(TRIAD_MEM_BIT_HOST, tags | TRIAD_TRANSPORT_OP_ALL_TO_ALL);
    c.max_world_size = kMaxRanks;
    return c;
  }

  sdk::TransportComm* init_world(int rank, int world, const triad_rendezvous_v1& rdv) override {
    if (worker_) throw invalid("init_world was already called on this instance");
    if (world > kMaxRanks)
      throw unsupported("world size " + std::to_string(world) + " is above the ucx limit of " +
                        std::to_string(kMaxRanks));
    start_ucx();
    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    ucs_status_t st = ucp_worker_get_address(worker_, &addr, &addr_len);
    if (st != UCS_OK)
      throw sdk::Error(TRIAD_ERR_INTERNAL, failed_with("ucp_worker_get_address", st));
    std::string key = "addr/rank/" + std::to_string(rank);
    int rc = rdv.set(rdv.ctx, key.c_str(), addr, addr_len);
    ucp_worker_release_address(worker_, addr);
    if (rc != TRIAD_OK) throw sdk::Error(rc, "publishing the worker address: " + rdv_error(rdv));

    eps_.assign(size_t(world), nullptr);
    std::vector<char> peer(4096);
    for (int r = 0; r < world; ++r) {
      std::string k = "addr/rank/" + std::to_string(r);
      size_t len = 0;
      rc = rdv.get(rdv.ctx, k.c_str(), peer.data(), peer.size(), &len, setup_timeout_ms_);
      if (rc == TRIAD_OK && len > peer.size()) {
        peer.resize(len);
        rc = rdv.get(rdv.ctx, k.c_str(), peer.data(), peer.size(), &len, setup_timeout_ms_);
      }
      if (rc != TRIAD_OK)
        throw sdk::Error(rc, "init_world: no UCX address from rank " + std::to_string(r) + ": " +
                                 rdv_error(rdv));
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
      st = ucp_ep_create(worker_, &ep, &eps_[size_t(r)]);
      if (st != UCS_OK)
        throw sdk::Error(TRIAD_ERR_INTERNAL,
                         failed_with(("connecting to rank " + std::to_string(r)).c_str(), st));
    }
    std::vector<int> ranks(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) ranks[size_t(r)] = r;
    return new UcxComm(0, rank, std::move(ranks));
  }

  sdk::TransportComm* split(sdk::TransportComm& base, int color, int key) override {
    auto& c = comm(base);
    if (color < 0 && color != TRIAD_COMM_SPLIT_NONE)
      throw invalid("split: color " + std::to_string(color) +
                    " is negative; use TRIAD_COMM_SPLIT_NONE (-1) to join no group");
    // Every member learns (color, key, next free communicator id) of every other.
    const int n = c.size();
    std::vector<int32_t> mine = {color, key, int32_t(next_comm_id_)};
    std::vector<int32_t> all(size_t(3 * n));
    CollArgs a;
    a.send = reinterpret_cast<const char*>(mine.data());
    a.recv = reinterpret_cast<char*>(all.data());
    a.count = uint64_t(3 * n);
    a.esize = 4;
    // Blocks of 3 elements: the split rule gives rank r elements [3r, 3r+3).
    Schedule* s = make(c, "split", plan_all_gather(c, c.next_seq(), a, tuning_));
    struct Release {
      Ucx* u;
      Schedule* s;
      ~Release() { u->request_free(s); }
    } release{this, s};
    block_on(*s, setup_timeout_ms_);
    if (!s->error().empty()) throw sdk::Error(TRIAD_ERR_INTERNAL, s->error());
    uint32_t id = 0;
    for (int r = 0; r < n; ++r) id = std::max<uint32_t>(id, uint32_t(all[size_t(3 * r + 2)]));
    if (id >= uint32_t(kMaxCommIds))
      throw unsupported("split: ran out of communicator ids (" + std::to_string(kMaxCommIds) +
                        " per process)");
    next_comm_id_ = id + 1;
    if (color == TRIAD_COMM_SPLIT_NONE) return nullptr;
    std::vector<std::pair<std::pair<int, int>, int>> members;  // ((key, rank), world rank)
    for (int r = 0; r < n; ++r)
      if (all[size_t(3 * r)] == color)
        members.push_back({{all[size_t(3 * r + 1)], r}, c.world_rank(r)});
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    int me = -1;
    for (auto& m : members) {
      if (m.first.second == c.rank()) me = int(ranks.size());
      ranks.push_back(m.second);
    }
    return new UcxComm(id, me, std::move(ranks));
  }

  sdk::TransportRequest* all_reduce(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d, int op) override {
    auto& c = comm(base);
    CollArgs a = coll_args("all_reduce", send, recv, count, t, d, true, op);
    return make(c, what("all_reduce", count, t, op), plan_all_reduce(c, c.next_seq(), a, tuning_));
  }

  sdk::TransportRequest* reduce_scatter(sdk::TransportComm& base, const void* send, void* recv,
                                        uint64_t count, DLDataType t, DLDevice d, int op) override {
    auto& c = comm(base);
    CollArgs a = coll_args("reduce_scatter", send, recv, count, t, d, true, op);
    return make(c, what("reduce_scatter", count, t, op),
                plan_reduce_scatter(c, c.next_seq(), a, tuning_));
  }

  sdk::TransportRequest* all_gather(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d) override {
    auto& c = comm(base);
    CollArgs a = coll_args("all_gather", send, recv, count, t, d, false, 0);
    return make(c, what("all_gather", count, t, -1), plan_all_gather(c, c.next_seq(), a, tuning_));
  }

  sdk::TransportRequest* broadcast(sdk::TransportComm& base, void* buf, uint64_t count,
                                   DLDataType t, DLDevice d, int root) override {
    auto& c = comm(base);
    check_peer(c, root, "broadcast root");
    CollArgs a = coll_args("broadcast", buf, buf, count, t, d, false, 0);
    a.root = root;
    return make(c, what("broadcast", count, t, -1) + " from rank " + std::to_string(root),
                plan_broadcast(c, c.next_seq(), a, tuning_));
  }

  sdk::TransportRequest* send(sdk::TransportComm& base, const void* buf, uint64_t count,
                              DLDataType t, DLDevice d, int peer, uint32_t tag) override {
    auto& c = comm(base);
    check_peer(c, peer, "send peer");
    check_tag(tag, "send");
    CollArgs a = coll_args("send", buf, const_cast<void*>(buf), count, t, d, false, 0);
    return make(c,
                what("send", count, t, -1) + " to rank " + std::to_string(peer) + " tag " +
                    std::to_string(tag),
                plan_p2p(c, true, const_cast<void*>(buf), count * a.esize, peer, tag));
  }

  sdk::TransportRequest* recv(sdk::TransportComm& base, void* buf, uint64_t count, DLDataType t,
                              DLDevice d, int peer, uint32_t tag) override {
    auto& c = comm(base);
    check_peer(c, peer, "recv peer");
    check_tag(tag, "recv");
    CollArgs a = coll_args("recv", buf, buf, count, t, d, false, 0);
    return make(c,
                what("recv", count, t, -1) + " from rank " + std::to_string(peer) + " tag " +
                    std::to_string(tag),
                plan_p2p(c, false, buf, count * a.esize, peer, tag));
  }

  sdk::TransportRequest* barrier(sdk::TransportComm& base) override {
    auto& c = comm(base);
    return make(c, "barrier", plan_barrier(c, c.next_seq()));
  }

  sdk::TransportRequest* all_to_all(sdk::TransportComm& base, const void* send, void* recv,
                                    uint64_t count, DLDataType t, DLDevice d) override {
    auto& c = comm(base);
    CollArgs a = coll_args("all_to_all", send, recv, count, t, d, false, 0);
    const size_t bytes = size_t(count) * a.esize * size_t(c.size());
    if (bytes && a.send < a.recv + bytes && a.recv < a.send + bytes)
      throw invalid("all_to_all: send and recv overlap; it does not work in place");
    return make(c, what("all_to_all", count, t, -1), plan_all_to_all(c, c.next_seq(), a));
  }

  // One pass: UCX's events, then every schedule as far as they let it go.
  void progress() override {
    if (worker_) progress_all();
  }

  bool test(sdk::TransportRequest& req) override {
    auto& s = sched(req);
    progress_all();
    if (!s.finished()) return false;
    if (!s.error().empty()) throw sdk::Error(TRIAD_ERR_INTERNAL, s.error());
    return true;
  }

  void wait(sdk::TransportRequest& req, int64_t timeout_ms) override {
    auto& s = sched(req);
    block_on(s, timeout_ms);
    if (!s.error().empty()) throw sdk::Error(TRIAD_ERR_INTERNAL, s.error());
  }

  void request_free(sdk::TransportRequest* req) override {
    auto* s = &sched(*req);
    active_.erase(std::remove(active_.begin(), active_.end(), s), active_.end());
    delete s;  // cancels what is still pending
  }

 private:
  UcxComm& comm(sdk::TransportComm& c) {
    if (!worker_) throw invalid("no communicator: call init_world first");
    return static_cast<UcxComm&>(c);
  }
  Schedule& sched(sdk::TransportRequest& r) { return static_cast<Schedule&>(r); }

  static std::string rdv_error(const triad_rendezvous_v1& rdv) {
    const char* e = rdv.last_error ? rdv.last_error(rdv.ctx) : nullptr;
    return e && *e ? e : "no reason given";
  }

  static std::string what(const char* op, uint64_t count, DLDataType t, int redop) {
    std::string s = std::string(op) + "(";
    if (redop >= 0) s += std::string(sdk::reduce_op_name(redop)) + ", ";
    return s + std::to_string(count) + " x " + sdk::dtype_name(t) + ")";
  }

  void check_peer(const UcxComm& c, int peer, const char* what) const {
    if (peer < 0 || peer >= c.size())
      throw invalid(std::string(what) + " " + std::to_string(peer) + " is not a rank of this " +
                    std::to_string(c.size()) + "-rank communicator");
  }

  // tags: false takes tag 0 only (what the capabilities then say).
  void check_tag(uint32_t tag, const char* op) const {
    if (!tags_ && tag != 0)
      throw sdk::unsupported(std::string(op) + ": tag " + std::to_string(tag) +
                             " with tags: false (messages match in order); use tag 0");
  }

  CollArgs coll_args(const char* op, const void* send, void* recv, uint64_t count, DLDataType t,
                     DLDevice d, bool reduces, int redop) const {
    if (sdk::memory_bit(d) != TRIAD_MEM_BIT_HOST)
      throw unsupported(std::string(op) + ": ucx moves host memory only (device type " +
                        std::to_string(int(d.device_type)) + "); use the nccl transport for CUDA");
    CollArgs a;
    a.esize = sdk::dtype_bytes(t);
    if (a.esize == 0)
      throw invalid(std::string(op) + ": dtype " + sdk::dtype_name(t) + " is not whole bytes");
    if (reduces) {
      a.reduce = reduce_fn(t, redop);
      if (!a.reduce)
        throw unsupported(std::string(op) + ": cannot reduce " + sdk::dtype_name(t) + " with op " +
                          std::to_string(redop) + " (fp32, bf16, fp16 with sum or max)");
    }
    if (count && (!send || !recv)) throw invalid(std::string(op) + ": a buffer is null");
    a.send = static_cast<const char*>(send);
    a.recv = static_cast<char*>(recv);
    a.count = count;
    return a;
  }

  Schedule* make(const UcxComm& c, std::string what, Plan plan) {
    auto* s = new Schedule(Wire{worker_, &eps_, &scratch_}, c, std::move(what), std::move(plan));
    active_.push_back(s);
    s->progress();
    return s;
  }

  // Returns the number of UCX events seen.
  unsigned progress_all() {
    unsigned events = ucp_worker_progress(worker_);
    // Indexes, not iterators: finishing one schedule never adds or removes others here.
    for (size_t i = 0; i < active_.size(); ++i) active_[i]->progress();
    active_.erase(
        std::remove_if(active_.begin(), active_.end(), [](Schedule* s) { return s->finished(); }),
        active_.end());
    return events;
  }

  void block_on(Schedule& s, int64_t timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto quiet_since = std::chrono::steady_clock::now();
    for (;;) {
      unsigned events = progress_all();
      if (s.finished()) return;
      auto now = std::chrono::steady_clock::now();
      if (timeout_ms >= 0 && now >= deadline)
        throw sdk::timeout_error(s.describe() + " did not finish within " +
                                 std::to_string(timeout_ms) + " ms");
      // Yield on an empty poll: the rank we wait for may share this core, and then every
      // microsecond spent spinning is a microsecond of latency (measured: latency ~ spin).
      // On a free core sched_yield returns at once, so polling barely slows down.
      // A wait that stays quiet much longer (a slow or stopped peer) naps instead, so a waiting
      // rank does not hold a core: 100 us naps after 20 ms of silence, 1 ms after 500 ms.
      using std::chrono::milliseconds, std::chrono::microseconds;
      if (events)
        quiet_since = now;
      else if (now - quiet_since > milliseconds(500))
        std::this_thread::sleep_for(milliseconds(1));
      else if (now - quiet_since > milliseconds(20))
        std::this_thread::sleep_for(microseconds(100));
      else if (now - quiet_since > spin_)
        sched_yield();
    }
  }

  void start_ucx() {
    if (!ctx_) ctx_ = start_context(tls_);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucs_status_t st = ucp_worker_create(ctx_, &wp, &worker_);
    if (st != UCS_OK) throw sdk::Error(TRIAD_ERR_INTERNAL, failed_with("ucp_worker_create", st));
  }

  void shutdown() {
    for (auto* s : active_) s->cancel();
    active_.clear();
    if (worker_) {
      // Flush each endpoint so our last sends reach their peers, but never wait forever
      // on a peer that is gone.
      std::vector<void*> closing;
      for (ucp_ep_h ep : eps_) {
        if (!ep) continue;
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = 0;
        ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
        if (r && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
      }
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!closing.empty() && std::chrono::steady_clock::now() < deadline) {
        ucp_worker_progress(worker_);
        closing.erase(std::remove_if(closing.begin(), closing.end(),
                                     [](void* r) {
                                       if (ucp_request_check_status(r) == UCS_INPROGRESS)
                                         return false;
                                       ucp_request_free(r);
                                       return true;
                                     }),
                      closing.end());
      }
      for (void* r : closing) ucp_request_free(r);
      eps_.clear();
      ucp_worker_destroy(worker_);
      worker_ = nullptr;
    }
    if (ctx_) ucp_cleanup(ctx_);
    ctx_ = nullptr;
  }

  sdk::Services services_;
  Tuning tuning_;
  std::string tls_;
  long long setup_timeout_ms_ = 120000;
  bool tags_ = true;
  std::chrono::microseconds spin_{0};
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<Schedule*> active_;
  ScratchPool scratch_;
  uint32_t next_comm_id_ = 1;
};

}  // namespace
}  // namespace triad::ucx

TRIAD_TRANSPORT_PLUGIN(triad::ucx::Ucx, "ucx", "1.0",
                       "host memory over UCX tagged messages (shared memory, TCP, RDMA); direct, "
                       "ring and recursive-doubling collectives",
                       TRIAD_PARAMS(triad::ucx::kParams))
