// GPT-2 (pre-LN blocks, GELU MLP, learned or rotary positions, LM head tied to the token
// embedding), forward and explicit backward over flat arenas. Attention goes through the
// attention plugin. Backward accumulates into the gradient arena, so micro-batches
// accumulate for free.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "triad/core/attention.hpp"
#include "triad/core/config.hpp"
#include "triad/core/device.hpp"
#include "triad/core/gpt_layout.hpp"

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

class GPT {
 public:
  // max_batch: the largest micro-batch forward() will be called with (activations sized for it).
  // act: dtype of activations and of the weights the layers read (bf16: mixed precision, with
  // fp32 master weights, gradients and optimizer state).
  GPT(const ModelConfig& cfg, Device& dev, AttentionBackend& attention, int max_batch,
      DType act = DType::f32);

  const GptLayout& layout() const { return layout_; }
  size_t num_params() const { return layout_.total; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  float* param(const std::string& name) const { return params_.data() + layout_.find(name).offset; }
  // The weights the layers read, in the activation dtype: the master weights themselves in
  // fp32, else a copy that the optimizer refreshes (null in fp32).
  void* compute_params() const { return act_ == DType::f32 ? nullptr : compute_.data(); }
  // Re-derives the compute copy from the master weights (after they were loaded or received).
  void sync_compute_weights();
  float* grad(const std::string& name) const { return grads_.data() + layout_.find(name).offset; }

  // GPT-2 initialisation: N(0, init_std), residual projections scaled by 1/sqrt(2 L),
  // biases 0, layernorm weights 1. Each tensor draws from its own stream seeded by (seed, its
  // name), so its values do not depend on the layout (which tensors a rank holds).
  void init_weights(uint64_t seed);
  // The whole parameter arena between the device and the host (HF import/export, tests).
  std::vector<float> params_to_host() const;
  void params_from_host(const std::vector<float>& host);
  void zero_grad();

  // inputs/targets (B,T) with B <= max_batch, T = seq_length. Returns the mean loss over the
  // B*T tokens and keeps the activations for backward().
  float forward(const int32_t* inputs, const int32_t* targets, int B);
  // Called during backward each time a range [offset, offset+count) of the gradient arena is
  // final: ln_f, then each layer from the last to the first, then the embeddings. The
  // ranges cover the arena exactly once (data parallelism starts reducing them at once).
  using GradsReady = std::function<void(size_t offset, size_t count)>;
  // grads += d(loss_scale * mean loss)/d params, for the last forward().
  void backward(float loss_scale, const GradsReady& grads_ready = nullptr);

  // Logits of the last forward, (B,T,V) in the activation dtype on the device (valid until
  // backward()).
  const void* logits() const { return logits_.data(); }

 private:
  struct LayerActs {
    ActBuffer res_in;  // (B,T,C) input of the layer (residual stream)
    ActBuffer ln1;
    Buffer<float> ln1_mean, ln1_rstd;
    ActBuffer qkv;      // (B,T,3C), q and k rotated in place when rope
    ActBuffer atty;     // (B,T,C) attention output, heads interleaved
    Buffer<float> lse;  // (B,H,T)
    ActBuffer res_mid;  // (B,T,C) after the attention residual
    ActBuffer ln2;
    Buffer<float> ln2_mean, ln2_rstd;
    ActBuffer fch, fch_gelu;  // (B,T,4C)
  };
  struct AttnViews;
  void attention_forward(LayerActs& a, int B);
  void attention_backward(LayerActs& a, void* dqkv, const void* datty, int B);
  // Arena offsets of one block's tensors (llm.c's struct of weight pointers, as offsets so that
  // they serve the master weights, the compute copy and the gradients alike); [begin, end) is
  // the block's whole range.
  struct BlockOffsets {
    size_t ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b,
        fc_proj_w, fc_proj_b, begin, end;
  };
  // The weight at an arena offset as the layers read it (compute copy in mixed precision), and
  // its gradient.
  const void* w(size_t off) const {
    return act_ == DType::f32 ? static_cast<const void*>(params_.data() + off)
                              : advance(compute_.data(), off, act_);
  }
  float* g(size_t off) const { return grads_.data() + off; }

  ModelConfig cfg_;
  Device& dev_;
  DType act_;
  AttentionBackend& attn_;
  GptLayout layout_;
  int maxB_, T_, C_, H_, V_, L_;
  bool rope_;
  Buffer<float> params_, grads_;  // fp32 master weights and gradients
  ActBuffer compute_;             // mixed precision: the weights in the activation dtype
  std::vector<BlockOffsets> blocks_;
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<LayerActs> acts_;
  ActBuffer res_out_, lnf_, logits_;
  Buffer<float> lnf_mean_, lnf_rstd_, losses_, ce_lse_;
  // Backward scratch, reused by every layer.
  ActBuffer dres_, dln_, dqkv_, datty_, dfch_, dfch_gelu_;
  Buffer<uint8_t> attn_workspace_;
  size_t ws_fwd_ = 0, ws_bwd_ = 0;
  Buffer<int32_t> targets_, inputs_;  // of the last forward, on the device
  int lastB_ = 0;
};

}  // namespace triad
