#include "triad/core/plugins/data_parallel.hpp"

#include "triad/core/error.hpp"

namespace triad {

namespace {

double elem_bytes(DLDataType t) {
  return double(t.bits) * t.lanes / 8.0;
}

}  // namespace

// Every slot forwards to the transport; the collectives add their ring bytes first.
const triad_transport_ops_v1 DataParallelBackend::kCountingOps = [] {
  using C = DataParallelBackend::Counted;
  triad_transport_ops_v1 o{};
  o.capabilities = [](void* h, triad_transport_caps_v1* c) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->capabilities(s.real.transport, c);
  };
  o.init_world = [](void*, int32_t, int32_t, const triad_rendezvous_v1*, void**) {
    return int(TRIAD_ERR_UNSUPPORTED);  // a borrower never makes communicators
  };
  o.split = [](void*, void*, int32_t, int32_t, void**) { return int(TRIAD_ERR_UNSUPPORTED); };
  o.comm_destroy = [](void*, void*) { return int(TRIAD_ERR_UNSUPPORTED); };
  o.comm_info = [](void* h, void* comm, int32_t* rank, int32_t* size) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->comm_info(s.real.transport, comm, rank, size);
  };
  o.all_reduce = [](void* h, void* comm, const void* sb, void* rb, uint64_t n, DLDataType t,
                    DLDevice d, int32_t op, void** req) {
    C& s = *static_cast<C*>(h);
    s.bytes += 2.0 * (s.size - 1) / s.size * double(n) * elem_bytes(t);
    return s.real.ops->all_reduce(s.real.transport, comm, sb, rb, n, t, d, op, req);
  };
  o.reduce_scatter = [](void* h, void* comm, const void* sb, void* rb, uint64_t n, DLDataType t,
                        DLDevice d, int32_t op, void** req) {
    C& s = *static_cast<C*>(h);
    s.bytes += double(s.size - 1) / s.size * double(n) * elem_bytes(t);
    return s.real.ops->reduce_scatter(s.real.transport, comm, sb, rb, n, t, d, op, req);
  };
  o.all_gather = [](void* h, void* comm, const void* sb, void* rb, uint64_t n, DLDataType t,
                    DLDevice d, void** req) {
    C& s = *static_cast<C*>(h);
    s.bytes += double(s.size - 1) / s.size * double(n) * elem_bytes(t);
    return s.real.ops->all_gather(s.real.transport, comm, sb, rb, n, t, d, req);
  };
  o.broadcast = [](void* h, void* comm, void* b, uint64_t n, DLDataType t, DLDevice d, int32_t root,
                   void** req) {
    C& s = *static_cast<C*>(h);
    if (s.size > 1) s.bytes += double(n) * elem_bytes(t);
    return s.real.ops->broadcast(s.real.transport, comm, b, n, t, d, root, req);
  };
  o.send = [](void* h, void* comm, const void* b, uint64_t n, DLDataType t, DLDevice d,
              int32_t peer, uint32_t tag, void** req) {
    C& s = *static_cast<C*>(h);
    s.bytes += double(n) * elem_bytes(t);
    return s.real.ops->send(s.real.transport, comm, b, n, t, d, peer, tag, req);
  };
  o.recv = [](void* h, void* comm, void* b, uint64_t n, DLDataType t, DLDevice d, int32_t peer,
              uint32_t tag, void** req) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->recv(s.real.transport, comm, b, n, t, d, peer, tag, req);
  };
  o.barrier = [](void* h, void* comm, void** req) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->barrier(s.real.transport, comm, req);
  };
  o.test = [](void* h, void* req, int32_t* done) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->test(s.real.transport, req, done);
  };
  o.wait = [](void* h, void* req, int64_t ms) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->wait(s.real.transport, req, ms);
  };
  o.request_free = [](void* h, void* req) {
    C& s = *static_cast<C*>(h);
    return s.real.ops->request_free(s.real.transport, req);
  };
  return o;
}();

double DataParallelBackend::take_traffic() {
  const double b = counted_.bytes;
  counted_.bytes = 0;
  return b;
}

DataParallelBackend::DataParallelBackend(std::shared_ptr<const LoadedPlugin> plugin,
                                         const ResolvedParams& params,
                                         const triad_services_v1* services)
    : instance_(std::move(plugin), "data", params, services),
      ops_(instance_.ops<triad_data_ops_v2>()),
      caps_(instance_.capabilities(ops_.capabilities)) {}

void DataParallelBackend::check(int status, const char* what) const {
  if (status == TRIAD_OK) return;
  std::string msg = instance_.who() + ": " + instance_.failure(status, what);
  if (status == TRIAD_TRANSPORT_ERR_TIMEOUT && transport_error_)
    msg += "; the transport: " + transport_error_();
  throw UserError(msg);
}

void DataParallelBackend::setup(const GptLayout& layout,
                                const std::vector<std::pair<size_t, size_t>>& units,
                                DLDevice device, int dp_rank, int dp_size,
                                const triad_comm_ref_v1& comm, int64_t timeout_ms) {
  offsets_.clear();
  sizes_.clear();
  for (const auto& p : layout.params) {
    offsets_.push_back(p.offset);
    sizes_.push_back(p.numel);
  }
  unit_offsets_.clear();
  unit_sizes_.clear();
  for (const auto& [off, n] : units) {
    unit_offsets_.push_back(off);
    unit_sizes_.push_back(n);
  }
  triad_data_setup_v2 s2{};
  s2.num_units = units.size();
  s2.unit_offsets = unit_offsets_.data();
  s2.unit_sizes = unit_sizes_.data();
  triad_data_setup_v1& s = s2.v1;
  s.num_elements = layout.total;
  s.num_tensors = offsets_.size();
  s.tensor_offsets = offsets_.data();
  s.tensor_sizes = sizes_.data();
  s.grad_dtype = DLDataType{kDLFloat, 32, 1};
  s.device = device;
  s.dp_rank = dp_rank;
  s.dp_size = dp_size;
  counted_.real = comm;
  counted_.size = dp_size;
  counted_.bytes = 0;
  s.dp_comm = {&kCountingOps, &counted_, comm.comm};
  s.timeout_ms = timeout_ms;
  run("setup", [&] { return ops_.setup(instance_.handle(), &s2); });
}

void DataParallelBackend::grads_ready(float* grads, size_t offset, size_t count) {
  run("grads_ready", [&] { return ops_.grads_ready(instance_.handle(), grads, offset, count); });
}

void DataParallelBackend::finish_grads(float* grads) {
  run("finish_grads", [&] { return ops_.finish_grads(instance_.handle(), grads); });
}

void DataParallelBackend::owned_range(size_t* offset, size_t* count) {
  uint64_t o = 0, n = 0;
  run("owned_range", [&] { return ops_.owned_range(instance_.handle(), &o, &n); });
  *offset = o;
  *count = n;
}

void DataParallelBackend::after_step(float* params) {
  run("after_step", [&] { return ops_.after_step(instance_.handle(), params); });
}

uint32_t DataParallelBackend::partitioning() {
  uint32_t flags = 0;
  run("partitioning", [&] { return ops_.partitioning(instance_.handle(), &flags); });
  if (flags & TRIAD_DATA_PARTITION_PARAMS) flags |= TRIAD_DATA_PARTITION_GRADS;
  const uint32_t known = TRIAD_DATA_PARTITION_GRADS | TRIAD_DATA_PARTITION_PARAMS |
                         TRIAD_DATA_PARTITION_BY_UNIT | TRIAD_DATA_GATHER_DEFERRED;
  const uint32_t stage = flags & ~uint32_t(TRIAD_DATA_GATHER_DEFERRED);
  const bool deferrable =
      stage == TRIAD_DATA_PARTITION_GRADS || stage == TRIAD_DATA_PARTITION_BY_UNIT;
  if ((flags & ~known) ||
      ((flags & TRIAD_DATA_PARTITION_BY_UNIT) && (flags & TRIAD_DATA_PARTITION_GRADS)) ||
      ((flags & TRIAD_DATA_GATHER_DEFERRED) && !deferrable))
    throw UserError(instance_.who() + ": partitioning: flags " + std::to_string(flags) +
                    " are not a stage data_v4.h knows (GRADS, GRADS | PARAMS or BY_UNIT alone, "
                    "GATHER_DEFERRED only with GRADS alone or BY_UNIT); a plugin bug");
  return flags;
}

std::vector<std::pair<size_t, size_t>> DataParallelBackend::shard() {
  std::vector<uint64_t> off(unit_offsets_.size()), n(unit_offsets_.size());
  run("shard", [&] { return ops_.shard(instance_.handle(), off.data(), n.data()); });
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t u = 0; u < off.size(); ++u) {
    if (n[u] > 0 &&
        (off[u] < unit_offsets_[u] || off[u] + n[u] > unit_offsets_[u] + unit_sizes_[u]))
      throw UserError(instance_.who() + ": shard: the slice [" + std::to_string(off[u]) + ", " +
                      std::to_string(off[u] + n[u]) + ") of unit " + std::to_string(u) +
                      " lies outside the unit; a plugin bug (data_v3.h)");
    out.emplace_back(size_t(off[u]), size_t(n[u]));
  }
  return out;
}

void DataParallelBackend::reduce_unit(size_t unit, float* grads, float* owned) {
  run("reduce_unit",
      [&] { return ops_.reduce_unit(instance_.handle(), uint32_t(unit), grads, owned); });
}

void DataParallelBackend::gather_unit(size_t unit, const void* owned, void* params,
                                      DLDataType dtype) {
  run("gather_unit",
      [&] { return ops_.gather_unit(instance_.handle(), uint32_t(unit), owned, params, dtype); });
}

void DataParallelBackend::wait_unit(size_t unit) {
  run("wait_unit", [&] { return ops_.wait_unit(instance_.handle(), uint32_t(unit)); });
}

}  // namespace triad
