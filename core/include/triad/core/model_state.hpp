// The training state of the tensors one rank holds (its ParamSpec): fp32 master weights, their
// gradients, the compute copy the layers read in mixed precision, and AdamW's two moments. Flat
// arenas in ParamSpec order, owned here rather than by the model, so that the data plugin can
// shard them (ZeRO), checkpoints can save them, and the model reads a layer's weights through a
// struct of pointers (BlockParams) that a later stage-3 gather can point elsewhere.
#pragma once

#include <cstddef>
#include <vector>

#include "triad/core/device.hpp"
#include "triad/core/param_spec.hpp"

namespace triad {

// n elements of an activation dtype on a device.
class ActBuffer {
 public:
  ActBuffer() = default;
  ActBuffer(Device& dev, size_t n, DType t, const char* what)
      : buf_(dev, n * dtype_bytes(t), what), t_(t) {}
  void* data() const { return buf_.data(); }
  void* at(size_t i) const { return advance(buf_.data(), i, t_); }  // element i

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

class ModelState {
 public:
  // optimizer: allocate AdamW's moments too (a model only run forward/backward needs none).
  ModelState(const ParamSpec& spec, Device& dev, DType act, bool optimizer = true);

  const ParamSpec& spec() const { return spec_; }
  Device& device() const { return dev_; }
  DType act() const { return act_; }
  size_t size() const { return spec_.total; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  // The activation-dtype copy of the weights in mixed precision; null in fp32.
  void* compute() const { return act_ == DType::f32 ? nullptr : compute_.data(); }
  // AdamW's moments for the arena range [opt_offset(), opt_offset() + opt_count()) (the whole
  // arena unless sharded); null without optimizer state.
  float* adam_m() const { return m_.data(); }
  float* adam_v() const { return v_.data(); }
  size_t opt_offset() const { return opt_offset_; }
  size_t opt_count() const { return opt_count_; }
  // ZeRO stage 1+: keep the moments of [offset, offset + count) only (this rank steps those).
  void shard_optimizer(size_t offset, size_t count);

  // The weight at an arena offset as the layers read it, and its gradient.
  const void* weight(size_t offset) const {
    return act_ == DType::f32 ? static_cast<const void*>(params_.data() + offset)
                              : advance(compute_.data(), offset, act_);
  }
  float* grad(size_t offset) const { return grads_.data() + offset; }
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
  ParamSpec spec_;
  Device& dev_;
  DType act_;
  Buffer<float> params_, grads_, m_, v_;
  size_t opt_offset_ = 0, opt_count_ = 0;
  ActBuffer compute_;
  std::vector<size_t> block_offsets_;  // 12 per block, in BlockTensors order
};

}  // namespace triad
