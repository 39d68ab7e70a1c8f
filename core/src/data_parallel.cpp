#include "triad/core/data_parallel.hpp"

#include "triad/core/error.hpp"

namespace triad {

DataParallelBackend::DataParallelBackend(std::shared_ptr<const LoadedPlugin> plugin,
                                         const ResolvedParams& params,
                                         const triad_services_v1* services)
    : instance_(std::move(plugin), "data", params, services),
      ops_(instance_.ops<triad_data_ops_v1>()),
      caps_(instance_.capabilities(ops_.capabilities)) {}

void DataParallelBackend::check(int status, const char* what) const {
  if (status != TRIAD_OK) throw UserError(instance_.who() + ": " + instance_.failure(status, what));
}

void DataParallelBackend::setup(const GptLayout& layout, DLDevice device, int dp_rank, int dp_size,
                                const triad_comm_ref_v1& comm, int64_t timeout_ms) {
  offsets_.clear();
  sizes_.clear();
  for (const auto& p : layout.params) {
    offsets_.push_back(p.offset);
    sizes_.push_back(p.numel);
  }
  triad_data_setup_v1 s{};
  s.num_elements = layout.total;
  s.num_tensors = offsets_.size();
  s.tensor_offsets = offsets_.data();
  s.tensor_sizes = sizes_.data();
  s.grad_dtype = DLDataType{kDLFloat, 32, 1};
  s.device = device;
  s.dp_rank = dp_rank;
  s.dp_size = dp_size;
  s.dp_comm = comm;
  s.timeout_ms = timeout_ms;
  check(ops_.setup(instance_.handle(), &s), "setup");
}

void DataParallelBackend::grads_ready(float* grads, size_t offset, size_t count) {
  check(ops_.grads_ready(instance_.handle(), grads, offset, count), "grads_ready");
}

void DataParallelBackend::finish_grads(float* grads) {
  check(ops_.finish_grads(instance_.handle(), grads), "finish_grads");
}

void DataParallelBackend::owned_range(size_t* offset, size_t* count) {
  uint64_t o = 0, n = 0;
  check(ops_.owned_range(instance_.handle(), &o, &n), "owned_range");
  *offset = o;
  *count = n;
}

void DataParallelBackend::after_step(float* params) {
  check(ops_.after_step(instance_.handle(), params), "after_step");
}

}  // namespace triad
