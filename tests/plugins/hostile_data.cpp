// A test-only data plugin: with `bug: none`, ZeRO stage 0 as `zero` does it (bucketed all-reduce
// in backward order, overlapped or not) and stage 1 on the same buckets, each rank owning the
// transport's block of the arena and all-gathering the parameters after the step, and stages 2
// and 3 (data_v2.h) as `zero` does them (each unit cut by the block split, reduce-scattered and
// all-gathered per unit); every other value of `bug` plants one defect, to prove the data
// conformance suite catches each. Built with -fno-gnu-unique like the other test plugins.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "triad/sdk/data.hpp"

namespace {

const triad_param_spec_v1 kParams[] = {
    {"stage", TRIAD_PARAM_INT, "0", "ZeRO stage: 0 to 3"},
    {"reduce_bucket_size", TRIAD_PARAM_INT, "1000", "elements per gradient all-reduce bucket"},
    {"overlap_comm", TRIAD_PARAM_BOOL, "true",
     "start each bucket's all-reduce as soon as its gradients are final"},
    {"bug", TRIAD_PARAM_STRING, "none",
     "none | overlap | reversed | skip_bucket | divide | reduce_twice | no_reset | no_gather | "
     "unbounded_wait | shard_overlap | no_reduce | gather_skip | by_unit_claimed"},
};

struct Bucket {
  uint64_t lo = 0, hi = 0;
  uint64_t ready = 0;
  bool started = false;
  void* request = nullptr;
};

class HostileData final : public triad::sdk::DataPlugin {
 public:
  HostileData(triad::sdk::Services, triad::sdk::Params p)
      : stage_(p.get_int("stage")),
        bucket_elems_(p.get_int("reduce_bucket_size")),
        overlap_(p.get_bool("overlap_comm")),
        bug_(p.get_string("bug")) {
    static const char* known[] = {"none",           "overlap",       "reversed",  "skip_bucket",
                                  "divide",         "reduce_twice",  "no_reset",  "no_gather",
                                  "unbounded_wait", "shard_overlap", "no_reduce", "gather_skip",
                                  "by_unit_claimed"};
    if (bucket_elems_ < 1) throw triad::sdk::invalid("reduce_bucket_size must be at least 1");
    for (const char* k : known)
      if (bug_ == k) return;
    throw triad::sdk::invalid("unknown bug '" + bug_ + "'");
  }
  ~HostileData() override {
    const auto& c = s_.dp_comm;
    for (auto& b : buckets_)
      if (b.request && c.ops) c.ops->request_free(c.transport, b.request);
    for (auto& reqs : pending_)
      for (void* r : reqs)
        if (c.ops) c.ops->request_free(c.transport, r);
  }

  triad_data_caps_v1 capabilities() const override {
    return {0xFu, stage_ >= 2
                      ? uint32_t(TRIAD_TRANSPORT_OP_REDUCE_SCATTER | TRIAD_TRANSPORT_OP_ALL_GATHER)
                      : uint32_t(TRIAD_TRANSPORT_OP_ALL_REDUCE | TRIAD_TRANSPORT_OP_ALL_GATHER)};
  }

  void setup(const triad_data_setup_v2& s2) override {
    const triad_data_setup_v1& s = s2.v1;
    if (stage_ < 0 || stage_ > 3)
      throw triad::sdk::unsupported("stage " + std::to_string(stage_) + " is not implemented");
    s_ = s;
    units_.assign(s2.unit_offsets, s2.unit_offsets + s2.num_units);
    sizes_.assign(s2.unit_sizes, s2.unit_sizes + s2.num_units);
    pending_.assign(s2.num_units, {});
    buckets_.clear();
    Bucket cur;
    cur.lo = cur.hi = s.num_elements;
    for (size_t i = s.num_tensors; i-- > 0;) {
      cur.lo = s.tensor_offsets[i];
      if (cur.hi - cur.lo >= uint64_t(bucket_elems_)) {
        buckets_.push_back(cur);
        cur = Bucket{};
        cur.hi = cur.lo = s.tensor_offsets[i];
      }
    }
    if (cur.hi > cur.lo) buckets_.push_back(cur);
  }

  void grads_ready(void* grads, uint64_t offset, uint64_t count) override {
    for (auto& b : buckets_) {
      const uint64_t lo = std::max(b.lo, offset), hi = std::min(b.hi, offset + count);
      if (lo >= hi) continue;
      b.ready += hi - lo;
      if (b.ready > b.hi - b.lo) throw triad::sdk::invalid("gradients reported ready twice");
      if (overlap_ && b.ready == b.hi - b.lo) launch(b, grads);
    }
  }

  void finish_grads(void* grads) override {
    for (auto& b : buckets_) {
      if (b.ready != b.hi - b.lo) throw triad::sdk::invalid("gradients not all reported ready");
      if (!b.started) launch(b, grads);
    }
    for (auto& b : buckets_) {
      finish(b);
      b.started = false;
      if (bug_ != "no_reset") b.ready = 0;
    }
    float* g = static_cast<float*>(grads);
    if (bug_ == "reduce_twice" && !buckets_.empty()) {  // the last tensors' bucket, once more
      launch(buckets_[0], grads);
      finish(buckets_[0]);
      buckets_[0].started = false;
    }
    if (bug_ == "divide")
      for (uint64_t i = 0; i < s_.num_elements; ++i) g[i] /= float(s_.dp_size);
  }

  void owned_range(uint64_t* offset, uint64_t* count) const override {
    if (stage_ == 0) {
      *offset = 0, *count = s_.num_elements;
      return;
    }
    const int32_t r = bug_ == "reversed" ? s_.dp_size - 1 - s_.dp_rank : s_.dp_rank;
    triad_transport_block(s_.num_elements, s_.dp_size, r, offset, count);
    if (bug_ == "overlap" && *offset + *count < s_.num_elements) ++*count;
  }

  uint32_t partitioning() const override {
    // by_unit_claimed: stage 1 says its optimizer state is owned unit by unit (data_v3.h), but
    // after_step still gathers the one owned range.
    if (stage_ == 1 && bug_ == "by_unit_claimed") return TRIAD_DATA_PARTITION_BY_UNIT;
    return stage_ == 2   ? uint32_t(TRIAD_DATA_PARTITION_GRADS)
           : stage_ == 3 ? uint32_t(TRIAD_DATA_PARTITION_GRADS | TRIAD_DATA_PARTITION_PARAMS)
                         : 0u;
  }

  void shard(uint64_t* offsets, uint64_t* counts) const override {
    for (size_t u = 0; u < units_.size(); ++u) {
      // shard_overlap: every rank claims the first block of each unit.
      const int32_t r = bug_ == "shard_overlap" ? 0 : s_.dp_rank;
      triad_transport_block(sizes_[u], s_.dp_size, r, &offsets[u], &counts[u]);
      offsets[u] += units_[u];
    }
  }

  void reduce_unit(uint32_t u, void* grads, void* owned) override {
    uint64_t off = 0, n = 0;
    triad_transport_block(sizes_[u], s_.dp_size, s_.dp_rank, &off, &n);
    if (bug_ == "no_reduce") {  // this rank's own contribution, never summed (host memory here)
      if (n) std::memcpy(owned, static_cast<float*>(grads) + off, n * sizeof(float));
      return;
    }
    const auto& c = s_.dp_comm;
    void* req = nullptr;
    check(c.ops->reduce_scatter(c.transport, c.comm, grads, owned ? owned : grads, sizes_[u],
                                s_.grad_dtype, s_.device, TRIAD_REDUCE_SUM, &req),
          "could not start a reduce-scatter");
    pending_[u].push_back(req);
  }

  void gather_unit(uint32_t u, const void* owned, void* params, DLDataType t) override {
    if (bug_ == "gather_skip") return;
    const auto& c = s_.dp_comm;
    void* req = nullptr;
    check(c.ops->all_gather(c.transport, c.comm, owned ? owned : params, params, sizes_[u], t,
                            s_.device, &req),
          "could not start an all-gather");
    pending_[u].push_back(req);
  }

  void wait_unit(uint32_t u) override {
    const auto& c = s_.dp_comm;
    std::vector<void*> reqs;
    reqs.swap(pending_.at(u));
    int rc = TRIAD_OK;
    for (void* r : reqs) {
      if (rc == TRIAD_OK) rc = c.ops->wait(c.transport, r, s_.timeout_ms);
      c.ops->request_free(c.transport, r);
    }
    check(rc, "a unit's collective did not complete");
  }

  void after_step(void* params) override {
    if (stage_ == 0 || stage_ == 3 || bug_ == "no_gather") return;
    if (stage_ == 2) {
      const auto& c = s_.dp_comm;
      float* p = static_cast<float*>(params);
      for (size_t u = 0; u < units_.size(); ++u) {
        uint64_t off = 0, n = 0;
        triad_transport_block(sizes_[u], s_.dp_size, s_.dp_rank, &off, &n);
        void* req = nullptr;
        check(c.ops->all_gather(c.transport, c.comm, p + units_[u] + off, p + units_[u], sizes_[u],
                                s_.grad_dtype, s_.device, &req),
              "could not start the parameter all-gather");
        const int rc = c.ops->wait(c.transport, req, s_.timeout_ms);
        c.ops->request_free(c.transport, req);
        check(rc, "the parameter all-gather did not complete");
      }
      return;
    }
    const auto& c = s_.dp_comm;
    uint64_t off = 0, n = 0;
    triad_transport_block(s_.num_elements, s_.dp_size, s_.dp_rank, &off, &n);
    float* p = static_cast<float*>(params);
    void* req = nullptr;
    check(c.ops->all_gather(c.transport, c.comm, p + off, p, s_.num_elements, s_.grad_dtype,
                            s_.device, &req),
          "could not start the parameter all-gather");
    const int rc = c.ops->wait(c.transport, req, s_.timeout_ms);
    c.ops->request_free(c.transport, req);
    check(rc, "the parameter all-gather did not complete");
  }

 private:
  static void check(int rc, const std::string& what) {
    if (rc != TRIAD_OK) throw triad::sdk::Error(rc, what);
  }
  void launch(Bucket& b, void* grads) {
    b.started = true;
    if (bug_ == "skip_bucket" && &b == &buckets_[0]) return;  // the last tensors: never reduced
    const auto& c = s_.dp_comm;
    float* p = static_cast<float*>(grads) + b.lo;
    check(c.ops->all_reduce(c.transport, c.comm, p, p, b.hi - b.lo, s_.grad_dtype, s_.device,
                            TRIAD_REDUCE_SUM, &b.request),
          "could not start a gradient all-reduce");
  }
  void finish(Bucket& b) {
    if (!b.request) return;
    const auto& c = s_.dp_comm;
    const int rc =
        c.ops->wait(c.transport, b.request, bug_ == "unbounded_wait" ? -1 : s_.timeout_ms);
    c.ops->request_free(c.transport, b.request);
    b.request = nullptr;
    check(rc, "a gradient all-reduce did not complete");
  }

  long long stage_, bucket_elems_;
  bool overlap_;
  std::string bug_;
  triad_data_setup_v1 s_{};
  std::vector<Bucket> buckets_;
  std::vector<uint64_t> units_, sizes_;
  std::vector<std::vector<void*>> pending_;
};

}  // namespace

TRIAD_DATA_PLUGIN(HostileData, "hostile", "0", "test data plugin with planted defects",
                  TRIAD_PARAMS(kParams))
