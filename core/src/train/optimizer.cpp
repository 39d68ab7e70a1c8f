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
  if (gathers_deferred_) units_ = arena_units(spec_);
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
    dist_->data->after_step(state_.params());
    if (gathers_deferred_) {  // each unit waited for (and its compute copy refreshed) when read
      DataParallelBackend* data = dist_->data.get();
      state_.gathers_started(units_, [this, data](size_t u) {
        TraceSpan span(TraceKind::communication, "gather_params", int(u));
        if (span) span.arg("group", "dp").arg("bytes", uint64_t(units_[u].size()) * sizeof(float));
        data->wait_unit(u);
      });
      return;
    }
    // Parameters other ranks stepped arrived in fp32: refresh their compute copy.
    if (state_.opt_count() != state_.size() && !state_.params_partitioned()) state_.sync_compute();
  }
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
  if (state_.act() != DType::f32) state_.sync_compute();
  offloaded_bytes_ += state_.opt_count() * sizeof(float);
}

}  // namespace triad
