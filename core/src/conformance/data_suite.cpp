// The data conformance suite. Every configuration (ZeRO stage the capabilities list, world,
// arena shape, bucket parameters) runs a fresh plugin instance for three training steps on host
// float32 arenas: each rank fills its gradients with its own known values, reports them through
// grads_ready in backward order and calls finish_grads, then sets its owned range of the
// parameters and calls after_step; the results are checked against a double-precision
// reference every rank computes for itself (every rank's values are a known function). Worlds
// above 1 are forked ranks over a transport plugin (ranks.hpp, as the tensor suite does), each
// configuration on a fresh communicator split from the world; world 1 runs here on the suite's
// own one-rank communicator. Whatever the plugin borrows goes through a watch that checks the
// borrowed-communicator rules of comm_ref_v1.h and data_v1.h, and holds every wait of the
// plugin to the setup's timeout_ms. The suite's own waits (the split, the exchange of owned
// ranges, the barrier after each configuration) are bounded by the world's timeout instead, as a
// plugin may wait several times in one call; the parent kills a world that outlives it.
// Malformed grads_ready ranges (gaps, overlaps, out of the arena) are not tried: data_v1.h
// promises the plugin ranges that never overlap and cover the arena once, and says nothing of
// what it must do with others.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <set>
#include <utility>

#include "ranks.hpp"
#include "triad/core/conformance/conformance.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/sdk/data_v4.h"

namespace triad::conformance {

namespace {

using Report = std::function<void(Outcome, const std::string& name, const std::string& detail)>;

constexpr int kStages = 4;  // ZeRO stages 0..3
constexpr int kSteps = 3;
constexpr double kFloor = 1e-3;

struct Range {
  uint64_t offset = 0, count = 0;
  uint64_t end() const { return offset + count; }
  bool operator!=(const Range& o) const { return offset != o.offset || count != o.count; }
};
constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();  // a rank without a range

std::string text(const Range& r) {
  return "[" + std::to_string(r.offset) + ", " + std::to_string(r.end()) + ")";
}

std::string fmt(const char* f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// ---------------------------------------------------------------------------------------
// Values: a known function of (rank, step, element), so every rank computes every other's.

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
float unit(uint64_t h) {  // [-1, 1), 24 significant bits
  return float(int64_t(h >> 40) - (int64_t(1) << 23)) / float(1 << 23);
}
float grad_value(int rank, int step, uint64_t i) {
  return unit(mix(mix(i) + uint64_t(rank) * 0x51ED27ull + uint64_t(step) * 0x2545F491ull));
}
float param_value(int step, uint64_t i) {
  return unit(mix(mix(i) ^ (uint64_t(step) * 0x7FB5D329ull + 0xC0FFEEull)));
}
float garbage(int rank) {
  return -1000.f - float(rank);
}

// ---------------------------------------------------------------------------------------
// Arenas and parameter variants.

struct Arena {
  std::string name;
  std::vector<uint64_t> offsets, sizes;
  uint64_t total = 0;
  // The tensor holding element i.
  size_t tensor_of(uint64_t i) const {
    return size_t(std::upper_bound(offsets.begin(), offsets.end(), i) - offsets.begin()) - 1;
  }
};

Arena arena(std::string name, std::vector<uint64_t> sizes) {
  Arena a{std::move(name), {}, std::move(sizes), 0};
  for (uint64_t s : a.sizes) {
    a.offsets.push_back(a.total);
    a.total += s;
  }
  return a;
}

std::vector<Arena> arenas() {
  std::vector<uint64_t> small;
  for (int i = 0; i < 64; ++i) small.push_back(uint64_t(1 + i % 3));
  return {arena("one-tensor", {4099}), arena("many-small", small),
          arena("odd-sizes", {13, 1, 257, 7, 64, 3, 1031, 5, 2, 511}),
          arena("three-elements", {2, 1})};  // smaller than the world of 4
}

// The ranges reported ready in step `step`, in backward order (last tensors first), covering the
// arena once: one tensor at a time, then three at a time (like layers), then all at once.
std::vector<Range> backward_ranges(const Arena& a, int step) {
  const size_t group = step == 1 ? 1 : step == 2 ? 3 : a.sizes.size();
  std::vector<Range> out;
  for (size_t t = 0; t < a.sizes.size(); t += group) {
    const size_t last = std::min(t + group, a.sizes.size()) - 1;
    out.push_back({a.offsets[t], a.offsets[last] + a.sizes[last] - a.offsets[t]});
  }
  std::reverse(out.begin(), out.end());
  return out;
}

struct Variant {
  std::string label;
  std::map<std::string, std::string> set;
};

// ---------------------------------------------------------------------------------------
// The suite's own one-rank transport, lent at world 1: every collective is a copy.

namespace solo {

int g_comm = 0;  // the one communicator's handle: &g_comm

size_t bytes(uint64_t count, DLDataType t) {
  return size_t(count) * ((size_t(t.bits) * t.lanes + 7) / 8);
}
int done(void** request) {
  *request = new int(0);
  return TRIAD_OK;
}
int capabilities(void*, triad_transport_caps_v1* c) {
  c->memory = TRIAD_MEM_BIT_HOST;
  c->dtypes = TRIAD_DTYPE_BIT_FP32 | TRIAD_DTYPE_BIT_BF16 | TRIAD_DTYPE_BIT_FP16;
  c->reduce_ops = (1u << TRIAD_REDUCE_SUM) | (1u << TRIAD_REDUCE_MAX);
  c->ops = TRIAD_TRANSPORT_OP_ALL_REDUCE | TRIAD_TRANSPORT_OP_REDUCE_SCATTER |
           TRIAD_TRANSPORT_OP_ALL_GATHER | TRIAD_TRANSPORT_OP_BROADCAST |
           TRIAD_TRANSPORT_OP_BARRIER;
  c->max_world_size = 1;
  return TRIAD_OK;
}
int init_world(void*, int32_t, int32_t, const triad_rendezvous_v1*, void**) {
  return TRIAD_ERR_UNSUPPORTED;
}
int split(void*, void*, int32_t, int32_t, void**) {
  return TRIAD_ERR_UNSUPPORTED;
}
int comm_destroy(void*, void*) {
  return TRIAD_OK;
}
int comm_info(void*, void*, int32_t* rank, int32_t* size) {
  *rank = 0;
  *size = 1;
  return TRIAD_OK;
}
int copy(const void* send, void* recv, uint64_t count, DLDataType t, void** request) {
  if (send != recv) std::memmove(recv, send, bytes(count, t));
  return done(request);
}
int all_reduce(void*, void*, const void* s, void* r, uint64_t n, DLDataType t, DLDevice, int32_t,
               void** req) {
  return copy(s, r, n, t, req);
}
int reduce_scatter(void*, void*, const void* s, void* r, uint64_t n, DLDataType t, DLDevice,
                   int32_t, void** req) {
  return copy(s, r, n, t, req);
}
int all_gather(void*, void*, const void* s, void* r, uint64_t n, DLDataType t, DLDevice,
               void** req) {
  return copy(s, r, n, t, req);
}
int broadcast(void*, void*, void*, uint64_t, DLDataType, DLDevice, int32_t, void** req) {
  return done(req);
}
int send(void*, void*, const void*, uint64_t, DLDataType, DLDevice, int32_t, uint32_t, void**) {
  return TRIAD_ERR_UNSUPPORTED;
}
int recv(void*, void*, void*, uint64_t, DLDataType, DLDevice, int32_t, uint32_t, void**) {
  return TRIAD_ERR_UNSUPPORTED;
}
int barrier(void*, void*, void** req) {
  return done(req);
}
int test(void*, void*, int32_t* is_done) {
  *is_done = 1;
  return TRIAD_OK;
}
int wait(void*, void*, int64_t) {
  return TRIAD_OK;
}
int request_free(void*, void* request) {
  delete static_cast<int*>(request);
  return TRIAD_OK;
}

const triad_transport_ops_v1 kOps = {capabilities, init_world, split,          comm_destroy,
                                     comm_info,    all_reduce, reduce_scatter, all_gather,
                                     broadcast,    send,       recv,           barrier,
                                     test,         wait,       request_free};

}  // namespace solo

// ---------------------------------------------------------------------------------------
// The watch: what the plugin borrows is this table, which checks each call and forwards it to
// the real communicator.

// How the plugins of one world used their communicators; the first rule broken, with where.
struct Usage {
  std::string problem;
  std::map<std::string, long> ops;
  long waits = 0;
  int64_t longest_wait = 0;
};

class Watch {
 public:
  Watch(const triad_comm_ref_v1& real, Usage& usage, std::string where, int64_t timeout_ms,
        int rank, int size)
      : real_(real),
        usage_(usage),
        where_(std::move(where)),
        timeout_ms_(timeout_ms),
        rank_(rank),
        size_(size) {}
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  triad_comm_ref_v1 ref() { return {&kOps, this, real_.comm}; }
  void declare(uint32_t transport_ops) { declared_ = transport_ops; }
  // The arenas; buffers that start inside one must end inside it.
  void arenas(const float* grads, const float* params, uint64_t n) {
    grads_ = grads, params_ = params, n_ = n;
  }

 private:
  void note(const std::string& what) {
    if (usage_.problem.empty()) usage_.problem = where_ + ": " + what;
  }
  // Counts an operation; false (and noted) when it is not on the lent communicator.
  bool use(const char* name, uint32_t bit, void* comm) {
    if (comm != real_.comm) {
      note(std::string("called ") + name + " on a communicator it was not lent");
      return false;
    }
    ++usage_.ops[name];
    if (bit && !(declared_ & bit))
      note(std::string("used ") + name + ", which capabilities().transport_ops does not list");
    return true;
  }
  void span(const char* what, const void* p, uint64_t count, DLDataType t) {
    const auto* b = static_cast<const char*>(p);
    const size_t len = solo::bytes(count, t);
    for (auto [base, arena] : {std::pair{grads_, "gradient"}, std::pair{params_, "parameter"}}) {
      const auto* lo = reinterpret_cast<const char*>(base);
      if (!lo || b < lo || b >= lo + n_ * sizeof(float)) continue;
      if (size_t(lo + n_ * sizeof(float) - b) < len)
        note(std::string(what) + " of " + std::to_string(count) + " elements at element " +
             std::to_string((b - lo) / sizeof(float)) + " runs past the end of the " + arena +
             " arena (" + std::to_string(n_) + " elements)");
    }
  }
  uint64_t block(uint64_t count) const {
    uint64_t off = 0, n = 0;
    triad_transport_block(count, size_, rank_, &off, &n);
    return n;
  }
  static Watch& self(void* h) { return *static_cast<Watch*>(h); }
  int unlent(const char* what) {
    note(std::string(what) +
         " through the lent table (a borrower never creates or destroys "
         "communicators)");
    return TRIAD_ERR_UNSUPPORTED;
  }

  static int capabilities(void* h, triad_transport_caps_v1* c) {
    Watch& w = self(h);
    return w.real_.ops->capabilities(w.real_.transport, c);
  }
  static int init_world(void* h, int32_t, int32_t, const triad_rendezvous_v1*, void**) {
    return self(h).unlent("called init_world");
  }
  static int split(void* h, void*, int32_t, int32_t, void**) {
    return self(h).unlent("called split");
  }
  static int comm_destroy(void* h, void*) { return self(h).unlent("destroyed a communicator"); }
  static int comm_info(void* h, void* comm, int32_t* rank, int32_t* size) {
    Watch& w = self(h);
    if (!w.use("comm_info", 0, comm)) return TRIAD_ERR_INVALID;
    return w.real_.ops->comm_info(w.real_.transport, comm, rank, size);
  }
  static int all_reduce(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                        DLDevice d, int32_t op, void** req) {
    Watch& w = self(h);
    if (!w.use("all-reduce", TRIAD_TRANSPORT_OP_ALL_REDUCE, comm)) return TRIAD_ERR_INVALID;
    w.span("an all-reduce's send buffer", s, n, t);
    w.span("an all-reduce's receive buffer", r, n, t);
    return w.real_.ops->all_reduce(w.real_.transport, comm, s, r, n, t, d, op, req);
  }
  static int reduce_scatter(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                            DLDevice d, int32_t op, void** req) {
    Watch& w = self(h);
    if (!w.use("reduce-scatter", TRIAD_TRANSPORT_OP_REDUCE_SCATTER, comm)) return TRIAD_ERR_INVALID;
    w.span("a reduce-scatter's send buffer", s, n, t);
    w.span("a reduce-scatter's receive buffer", r, w.block(n), t);
    return w.real_.ops->reduce_scatter(w.real_.transport, comm, s, r, n, t, d, op, req);
  }
  static int all_gather(void* h, void* comm, const void* s, void* r, uint64_t n, DLDataType t,
                        DLDevice d, void** req) {
    Watch& w = self(h);
    if (!w.use("all-gather", TRIAD_TRANSPORT_OP_ALL_GATHER, comm)) return TRIAD_ERR_INVALID;
    w.span("an all-gather's send buffer", s, w.block(n), t);
    w.span("an all-gather's receive buffer", r, n, t);
    return w.real_.ops->all_gather(w.real_.transport, comm, s, r, n, t, d, req);
  }
  static int broadcast(void* h, void* comm, void* buf, uint64_t n, DLDataType t, DLDevice d,
                       int32_t root, void** req) {
    Watch& w = self(h);
    if (!w.use("broadcast", TRIAD_TRANSPORT_OP_BROADCAST, comm)) return TRIAD_ERR_INVALID;
    w.span("a broadcast's buffer", buf, n, t);
    return w.real_.ops->broadcast(w.real_.transport, comm, buf, n, t, d, root, req);
  }
  static int send(void* h, void* comm, const void* buf, uint64_t n, DLDataType t, DLDevice d,
                  int32_t peer, uint32_t tag, void** req) {
    Watch& w = self(h);
    if (!w.use("send", TRIAD_TRANSPORT_OP_SEND_RECV, comm)) return TRIAD_ERR_INVALID;
    w.span("a send's buffer", buf, n, t);
    return w.real_.ops->send(w.real_.transport, comm, buf, n, t, d, peer, tag, req);
  }
  static int recv(void* h, void* comm, void* buf, uint64_t n, DLDataType t, DLDevice d,
                  int32_t peer, uint32_t tag, void** req) {
    Watch& w = self(h);
    if (!w.use("recv", TRIAD_TRANSPORT_OP_SEND_RECV, comm)) return TRIAD_ERR_INVALID;
    w.span("a receive's buffer", buf, n, t);
    return w.real_.ops->recv(w.real_.transport, comm, buf, n, t, d, peer, tag, req);
  }
  static int barrier(void* h, void* comm, void** req) {
    Watch& w = self(h);
    if (!w.use("barrier", TRIAD_TRANSPORT_OP_BARRIER, comm)) return TRIAD_ERR_INVALID;
    return w.real_.ops->barrier(w.real_.transport, comm, req);
  }
  static int test(void* h, void* req, int32_t* done) {
    Watch& w = self(h);
    return w.real_.ops->test(w.real_.transport, req, done);
  }
  // data_v1.h: the setup's timeout_ms bounds every wait. One beyond it is noted and held to it.
  static int wait(void* h, void* req, int64_t timeout_ms) {
    Watch& w = self(h);
    ++w.usage_.waits;
    if (timeout_ms < 0 || timeout_ms > w.timeout_ms_) {
      w.note("waited with timeout_ms " + std::to_string(timeout_ms) +
             (timeout_ms < 0 ? " (no limit)" : "") + ", beyond the setup's timeout_ms " +
             std::to_string(w.timeout_ms_));
      timeout_ms = w.timeout_ms_;
    }
    w.usage_.longest_wait = std::max(w.usage_.longest_wait, timeout_ms);
    return w.real_.ops->wait(w.real_.transport, req, timeout_ms);
  }
  static int request_free(void* h, void* req) {
    Watch& w = self(h);
    return w.real_.ops->request_free(w.real_.transport, req);
  }
  static const triad_transport_ops_v1 kOps;

  triad_comm_ref_v1 real_;
  Usage& usage_;
  std::string where_;
  int64_t timeout_ms_;
  int rank_, size_;
  uint32_t declared_ = 0;
  const float *grads_ = nullptr, *params_ = nullptr;
  uint64_t n_ = 0;
};

const triad_transport_ops_v1 Watch::kOps = {capabilities, init_world, split,          comm_destroy,
                                            comm_info,    all_reduce, reduce_scatter, all_gather,
                                            broadcast,    send,       recv,           barrier,
                                            test,         wait,       request_free};

// ---------------------------------------------------------------------------------------
// Groups: what one world lends its plugins (a fresh communicator per configuration) and what
// the suite itself exchanges over.

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual triad_comm_ref_v1 lend() = 0;
  // After the plugin instance is gone: every rank is done with the lent communicator.
  virtual void reclaim() = 0;
  // Every rank's range, in rank order.
  virtual std::vector<Range> gather(const Range& mine) = 0;
};

class SoloGroup final : public Group {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  triad_comm_ref_v1 lend() override { return {&solo::kOps, nullptr, &solo::g_comm}; }
  void reclaim() override {}
  std::vector<Range> gather(const Range& mine) override { return {mine}; }
};

class WorldGroup final : public Group {
 public:
  WorldGroup(Communicator& world, std::chrono::milliseconds timeout)
      : world_(world), timeout_(timeout) {}
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }
  triad_comm_ref_v1 lend() override {
    lent_ = world_.split(0, world_.rank());
    return lent_.c_ref();
  }
  void reclaim() override {
    world_.barrier().wait(timeout_);
    lent_ = Communicator();
  }
  std::vector<Range> gather(const Range& mine) override {
    const uint64_t in[2] = {mine.offset, mine.count};
    std::vector<uint64_t> all(2 * size_t(size()));
    world_.all_gather(in, all.data(), all.size(), DLDataType{kDLUInt, 64, 1}).wait(timeout_);
    std::vector<Range> out;
    for (size_t r = 0; r < size_t(size()); ++r) out.push_back({all[2 * r], all[2 * r + 1]});
    return out;
  }

 private:
  Communicator& world_;
  Communicator lent_;
  std::chrono::milliseconds timeout_;
};

// ---------------------------------------------------------------------------------------
// Checks.

// "" when the ranks' ranges are right for the stage: at stage 0 every rank owns the whole
// arena; above, the ranges tile it (disjoint, covering, in rank order; empty ones anywhere).
std::string tiling_error(const std::vector<Range>& all, uint64_t n, int stage) {
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].offset == kNone) return "rank " + std::to_string(r) + " has no owned range";
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].count > n || all[r].offset > n - all[r].count)
      return "rank " + std::to_string(r) + " owns " + text(all[r]) + ", past the arena's " +
             std::to_string(n) + " elements";
  if (stage == 0) {
    for (size_t r = 0; r < all.size(); ++r)
      if (all[r] != Range{0, n})
        return "rank " + std::to_string(r) + " owns " + text(all[r]) + " of " + std::to_string(n) +
               " elements; at stage 0 every rank owns the whole arena";
    return "";
  }
  uint64_t next = 0;
  size_t prev = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].count == 0) continue;
    if (all[r].offset < next)
      return "rank " + std::to_string(r) + " owns " + text(all[r]) + ", overlapping rank " +
             std::to_string(prev) + "'s " + text(all[prev]);
    if (all[r].offset > next)
      return "elements " + text({next, all[r].offset - next}) + " belong to no rank before rank " +
             std::to_string(r) + ", which owns " + text(all[r]) +
             " (the ranges must tile the arena in rank order)";
    next = all[r].end();
    prev = r;
  }
  if (next != n) return "elements " + text({next, n - next}) + " belong to no rank";
  return "";
}

// What one step found: a call that failed (the configuration stops), or wrong results.
struct StepResult {
  std::string stop, grads, params;
  bool grads_checked = false, params_checked = false;
  double grad_error = 0;  // max |got - sum| / max(max |sum|, kFloor)
};

// One configuration on one rank.
class Config {
 public:
  Config(Group& g, std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
         const triad_services_v1* services, int stage, const Arena& a, int64_t timeout_ms,
         double tolerance)
      : g_(g),
        plugin_(std::move(plugin)),
        params_(params),
        services_(services),
        stage_(stage),
        a_(a),
        timeout_ms_(timeout_ms),
        tolerance_(tolerance),
        grads_(a.total),
        weights_(a.total) {}

  void run(const std::string& label, Usage& usage, const Report& report) {
    const int rank = g_.rank();
    std::string fatal;
    Range mine{kNone, kNone};
    watch_ = std::make_unique<Watch>(g_.lend(), usage, label, timeout_ms_, rank, g_.size());
    watch_->arenas(grads_.data(), weights_.data(), a_.total);
    try {
      inst_ = std::make_unique<PluginInstance>(plugin_, "data", params_, services_);
      ops_ = &inst_->ops<triad_data_ops_v4>();
      watch_->declare(inst_->capabilities(ops_->capabilities).transport_ops);
      // Units (data_v2.h): the tensors, each one unit.
      triad_data_setup_v2 s2{};
      s2.num_units = a_.sizes.size();
      s2.unit_offsets = a_.offsets.data();
      s2.unit_sizes = a_.sizes.data();
      triad_data_setup_v1& s = s2.v1;
      s.num_elements = a_.total;
      s.num_tensors = a_.sizes.size();
      s.tensor_offsets = a_.offsets.data();
      s.tensor_sizes = a_.sizes.data();
      s.grad_dtype = DLDataType{kDLFloat, 32, 1};
      s.device = DLDevice{kDLCPU, 0};
      s.dp_rank = rank;
      s.dp_size = g_.size();
      s.dp_comm = watch_->ref();
      s.timeout_ms = timeout_ms_;
      fatal = call(ops_->setup(inst_->handle(), &s2), "setup");
      if (fatal.empty() && stage_ == 1) fatal = stage1_partitioning();
      if (fatal.empty() && stage_ < 2 && !by_unit_) fatal = owned(&mine);
    } catch (const std::exception& e) {
      fatal = e.what();
    }
    if (stage_ >= 2 || by_unit_) return run_partitioned(label, report, fatal);
    const std::vector<Range> all = g_.gather(mine);
    const std::string owned_detail = fatal.empty() ? tiling_error(all, a_.total, stage_) : fatal;
    const bool owned_ok = owned_detail.empty();

    const std::string ranks = std::to_string(g_.size()) + (g_.size() == 1 ? " rank" : " ranks");
    steps_and_report(
        label, report, fatal, owned_detail, [&](int step) { return run_step(step, {mine}); },
        [&](double first_error, double later_error) -> std::array<std::string, 4> {
          return {owned_ok ? ranges_detail(all) : "",
                  std::string(stage_ == 0 ? "the whole arena" : "each owned range") +
                      " holds the sum over " + ranks + ", within " + fmt("%.1e", first_error) +
                      " relative",
                  "whole and identical on every rank, " + std::to_string(a_.total) + " elements",
                  "the same with other values and grads_ready ranges, within " +
                      fmt("%.1e", later_error) + " relative"};
        });
  }

 private:
  // Stage 1 may partition the optimizer state by unit (data_v3.h) or own one range (data_v1.h):
  // partitioning() says which, and nothing else.
  std::string stage1_partitioning() {
    uint32_t flags = 0;
    std::string fatal = call(ops_->partitioning(inst_->handle(), &flags), "partitioning");
    const uint32_t unit = TRIAD_DATA_PARTITION_BY_UNIT;
    if (fatal.empty() && flags != 0 && flags != unit &&
        flags != (unit | TRIAD_DATA_GATHER_DEFERRED))
      fatal = "partitioning() says " + std::to_string(flags) +
              " at stage 1; data_v4.h allows 0 (one owned range), " + std::to_string(unit) +
              " (BY_UNIT) or " + std::to_string(unit | TRIAD_DATA_GATHER_DEFERRED) +
              " (BY_UNIT | GATHER_DEFERRED)";
    by_unit_ = fatal.empty() && (flags & unit);
    deferred_ = fatal.empty() && (flags & TRIAD_DATA_GATHER_DEFERRED);
    return fatal;
  }

  // Stages 2 and 3 (data_v2.h): each unit (a tensor here) is cut over the ranks; per step, two
  // micro-batches' windows are reduced unit by unit (back to front, one reduction in flight,
  // the running sum folded in as the core does) and the owned slices must hold the sum over
  // ranks and micro-batches; then the parameters: stage 3 gathers each unit from the owned
  // slices, stage 2's after_step makes the whole arena from them. Stage 1 by unit (data_v3.h):
  // the units are cut the same way, but the whole gradient arena goes through grads_ready and
  // finish_grads as at stage 1 (run_step), each owned slice then holding the sum.
  void run_partitioned(const std::string& label, const Report& report, std::string fatal) {
    const size_t nu = a_.sizes.size();
    const uint32_t want = stage_ == 1 ? uint32_t(TRIAD_DATA_PARTITION_BY_UNIT)
                          : stage_ == 2
                              ? uint32_t(TRIAD_DATA_PARTITION_GRADS)
                              : uint32_t(TRIAD_DATA_PARTITION_GRADS | TRIAD_DATA_PARTITION_PARAMS);
    std::vector<uint64_t> off(nu, kNone), cnt(nu, 0);
    if (fatal.empty()) {
      uint32_t flags = 0;
      fatal = call(ops_->partitioning(inst_->handle(), &flags), "partitioning");
      // Stages 1 (by unit) and 2 may leave the gathers after the step to wait_unit (data_v4.h).
      const uint32_t also = stage_ < 3 ? uint32_t(TRIAD_DATA_GATHER_DEFERRED) : 0u;
      if (fatal.empty() && flags != want && flags != (want | also))
        fatal = "partitioning() says " + std::to_string(flags) + " at stage " +
                std::to_string(stage_) + "; data_v4.h asks for " + std::to_string(want) +
                (also ? " or " + std::to_string(want | also) + " (with GATHER_DEFERRED)" : "");
      deferred_ = fatal.empty() && (flags & TRIAD_DATA_GATHER_DEFERRED);
    }
    if (fatal.empty()) fatal = call(ops_->shard(inst_->handle(), off.data(), cnt.data()), "shard");
    // Every unit's slices over the ranks, relative to the unit: they must tile it.
    std::string owned_detail = fatal;
    std::vector<Range> mine(nu);
    for (size_t u = 0; u < nu; ++u) {
      Range r{kNone, kNone};
      if (fatal.empty() && off[u] >= a_.offsets[u]) r = {off[u] - a_.offsets[u], cnt[u]};
      mine[u] = fatal.empty() ? Range{off[u], cnt[u]} : Range{0, 0};
      const std::vector<Range> all = g_.gather(r);
      if (owned_detail.empty()) {
        const std::string e = tiling_error(all, a_.sizes[u], stage_);
        if (!e.empty()) owned_detail = "unit " + std::to_string(u) + ": " + e;
      }
    }
    const std::string ranks = std::to_string(g_.size()) + (g_.size() == 1 ? " rank" : " ranks");
    const std::string micro = by_unit_ ? "" : " and 2 micro-batches";
    steps_and_report(
        label, report, owned_detail, owned_detail,
        [&](int step) { return by_unit_ ? run_step(step, mine) : partitioned_step(step, mine); },
        [&](double first_error, double later_error) -> std::array<std::string, 4> {
          return {"each of " + std::to_string(nu) + " units tiled by the ranks' slices",
                  "each owned slice holds the sum over " + ranks + micro + ", within " +
                      fmt("%.1e", first_error) + " relative",
                  stage_ == 3 ? "every unit gathered whole from the owned slices"
                              : "whole and identical on every rank after after_step",
                  "the same with other values, within " + fmt("%.1e", later_error) + " relative"};
        });
  }

  // Runs the steps unless `blocker` says why not, releases the instance, and reports the four
  // cases: owned ranges (failing with owned_detail), step 1's gradients and parameters (a check
  // step 1 did not reach fails with what stopped it) and the later steps.
  template <class Step, class Passed>
  void steps_and_report(const std::string& label, const Report& report, const std::string& blocker,
                        const std::string& owned_detail, Step step_fn, Passed passed_texts) {
    const int rank = g_.rank();
    StepResult first;
    std::string later, stopped = blocker;
    double later_error = 0;
    for (int step = 1; step <= kSteps && stopped.empty(); ++step) {
      StepResult r = step_fn(step);
      const std::string at = "rank " + std::to_string(rank) + ", step " + std::to_string(step);
      if (!r.stop.empty()) stopped = at + ": " + r.stop;
      if (step == 1) {
        first = r;
        continue;
      }
      later_error = std::max(later_error, r.grad_error);
      for (const std::string* e : {&r.stop, &r.grads, &r.params})
        if (later.empty() && !e->empty()) later = at + ": " + *e;
    }
    inst_.reset();
    g_.reclaim();
    const std::string at1 = "rank " + std::to_string(rank) + ", step 1: ";
    auto step1 = [&](bool reached, const std::string& err) {
      return !blocker.empty() ? blocker
             : !reached       ? at1 + first.stop
             : err.empty()    ? ""
                              : at1 + err;
    };
    if (later.empty() && !first.stop.empty()) later = "not run: " + stopped;
    if (!blocker.empty()) later = blocker;
    const std::pair<std::string, std::string> cases[] = {
        {" owned ranges", owned_detail},
        {" gradients", step1(first.grads_checked, first.grads)},
        {" parameters", step1(first.params_checked, first.params)},
        {" steps 2-3", later}};
    const std::array<std::string, 4> passed = passed_texts(first.grad_error, later_error);
    for (size_t i = 0; i < std::size(cases); ++i) {
      const bool ok = i == 0 ? owned_detail.empty() : cases[i].second.empty();
      report(ok ? Outcome::kPass : Outcome::kFail, label + cases[i].first,
             ok ? passed[i] : cases[i].second);
    }
  }

  StepResult partitioned_step(int step, const std::vector<Range>& mine) {
    StepResult res;
    const int rank = g_.rank(), n = g_.size();
    void* h = inst_->handle();
    const size_t nu = a_.sizes.size();
    // The owned slices, back to back in unit order (the core's shard).
    std::vector<size_t> pos(nu, 0);
    size_t total = 0;
    for (size_t u = 0; u < nu; ++u) pos[u] = total, total += mine[u].count;
    std::vector<float> owned(total, 0.0f);
    std::vector<std::vector<float>> windows(nu);
    auto value = [&](int r, int micro, uint64_t i) { return grad_value(r, step * 2 + micro, i); };
    for (int micro = 0; micro < 2 && res.stop.empty(); ++micro) {
      std::vector<size_t> in_flight;
      for (size_t u = nu; u-- > 0 && res.stop.empty();) {
        std::vector<float>& w = windows[u];
        w.resize(a_.sizes[u]);
        for (uint64_t k = 0; k < a_.sizes[u]; ++k) w[k] = value(rank, micro, a_.offsets[u] + k);
        for (uint64_t k = 0; k < mine[u].count; ++k)
          w[mine[u].offset - a_.offsets[u] + k] += owned[pos[u] + k];
        // An empty owned slice comes as null (data_v2.h allows it).
        float* dst = mine[u].count ? owned.data() + pos[u] : nullptr;
        res.stop = call(ops_->reduce_unit(h, uint32_t(u), w.data(), dst),
                        "reduce_unit(" + std::to_string(u) + ")");
        in_flight.push_back(u);
        if (in_flight.size() > 1 && res.stop.empty()) {
          res.stop = call(ops_->wait_unit(h, uint32_t(in_flight.front())), "wait_unit");
          in_flight.erase(in_flight.begin());
        }
      }
      for (size_t u : in_flight)
        if (res.stop.empty()) res.stop = call(ops_->wait_unit(h, uint32_t(u)), "wait_unit");
    }
    if (!res.stop.empty()) return res;
    double err = 0, scale = kFloor;
    uint64_t worst = 0;
    float got_w = 0;
    double want_w = 0;
    for (size_t u = 0; u < nu; ++u)
      for (uint64_t k = 0; k < mine[u].count; ++k) {
        const uint64_t i = mine[u].offset + k;
        double want = 0;
        for (int r = 0; r < n; ++r) want += double(value(r, 0, i)) + double(value(r, 1, i));
        scale = std::max(scale, std::abs(want));
        double e = std::abs(double(owned[pos[u] + k]) - want);
        if (std::isnan(e)) e = std::numeric_limits<double>::infinity();
        if (e > err) err = e, worst = i, got_w = owned[pos[u] + k], want_w = want;
      }
    res.grad_error = err / scale;
    res.grads_checked = true;
    if (!(res.grad_error <= tolerance_))
      res.grads = "element " + std::to_string(worst) + " (tensor " +
                  std::to_string(a_.tensor_of(worst)) + ") holds " + fmt("%.9g", got_w) +
                  " where the sum over " + std::to_string(n) + " ranks and 2 micro-batches is " +
                  fmt("%.9g", want_w);
    // Parameters: the owned slices hold the step's values, everything else this rank's garbage.
    for (uint64_t i = 0; i < a_.total; ++i) weights_[i] = garbage(rank);
    for (size_t u = 0; u < nu; ++u)
      for (uint64_t k = 0; k < mine[u].count; ++k)
        weights_[mine[u].offset + k] = param_value(step, mine[u].offset + k);
    if (stage_ == 3) {
      std::vector<float> shard(total);
      for (size_t u = 0; u < nu; ++u)
        for (uint64_t k = 0; k < mine[u].count; ++k)
          shard[pos[u] + k] = param_value(step, mine[u].offset + k);
      for (size_t u = 0; u < nu && res.stop.empty(); ++u) {
        res.stop =
            call(ops_->gather_unit(h, uint32_t(u), mine[u].count ? shard.data() + pos[u] : nullptr,
                                   weights_.data() + a_.offsets[u], DLDataType{kDLFloat, 32, 1}),
                 "gather_unit(" + std::to_string(u) + ")");
        if (res.stop.empty()) res.stop = call(ops_->wait_unit(h, uint32_t(u)), "wait_unit");
      }
    } else {
      res.stop = after_step(h, step, mine);
    }
    if (!res.stop.empty()) return res;
    res.params_checked = true;
    for (uint64_t i = 0; i < a_.total; ++i) {
      const float want_p = param_value(step, i);
      if (std::memcmp(&weights_[i], &want_p, sizeof(float)) != 0) {
        res.params = "parameter " + std::to_string(i) + " is " + fmt("%.9g", weights_[i]) +
                     " where every rank must hold its owner's " + fmt("%.9g", want_p) + " after " +
                     (stage_ == 3 ? "gather_unit" : "after_step");
        break;
      }
    }
    return res;
  }

  // "" or "<what> failed (STATUS): message".
  std::string call(int status, const std::string& what) const {
    if (status == TRIAD_OK) return "";
    std::string m = inst_->failure(status, what);
    if (inst_->last_error() == "no message") m += " (a failing call must say why in last_error)";
    return m;
  }
  std::string owned(Range* r) const {
    return call(ops_->owned_range(inst_->handle(), &r->offset, &r->count), "owned_range");
  }
  std::string ranges_detail(const std::vector<Range>& all) const {
    if (stage_ == 0)
      return "every rank owns all " + std::to_string(a_.total) + " elements, as stage 0 does";
    std::string d;
    for (const Range& r : all) {
      if (!d.empty()) d += ' ';
      d += text(r);
    }
    return d + " of " + std::to_string(a_.total) + " elements";
  }

  // One step of stages 0 and 1: grads_ready in backward order, finish_grads, after_step. `owned`
  // is what setup said this rank owns: its owned_range(), or by unit its slice of each unit.
  StepResult run_step(int step, const std::vector<Range>& owned_ranges) {
    StepResult res;
    const int rank = g_.rank(), n = g_.size();
    void* h = inst_->handle();
    for (uint64_t i = 0; i < a_.total; ++i) grads_[i] = grad_value(rank, step, i);
    for (const Range& r : backward_ranges(a_, step)) {
      res.stop =
          call(ops_->grads_ready(h, grads_.data(), r.offset, r.count),
               "grads_ready(" + std::to_string(r.offset) + ", " + std::to_string(r.count) + ")");
      if (!res.stop.empty()) return res;
    }
    if (!(res.stop = call(ops_->finish_grads(h, grads_.data()), "finish_grads")).empty())
      return res;
    // The sum over the ranks on the ranges the stage makes final: all of it at stage 0, else the
    // owned range (clipped to the arena; the owned-ranges case says when it is not in it), or
    // by unit the owned slices (checked to lie in their units before any step).
    std::vector<Range> checks = owned_ranges;
    if (!by_unit_) {
      Range mine;
      if (!(res.stop = owned(&mine)).empty()) return res;
      if (mine != owned_ranges.front())
        res.grads = "owned_range() says " + text(mine) + " where it said " +
                    text(owned_ranges.front()) + " after setup";
      Range check{0, a_.total};
      if (stage_ > 0) {
        check.offset = std::min(mine.offset, a_.total);
        check.count = std::min(mine.count, a_.total - check.offset);
      }
      checks = {check};
    }
    uint64_t worst = 0;
    double err = 0, scale = kFloor, want_w = 0;
    for (const Range& check : checks)
      for (uint64_t k = 0; k < check.count; ++k) {
        const uint64_t i = check.offset + k;
        double want = 0;
        for (int r = 0; r < n; ++r) want += double(grad_value(r, step, i));
        scale = std::max(scale, std::abs(want));
        double e = std::abs(double(grads_[i]) - want);
        if (std::isnan(e)) e = std::numeric_limits<double>::infinity();
        if (e > err) err = e, worst = i, want_w = want;
      }
    res.grad_error = err / scale;
    res.grads_checked = true;
    if (res.grads.empty() && !(res.grad_error <= tolerance_)) {
      const uint64_t i = worst;
      res.grads = "element " + std::to_string(i) + " (tensor " + std::to_string(a_.tensor_of(i)) +
                  " of " + std::to_string(a_.sizes.size()) + ") is " + fmt("%.9g", grads_[i]) +
                  " where the sum over " + std::to_string(n) + " ranks is " + fmt("%.9g", want_w) +
                  " (off by " + fmt("%.2g", res.grad_error) + " relative; the mean would be " +
                  fmt("%.9g", want_w / n) + ")";
    }
    // Parameters: the owned ranges hold the step's values, the rest this rank's garbage.
    for (uint64_t i = 0; i < a_.total; ++i) weights_[i] = garbage(rank);
    for (const Range& check : checks)
      for (uint64_t i = check.offset; i < check.end(); ++i) weights_[i] = param_value(step, i);
    if (!(res.stop = after_step(h, step, owned_ranges)).empty()) return res;
    res.params_checked = true;
    for (uint64_t i = 0; i < a_.total; ++i) {
      const float want_p = param_value(step, i);
      if (std::memcmp(&weights_[i], &want_p, sizeof(float)) != 0) {
        res.params =
            "parameter " + std::to_string(i) + " is " + fmt("%.9g", weights_[i]) +
            " where every rank must hold its owner's " + fmt("%.9g", want_p) +
            (stage_ == 0 ? " (stage 0 leaves the parameters as they are)"
                         : " (after_step makes the parameters whole: rank r's garbage is " +
                               fmt("%g", garbage(0)) + " - r)");
        break;
      }
    }
    return res;
  }

  // after_step, then (GATHER_DEFERRED, data_v4.h) wait_unit for every unit, as the core ends
  // them before it reads the parameters. On even steps a deferring plugin is asked instead to
  // gather every unit in place with gather_unit (its owned slice, `mine`, inside the unit), as
  // the core gathers a mixed-precision compute copy.
  std::string after_step(void* h, int step, const std::vector<Range>& mine) {
    std::string stop;
    if (deferred_ && step % 2 == 0) {
      for (size_t u = 0; stop.empty() && u < a_.sizes.size(); ++u)
        stop = call(ops_->gather_unit(h, uint32_t(u), weights_.data() + mine[u].offset,
                                      weights_.data() + a_.offsets[u], DLDataType{kDLFloat, 32, 1}),
                    "gather_unit(" + std::to_string(u) + ") in place");
    } else {
      stop = call(ops_->after_step(h, weights_.data()), "after_step");
    }
    for (size_t u = 0; deferred_ && stop.empty() && u < a_.sizes.size(); ++u)
      stop = call(ops_->wait_unit(h, uint32_t(u)), "wait_unit(" + std::to_string(u) + ")");
    return stop;
  }

  Group& g_;
  std::shared_ptr<const LoadedPlugin> plugin_;
  const ResolvedParams& params_;
  const triad_services_v1* services_;
  int stage_;
  bool by_unit_ = false;   // stage 1, partitioned by unit (data_v3.h)
  bool deferred_ = false;  // after_step leaves the gathers to wait_unit (data_v4.h)
  const Arena& a_;
  int64_t timeout_ms_;
  double tolerance_;
  std::vector<float> grads_, weights_;
  std::unique_ptr<Watch> watch_;  // what the instance borrows: outlives it
  std::unique_ptr<PluginInstance> inst_;
  const triad_data_ops_v4* ops_ = nullptr;
};

// Every configuration of one (stage, world) on this rank, then how the plugins used their
// communicators.
void world_cases(Group& g, const std::shared_ptr<const LoadedPlugin>& plugin,
                 const std::vector<std::pair<Variant, ResolvedParams>>& variants, int stage,
                 const std::string& label, const DataSuiteOptions& o, const Report& report) {
  CoreServices services;
  Usage usage;
  for (const Arena& a : arenas())
    for (const auto& [v, params] : variants)
      Config(g, plugin, params, services.c_services(), stage, a, o.op_timeout_ms, o.tolerance)
          .run(label + " " + a.name + " " + v.label, usage, report);
  std::string ops;
  for (const auto& [op, count] : usage.ops)
    ops += (ops.empty() ? "" : ", ") + std::to_string(count) + " " + op;
  report(usage.problem.empty() ? Outcome::kPass : Outcome::kFail, label + " communicator use",
         !usage.problem.empty()
             ? usage.problem
             : (ops.empty() ? "no operations" : ops) + ", " + std::to_string(usage.waits) +
                   " waits within " + std::to_string(usage.longest_wait) + " ms, on the lent " +
                   "communicator, with declared operations only");
}

std::string stage_list(uint32_t stages) {
  std::string s;
  for (int i = 0; i < 32; ++i)
    if (stages & (1u << i)) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s.empty() ? "none" : s;
}

}  // namespace

Summary run_data_suite(const std::string& so_path, const DataSuiteOptions& o) {
  Summary sum;
  const auto emit = counting(sum, o.on_case);
  auto plugin = PluginLoader().load_file(so_path, "data");
  const triad_plugin_v1& d = plugin->descriptor();
  std::set<std::string> declared;
  for (size_t i = 0; i < d.num_params; ++i) declared.insert(d.params[i].name);
  uint32_t stages = 0;
  std::string name;
  {
    CoreServices services;
    PluginInstance probe(plugin, "data", resolve_params(d, o.params, "data"),
                         services.c_services());
    stages = probe.capabilities(probe.ops<triad_data_ops_v2>().capabilities).stages;
    name = probe.name();
  }

  // The bucket sweep: what the plugin declares and --param did not fix.
  std::vector<Variant> variants = {{"default", {}}};
  auto sweeps = [&](const char* key) { return declared.count(key) && !o.params.count(key); };
  if (sweeps("reduce_bucket_size")) {
    variants.push_back({"bucket=7", {{"reduce_bucket_size", "7"}}});
    if (sweeps("overlap_comm"))
      variants.push_back(
          {"bucket=7 no-overlap", {{"reduce_bucket_size", "7"}, {"overlap_comm", "false"}}});
  } else if (sweeps("overlap_comm")) {
    variants.push_back({"no-overlap", {{"overlap_comm", "false"}}});
  }

  const auto given_stage = o.params.find("stage");
  const int listed = std::popcount(stages & ((1u << kStages) - 1));
  for (int stage = 0; stage < kStages; ++stage) {
    const std::string label = name + " stage=" + std::to_string(stage);
    if (!(stages & (1u << stage))) {
      emit({label, Outcome::kSkip,
            "the plugin's capabilities exclude it (stages " + stage_list(stages) + ")"});
      continue;
    }
    if (given_stage != o.params.end() && given_stage->second != std::to_string(stage)) {
      emit({label, Outcome::kSkip, "--param stage=" + given_stage->second + " chose another"});
      continue;
    }
    if (!declared.count("stage") && listed > 1) {
      emit({label, Outcome::kFail,
            "the capabilities list stages " + stage_list(stages) +
                " but the plugin has no `stage` parameter to choose one"});
      continue;
    }
    // Resolved here, so that a rank never meets a parameter error.
    std::vector<std::pair<Variant, ResolvedParams>> configs;
    for (const Variant& v : variants) {
      std::map<std::string, std::string> p = o.params;
      if (declared.count("stage")) p["stage"] = std::to_string(stage);
      for (const auto& [k, val] : v.set) p[k] = val;
      configs.emplace_back(v, resolve_params(d, p, "data"));
    }
    for (int n : o.dp_sizes) {
      const std::string wlabel = label + " dp=" + std::to_string(n);
      if (n == 1) {
        SoloGroup solo;
        world_cases(solo, plugin, configs, stage, wlabel, o,
                    [&](Outcome out, const std::string& c, const std::string& detail) {
                      emit({c, out, detail});
                    });
        continue;
      }
      ranks::run_world(
          n, wlabel, o.world_timeout_ms,
          [&](const ranks::RankContext& c) {
            const std::chrono::milliseconds timeout(o.op_timeout_ms);
            ranks::RankWorld rw(c, o.transport, o.transport_params, "data/", timeout);
            Communicator& world = rw.world();
            // The suite's own waits outlast any plugin's: a rank whose plugin failed waits here
            // for one whose plugin is still waiting out its timeouts.
            WorldGroup group(world, std::chrono::milliseconds(o.world_timeout_ms));
            world_cases(group, plugin, configs, stage, wlabel, o,
                        [&](Outcome out, const std::string& cn, const std::string& detail) {
                          ranks::report(c.fd, out, cn, detail);
                        });
            world.barrier().wait(timeout);
            return 0;
          },
          emit);
    }
  }
  return sum;
}

}  // namespace triad::conformance
