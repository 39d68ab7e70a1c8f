// The "zero" data-parallel plugin.
// Stage 0 (DDP): every rank holds everything; gradients are cut into buckets of about
// reduce_bucket_size elements in backward order (last layer first), and each bucket's in-place
// all-reduce starts as soon as its last gradient is final, so communication overlaps the rest
// of the backward pass. finish_grads waits for them all.
// Stage 1 (ZeRO-1): the same gradient all-reduce, but each rank owns one block of the flat
// arena (the transport's block split) and the core keeps AdamW's moments for that block only
// and steps only it; after_step all-gathers the updated blocks so every rank holds the whole
// parameters again.
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
     "partition the optimizer state, all-gather the parameters after the step"},
    {"reduce_bucket_size", TRIAD_PARAM_INT, "6553600",
     "elements per gradient all-reduce bucket (DeepSpeed's reduce_bucket_size)"},
    {"overlap_comm", TRIAD_PARAM_BOOL, "true",
     "start each bucket's all-reduce as soon as its gradients are final"},
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
        overlap_(params.get_bool("overlap_comm")) {
    if (bucket_elems_ < 1)
      throw triad::sdk::invalid("reduce_bucket_size must be at least 1, got " +
                                std::to_string(bucket_elems_));
  }
  ~Zero() override { abandon(); }

  triad_data_caps_v1 capabilities() const override {
    return {(1u << 0) | (1u << 1),
            TRIAD_TRANSPORT_OP_ALL_REDUCE |
                (stage_ >= 1 ? uint32_t(TRIAD_TRANSPORT_OP_ALL_GATHER) : 0u)};
  }

  void setup(const triad_data_setup_v1& s) override {
    // The core checks capabilities().stages before it gets here.
    if (stage_ != 0 && stage_ != 1)
      throw triad::sdk::unsupported("ZeRO stage " + std::to_string(stage_) +
                                    " is not implemented yet by data plugin 'zero'; use 0 or 1");
    if (s.grad_dtype.code != kDLFloat || s.grad_dtype.bits != 32)
      throw triad::sdk::unsupported("data plugin 'zero' reduces float32 gradients only");
    setup_ = s;
    buckets_.clear();
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
        throw triad::sdk::Error(rc, "gradient all-reduce of [" + std::to_string(b.lo) + ", " +
                                        std::to_string(b.hi) + ") did not complete");
      c.ops->request_free(c.transport, b.request);
      b.request = nullptr;
      b.ready = 0;
    }
  }

  void owned_range(uint64_t* offset, uint64_t* count) const override {
    if (stage_ == 0) {
      *offset = 0;
      *count = setup_.num_elements;
      return;
    }
    triad_transport_block(setup_.num_elements, setup_.dp_size, setup_.dp_rank, offset, count);
  }

  void after_step(void* params) override {
    if (stage_ == 0) return;
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
    const int rc = c.ops->all_reduce(c.transport, c.comm, p, p, b.hi - b.lo, setup_.grad_dtype,
                                     setup_.device, TRIAD_REDUCE_SUM, &b.request);
    if (rc != TRIAD_OK)
      throw triad::sdk::Error(rc, "could not start the gradient all-reduce of [" +
                                      std::to_string(b.lo) + ", " + std::to_string(b.hi) + ")");
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
  void abandon() {
    const auto& c = setup_.dp_comm;
    for (auto& b : buckets_)
      if (b.request && c.ops) c.ops->request_free(c.transport, b.request);
  }

  triad::sdk::Services services_;
  int stage_;
  long long bucket_elems_;
  bool overlap_;
  triad_data_setup_v1 setup_{};
  std::vector<Bucket> buckets_;
};

}  // namespace

TRIAD_DATA_PLUGIN(Zero, "zero", "1.0",
                  "ZeRO data parallelism (stage 0: bucketed, overlapped gradient all-reduce; "
                  "stage 1: optimizer state partitioned, parameters all-gathered)",
                  TRIAD_PARAMS(kParams))
