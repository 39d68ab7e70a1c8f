#include "triad/core/train/optimizer.hpp"

#include <cmath>
#include <vector>

#include "triad/core/train/run.hpp"
#include "triad/core/train/trace.hpp"

namespace triad {

Optimizer::Optimizer(ModelState& state, const ParamSpec& spec, const GptLayout& arena,
                     const OptimizerConfig& cfg, const Place& place, DistributedRun* dist)
    : state_(state), spec_(spec), arena_(arena), cfg_(cfg), place_(place), dist_(dist) {
  gathers_deferred_ = dist_ && (dist_->data->partitioning() & TRIAD_DATA_GATHER_DEFERRED);
  if (gathers_deferred_) {
    units_ = arena_units(spec_);
    slices_ = dist_->data->shard();
  }
}

double Optimizer::grad_norm(double grad_scale) {
  Device& dev = state_.device();
  // Sharded (ZeRO-1's owned block, ZeRO-2/3's slices): only the pieces hold the group's sums.
  const bool sharded = dist_ && state_.grads_sharded();
  const int tp = place_.tp_size, pp = place_.stages;
  double sq = 0;
  if (!sharded && tp == 1 && pp == 1) {
    sq = dev.sum_squares(state_.grads(), state_.size());
  } else {
    const std::vector<ModelState::Piece> whole{{0, state_.size(), 0}};
    for_each_overlap(sharded ? state_.pieces() : whole, spec_.tensors,
                     [&](const ModelState::Piece& pc, const TensorSpec& ts, size_t k, size_t n) {
                       if (ts.replicated_in_tp && place_.tp_rank != 0) return;
                       if (ts.tie_group == "wte" && pp > 1 && place_.stage != 0) return;
                       sq += dev.sum_squares(state_.piece_grads(pc) + k, n);
                     });
  }
  // Unscaled before any sum across ranks: a scaled square can overflow the float they carry.
  sq /= grad_scale * grad_scale;
  if (sharded) sq = dist_->sum(dist_->comms.grad_reduce(), sq);
  if (tp > 1) sq = dist_->sum(*dist_->comms.tp, sq);
  if (pp > 1) sq = dist_->sum(*dist_->comms.pp, sq);
  return std::sqrt(sq);
}

void Optimizer::step(double norm, double lr, int t, double grad_scale) {
  state_.settle();  // the last step's gathers still read the owned slices this one writes
  double factor = 1 / grad_scale;
  if (cfg_.clip_grad > 0 && norm > cfg_.clip_grad) factor *= cfg_.clip_grad / (norm + 1e-6);
  if (factor != 1)
    state_.device().scale_inplace(state_.grads(), state_.grads_size(), float(factor));
  if (state_.host())
    offloaded_adamw(lr, t);
  else
    adamw(lr, t);
  after_step();
}

void Optimizer::skip() {
  after_step();
}

void Optimizer::after_step() {
  if (dist_) {
    state_.settle();
    if (gathers_deferred_) {
      start_gathers();
      return;
    }
    dist_->data->after_step(state_.params());
    // Parameters other ranks stepped arrived in fp32: refresh their compute copy.
    if (state_.opt_count() != state_.size() && !state_.params_partitioned()) state_.sync_compute();
  }
}

// The parameter gathers of data_v4.h's GATHER_DEFERRED, left in flight: each unit is waited for
// where the next forward first reads it. In fp32 the plugin's after_step gathers the master
// weights. In mixed precision the layers read the compute copy, so that is what is gathered, in
// its dtype (half the bytes, as Megatron-Core's distributed optimizer gathers its bf16
// parameters): each unit's owned slice in place with gather_unit; the master weights outside
// the pieces then wait for a collective fp32 gather until something needs them whole.
void Optimizer::start_gathers() {
  DataParallelBackend* data = dist_->data.get();
  const DType act = state_.act();
  const size_t bytes = act == DType::f32 ? sizeof(float) : dtype_bytes(act);
  auto wait = [this, data, bytes](size_t u) {
    TraceSpan span(TraceKind::communication, "gather_params", int(u));
    if (span) span.arg("group", "dp").arg("bytes", uint64_t(units_[u].size()) * bytes);
    data->wait_unit(u);
  };
  if (act == DType::f32) {
    data->after_step(state_.params());
    state_.gathers_started(units_, wait);
    return;
  }
  char* compute = static_cast<char*>(state_.compute());
  for (size_t u = 0; u < units_.size(); ++u)
    data->gather_unit(u, compute + slices_[u].first * bytes, compute + units_[u].begin * bytes,
                      dl_dtype(act));
  // Collective: every rank needs its masters whole at the same points (the export, the end).
  auto refresh = [this, data] {
    float* p = state_.params();
    for (size_t u = 0; u < units_.size(); ++u)
      data->gather_unit(u, p + slices_[u].first, p + units_[u].begin, dl_float32());
    for (size_t u = 0; u < units_.size(); ++u) data->wait_unit(u);
  };
  state_.gathers_started(units_, wait, refresh);
}

// AdamW over each tensor of the arena, decaying only matmul weights and embeddings; only the
// pieces whose moments this rank keeps (its ZeRO shard; the whole arena below stage 1). In
// mixed precision the compute copy of the weights is refreshed in the same pass. Each piece's
// tensors go to the device together (a GPU updates them in a few launches).
void Optimizer::adamw(double lr, int t) {
  Device& dev = state_.device();
  const OptimizerConfig& o = cfg_;
  std::vector<Device::AdamwSegment> segs;
  const ModelState::Piece* piece = nullptr;
  auto flush = [&] {
    if (segs.empty()) return;
    dev.adamw_update_segments(state_.piece_params(*piece), state_.piece_grads(*piece),
                              state_.piece_m(*piece), state_.piece_v(*piece), segs.data(),
                              segs.size(), float(lr), float(o.adam_beta1), float(o.adam_beta2),
                              float(o.adam_eps), t, state_.piece_compute(*piece), state_.act());
    segs.clear();
  };
  for_each_overlap(state_.pieces(), arena_.params,
                   [&](const ModelState::Piece& pc, const ParamInfo& p, size_t k, size_t n) {
                     if (&pc != piece) flush();
                     piece = &pc;
                     segs.push_back({k, n, p.weight_decay ? float(o.weight_decay) : 0.0f});
                   });
  flush();
}

// ZeRO-Offload: the same update on the host: each piece's gradients down, AdamW over the host's
// master weights and moments, the weights back up (and into the compute copy).
void Optimizer::offloaded_adamw(double lr, int t) {
  Device& dev = state_.device();
  Device& host = *state_.host();
  const OptimizerConfig& o = cfg_;
  for (const ModelState::Piece& pc : state_.pieces())
    dev.to_host(state_.piece_host_grads(pc), state_.piece_grads(pc), pc.count * sizeof(float));
  for_each_overlap(state_.pieces(), arena_.params,
                   [&](const ModelState::Piece& pc, const ParamInfo& p, size_t k, size_t n) {
                     host.adamw_update(state_.piece_master(pc) + k, state_.piece_host_grads(pc) + k,
                                       state_.piece_m(pc) + k, state_.piece_v(pc) + k, n, float(lr),
                                       float(o.adam_beta1), float(o.adam_beta2), float(o.adam_eps),
                                       p.weight_decay ? float(o.weight_decay) : 0.0f, t, nullptr,
                                       DType::f32);
                   });
  for (const ModelState::Piece& pc : state_.pieces())
    dev.to_device(state_.piece_params(pc), state_.piece_master(pc), pc.count * sizeof(float));
  state_.sync_compute_pieces();  // the rest arrives with the gathers after the step
  offloaded_bytes_ += state_.opt_count() * sizeof(float);
}

}  // namespace triad
