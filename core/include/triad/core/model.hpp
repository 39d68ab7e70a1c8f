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

class GPT {
 public:
  // max_batch: the largest micro-batch forward() will be called with (activations sized for it).
  GPT(const ModelConfig& cfg, Device& dev, AttentionBackend& attention, int max_batch);

  const GptLayout& layout() const { return layout_; }
  size_t num_params() const { return layout_.total; }
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }
  float* param(const std::string& name) const { return params_.data() + layout_.find(name).offset; }
  float* grad(const std::string& name) const { return grads_.data() + layout_.find(name).offset; }

  // GPT-2 initialisation: N(0, init_std), residual projections scaled by 1/sqrt(2 L),
  // biases 0, layernorm weights 1. Deterministic for a seed.
  void init_weights(uint64_t seed);
  // Whole arenas between the device and the host (HF import/export, tests).
  std::vector<float> params_to_host() const;
  std::vector<float> grads_to_host() const;
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

  // Logits of the last forward, (B,T,V) on the device (valid until backward()).
  const float* logits() const { return logits_.data(); }

 private:
  struct LayerActs {
    Buffer<float> res_in;  // (B,T,C) input of the layer (residual stream)
    Buffer<float> ln1, ln1_mean, ln1_rstd;
    Buffer<float> qkv;      // (B,T,3C), q and k rotated in place when rope
    Buffer<float> atty;     // (B,T,C) attention output, heads interleaved
    Buffer<float> lse;      // (B,H,T)
    Buffer<float> res_mid;  // (B,T,C) after the attention residual
    Buffer<float> ln2, ln2_mean, ln2_rstd;
    Buffer<float> fch, fch_gelu;  // (B,T,4C)
  };
  struct AttnViews;
  void attention_forward(LayerActs& a, int B);
  void attention_backward(LayerActs& a, float* dqkv, const float* datty, int B);

  ModelConfig cfg_;
  Device& dev_;
  AttentionBackend& attn_;
  GptLayout layout_;
  int maxB_, T_, C_, H_, V_, L_;
  bool rope_;
  Buffer<float> params_, grads_;
  std::vector<LayerActs> acts_;
  Buffer<float> res_out_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, ce_lse_;
  // Backward scratch, reused by every layer.
  Buffer<float> dres_, dln_, dqkv_, datty_, dfch_, dfch_gelu_;
  Buffer<uint8_t> attn_workspace_;
  size_t ws_fwd_ = 0, ws_bwd_ = 0;
  Buffer<int32_t> targets_, inputs_;  // of the last forward, on the device
  int lastB_ = 0;
};

}  // namespace triad
