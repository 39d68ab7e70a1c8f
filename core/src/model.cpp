#include "triad/core/model.hpp"

#include <cmath>
#include <cstring>
#include <random>

namespace triad {

namespace {

// A (B,H,T,D) strided view into a (B,T,W) activation where head h of this part starts at
// column col0 + h*D. Owns the shape/stride arrays the DLTensor points at.
struct HeadView {
  int64_t shape[4];
  int64_t strides[4];
  DLTensor t{};
  HeadView(const void* base, int B, int T, int H, int D, int64_t row_width, int64_t col0,
           DLDevice dev, DType act) {
    shape[0] = B, shape[1] = H, shape[2] = T, shape[3] = D;
    strides[0] = T * row_width, strides[1] = D, strides[2] = row_width, strides[3] = 1;
    t.data = const_cast<void*>(advance(base, col0, act));
    t.device = dev;
    t.ndim = 4;
    t.dtype = dl_dtype(act);
    t.shape = shape;
    t.strides = strides;
    t.byte_offset = 0;
  }
};

struct LseView {
  int64_t shape[3];
  DLTensor t{};
  LseView(float* base, int B, int H, int T, DLDevice dev) {
    shape[0] = B, shape[1] = H, shape[2] = T;
    t.data = base;
    t.device = dev;
    t.ndim = 3;
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.shape = shape;
    t.strides = nullptr;
  }
};

}  // namespace

GPT::GPT(const ModelConfig& cfg, Device& dev, AttentionBackend& attention, int max_batch, DType act)
    : cfg_(cfg),
      dev_(dev),
      act_(act),
      attn_(attention),
      layout_(gpt_layout(cfg)),
      maxB_(max_batch),
      T_(cfg.seq_length),
      C_(cfg.hidden_size),
      H_(cfg.num_attention_heads),
      V_(cfg.vocab_size),
      L_(cfg.num_layers),
      rope_(cfg.position_embedding == "rope") {
  const size_t BT = size_t(maxB_) * T_, C = C_;
  // Where each tensor lives, looked up by name once here and never per call.
  wte_ = layout_.find("wte.weight").offset;
  wpe_ = rope_ ? 0 : layout_.find("wpe.weight").offset;
  lnf_w_ = layout_.find("ln_f.weight").offset;
  lnf_b_ = layout_.find("ln_f.bias").offset;
  for (int l = 0; l < L_; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto at = [&](const char* n) { return layout_.find(h + n).offset; };
    const ParamInfo& last = layout_.find(h + "mlp.c_proj.bias");
    blocks_.push_back({at("ln_1.weight"), at("ln_1.bias"), at("attn.c_attn.weight"),
                       at("attn.c_attn.bias"), at("attn.c_proj.weight"), at("attn.c_proj.bias"),
                       at("ln_2.weight"), at("ln_2.bias"), at("mlp.c_fc.weight"),
                       at("mlp.c_fc.bias"), at("mlp.c_proj.weight"), at("mlp.c_proj.bias"),
                       at("ln_1.weight"), last.offset + last.numel});
  }
  params_ = Buffer<float>(dev_, layout_.total, "parameters");
  grads_ = Buffer<float>(dev_, layout_.total, "gradients");
  // Mixed precision: the forward and backward read a copy of the weights in the activation
  // dtype, refreshed by every optimizer step (fp32: they read the master weights themselves).
  if (act_ != DType::f32) compute_ = ActBuffer(dev_, layout_.total, act_, "compute weights");
  acts_.resize(L_);
  for (auto& a : acts_) {
    a.res_in = ActBuffer(dev_, BT * C, act_, "activations");
    a.ln1 = ActBuffer(dev_, BT * C, act_, "activations");
    a.ln1_mean = Buffer<float>(dev_, BT, "activations");
    a.ln1_rstd = Buffer<float>(dev_, BT, "activations");
    a.qkv = ActBuffer(dev_, BT * 3 * C, act_, "activations");
    a.atty = ActBuffer(dev_, BT * C, act_, "activations");
    a.lse = Buffer<float>(dev_, BT * H_, "activations");
    a.res_mid = ActBuffer(dev_, BT * C, act_, "activations");
    a.ln2 = ActBuffer(dev_, BT * C, act_, "activations");
    a.ln2_mean = Buffer<float>(dev_, BT, "activations");
    a.ln2_rstd = Buffer<float>(dev_, BT, "activations");
    a.fch = ActBuffer(dev_, BT * 4 * C, act_, "activations");
    a.fch_gelu = ActBuffer(dev_, BT * 4 * C, act_, "activations");
  }
  res_out_ = ActBuffer(dev_, BT * C, act_, "activations");
  lnf_ = ActBuffer(dev_, BT * C, act_, "activations");
  lnf_mean_ = Buffer<float>(dev_, BT, "activations");
  lnf_rstd_ = Buffer<float>(dev_, BT, "activations");
  logits_ = ActBuffer(dev_, BT * V_, act_, "logits");
  losses_ = Buffer<float>(dev_, BT, "activations");
  ce_lse_ = Buffer<float>(dev_, BT, "activations");
  dres_ = ActBuffer(dev_, BT * C, act_, "activation gradients");
  dln_ = ActBuffer(dev_, BT * C, act_, "activation gradients");
  dqkv_ = ActBuffer(dev_, BT * 3 * C, act_, "activation gradients");
  datty_ = ActBuffer(dev_, BT * C, act_, "activation gradients");
  dfch_ = ActBuffer(dev_, BT * 4 * C, act_, "activation gradients");
  dfch_gelu_ = ActBuffer(dev_, BT * 4 * C, act_, "activation gradients");

  triad_attention_shape_v1 shape{maxB_, H_, T_, C_ / H_, 1, dl_dtype(act_), dev_.dl_device()};
  attn_.check_supported(shape);
  attn_.workspace_size(shape, &ws_fwd_, &ws_bwd_);
  const size_t ws = std::max(ws_fwd_, ws_bwd_);
  if (ws) attn_workspace_ = Buffer<uint8_t>(dev_, ws, "attention workspace");
  targets_ = Buffer<int32_t>(dev_, BT, "token ids");
  inputs_ = Buffer<int32_t>(dev_, BT, "token ids");
}

namespace {

// The seed of one tensor's random stream: (run seed, tensor name) mixed by FNV-1a and
// splitmix64. Every tensor draws from its own stream, so its values do not depend on which
// other tensors a rank holds or in which order they are laid out: a tensor- or
// pipeline-parallel rank can draw the same global tensor and keep its slice.
uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  uint64_t z = seed ^ h;
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void GPT::init_weights(uint64_t seed) {
  std::vector<float> host(layout_.total);
  const float std = static_cast<float>(cfg_.init_std);
  const float proj_std = std / std::sqrt(2.0f * L_);
  for (const auto& p : layout_.params) {
    float* w = host.data() + p.offset;
    const bool is_bias = p.name.ends_with(".bias");
    const bool is_ln = p.name.find("ln_") != std::string::npos;
    if (is_ln && !is_bias) {
      for (size_t i = 0; i < p.numel; ++i) w[i] = 1.0f;
    } else if (is_bias) {
      std::memset(w, 0, p.numel * sizeof(float));
    } else {
      const bool residual_proj = p.name.ends_with("c_proj.weight");
      std::mt19937_64 rng(tensor_seed(seed, p.name));
      std::normal_distribution<float> nd(0.0f, residual_proj ? proj_std : std);
      for (size_t i = 0; i < p.numel; ++i) w[i] = nd(rng);
    }
  }
  params_from_host(host);
}

std::vector<float> GPT::params_to_host() const {
  std::vector<float> host(layout_.total);
  dev_.to_host(host.data(), params_.data(), host.size() * sizeof(float));
  return host;
}

void GPT::params_from_host(const std::vector<float>& host) {
  dev_.to_device(params_.data(), host.data(), layout_.total * sizeof(float));
  sync_compute_weights();
}

void GPT::sync_compute_weights() {
  if (act_ != DType::f32) dev_.convert(compute_.data(), act_, params_.data(), layout_.total);
}

void GPT::zero_grad() {
  dev_.fill_zero(grads_.data(), layout_.total * sizeof(float));
}

// The attention plugin's views of one layer: q, k, v inside qkv (B,T,3C), the output inside
// atty (B,T,C), lse (B,H,T). Forward and backward see the same ones.
struct GPT::AttnViews {
  HeadView q, k, v, out;
  LseView lse;
  AttnViews(LayerActs& a, int B, int T, int H, int C, DLDevice d, DType act)
      : q(a.qkv.data(), B, T, H, C / H, 3 * C, 0, d, act),
        k(a.qkv.data(), B, T, H, C / H, 3 * C, C, d, act),
        v(a.qkv.data(), B, T, H, C / H, 3 * C, 2 * C, d, act),
        out(a.atty.data(), B, T, H, C / H, C, 0, d, act),
        lse(a.lse.data(), B, H, T, d) {}
};

void GPT::attention_forward(LayerActs& a, int B) {
  const int D = C_ / H_;
  AttnViews w(a, B, T_, H_, C_, dev_.dl_device(), act_);
  triad_attention_fwd_args_v1 args{&w.q.t,
                                   &w.k.t,
                                   &w.v.t,
                                   &w.out.t,
                                   &w.lse.t,
                                   1,
                                   1.0f / std::sqrt(static_cast<float>(D)),
                                   attn_workspace_.data(),
                                   attn_workspace_.size()};
  attn_.forward(args);
}

void GPT::attention_backward(LayerActs& a, void* dqkv, const void* datty, int B) {
  const int D = C_ / H_;
  const DLDevice d = dev_.dl_device();
  AttnViews w(a, B, T_, H_, C_, d, act_);
  HeadView dout(datty, B, T_, H_, D, C_, 0, d, act_);
  HeadView dq(dqkv, B, T_, H_, D, 3 * C_, 0, d, act_);
  HeadView dk(dqkv, B, T_, H_, D, 3 * C_, C_, d, act_);
  HeadView dv(dqkv, B, T_, H_, D, 3 * C_, 2 * C_, d, act_);
  triad_attention_bwd_args_v1 args{&w.q.t,
                                   &w.k.t,
                                   &w.v.t,
                                   &w.out.t,
                                   &w.lse.t,
                                   &dout.t,
                                   &dq.t,
                                   &dk.t,
                                   &dv.t,
                                   1,
                                   1.0f / std::sqrt(static_cast<float>(D)),
                                   attn_workspace_.data(),
                                   attn_workspace_.size()};
  attn_.backward(args);
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B) {
  const int T = T_, C = C_, N = B * T;
  const int D = C / H_;
  lastB_ = B;
  dev_.to_device(inputs_.data(), inputs, sizeof(int32_t) * N);
  dev_.to_device(targets_.data(), targets, sizeof(int32_t) * N);
  const void* wpe = rope_ ? nullptr : w(wpe_);
  // x (B,T,C) = wte[tokens] + wpe[positions]
  dev_.embedding_forward(acts_[0].res_in.data(), inputs_.data(), w(wte_), wpe, B, T, C, act_);
  for (int l = 0; l < L_; ++l) {
    LayerActs& a = acts_[l];
    const BlockOffsets& o = blocks_[l];
    void* out = (l + 1 < L_) ? acts_[l + 1].res_in.data() : res_out_.data();
    dev_.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), a.res_in.data(),
                           w(o.ln1_w), w(o.ln1_b), N, C, static_cast<float>(cfg_.layernorm_epsilon),
                           act_);
    // qkv (N,3C) = ln1 @ Wqkv^T + b
    dev_.matmul_forward(a.qkv.data(), a.ln1.data(), w(o.attn_w), w(o.attn_b), N, C, 3 * C, act_);
    if (rope_) {
      // rotate q and k in place: (B,T,H,D) views with row stride 3C
      dev_.rope_forward(a.qkv.data(), B, T, H_, D, int64_t(T) * 3 * C, 3 * C, D, cfg_.rope_base,
                        act_);
      dev_.rope_forward(a.qkv.at(C), B, T, H_, D, int64_t(T) * 3 * C, 3 * C, D, cfg_.rope_base,
                        act_);
    }
    attention_forward(a, B);
    // res_mid = res_in + atty @ Wproj^T + b   (use `out` as the projection scratch)
    dev_.matmul_forward(out, a.atty.data(), w(o.attn_proj_w), w(o.attn_proj_b), N, C, C, act_);
    dev_.residual_forward(a.res_mid.data(), a.res_in.data(), out, size_t(N) * C, act_);
    dev_.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res_mid.data(),
                           w(o.ln2_w), w(o.ln2_b), N, C, static_cast<float>(cfg_.layernorm_epsilon),
                           act_);
    dev_.matmul_forward(a.fch.data(), a.ln2.data(), w(o.fc_w), w(o.fc_b), N, C, 4 * C, act_);
    dev_.gelu_forward(a.fch_gelu.data(), a.fch.data(), size_t(N) * 4 * C, act_);
    // out = res_mid + fch_gelu @ Wfcproj^T + b
    dev_.matmul_forward(out, a.fch_gelu.data(), w(o.fc_proj_w), w(o.fc_proj_b), N, 4 * C, C, act_);
    dev_.residual_forward(out, a.res_mid.data(), out, size_t(N) * C, act_);
  }
  dev_.layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), res_out_.data(),
                         w(lnf_w_), w(lnf_b_), N, C, static_cast<float>(cfg_.layernorm_epsilon),
                         act_);
  // logits (N,V) = lnf @ wte^T  (tied head, no bias)
  dev_.matmul_forward(logits_.data(), lnf_.data(), w(wte_), nullptr, N, C, V_, act_);
  dev_.crossentropy_forward(losses_.data(), ce_lse_.data(), logits_.data(), targets_.data(), N, V_,
                            act_);
  return static_cast<float>(dev_.sum(losses_.data(), N) / N);
}

void GPT::backward(float loss_scale, const GradsReady& grads_ready) {
  const int B = lastB_, T = T_, C = C_, N = B * T;
  const int D = C / H_;
  const size_t NC = size_t(N) * C, ab = dtype_bytes(act_);
  // dlogits (in place over logits) = scale/N * (softmax - onehot)
  dev_.crossentropy_backward(logits_.data(), logits_.data(), ce_lse_.data(), targets_.data(),
                             loss_scale / N, N, V_, act_);
  dev_.fill_zero(dln_.data(), NC * ab);
  dev_.matmul_backward(dln_.data(), g(wte_), nullptr, logits_.data(), lnf_.data(), w(wte_), N, C,
                       V_, act_);
  dev_.fill_zero(dres_.data(), NC * ab);
  dev_.layernorm_backward(dres_.data(), g(lnf_w_), g(lnf_b_), dln_.data(), res_out_.data(),
                          w(lnf_w_), lnf_mean_.data(), lnf_rstd_.data(), N, C, act_);
  if (grads_ready) grads_ready(lnf_w_, layout_.total - lnf_w_);
  // dres_ now holds d loss / d (residual stream) at the output of the last layer; each layer
  // turns it into the gradient at its input (the residual adds pass it through unchanged).
  for (int l = L_ - 1; l >= 0; --l) {
    LayerActs& a = acts_[l];
    const BlockOffsets& o = blocks_[l];
    // MLP: out = res_mid + c_proj(gelu(c_fc(ln2(res_mid))))
    dev_.fill_zero(dfch_gelu_.data(), 4 * NC * ab);
    dev_.matmul_backward(dfch_gelu_.data(), g(o.fc_proj_w), g(o.fc_proj_b), dres_.data(),
                         a.fch_gelu.data(), w(o.fc_proj_w), N, 4 * C, C, act_);
    dev_.fill_zero(dfch_.data(), 4 * NC * ab);
    dev_.gelu_backward(dfch_.data(), a.fch.data(), dfch_gelu_.data(), 4 * NC, act_);
    dev_.fill_zero(dln_.data(), NC * ab);
    dev_.matmul_backward(dln_.data(), g(o.fc_w), g(o.fc_b), dfch_.data(), a.ln2.data(), w(o.fc_w),
                         N, C, 4 * C, act_);
    dev_.layernorm_backward(dres_.data(), g(o.ln2_w), g(o.ln2_b), dln_.data(), a.res_mid.data(),
                            w(o.ln2_w), a.ln2_mean.data(), a.ln2_rstd.data(), N, C, act_);
    // Attention: res_mid = res_in + c_proj(attn(c_attn(ln1(res_in))))
    dev_.fill_zero(datty_.data(), NC * ab);
    dev_.matmul_backward(datty_.data(), g(o.attn_proj_w), g(o.attn_proj_b), dres_.data(),
                         a.atty.data(), w(o.attn_proj_w), N, C, C, act_);
    attention_backward(a, dqkv_.data(), datty_.data(), B);
    if (rope_) {
      dev_.rope_backward(dqkv_.data(), B, T, H_, D, int64_t(T) * 3 * C, 3 * C, D, cfg_.rope_base,
                         act_);
      dev_.rope_backward(dqkv_.at(C), B, T, H_, D, int64_t(T) * 3 * C, 3 * C, D, cfg_.rope_base,
                         act_);
    }
    dev_.fill_zero(dln_.data(), NC * ab);
    dev_.matmul_backward(dln_.data(), g(o.attn_w), g(o.attn_b), dqkv_.data(), a.ln1.data(),
                         w(o.attn_w), N, C, 3 * C, act_);
    dev_.layernorm_backward(dres_.data(), g(o.ln1_w), g(o.ln1_b), dln_.data(), a.res_in.data(),
                            w(o.ln1_w), a.ln1_mean.data(), a.ln1_rstd.data(), N, C, act_);
    if (grads_ready) grads_ready(o.begin, o.end - o.begin);
  }
  float* dwpe = rope_ ? nullptr : g(wpe_);
  dev_.embedding_backward(g(wte_), dwpe, dres_.data(), inputs_.data(), B, T, C, V_, act_);
  // wte (and wpe) are final only now: the tied LM head wrote into wte first.
  if (grads_ready) grads_ready(0, L_ > 0 ? blocks_[0].begin : lnf_w_);
}

}  // namespace triad
