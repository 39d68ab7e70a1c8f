// The training state of the tensors one rank holds (its ParamSpec): fp32 master weights, their
// gradients, the compute copy the layers read in mixed precision, and AdamW's two moments. Flat
// arenas in ParamSpec order, owned here rather than by the model, so that the data plugin can
// shard them (ZeRO), checkpoints can save them, and the model reads a layer's weights through a
// struct of pointers (BlockParams) that a later stage-3 gather can point elsewhere.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "triad/core/device/device.hpp"
#include "triad/core/model/param_spec.hpp"

namespace triad {

// n elements of an activation dtype on a device.
class ActBuffer {
 public:
  ActBuffer() = default;
  ActBuffer(Device& dev, size_t n, DType t, const char* what)
      : buf_(dev, n * dtype_bytes(t), what), t_(t) {}
  // A view of n elements at ptr, owned elsewhere (Buffer::view).
  static ActBuffer view(void* ptr, size_t n, DType t) {
    ActBuffer b;
    b.buf_ = Buffer<unsigned char>::view(static_cast<unsigned char*>(ptr), n * dtype_bytes(t));
    b.t_ = t;
    return b;
  }
  void* data() const { return buf_.data(); }
  void* at(size_t i) const { return advance(buf_.data(), i, t_); }  // element i
  size_t count() const { return buf_.size() / dtype_bytes(t_); }
  DType dtype() const { return t_; }

 private:
  Buffer<unsigned char> buf_;
  DType t_ = DType::f32;
};

// One block's weights as the layers read them (activation dtype), and their gradients (fp32).
template <class P>
struct BlockTensors {
  P ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, fc_proj_w,
      fc_proj_b;
};
using BlockParams = BlockTensors<const void*>;
using BlockGrads = BlockTensors<float*>;

// ZeRO-2/3: moves a unit's gradients from its window into this rank's shard (summed over the
// data-parallel group) and its parameters from the shards into a window; the engine implements
// it over the data plugin (data_v2.h). Each call starts the transfer; wait() completes them.
class ShardComm {
 public:
  virtual ~ShardComm() = default;
  virtual void reduce(size_t unit, float* window, float* owned) = 0;
  virtual void gather(size_t unit, const void* owned, void* window, DType t) = 0;
  virtual void wait(size_t unit) = 0;
};

class ModelState {
 public:
  // optimizer: allocate AdamW's moments too (a model only run forward/backward needs none).
  // gradients = false defers the gradient arena to shard_optimizer() or partition(), which
  // then allocate only what the ZeRO stage keeps (so no whole arena ever exists at stage 2+).
  ModelState(const ParamSpec& spec, Device& dev, DType act, bool optimizer = true,
             bool gradients = true);

  const ParamSpec& spec() const { return spec_; }
  Device& device() const { return dev_; }
  DType act() const { return act_; }
  size_t size() const { return spec_.total; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  // The activation-dtype copy of the weights in mixed precision; null in fp32.
  void* compute() const { return act_ == DType::f32 ? nullptr : compute_.data(); }
  // AdamW's moments: opt_count() elements, for the arena ranges of pieces() (the whole
  // arena unless sharded); null without optimizer state.
  size_t opt_count() const { return opt_count_; }
  // ZeRO stage 1+: keep the moments of [offset, offset + count) only (this rank steps those).
  void shard_optimizer(size_t offset, size_t count);
  // ZeRO-1 partitioned unit by unit (TRIAD_DATA_PARTITION_BY_UNIT): the moments of these
  // (arena offset, count) slices, in arena order, one piece each; gradients stay whole.
  void shard_optimizer(const std::vector<std::pair<size_t, size_t>>& slices);
  // Whether the gradients outside pieces() may not hold the group's sums after the reduction:
  // the optimizer is sharded (ZeRO-1 reduce-scatters to the owners; data_v1.h promises only the
  // owned range, data_v3.h the owned slices) or the gradients are partitioned. Norms and checks
  // then read the pieces and add them up over the group.
  bool grads_sharded() const {
    return comm_ || (!pieces_.empty() && (pieces_.size() != 1 || pieces_[0].count != spec_.total));
  }
  // The sum of squares of the gradients this rank owns (the whole arena unless sharded).
  double owned_grad_sum_squares() const;

  // ZeRO-2 (and ZeRO-3 with params): the arena cut into units (the layers, tiling it in order),
  // and this rank's slice (arena offset, count) of each. From then on the gradient arena holds
  // the owned slices only, back to back (the shard); a unit's gradient lives in a window while
  // a backward pass writes it, and grads_done() reduces it into the shard. With params the
  // master weights (and their compute copy) shrink to the shard too and a unit's weights are
  // gathered into a window when the layers read them, until release(). The moments follow the
  // shard. Called once, after the weights were initialised, loaded and broadcast.
  void partition(const std::vector<ArenaRange>& units,
                 const std::vector<std::pair<size_t, size_t>>& slices, bool params,
                 ShardComm& comm);
  bool grads_partitioned() const { return comm_ != nullptr; }
  bool params_partitioned() const { return params_sharded_; }
  // The unit whose gradient window stays open across the micro-batches of a step (a tied weight
  // reduced over the pipeline first): grads_done() for it comes once, after the last.
  void defer_unit(const ArenaRange& r) { defer_ = unit_of(r.begin); }
  // Whether the unit holding `r` is reduced after every micro-batch's backward (partitioned and
  // not deferred): partial sums the model keeps must then be completed every micro-batch.
  bool reduced_each_micro_batch(const ArenaRange& r) const {
    return comm_ && r.size() > 0 && unit_of(r.begin) != defer_;
  }
  // The unit holding arena range `r`: its gradient of this backward pass is final.
  void grads_done(const ArenaRange& r);
  // Every reduction complete (the shard holds the step's summed gradients), windows freed.
  void finish_grads();
  // ZeRO-3: start gathering the weights of the unit holding `r` / free them once used (no-ops
  // otherwise, and for an empty range).
  void prefetch(const ArenaRange& r) const;
  void release(const ArenaRange& r) const;
  // ZeRO-1 by unit and ZeRO-2 with the parameter gather deferred (data_v4.h's
  // TRIAD_DATA_GATHER_DEFERRED): the step started one all-gather per unit (`units`, tiling the
  // arena in order), and `wait(u)` ends unit u's. Each unit is waited for where the layers
  // first read it (weight()), so the later units' gathers run behind the earlier units'
  // compute. In fp32 the gathers fill the master weights. In mixed precision they fill the
  // compute copy the layers read (half the bytes), and the master weights outside this rank's
  // pieces fall behind until `refresh_masters` (a collective fp32 gather from their owners) is
  // run by whatever needs them whole (whole_params, the host copies, sync_compute). settle()
  // waits for every unit still in flight; whatever reads or writes the arena otherwise calls it
  // (the optimizer, the gradient reductions, whole_params and the host copies do).
  void gathers_started(const std::vector<ArenaRange>& units, std::function<void(size_t)> wait,
                       std::function<void()> refresh_masters = nullptr);
  void settle() const;
  // The compute copy of the pieces this rank's optimizer steps, from their master weights.
  void sync_compute_pieces();
  // The whole parameter / gradient arena on the device: gathered from the shards when they are
  // partitioned (collective over the data-parallel group), else a copy.
  Buffer<float> whole_params() const;
  Buffer<float> whole_grads() const;

  // The ranges the optimizer steps on this rank, each (arena offset, count, position in the
  // moments); and where their master weights, gradients, compute copy and moments are.
  struct Piece {
    size_t arena = 0, count = 0, pos = 0;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  float* piece_params(const Piece& p) const {
    return params_.data() + (params_sharded_ ? p.pos : p.arena);
  }
  float* piece_grads(const Piece& p) const { return grads_.data() + (comm_ ? p.pos : p.arena); }
  void* piece_compute(const Piece& p) const {
    return act_ == DType::f32 ? nullptr
                              : advance(compute_.data(), params_sharded_ ? p.pos : p.arena, act_);
  }
  // ZeRO-Offload (offload_optimizer: {device: cpu}): the moments and an fp32 master copy of the
  // pieces live on `host` (called before the optimizer state is sharded, they are allocated
  // there directly); the optimizer then steps there: gradients down, AdamW on the host's
  // threads, weights back up.
  void offload_optimizer(Device& host);
  Device* host() const { return host_; }
  float* piece_master(const Piece& p) const { return master_.data() + p.pos; }
  float* piece_host_grads(const Piece& p) const { return host_grads_.data() + p.pos; }
  float* piece_m(const Piece& p) const { return m_.data() + p.pos; }
  float* piece_v(const Piece& p) const { return v_.data() + p.pos; }
  size_t grads_size() const { return comm_ ? shard_ : spec_.total; }
  size_t params_size() const { return params_sharded_ ? shard_ : spec_.total; }

  // The weight at an arena offset as the layers read it, and its gradient (ZeRO-2/3: in the
  // unit's window, opened, or gathered and waited for, on first use).
  const void* weight(size_t offset) const {
    if (params_sharded_) return unit_weight(offset);
    if (in_flight_) arrive(offset);
    return act_ == DType::f32 ? static_cast<const void*>(params_.data() + offset)
                              : advance(compute_.data(), offset, act_);
  }
  float* grad(size_t offset) const { return comm_ ? unit_grad(offset) : grads_.data() + offset; }
  // Block `index` of spec().layers.
  BlockParams block_params(size_t index) const;
  BlockGrads block_grads(size_t index) const;

  // Re-derives the compute copy from the master weights (after they were loaded or received).
  void sync_compute();
  void zero_grad();
  std::vector<float> params_to_host() const;
  std::vector<float> grads_to_host() const;
  void params_from_host(const std::vector<float>& host);

 private:
  template <class P, class F>
  BlockTensors<P> block(size_t index, F at) const;
  // ZeRO-2/3: one unit's windows and what is in flight for it.
  struct Unit {
    ArenaRange range;
    size_t slice = 0, count = 0, pos = 0;  // owned slice (arena offset, count), shard position
    Buffer<float> grads;                   // the gradient window, while open or reducing
    ActBuffer params;                      // the gathered weights (ZeRO-3)
    bool grads_open = false, reducing = false, gathering = false, resident = false;
  };
  size_t unit_of(size_t offset) const;
  float* unit_grad(size_t offset) const;
  const void* unit_weight(size_t offset) const;
  void complete(size_t u) const;     // waits for u's transfers and retires them
  void arrive(size_t offset) const;  // the deferred gather of the unit holding offset, ended
  void gathered(size_t u) const;     // ends deferred gather u
  void masters_whole() const;        // the master weights gathered from their owners if behind
  // Windows without churn: a window a unit is done with waits here for the next unit of its size
  // (every block's unit has one size) instead of going back to the device (on the CPU an mmap,
  // page faults and a memset per layer and micro-batch). Asking for a size no idle window has
  // frees the idle ones first, and finish_grads() frees them all, so the memory in use stays
  // what it was without the pool, as the memory plan counts it.
  Buffer<float> take_grad_window(size_t n) const;
  ActBuffer take_param_window(size_t n) const;
  void drop_idle_windows() const;
  void alloc_optimizer(size_t n);  // the moments (and offload's host buffers) for n elements
  Buffer<float> copy_arena(const float* arena) const;
  Buffer<float> gather_shard(const float* shard) const;
  ParamSpec spec_;
  Device& dev_;
  DType act_;
  Buffer<float> params_, grads_, m_, v_;
  size_t opt_count_ = 0;
  ActBuffer compute_;
  std::vector<size_t> block_offsets_;  // 12 per block, in BlockTensors order
  std::vector<Piece> pieces_;
  ShardComm* comm_ = nullptr;
  bool params_sharded_ = false;
  Device* host_ = nullptr;               // ZeRO-Offload's host device, if any
  Buffer<float> master_, host_grads_;    // on the host: the pieces' weights and gradients
  size_t shard_ = 0;                     // elements of the shard
  size_t defer_ = size_t(-1);            // the deferred unit, if any
  mutable std::vector<Unit> units_;      // windows open and close as the layers are used
  mutable std::deque<size_t> reducing_;  // units whose reduction is in flight, oldest first
  mutable std::vector<Buffer<float>> idle_grads_;  // windows without a unit (see take_*)
  mutable std::vector<ActBuffer> idle_params_;
  // Deferred parameter gathers (gathers_started): the units, which are still in flight.
  std::vector<ArenaRange> gather_units_;
  mutable std::vector<char> gather_pending_;
  mutable size_t in_flight_ = 0;
  std::function<void(size_t)> gather_wait_;
  mutable std::function<void()> refresh_masters_;  // set while the master weights are behind
};

// f(piece, item, k, n) for every overlap of an optimizer piece with an item of the arena (a
// tensor: offset, numel): n elements starting k elements into the piece.
template <class Items, class F>
void for_each_overlap(const std::vector<ModelState::Piece>& pieces, const Items& items, F f) {
  for (const ModelState::Piece& pc : pieces)
    for (const auto& item : items) {
      const size_t a = std::max(pc.arena, item.offset);
      const size_t b = std::min(pc.arena + pc.count, item.offset + item.numel);
      if (a < b) f(pc, item, a - pc.arena, b - a);
    }
}

}  // namespace triad
