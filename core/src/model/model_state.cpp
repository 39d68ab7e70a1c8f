#include "triad/core/model/model_state.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace triad {

namespace {
// BlockTensors' fields in order, as the names inside a block ("h.L." + name).
const char* const kBlockNames[12] = {"ln_1.weight",      "ln_1.bias",          "attn.c_attn.weight",
                                     "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                     "ln_2.weight",      "ln_2.bias",          "mlp.c_fc.weight",
                                     "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
}  // namespace

ModelState::ModelState(const ParamSpec& spec, Device& dev, DType act, bool optimizer,
                       bool gradients)
    : spec_(spec), dev_(dev), act_(act) {
  params_ = Buffer<float>(dev_, spec_.total, "parameters");
  if (gradients) grads_ = Buffer<float>(dev_, spec_.total, "gradients");
  // Mixed precision: the forward and backward read a copy of the weights in the activation
  // dtype, refreshed by every optimizer step (fp32: they read the master weights themselves).
  if (act_ != DType::f32) compute_ = ActBuffer(dev_, spec_.total, act_, "compute weights");
  if (optimizer) shard_optimizer(0, spec_.total);
  // Looked up by name once here, never per call.
  for (const LayerRange& l : spec_.layers) {
    const std::string h = "h." + std::to_string(l.layer) + ".";
    for (const char* n : kBlockNames) block_offsets_.push_back(spec_.find(h + n).offset);
  }
}

template <class P, class F>
BlockTensors<P> ModelState::block(size_t index, F at) const {
  const size_t* o = block_offsets_.data() + 12 * index;
  return {at(o[0]), at(o[1]), at(o[2]), at(o[3]), at(o[4]),  at(o[5]),
          at(o[6]), at(o[7]), at(o[8]), at(o[9]), at(o[10]), at(o[11])};
}

BlockParams ModelState::block_params(size_t index) const {
  return block<const void*>(index, [this](size_t o) { return weight(o); });
}

BlockGrads ModelState::block_grads(size_t index) const {
  return block<float*>(index, [this](size_t o) { return grad(o); });
}

void ModelState::shard_optimizer(size_t offset, size_t count) {
  shard_optimizer({{offset, count}});
}

void ModelState::shard_optimizer(const std::vector<std::pair<size_t, size_t>>& slices) {
  if (!grads_.data()) {  // deferred by the constructor: the whole arena's
    grads_ = Buffer<float>(dev_, spec_.total, "gradients");
    dev_.fill_zero(grads_.data(), spec_.total * sizeof(float));
  }
  pieces_.clear();
  size_t pos = 0;
  for (const auto& [offset, count] : slices) {
    if (count == 0) continue;
    if (!pieces_.empty() && offset < pieces_.back().arena + pieces_.back().count)
      throw std::logic_error("optimizer slices overlap or are out of arena order");
    pieces_.push_back({offset, count, pos});
    pos += count;
  }
  // A rank that owns nothing still has one (empty) piece: pieces() empty means no optimizer.
  if (pieces_.empty()) pieces_.push_back({0, 0, 0});
  alloc_optimizer(pos);
}

double ModelState::owned_grad_sum_squares() const {
  if (comm_ || pieces_.empty()) return dev_.sum_squares(grads_.data(), grads_size());
  double sq = 0;  // ZeRO-1: the owned block, or the owned slice of each unit
  for (const Piece& p : pieces_) sq += dev_.sum_squares(piece_grads(p), p.count);
  return sq;
}

void ModelState::alloc_optimizer(size_t n) {
  // On the host with ZeRO-Offload (never on the training device first).
  Device& d = host_ ? *host_ : dev_;
  m_.reset();
  v_.reset();
  master_.reset();
  host_grads_.reset();
  m_ = Buffer<float>(d, n, host_ ? "Adam first moment (host)" : "Adam first moment");
  v_ = Buffer<float>(d, n, host_ ? "Adam second moment (host)" : "Adam second moment");
  d.fill_zero(m_.data(), n * sizeof(float));
  d.fill_zero(v_.data(), n * sizeof(float));
  opt_count_ = n;
  if (!host_) return;
  master_ = Buffer<float>(d, n, "master weights (host)");
  host_grads_ = Buffer<float>(d, n, "gradients (host)");
  for (const Piece& p : pieces_)
    dev_.to_host(master_.data() + p.pos, piece_params(p), p.count * sizeof(float));
}

void ModelState::partition(const std::vector<ArenaRange>& units,
                           const std::vector<std::pair<size_t, size_t>>& slices, bool params,
                           ShardComm& comm) {
  if (units.size() != slices.size())
    throw std::logic_error("partition: one slice per unit is needed");
  units_ = std::vector<Unit>(units.size());
  pieces_.clear();
  size_t pos = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    Unit& w = units_[u];
    w.range = units[u];
    w.slice = slices[u].first;
    w.count = slices[u].second;
    w.pos = pos;
    if (w.count) pieces_.push_back({w.slice, w.count, pos});
    pos += w.count;
  }
  shard_ = pos;
  comm_ = &comm;
  // Gradients: the shard only (the whole arena is freed first).
  grads_.reset();
  grads_ = Buffer<float>(dev_, shard_, "gradients (owned shard)");
  dev_.fill_zero(grads_.data(), shard_ * sizeof(float));
  if (params) {
    Buffer<float> mine(dev_, shard_, "parameters (owned shard)");
    for (const Piece& p : pieces_)
      dev_.copy(mine.data() + p.pos, params_.data() + p.arena, p.count * sizeof(float));
    params_ = std::move(mine);
    compute_ = ActBuffer();
    if (act_ != DType::f32) compute_ = ActBuffer(dev_, shard_, act_, "compute weights (shard)");
    params_sharded_ = true;
    sync_compute();
  }
  alloc_optimizer(shard_);
}

void ModelState::offload_optimizer(Device& host) {
  host_ = &host;
  if (!pieces_.empty()) alloc_optimizer(opt_count_);  // already sharded: move it
}

size_t ModelState::unit_of(size_t offset) const {
  auto it = std::upper_bound(units_.begin(), units_.end(), offset,
                             [](size_t o, const Unit& u) { return o < u.range.begin; });
  if (it == units_.begin() || offset >= std::prev(it)->range.end)
    throw std::logic_error("arena offset " + std::to_string(offset) + " is in no unit");
  return size_t(std::prev(it) - units_.begin());
}

void ModelState::complete(size_t u) const {
  Unit& w = units_[u];
  if (!w.reducing && !w.gathering) return;
  comm_->wait(u);
  if (w.reducing) {
    w.reducing = false;
    idle_grads_.push_back(std::move(w.grads));
    reducing_.erase(std::find(reducing_.begin(), reducing_.end(), u));
  }
  if (w.gathering) {
    w.gathering = false;
    w.resident = true;
  }
}

float* ModelState::unit_grad(size_t offset) const {
  const size_t u = unit_of(offset);
  Unit& w = units_[u];
  if (!w.grads_open) {
    complete(u);  // the previous micro-batch's reduction of this unit
    w.grads = take_grad_window(w.range.size());
    dev_.fill_zero(w.grads.data(), w.range.size() * sizeof(float));
    w.grads_open = true;
  }
  return w.grads.data() + (offset - w.range.begin);
}

void ModelState::grads_done(const ArenaRange& r) {
  if (!comm_ || r.size() == 0) return;
  settle();
  const size_t u = unit_of(r.begin);
  Unit& w = units_[u];
  if (!w.grads_open) unit_grad(r.begin);  // a unit this pass left untouched still takes part
  // Fold the running sum into this rank's contribution: the reduction then yields the new sum.
  float* owned = grads_.data() + w.pos;
  float* mine = w.grads.data() + (w.slice - w.range.begin);
  if (w.count) dev_.residual_forward(mine, mine, owned, w.count, DType::f32);
  comm_->reduce(u, w.grads.data(), owned);
  w.grads_open = false;
  w.reducing = true;
  reducing_.push_back(u);
  // One reduction in flight (overlapping the next unit's backward): the window memory stays at
  // one unit beside the open ones.
  while (reducing_.size() > 1) complete(reducing_.front());
}

void ModelState::finish_grads() {
  if (!comm_) return;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].grads_open)
      throw std::logic_error("unit " + std::to_string(u) + "'s gradient was never reduced");
    complete(u);
  }
  drop_idle_windows();
}

void ModelState::prefetch(const ArenaRange& r) const {
  if (!params_sharded_ || r.size() == 0) return;
  const size_t u = unit_of(r.begin);
  Unit& w = units_[u];
  if (w.resident || w.gathering) return;
  w.params = take_param_window(w.range.size());
  const void* src = act_ == DType::f32 ? static_cast<const void*>(params_.data() + w.pos)
                                       : advance(compute_.data(), w.pos, act_);
  comm_->gather(u, src, w.params.data(), act_);
  w.gathering = true;
}

void ModelState::release(const ArenaRange& r) const {
  if (!params_sharded_ || r.size() == 0) return;
  const size_t u = unit_of(r.begin);
  Unit& w = units_[u];
  complete(u);  // never free memory a transfer still writes
  idle_params_.push_back(std::move(w.params));
  w.resident = false;
}

Buffer<float> ModelState::take_grad_window(size_t n) const {
  for (auto it = idle_grads_.begin(); it != idle_grads_.end(); ++it)
    if (it->size() == n) {
      Buffer<float> b = std::move(*it);
      idle_grads_.erase(it);
      return b;
    }
  drop_idle_windows();
  return Buffer<float>(dev_, n, "gradient windows");
}

ActBuffer ModelState::take_param_window(size_t n) const {
  for (auto it = idle_params_.begin(); it != idle_params_.end(); ++it)
    if (it->count() == n && it->dtype() == act_) {
      ActBuffer b = std::move(*it);
      idle_params_.erase(it);
      return b;
    }
  drop_idle_windows();
  return ActBuffer(dev_, n, act_, "gathered weights");
}

void ModelState::drop_idle_windows() const {
  idle_grads_.clear();
  idle_params_.clear();
}

const void* ModelState::unit_weight(size_t offset) const {
  const size_t u = unit_of(offset);
  Unit& w = units_[u];
  if (!w.resident) {
    prefetch(w.range);
    complete(u);
  }
  return w.params.at(offset - w.range.begin);
}

void ModelState::gathers_started(const std::vector<ArenaRange>& units,
                                 std::function<void(size_t)> wait,
                                 std::function<void()> refresh_masters) {
  settle();
  gather_units_ = units;
  gather_wait_ = std::move(wait);
  gather_pending_.assign(units.size(), 1);
  in_flight_ = units.size();
  refresh_masters_ = std::move(refresh_masters);
}

void ModelState::masters_whole() const {
  settle();
  if (!refresh_masters_) return;
  const std::function<void()> refresh = std::move(refresh_masters_);
  refresh_masters_ = nullptr;
  refresh();
}

void ModelState::sync_compute_pieces() {
  if (act_ == DType::f32) return;
  for (const Piece& p : pieces_)
    if (p.count) dev_.convert(piece_compute(p), act_, piece_params(p), p.count);
}

void ModelState::gathered(size_t u) const {
  if (!gather_pending_[u]) return;
  gather_pending_[u] = 0;
  --in_flight_;
  gather_wait_(u);
}

void ModelState::arrive(size_t offset) const {
  auto it = std::upper_bound(gather_units_.begin(), gather_units_.end(), offset,
                             [](size_t o, const ArenaRange& r) { return o < r.begin; });
  if (it == gather_units_.begin() || offset >= std::prev(it)->end)
    throw std::logic_error("arena offset " + std::to_string(offset) + " is in no gathered unit");
  gathered(size_t(std::prev(it) - gather_units_.begin()));
}

void ModelState::settle() const {
  for (size_t u = 0; in_flight_ && u < gather_pending_.size(); ++u) gathered(u);
}

Buffer<float> ModelState::whole_params() const {
  masters_whole();
  return params_sharded_ ? gather_shard(params_.data()) : copy_arena(params_.data());
}

Buffer<float> ModelState::whole_grads() const {
  return comm_ ? gather_shard(grads_.data()) : copy_arena(grads_.data());
}

Buffer<float> ModelState::copy_arena(const float* arena) const {
  Buffer<float> whole(dev_, spec_.total, "gathered arena");
  dev_.copy(whole.data(), arena, spec_.total * sizeof(float));
  return whole;
}

Buffer<float> ModelState::gather_shard(const float* shard) const {
  Buffer<float> whole(dev_, spec_.total, "gathered arena");
  for (size_t u = 0; u < units_.size(); ++u) {
    complete(u);
    comm_->gather(u, shard + units_[u].pos, whole.data() + units_[u].range.begin, DType::f32);
    comm_->wait(u);
  }
  return whole;
}

void ModelState::sync_compute() {
  masters_whole();
  if (act_ != DType::f32) dev_.convert(compute_.data(), act_, params_.data(), params_size());
}

void ModelState::zero_grad() {
  dev_.fill_zero(grads_.data(), grads_size() * sizeof(float));
}

std::vector<float> ModelState::params_to_host() const {
  if (params_sharded_) throw std::logic_error("params_to_host: the parameters are sharded");
  masters_whole();
  std::vector<float> host(spec_.total);
  dev_.to_host(host.data(), params_.data(), host.size() * sizeof(float));
  return host;
}

std::vector<float> ModelState::grads_to_host() const {
  if (comm_) throw std::logic_error("grads_to_host: the gradients are sharded");
  std::vector<float> host(spec_.total);
  dev_.to_host(host.data(), grads_.data(), host.size() * sizeof(float));
  return host;
}

void ModelState::params_from_host(const std::vector<float>& host) {
  if (params_sharded_) throw std::logic_error("params_from_host: the parameters are sharded");
  settle();
  refresh_masters_ = nullptr;  // every master weight is written here
  dev_.to_device(params_.data(), host.data(), spec_.total * sizeof(float));
  sync_compute();
}

}  // namespace triad
