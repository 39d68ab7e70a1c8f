// The "zero" data-parallel plugin.
// Stage 0 (DDP): every rank holds everything; gradients are cut into buckets of about
// reduce_bucket_size elements in backward order (last layer first), and each bucket's in-place
// all-reduce starts as soon as its last gradient is final, so communication overlaps the rest
// of the backward pass. finish_grads waits for them all.
// Stage 1 (ZeRO-1): the optimizer state is partitioned unit by unit (data_v3.h's
// TRIAD_DATA_PARTITION_BY_UNIT): each unit (a layer: the embedding, a block, the head) is cut
// over the group by the transport's block split, this rank owns block dp_rank of every unit,
// and the core keeps AdamW's moments for those slices only. Gradients stay whole (accumulated
// over the micro-batches); in the last micro-batch's backward pass, as soon as a whole unit is
// reported final, its in-place reduce-scatter starts, so the reduction overlaps the rest of the
// backward pass (each owned slice of the arena then holds the group's sum, the rest partial sums
// the core does not read). After the step after_step all-gathers every unit's updated slices so
// every rank holds the whole parameters again: 2Ψ per step, the ZeRO paper's. (A block split of
// the whole arena, one owned range, could not start before its first block is final, which is
// the last.) With reduce_scatter false each rank owns one block of the arena (owned_range) and
// the gradients are all-reduced in buckets during the backward pass as at stage 0 (3Ψ).
// Stage 2 (ZeRO-2): gradients partitioned too. Each unit (a layer: the embedding, a block, the
// head) is cut over the group by the transport's block split, and this rank owns block dp_rank
// of every unit. As backward finishes a unit in each micro-batch, its gradient window is
// reduce-scattered into the owned slice (the core keeps no other gradient memory); after the
// step each unit's owned slices are all-gathered into the whole parameters.
// Stages 1 (by unit) and 2 with overlap_param_gather (the default): after_step only starts the
// per-unit gathers and answers TRIAD_DATA_GATHER_DEFERRED (data_v4.h); the core's wait_unit(u)
// ends unit u's just before the next forward pass reads it, so the later units' gathers run
// behind the earlier units' compute. In mixed precision the core gathers the compute copy
// itself instead, with gather_unit in place (each owned slice where it lies in its unit).
// Stage 3 (ZeRO-3): parameters partitioned as the gradients are; the core gathers a unit's
// parameters (all-gather of every rank's slice) before it uses them and frees them after,
// prefetching the next unit's while it computes; after_step has nothing left to do.
//
// Averaging: the core scales every rank's loss gradient by 1/dp_size (folded into the loss
// scale of backward), so the sum over the group is the mean and nothing is left to divide.
// The plugin never touches gradient memory itself: it may live on a GPU, and only the
// transport (over the device's stream) reads and writes it.
#include <algorithm>
#include <string>
#include <vector>

#include "triad/sdk/data.hpp"

namespace {

const triad_param_spec_v1 kParams[] = {
    {"stage", TRIAD_PARAM_INT, "0",
     "ZeRO stage: 0 = replicate parameters and optimizer state, all-reduce gradients; 1 = "
     "partition the optimizer state, all-gather the parameters after the step; 2 = partition "
     "the gradients too (reduce-scatter per layer); 3 = partition the parameters too (gathered "
     "per layer when used)"},
    {"reduce_bucket_size", TRIAD_PARAM_INT, "6553600",
     "elements per gradient all-reduce bucket (DeepSpeed's reduce_bucket_size)"},
    {"overlap_comm", TRIAD_PARAM_BOOL, "true",
     "start each bucket's all-reduce as soon as its gradients are final"},
    {"reduce_scatter", TRIAD_PARAM_BOOL, "true",
     "stage 1: own a slice of every layer and reduce-scatter each layer's gradients to their "
     "owners as soon as the backward pass is done with it (2Ψ per step with the parameter "
     "all-gather); false owns one block of the arena and all-reduces the gradients in buckets "
     "during the backward pass (3Ψ)"},
    {"overlap_param_gather", TRIAD_PARAM_BOOL, "true",
     "stages 1 (with reduce_scatter) and 2: after the step only start each layer's parameter "
     "all-gather; the core waits for it just before the next forward pass reads the layer "
     "(Megatron's --overlap-param-gather); false completes every gather within the step"},
};

struct Bucket {
  uint64_t lo = 0, hi = 0;  // [lo, hi) of the arena
  uint64_t ready = 0;       // elements reported final this step
  void* request = nullptr;
};

class Zero final : public triad::sdk::DataPlugin {
 public:
  Zero(triad::sdk::Services services, triad::sdk::Params params)
      : services_(services),
        stage_(static_cast<int>(params.get_int("stage"))),
        bucket_elems_(params.get_int("reduce_bucket_size")),
        overlap_(params.get_bool("overlap_comm")),
        by_unit_(stage_ == 1 && params.get_bool("reduce_scatter")),
        defer_gather_((stage_ == 2 || by_unit_) && params.get_bool("overlap_param_gather")) {
    if (bucket_elems_ < 1)
      throw triad::sdk::invalid("reduce_bucket_size must be at least 1, got " +
                                std::to_string(bucket_elems_));
  }
  ~Zero() override { abandon(); }

  triad_data_caps_v1 capabilities() const override {
    const uint32_t ops =
        stage_ == 0 ? uint32_t(TRIAD_TRANSPORT_OP_ALL_REDUCE)
        : stage_ == 1 && !by_unit_
            ? uint32_t(TRIAD_TRANSPORT_OP_ALL_REDUCE | TRIAD_TRANSPORT_OP_ALL_GATHER)
            : uint32_t(TRIAD_TRANSPORT_OP_REDUCE_SCATTER | TRIAD_TRANSPORT_OP_ALL_GATHER);
    return {(1u << 0) | (1u << 1) | (1u << 2) | (1u << 3), ops};
  }

  void setup(const triad_data_setup_v2& s2) override {
    const triad_data_setup_v1& s = s2.v1;
    // The core checks capabilities().stages before it gets here.
    if (stage_ < 0 || stage_ > 3)
      throw triad::sdk::unsupported("ZeRO stage " + std::to_string(stage_) +
                                    " does not exist; use 0, 1, 2 or 3");
    if (s.grad_dtype.code != kDLFloat || s.grad_dtype.bits != 32)
      throw triad::sdk::unsupported("data plugin 'zero' reduces float32 gradients only");
    setup_ = s;
    units_.assign(s2.unit_offsets, s2.unit_offsets + s2.num_units);
    unit_sizes_.assign(s2.unit_sizes, s2.unit_sizes + s2.num_units);
    pending_.assign(s2.num_units, {});
    if (stage_ >= 2 || by_unit_) {
      uint64_t at = 0;
      for (size_t u = 0; u < units_.size(); ++u) {
        if (units_[u] != at)
          throw triad::sdk::invalid("unit " + std::to_string(u) + " starts at " +
                                    std::to_string(units_[u]) + ", not at " + std::to_string(at) +
                                    ": units must tile the arena in order");
        at += unit_sizes_[u];
      }
      if (at != s.num_elements)
        throw triad::sdk::invalid("the units cover " + std::to_string(at) + " of " +
                                  std::to_string(s.num_elements) + " elements");
    }
    if (stage_ >= 2) {
      services_.debug("zero stage " + std::to_string(stage_) + ": " +
                      std::to_string(units_.size()) + " units over " +
                      std::to_string(s.num_elements) + " elements, dp " +
                      std::to_string(s.dp_size));
      return;
    }
    buckets_.clear();
    if (by_unit_) {  // one in-place reduce-scatter per unit (see the top of this file)
      for (size_t u = 0; u < units_.size(); ++u)
        if (unit_sizes_[u] > 0) buckets_.push_back({units_[u], units_[u] + unit_sizes_[u]});
      services_.debug("zero stage 1: a gradient reduce-scatter per unit, " +
                      std::to_string(buckets_.size()) + " units over " +
                      std::to_string(s.num_elements) + " elements, dp " +
                      std::to_string(s.dp_size));
      return;
    }
    // Walk tensors back to front (the order backward finishes them), closing a bucket once
    // it holds reduce_bucket_size elements. Tensors are contiguous, so each bucket is a range.
    Bucket cur;
    cur.hi = s.num_elements;
    cur.lo = s.num_elements;
    for (size_t i = s.num_tensors; i-- > 0;) {
      cur.lo = s.tensor_offsets[i];
      if (cur.hi - cur.lo >= static_cast<uint64_t>(bucket_elems_)) {
        buckets_.push_back(cur);
        cur = Bucket{};
        cur.hi = cur.lo = s.tensor_offsets[i];
      }
    }
    if (cur.hi > cur.lo) buckets_.push_back(cur);
    services_.debug("zero stage " + std::to_string(stage_) + ": " +
                    std::to_string(buckets_.size()) + " gradient buckets over " +
                    std::to_string(s.num_elements) + " elements, dp " + std::to_string(s.dp_size));
  }

  void grads_ready(void* grads, uint64_t offset, uint64_t count) override {
    if (stage_ >= 2)
      throw triad::sdk::invalid("grads_ready called at stage " + std::to_string(stage_) +
                                ", which reduces per unit (reduce_unit)");
    const uint64_t end = offset + count;
    for (auto& b : buckets_) {
      const uint64_t lo = std::max(b.lo, offset), hi = std::min(b.hi, end);
      if (lo >= hi) continue;
      b.ready += hi - lo;
      if (b.ready > b.hi - b.lo)
        throw triad::sdk::invalid("gradient range [" + std::to_string(offset) + ", " +
                                  std::to_string(end) + ") reported ready twice in one step");
      if (overlap_ && b.ready == b.hi - b.lo) launch(b, grads);
    }
    progress();
  }

  void finish_grads(void* grads) override {
    if (stage_ >= 2)
      throw triad::sdk::invalid("finish_grads called at stage " + std::to_string(stage_) +
                                ", which reduces per unit (reduce_unit)");
    for (auto& b : buckets_) {
      if (b.ready != b.hi - b.lo)
        throw triad::sdk::invalid("gradients [" + std::to_string(b.lo) + ", " +
                                  std::to_string(b.hi) +
                                  ") were not all reported ready before finish_grads");
      if (!b.request) launch(b, grads);
    }
    const auto& c = setup_.dp_comm;
    for (auto& b : buckets_) {
      const int rc = c.ops->wait(c.transport, b.request, setup_.timeout_ms);
      if (rc != TRIAD_OK)
        throw triad::sdk::Error(rc, "gradient " + reduction_of(b) + " did not complete");
      c.ops->request_free(c.transport, b.request);
      b.request = nullptr;
      b.ready = 0;
    }
  }

  void owned_range(uint64_t* offset, uint64_t* count) const override {
    if (stage_ >= 2 || by_unit_)
      throw triad::sdk::invalid("stage " + std::to_string(stage_) +
                                " owns one slice of every unit, not one range: call shard()");
    if (stage_ == 0) {
      *offset = 0;
      *count = setup_.num_elements;
      return;
    }
    triad_transport_block(setup_.num_elements, setup_.dp_size, setup_.dp_rank, offset, count);
  }

  uint32_t partitioning() const override {
    const uint32_t stage = stage_ == 2 ? uint32_t(TRIAD_DATA_PARTITION_GRADS)
                           : stage_ == 3
                               ? uint32_t(TRIAD_DATA_PARTITION_GRADS | TRIAD_DATA_PARTITION_PARAMS)
                           : by_unit_ ? uint32_t(TRIAD_DATA_PARTITION_BY_UNIT)
                                      : 0u;
    return stage | (defer_gather_ ? uint32_t(TRIAD_DATA_GATHER_DEFERRED) : 0u);
  }

  void shard(uint64_t* offsets, uint64_t* counts) const override {
    if (stage_ < 2 && !by_unit_)
      throw triad::sdk::unsupported("stage " + std::to_string(stage_) +
                                    " owns one range of the arena, not a slice of every unit");
    for (size_t u = 0; u < units_.size(); ++u) {
      triad_transport_block(unit_sizes_[u], setup_.dp_size, setup_.dp_rank, &offsets[u],
                            &counts[u]);
      offsets[u] += units_[u];
    }
  }

  void reduce_unit(uint32_t u, void* grads, void* owned) override {
    check_unit(u, 2, "reduce_unit");
    const auto& c = setup_.dp_comm;
    // An empty owned slice may come as a null pointer; transports want a buffer regardless.
    if (!owned) owned = grads;
    void* req = nullptr;
    const int rc = c.ops->reduce_scatter(c.transport, c.comm, grads, owned, unit_sizes_[u],
                                         setup_.grad_dtype, setup_.device, TRIAD_REDUCE_SUM, &req);
    if (rc != TRIAD_OK)
      throw triad::sdk::Error(
          rc, "could not start the gradient reduce-scatter of unit " + std::to_string(u));
    pending_[u].push_back(req);
  }

  void gather_unit(uint32_t u, const void* owned, void* params, DLDataType dtype) override {
    check_unit(u, by_unit_ ? 1 : 2, "gather_unit");  // stage 1 by unit: data_v4.h's in place
    const auto& c = setup_.dp_comm;
    if (!owned) owned = params;  // an empty owned slice (see reduce_unit)
    void* req = nullptr;
    const int rc = c.ops->all_gather(c.transport, c.comm, owned, params, unit_sizes_[u], dtype,
                                     setup_.device, &req);
    if (rc != TRIAD_OK)
      throw triad::sdk::Error(
          rc, "could not start the parameter all-gather of unit " + std::to_string(u));
    pending_[u].push_back(req);
  }

  void wait_unit(uint32_t u) override {
    if (u >= pending_.size())
      throw triad::sdk::invalid("wait_unit: no unit " + std::to_string(u) + " (" +
                                std::to_string(pending_.size()) + " units)");
    const auto& c = setup_.dp_comm;
    std::vector<void*> reqs;
    reqs.swap(pending_[u]);
    int bad = TRIAD_OK;
    for (void* r : reqs) {
      const int rc = bad == TRIAD_OK ? c.ops->wait(c.transport, r, setup_.timeout_ms) : bad;
      if (rc != TRIAD_OK) bad = rc;
      c.ops->request_free(c.transport, r);
    }
    if (bad != TRIAD_OK)
      throw triad::sdk::Error(bad,
                              "the collectives of unit " + std::to_string(u) + " did not complete");
  }

  void after_step(void* params) override {
    if (stage_ == 0 || stage_ == 3) return;
    if (stage_ == 2 || by_unit_) {
      // Each unit's owned slices, stepped by their owners, to every rank (in place). Deferred
      // (data_v4.h), each unit's gather is left in flight for the core's wait_unit.
      const auto& c = setup_.dp_comm;
      float* p = static_cast<float*>(params);
      std::vector<void*> reqs;
      int rc = TRIAD_OK;
      for (size_t u = 0; u < units_.size() && rc == TRIAD_OK; ++u) {
        uint64_t off = 0, n = 0;
        triad_transport_block(unit_sizes_[u], setup_.dp_size, setup_.dp_rank, &off, &n);
        void* req = nullptr;
        rc = c.ops->all_gather(c.transport, c.comm, p + units_[u] + off, p + units_[u],
                               unit_sizes_[u], setup_.grad_dtype, setup_.device, &req);
        if (req && defer_gather_ && rc == TRIAD_OK)
          pending_[u].push_back(req);
        else if (req)
          reqs.push_back(req);
      }
      if (defer_gather_ && rc != TRIAD_OK)  // a failed start: the others waited for here
        for (auto& unit : pending_) {
          reqs.insert(reqs.end(), unit.begin(), unit.end());
          unit.clear();
        }
      for (void* r : reqs) {
        if (rc == TRIAD_OK) rc = c.ops->wait(c.transport, r, setup_.timeout_ms);
        c.ops->request_free(c.transport, r);
      }
      if (rc != TRIAD_OK)
        throw triad::sdk::Error(rc, "parameter all-gather after the step did not complete");
      return;
    }
    // Every rank's block, stepped by its owner, to every rank (in place).
    uint64_t off = 0, n = 0;
    owned_range(&off, &n);
    const auto& c = setup_.dp_comm;
    float* p = static_cast<float*>(params);
    void* req = nullptr;
    int rc = c.ops->all_gather(c.transport, c.comm, p + off, p, setup_.num_elements,
                               setup_.grad_dtype, setup_.device, &req);
    if (rc == TRIAD_OK) rc = c.ops->wait(c.transport, req, setup_.timeout_ms);
    if (req) c.ops->request_free(c.transport, req);
    if (rc != TRIAD_OK)
      throw triad::sdk::Error(rc, "parameter all-gather after the step did not complete");
  }

 private:
  void launch(Bucket& b, void* grads) {
    const auto& c = setup_.dp_comm;
    float* p = static_cast<float*>(grads) + b.lo;
    int rc = TRIAD_OK;
    if (by_unit_) {  // in place: this rank's slice of the sum lands where it lies in the unit
      uint64_t off = 0, n = 0;
      triad_transport_block(b.hi - b.lo, setup_.dp_size, setup_.dp_rank, &off, &n);
      rc = c.ops->reduce_scatter(c.transport, c.comm, p, p + off, b.hi - b.lo, setup_.grad_dtype,
                                 setup_.device, TRIAD_REDUCE_SUM, &b.request);
    } else {
      rc = c.ops->all_reduce(c.transport, c.comm, p, p, b.hi - b.lo, setup_.grad_dtype,
                             setup_.device, TRIAD_REDUCE_SUM, &b.request);
    }
    if (rc != TRIAD_OK)
      throw triad::sdk::Error(rc, "could not start the gradient " + reduction_of(b));
  }
  // "reduce-scatter of [lo, hi)" or "all-reduce of [lo, hi)": a bucket's reduction, for errors.
  std::string reduction_of(const Bucket& b) const {
    return std::string(by_unit_ ? "reduce-scatter" : "all-reduce") + " of [" +
           std::to_string(b.lo) + ", " + std::to_string(b.hi) + ")";
  }
  // Lets in-flight all-reduces advance while the backward pass goes on.
  void progress() {
    const auto& c = setup_.dp_comm;
    for (auto& b : buckets_) {
      if (!b.request) continue;
      int32_t done = 0;
      c.ops->test(c.transport, b.request, &done);
    }
  }
  void check_unit(uint32_t u, int min_stage, const char* what) const {
    if (stage_ < min_stage)
      throw triad::sdk::invalid(std::string(what) + " called at stage " + std::to_string(stage_));
    if (u >= units_.size())
      throw triad::sdk::invalid(std::string(what) + ": no unit " + std::to_string(u) + " (" +
                                std::to_string(units_.size()) + " units)");
  }
  void abandon() {
    const auto& c = setup_.dp_comm;
    if (!c.ops) return;
    for (auto& b : buckets_)
      if (b.request) c.ops->request_free(c.transport, b.request);
    for (auto& reqs : pending_)
      for (void* r : reqs) c.ops->request_free(c.transport, r);
  }

  triad::sdk::Services services_;
  int stage_;
  long long bucket_elems_;
  bool overlap_;
  bool by_unit_;       // stage 1 with reduce_scatter: owned per unit, one reduce-scatter per unit
  bool defer_gather_;  // stage 2 or by_unit_: after_step leaves the gathers to wait_unit
  triad_data_setup_v1 setup_{};
  std::vector<Bucket> buckets_;
  std::vector<uint64_t> units_, unit_sizes_;
  std::vector<std::vector<void*>> pending_;  // per unit: its reduction and gather in flight
};

}  // namespace

TRIAD_DATA_PLUGIN(Zero, "zero", "1.0",
                  "ZeRO data parallelism (stage 0: bucketed, overlapped gradient all-reduce; "
                  "stage 1: optimizer state partitioned, gradients reduce-scattered; stage 2: "
                  "gradients partitioned, "
                  "reduce-scattered per layer; stage 3: parameters partitioned, gathered per "
                  "layer when used)",
                  TRIAD_PARAMS(kParams))
