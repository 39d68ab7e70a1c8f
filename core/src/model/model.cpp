#include "triad/core/model/model.hpp"

#include "triad/core/dist/transport.hpp"
#include "triad/core/train/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

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

namespace {

ParamSpec whole_model_spec(const ModelConfig& cfg) {
  Placement p;
  p.make_vocab_size_divisible_by = cfg.make_vocab_size_divisible_by;
  return build_param_spec(cfg, p);
}

}  // namespace

GPT::GPT(const ModelConfig& cfg, Device& dev, AttentionBackend& attention, int max_batch, DType act)
    : cfg_(cfg),
      own_state_(std::make_unique<ModelState>(whole_model_spec(cfg), dev, act, false)),
      state_(*own_state_),
      dev_(dev),
      attn_(attention) {
  setup(TensorParallel{}, max_batch, 1);
}

GPT::GPT(const ModelConfig& cfg, ModelState& state, const TensorParallel& tp,
         AttentionBackend& attention, int max_batch, int activation_sets, StageChunk chunk,
         Recompute recompute, const ContextParallel& cp, ActivationPool* pool)
    : cfg_(cfg),
      cp_(cp),
      state_(state),
      dev_(state.device()),
      attn_(attention),
      chunk_(chunk),
      recompute_(recompute),
      pool_(pool) {
  setup(tp, max_batch, activation_sets);
}

GPT::~GPT() = default;

void GPT::setup(const TensorParallel& tp, int max_batch, int activation_sets) {
  const ModelConfig& cfg = cfg_;
  full_ = gpt_layout(cfg);
  tp_ = tp;
  act_ = state_.act();
  maxB_ = max_batch;
  if (cp_.size > 1 && !cp_.comm)
    throw std::logic_error("GPT: context-parallel size > 1 without a communicator");
  T_ = cfg.seq_length / cp_.size;
  C_ = cfg.hidden_size;
  H_ = cfg.num_attention_heads;
  L_ = cfg.num_layers;
  rope_ = cfg.position_embedding == "rope";
  const int t = tp_.size;
  sp_ = t > 1 && tp_.sequence_parallel;
  if (t > 1 && !tp_.comm)
    throw std::logic_error("GPT: tensor-parallel size > 1 without a communicator");
  if (activation_sets < 1) throw std::logic_error("GPT: at least one activation set");
  const ParamSpec& spec = state_.spec();
  shards_ = tensor_shards(spec.placement);
  Hl_ = H_ / shards_.attention;
  Cl_ = C_ / shards_.attention;
  Fl_ = 4 * C_ / shards_.mlp;
  const int64_t Vl = spec.padded_vocab_size / shards_.vocab;
  vocab_.start = shards_.vocab > 1 ? int64_t(tp_.rank) * Vl : 0;
  vocab_.rows = static_cast<int>(Vl);
  vocab_.valid = static_cast<int>(std::clamp<int64_t>(spec.vocab_size - vocab_.start, 0, Vl));
  gather_in_ = sp_ || at(TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT).forward == TRIAD_TENSOR_ALL_GATHER;
  // A pipeline stage holds the embedding (first stage) and/or the head (last stage); the last
  // stage's head has its own copy of the tied wte.
  const int held = static_cast<int>(spec.layers.size());
  if (chunk_.blocks < 0) chunk_.blocks = held - chunk_.first_block;
  if (chunk_.first_block < 0 || chunk_.first_block + chunk_.blocks > held)
    throw std::logic_error("GPT: chunk outside the blocks this rank holds");
  has_embedding_ = chunk_.embedding < 0 ? spec.placement.has_embedding : chunk_.embedding != 0;
  has_head_ = chunk_.head < 0 ? spec.placement.has_head : chunk_.head != 0;
  if (has_embedding_ || has_head_) wte_ = spec.find("wte.weight").offset;
  wpe_ = rope_ || !has_embedding_ ? 0 : spec.find("wpe.weight").offset;
  if (has_head_) {
    lnf_w_ = spec.find("ln_f.weight").offset;
    lnf_b_ = spec.find("ln_f.bias").offset;
  }
  pipelined_ = !(has_embedding_ && has_head_);
  ActCarver own(dev_);
  if (recompute_ == Recompute::full) {
    alloc_block_acts(work_, own);
    recompute_out_ =
        ActBuffer(dev_, (sp_ ? size_t(maxB_) * T_ / tp_.size : size_t(maxB_) * T_) * size_t(C_),
                  act_, "activations");
  } else if (recompute_ == Recompute::selective) {
    work_.attn_out = ActBuffer(dev_, size_t(maxB_) * T_ * Cl_, act_, "activations");
    work_.lse = Buffer<float>(dev_, size_t(maxB_) * T_ * Hl_, "activations");
  }
  reserve_act_sets(activation_sets);
  const size_t BT = size_t(maxB_) * T_, C = C_, BTs = sp_ ? BT / t : BT;
  if (t > 1) {
    row_partial_ = ActBuffer(dev_, BT * C, act_, "activations");
    drow_full_ = ActBuffer(dev_, BT * C, act_, "activation gradients");
    dln_full_ = ActBuffer(dev_, BT * C, act_, "activation gradients");
    grad_pack_ = Buffer<float>(dev_, 6 * C, "gradient scratch");
  }
  if (gather_in_) col_full_ = ActBuffer(dev_, BT * C, act_, "activations");
  dres_ = ActBuffer(dev_, BTs * C, act_, "activation gradients");
  dln_ = ActBuffer(dev_, BTs * C, act_, "activation gradients");
  dcol_ = t > 1 ? dln_full_.data() : dln_.data();
  dqkv_ = ActBuffer(dev_, BT * 3 * Cl_, act_, "activation gradients");
  dattn_out_ = ActBuffer(dev_, BT * Cl_, act_, "activation gradients");
  dmlp_pre_ = ActBuffer(dev_, BT * Fl_, act_, "activation gradients");
  dmlp_act_ = ActBuffer(dev_, BT * Fl_, act_, "activation gradients");

  setup_context();
  if (ctx_) return;  // ContextAttention sizes the plugin's workspace for its own calls
  triad_attention_shape_v1 shape{maxB_, Hl_, T_, C_ / H_, 1, dl_dtype(act_), dev_.dl_device()};
  attn_.check_supported(shape);
  attn_.workspace_size(shape, &ws_fwd_, &ws_bwd_);
  const size_t ws = std::max(ws_fwd_, ws_bwd_);
  if (ws) attn_workspace_ = Buffer<uint8_t>(dev_, ws, "attention workspace");
}

void GPT::setup_context() {
  runs_.clear();
  if (cp_.size == 1) {
    runs_.push_back({0, 0, T_});
    return;
  }
  const std::vector<int64_t> pos =
      context_token_positions(cp_.method, cfg_.seq_length, cp_.size, cp_.rank);
  for (size_t i = 0; i < pos.size(); ++i) {
    if (!runs_.empty() && runs_.back().pos + runs_.back().len == pos[i])
      ++runs_.back().len;
    else
      runs_.push_back({static_cast<int>(i), static_cast<int>(pos[i]), 1});
  }
  ctx_ = std::make_unique<ContextAttention>(cp_.method, attn_, *cp_.comm, dev_, act_,
                                            ContextShape{maxB_, Hl_, cfg_.seq_length, C_ / H_}, 1,
                                            tp_.timeout);
  ctx_->set_progress([this] { progress(); });
  if (has_embedding_ && !rope_) {
    wpe_own_ = ActBuffer(dev_, size_t(T_) * C_, act_, "activations");
    dwpe_own_ = Buffer<float>(dev_, size_t(T_) * C_, "activation gradients");
  }
}

GPT::TrafficCounters GPT::traffic_counters() const {
  TrafficCounters c{volume_, {}, {}};
  if (ctx_) c.context_fwd = ctx_->forward_traffic(), c.context_bwd = ctx_->backward_traffic();
  return c;
}

void GPT::restore_traffic_counters(const TrafficCounters& c) {
  volume_ = c.tensor;
  if (ctx_) ctx_->set_traffic(c.context_fwd, c.context_bwd);
}

void GPT::rotate_qk(const ActBuffer& qkv, int B, bool backward) {
  const int Cl = Cl_, D = C_ / H_;
  const int64_t row = 3 * int64_t(Cl);
  for (const TokenRun& r : runs_)
    for (int part = 0; part < 2; ++part) {
      void* x = qkv.at(size_t(r.local) * row + size_t(part) * Cl);
      if (backward)
        dev_.rope_backward(x, B, r.len, Hl_, D, T_ * row, row, D, cfg_.rope_base, r.pos, act_);
      else
        dev_.rope_forward(x, B, r.len, Hl_, D, T_ * row, row, D, cfg_.rope_base, r.pos, act_);
    }
}

const int32_t* GPT::own_tokens(const int32_t* whole, int B, std::vector<int32_t>& out) const {
  if (cp_.size == 1) return whole;
  const size_t S = size_t(cfg_.seq_length);
  out.resize(size_t(B) * T_);
  for (int b = 0; b < B; ++b)
    for (const TokenRun& r : runs_)
      std::copy_n(whole + b * S + r.pos, r.len, out.data() + size_t(b) * T_ + r.local);
  return out.data();
}

// The sets live in the stage's pool (or one of this GPT's own): this GPT asks for its set's
// bytes now and cuts its views of the regions at the first use of a set, once every chunk of
// the stage has asked and the pool has allocated.
void GPT::reserve_act_sets(int activation_sets) {
  if (!pool_) {
    own_pool_ = std::make_unique<ActivationPool>(dev_, activation_sets);
    pool_ = own_pool_.get();
  } else if (pool_->sets() != activation_sets) {
    throw std::logic_error("GPT: " + std::to_string(activation_sets) +
                           " activation sets asked for over a pool of " +
                           std::to_string(pool_->sets()));
  }
  ActCarver count(static_cast<unsigned char*>(nullptr));
  make_act_set(count);
  pool_->reserve(count.used());
  if (!own_pool_) return;
  // Alone, without the stage's stream: as many boundary slots as `activation_sets` passes
  // could hold at once, three each.
  if (pipelined_) own_pool_->reserve_boundaries(3 * activation_sets, stage_bytes(maxB_));
  own_pool_->allocate();
}

GPT::ActSet& GPT::act_set(int set) {
  if (sets_.empty())
    for (int k = 0; k < pool_->sets(); ++k) {
      ActCarver cut(pool_->region(k));
      sets_.push_back(make_act_set(cut));
    }
  return sets_.at(static_cast<size_t>(set));
}

void GPT::alloc_block_acts(LayerActs& a, ActCarver& mem, bool core) {
  const size_t BT = size_t(maxB_) * T_, C = C_;
  const size_t BTs = sp_ ? BT / tp_.size : BT;
  a.ln1 = mem.take_act(BTs * C, act_, "activations");
  a.ln1_mean = mem.take<float>(BTs, "activations");
  a.ln1_rstd = mem.take<float>(BTs, "activations");
  a.qkv = mem.take_act(BT * 3 * Cl_, act_, "activations");
  if (core) {
    a.attn_out = mem.take_act(BT * Cl_, act_, "activations");
    a.lse = mem.take<float>(BT * Hl_, "activations");
  }
  a.res_mid = mem.take_act(BTs * C, act_, "activations");
  a.ln2 = mem.take_act(BTs * C, act_, "activations");
  a.ln2_mean = mem.take<float>(BTs, "activations");
  a.ln2_rstd = mem.take<float>(BTs, "activations");
  a.mlp_pre = mem.take_act(BT * Fl_, act_, "activations");
  a.mlp_act = mem.take_act(BT * Fl_, act_, "activations");
}

GPT::ActSet GPT::make_act_set(ActCarver& mem) {
  const size_t BT = size_t(maxB_) * T_, C = C_;
  const size_t BTs = sp_ ? BT / tp_.size : BT;  // tokens of the token-split regions
  ActSet s;
  s.layers.resize(static_cast<size_t>(chunk_.blocks));
  for (auto& a : s.layers) {
    a.res_in = mem.take_act(BTs * C, act_, "activations");
    // With full recomputation a set keeps each block's input only; the rest lives in work_,
    // rewritten by each block's forward and recomputed before its backward. Selective
    // recomputation keeps all but the attention core's output (work_ again).
    if (recompute_ != Recompute::full) alloc_block_acts(a, mem, recompute_ == Recompute::none);
  }
  // A pipelined chunk's output and boundary gradients: the pool's boundary slots
  // (bind_boundaries).
  if (!pipelined_) s.res_out = mem.take_act(BTs * C, act_, "activations");
  if (s.layers.empty()) s.res_in = mem.take_act(BTs * C, act_, "activations");
  if (!has_head_) {
    s.targets = mem.take<int32_t>(BT, "token ids");
    s.inputs = mem.take<int32_t>(BT, "token ids");
    return s;
  }
  s.lnf = mem.take_act(BTs * C, act_, "activations");
  if (gather_in_) s.lnf_full = mem.take_act(BT * C, act_, "activations");
  s.lnf_mean = mem.take<float>(BTs, "activations");
  s.lnf_rstd = mem.take<float>(BTs, "activations");
  s.logits = mem.take_act(BT * size_t(vocab_.rows), act_, "logits");
  s.losses = mem.take<float>(BT, "activations");
  s.ce_lse = mem.take<float>(BT, "activations");
  if (vocab_parallel_ce()) {
    s.ce_max = mem.take<float>(BT, "activations");
    s.ce_sums = mem.take<float>(2 * BT, "activations");
  }
  s.targets = mem.take<int32_t>(BT, "token ids");
  s.inputs = mem.take<int32_t>(BT, "token ids");
  return s;
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
  // The whole model is drawn in the full (unpadded) layout, tensor by tensor from its own
  // stream, and this rank keeps its slices.
  std::vector<float> full(full_.total);
  const float std = static_cast<float>(cfg_.init_std);
  const float proj_std = std / std::sqrt(2.0f * L_);
  for (const TensorSpec& t : spec().tensors) {
    const ParamInfo& p = full_.find(t.name);
    float* w = full.data() + p.offset;
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
  params_from_full(full.data());
}

void GPT::params_from_full(const float* full) {
  std::vector<float> local(num_params());
  local_from_full(spec(), full_, full, local.data());
  params_from_host(local);
}

namespace {

std::vector<float> arena_to_full(const ParamSpec& spec, const GptLayout& full_layout,
                                 const std::vector<float>& local) {
  if (spec.placement.tp_size != 1)
    throw std::logic_error("the whole model is on no single rank under tensor parallelism");
  std::vector<float> full(full_layout.total);
  full_from_local(spec, 0, full_layout, local.data(), full.data());
  return full;
}

}  // namespace

std::vector<float> GPT::params_to_full() const {
  return arena_to_full(spec(), full_, state_.params_to_host());
}

std::vector<float> GPT::grads_to_full() const {
  return arena_to_full(spec(), full_, state_.grads_to_host());
}

// The attention plugin's views of one layer: q, k, v inside qkv (B,T,3Cl), the output inside
// attn_out (B,T,Cl), lse (B,Hl,T), over this rank's Hl heads. Forward and backward see the same
// ones.
struct GPT::AttnViews {
  HeadView q, k, v, out;
  LseView lse;
  // a: the block's qkv; core: where its attention output and lse are (attention_core(a)).
  AttnViews(LayerActs& a, LayerActs& core, int B, int T, int H, int C, DLDevice d, DType act)
      : q(a.qkv.data(), B, T, H, C / H, 3 * C, 0, d, act),
        k(a.qkv.data(), B, T, H, C / H, 3 * C, C, d, act),
        v(a.qkv.data(), B, T, H, C / H, 3 * C, 2 * C, d, act),
        out(core.attn_out.data(), B, T, H, C / H, C, 0, d, act),
        lse(core.lse.data(), B, H, T, d) {}
};

void GPT::attention_forward(LayerActs& a, int B) {
  const int D = C_ / H_;
  AttnViews w(a, attention_core(a), B, T_, Hl_, Cl_, dev_.dl_device(), act_);
  triad_attention_fwd_args_v1 args{&w.q.t,
                                   &w.k.t,
                                   &w.v.t,
                                   &w.out.t,
                                   &w.lse.t,
                                   1,
                                   1.0f / std::sqrt(static_cast<float>(D)),
                                   attn_workspace_.data(),
                                   attn_workspace_.size()};
  if (ctx_)
    ctx_->forward(args);
  else
    attn_.forward(args);
}

void GPT::attention_backward(LayerActs& a, void* dqkv, const void* dattn_out, int B) {
  const int D = C_ / H_, Cl = Cl_, Hl = Hl_;
  const DLDevice d = dev_.dl_device();
  AttnViews w(a, attention_core(a), B, T_, Hl, Cl, d, act_);
  HeadView dout(dattn_out, B, T_, Hl, D, Cl, 0, d, act_);
  HeadView dq(dqkv, B, T_, Hl, D, 3 * Cl, 0, d, act_);
  HeadView dk(dqkv, B, T_, Hl, D, 3 * Cl, Cl, d, act_);
  HeadView dv(dqkv, B, T_, Hl, D, 3 * Cl, 2 * Cl, d, act_);
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
  if (ctx_)
    ctx_->backward(args);
  else
    attn_.backward(args);
}

GPT::PendingExchange GPT::exchange_start(int c, void* in, void* out, int N, int width, DType t,
                                         double* counter) {
  if (c == TRIAD_TENSOR_IDENTITY) return {{}, in, tp_.timeout};
  const size_t total = size_t(N) * width;  // the whole, unsplit buffer
  const double bytes = double(total) * dtype_bytes(t), k = tp_.size;
  const DLDataType dt = dl_dtype(t);
  const DLDevice d = dev_.dl_device();
  Communicator& comm = *tp_.comm;
  switch (c) {
    case TRIAD_TENSOR_ALL_REDUCE: {  // into `out` when given, else in place
      void* dst = out ? out : in;
      *counter += 2 * (k - 1) / k * bytes;
      return {comm.all_reduce(in, dst, total, dt, TRIAD_REDUCE_SUM, d), dst, tp_.timeout};
    }
    case TRIAD_TENSOR_ALL_GATHER:  // in: this rank's block of total / tp
      *counter += (k - 1) / k * bytes;
      return {comm.all_gather(in, out, total, dt, d), out, tp_.timeout};
    case TRIAD_TENSOR_REDUCE_SCATTER:  // out: this rank's block of total / tp
      *counter += (k - 1) / k * bytes;
      return {comm.reduce_scatter(in, out, total, dt, TRIAD_REDUCE_SUM, d), out, tp_.timeout};
  }
  throw std::logic_error("unknown tensor-parallel collective " + std::to_string(c));
}

const void* GPT::exchange(int c, void* in, void* out, int N, int width, DType t, double* counter) {
  return exchange_start(c, in, out, N, width, t, counter).finish();
}

// A part every rank holds whole reads every token: gathered under sequence parallelism.
int GPT::whole_part_input() const {
  return sp_ ? TRIAD_TENSOR_ALL_GATHER : TRIAD_TENSOR_IDENTITY;
}

GPT::PendingExchange GPT::column_input_start(const ActBuffer& x, const ActBuffer& full, int N,
                                             bool split) {
  const int c = split ? at(TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT).forward : whole_part_input();
  return exchange_start(c, x.data(), full.data(), N, C_, act_, &volume_.activations);
}

const void* GPT::column_input(const ActBuffer& x, const ActBuffer& full, int N, bool split) {
  return column_input_start(x, full, N, split).finish();
}

void GPT::column_forward(const ActBuffer& x, const ActBuffer& full, int N, bool split,
                         const RowGemm& gemm) {
  const int c = split ? at(TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT).forward : whole_part_input();
  if (!tp_.overlap_ring || c != TRIAD_TENSOR_ALL_GATHER) {
    gemm(column_input(x, full, N, split), 0, N);
    return;
  }
  const size_t Ns = size_t(N / tp_.size);
  ring_gather(x.data(), full.data(), N,
              [&](int q, const void* rows) { gemm(rows, size_t(q) * Ns, int(Ns)); });
}

const void* GPT::row_output_grad_ring(const void* dy, int N, const RowGemm& dx_rows) {
  const size_t Ns = size_t(N / tp_.size);
  void* full = drow_full_.data();  // every token's, in order, for the weight gradient
  dev_.copy(advance(full, size_t(tp_.rank) * Ns * size_t(C_), act_), dy,
            Ns * size_t(C_) * dtype_bytes(act_));
  ring_gather(dy, full, N,
              [&](int q, const void* rows) { dx_rows(rows, size_t(q) * Ns, int(Ns)); });
  return full;
}

std::array<TransportRequest, 2> GPT::ring_step(void* into, const void* from, size_t elems) {
  const int t = tp_.size, r = tp_.rank;
  const DLDataType dt = dl_dtype(act_);
  const DLDevice d = dev_.dl_device();
  Communicator& comm = *tp_.comm;
  std::array<TransportRequest, 2> step{comm.recv(into, elems, dt, (r + t - 1) % t, 0, d),
                                       comm.send(from, elems, dt, (r + 1) % t, 0, d)};
  volume_.activations += double(elems) * dtype_bytes(act_);
  progress();  // a transport that holds point-to-point work until asked (nccl) starts it
  return step;
}

void GPT::ring_gather(const void* own, void* full, int N, const BlockUse& use) {
  const int t = tp_.size, r = tp_.rank;
  const size_t block = size_t(N / t) * size_t(C_);
  const auto block_of = [&](int q) { return advance(full, size_t(q) * block, act_); };
  for (int i = 0; i < t; ++i) {
    const int q = (r - i + t) % t;  // the block in hand: rank r - i's
    const void* in = i == 0 ? own : block_of(q);
    std::array<TransportRequest, 2> step;  // the previous rank's block in hand comes in
    if (i + 1 < t) step = ring_step(block_of((q + t - 1) % t), in, block);
    use(q, in);
    for (TransportRequest& req : step)
      if (req) req.wait(tp_.timeout);
  }
}

void GPT::ring_reduce_scatter(void* y, const void* x, const void* W, int N, int K) {
  // Three (Ns,C) blocks of row_partial_ in turn (two at t = 2): the block computed at step i,
  // C_i, in slot 2i mod 3 and the sum received for the next step, R_i, in slot 2i + 1 mod 3; C_i
  // is computed while C_{i-1} and R_{i-1} are in flight.
  const int t = tp_.size, r = tp_.rank, Ns = N / t;
  const size_t block = size_t(Ns) * size_t(C_);
  const auto slot = [&](int k) {
    return advance(row_partial_.data(), size_t(k % 3) * block, act_);
  };
  std::array<TransportRequest, 2> step;
  void* received = nullptr;
  for (int i = 0; i < t; ++i) {
    const int c = ((r - i - 1) % t + t) % t;  // rank c's tokens; the last step this rank's own
    void* out = i + 1 < t ? slot(2 * i) : y;
    dev_.matmul_forward(out, advance(x, size_t(c) * size_t(Ns) * size_t(K), act_), W, nullptr, Ns,
                        K, C_, act_);
    for (TransportRequest& req : step)
      if (req) req.wait(tp_.timeout);
    if (received) dev_.residual_forward(out, out, received, block, act_);
    if (i + 1 < t) {  // the sum so far of rank c's tokens goes on to the next rank
      received = slot(2 * i + 1);
      step = ring_step(received, out, block);
    }
  }
}

void GPT::keep_own_tokens(const void* full, void* out, int N) {
  const size_t rows = size_t(N) / size_t(tp_.size), elems = rows * size_t(C_);
  dev_.copy(out, advance(full, size_t(tp_.rank) * elems, act_), elems * dtype_bytes(act_));
}

void GPT::row_parallel_forward(void* y, const void* x, const void* W, const void* bias, int N,
                               int K, bool split) {
  const triad_tensor_collectives_v1& c = at(TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT);
  if (!split && sp_) {  // every rank computes all tokens and keeps its own
    dev_.matmul_forward(row_partial_.data(), x, W, bias, N, K, C_, act_);
    keep_own_tokens(row_partial_.data(), y, N);
    return;
  }
  if (!split || c.forward == TRIAD_TENSOR_IDENTITY) {  // nothing to reduce: the bias in the GEMM
    dev_.matmul_forward(y, x, W, bias, N, K, C_, act_);
    return;
  }
  // Each rank's product over its slice of the inputs is a partial sum: reduce, then add the
  // (replicated) bias once.
  const int Ns = sp_ ? N / tp_.size : N;
  if (sp_ && tp_.overlap_ring && c.forward == TRIAD_TENSOR_REDUCE_SCATTER) {
    ring_reduce_scatter(y, x, W, N, K);
    dev_.bias_forward(y, bias, Ns, C_, act_);
    return;
  }
  dev_.matmul_forward(row_partial_.data(), x, W, nullptr, N, K, C_, act_);
  exchange(c.forward, row_partial_.data(), y, N, C_, act_, &volume_.activations);
  dev_.bias_forward(y, bias, Ns, C_, act_);
}

namespace {
// A layernorm's output as the following GEMM read it: gathered over the tensor group when the
// layer keeps a gathered copy, else this rank's own.
const void* gemm_input(const ActBuffer& own, const ActBuffer& gathered) {
  return gathered.data() ? gathered.data() : own.data();
}

// Whether a row-parallel matmul's output is whole on every rank (its plan reduces nothing): every
// token's gradient then gives each rank the whole weight and bias gradients.
bool row_output_whole(bool split, const triad_tensor_collectives_v1& c) {
  return !split || c.forward == TRIAD_TENSOR_IDENTITY;
}
}  // namespace

int GPT::row_output_grad_op(bool split) const {
  const triad_tensor_collectives_v1& c = at(TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT);
  return row_output_whole(split, c) ? (split ? TRIAD_TENSOR_IDENTITY : whole_part_input())
                                    : c.backward;
}

const void* GPT::row_output_grad(const void* dy, int N, bool split) {
  return exchange(row_output_grad_op(split), const_cast<void*>(dy), drow_full_.data(), N, C_, act_,
                  &volume_.activations);
}

void GPT::row_parallel_backward(void* dx, const void* dy, const void* x, const void* W, float* dW,
                                float* dbias, int N, int K, bool split, const void* gelu_pre) {
  const bool whole = row_output_whole(split, at(TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT));
  // Split: the (replicated) bias was added once, after the reduction, on this rank's tokens.
  if (!whole && dbias) dev_.bias_backward(dbias, dy, sp_ ? N / tp_.size : N, C_, act_);
  float* db = whole ? dbias : nullptr;
  if (sp_ && tp_.overlap_ring && row_output_grad_op(split) == TRIAD_TENSOR_ALL_GATHER) {
    // The input gradient row by row as the gather brings them; the weight gradient over every
    // token at the end, in token order (the same GEMM as below, so the same bits).
    const size_t Kw = size_t(K);
    const RowGemm dx_rows = [&](const void* d, size_t row0, int rows) {
      void* to = advance(dx, row0 * Kw, act_);
      if (gelu_pre)
        dev_.matmul_backward_dgelu(to, advance(dmlp_act_.data(), row0 * Kw, act_),
                                   advance(gelu_pre, row0 * Kw, act_), nullptr, nullptr, d, nullptr,
                                   W, rows, K, C_, act_);
      else
        dev_.matmul_backward(to, nullptr, nullptr, d, nullptr, W, rows, K, C_, act_,
                             GradWrite::overwrite);
    };
    const void* dfull = row_output_grad_ring(dy, N, dx_rows);
    if (dW || db)
      dev_.matmul_backward(nullptr, dW, db, dfull, x, nullptr, N, K, C_, act_,
                           GradWrite::overwrite);
    return;
  }
  const void* dfull = row_output_grad(dy, N, split);
  if (gelu_pre)
    dev_.matmul_backward_dgelu(dx, dmlp_act_.data(), gelu_pre, dW, db, dfull, x, W, N, K, C_, act_);
  else
    dev_.matmul_backward(dx, dW, db, dfull, x, W, N, K, C_, act_, GradWrite::overwrite);
}

void GPT::row_parallel_weights(const void* dy, const void* x, float* dW, float* dbias, int N, int K,
                               bool split) {
  const bool whole = row_output_whole(split, at(TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT));
  if (!whole) dev_.bias_backward(dbias, dy, sp_ ? N / tp_.size : N, C_, act_);
  dev_.matmul_backward(nullptr, dW, whole ? dbias : nullptr, row_output_grad(dy, N, split), x,
                       nullptr, N, K, C_, act_, GradWrite::overwrite);
}

GPT::PendingExchange GPT::column_input_grad_start(int N, bool split) {
  const triad_tensor_collectives_v1& c = at(TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT);
  if (split)
    return exchange_start(c.backward, dcol_, dln_.data(), N, C_, act_, &volume_.activations);
  if (!sp_) return {{}, dcol_, tp_.timeout};  // whole and identical on every rank
  keep_own_tokens(dcol_, dln_.data(), N);
  return {{}, dln_.data(), tp_.timeout};
}

const void* GPT::column_input_grad(int N, bool split) {
  return column_input_grad_start(N, split).finish();
}

const void* GPT::column_backward(const void* dy, const ActBuffer& x, const ActBuffer& full,
                                 const void* x_kept, const void* W, float* dW, float* dbias, int N,
                                 int OC, bool split) {
  const bool weights = dW || dbias;
  if (!tp_.overlap_backward) {
    const void* in = !weights ? nullptr : x_kept ? x_kept : column_input(x, full, N, split);
    dev_.matmul_backward(dcol_, dW, dbias, dy, in, W, N, C_, OC, act_, GradWrite::overwrite);
    return column_input_grad(N, split);
  }
  // The input-gradient GEMM needs no input: its gather runs behind it. The two GEMMs are the
  // ones matmul_backward runs together, so the bits are the same either way.
  PendingExchange gather;
  if (weights && !x_kept) gather = column_input_start(x, full, N, split);
  dev_.matmul_backward(dcol_, nullptr, nullptr, dy, nullptr, W, N, C_, OC, act_,
                       GradWrite::overwrite);
  const void* in = weights ? (x_kept ? x_kept : gather.finish()) : nullptr;
  PendingExchange reduced = column_input_grad_start(N, split);
  if (weights)
    dev_.matmul_backward(nullptr, dW, dbias, dy, in, nullptr, N, C_, OC, act_,
                         GradWrite::overwrite);
  return reduced.finish();
}

void GPT::reduce_replicated(const std::vector<float*>& grads) {
  const triad_tensor_collectives_v1& c = at(TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS);
  if (c.backward == TRIAD_TENSOR_IDENTITY) return;
  if (c.backward != TRIAD_TENSOR_ALL_REDUCE)
    throw std::logic_error("replicated gradients are summed with an all-reduce");
  const size_t C = C_, bytes = C * sizeof(float);
  for (size_t i = 0; i < grads.size(); ++i) dev_.copy(grad_pack_.data() + i * C, grads[i], bytes);
  exchange(TRIAD_TENSOR_ALL_REDUCE, grad_pack_.data(), nullptr, 1, int(grads.size() * C),
           DType::f32, &volume_.replicated_grads);
  for (size_t i = 0; i < grads.size(); ++i) dev_.copy(grads[i], grad_pack_.data() + i * C, bytes);
}

void GPT::embedding_forward(ActSet& s) {
  const int B = s.B, T = T_, C = C_, N = B * T;
  // x (Ns,C) = wte[tokens] + wpe[positions]: each rank looks up its own vocabulary rows (zero
  // for the others) and rank 0 alone adds the positions, so the reduction sums to the whole.
  // A whole embedding: every rank looks up every token and keeps its own.
  const bool split = shards_.vocab > 1;
  const void* wpe = rope_ || (split && tp_.rank != 0) ? nullptr : state_.weight(wpe_);
  if (wpe && ctx_) {  // the rows of this rank's positions
    for (const TokenRun& r : runs_)
      dev_.copy(wpe_own_.at(size_t(r.local) * C), advance(wpe, size_t(r.pos) * C, act_),
                size_t(r.len) * C * dtype_bytes(act_));
    wpe = wpe_own_.data();
  }
  const void* wte = state_.weight(wte_);
  const auto& emb = at(TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT);
  void* x0 = stage_in(s);
  if (!split) {
    void* x = sp_ ? row_partial_.data() : x0;
    dev_.embedding_forward(x, s.inputs.data(), wte, wpe, B, T, C, vocab_, act_);
    if (sp_) keep_own_tokens(x, x0, N);
  } else if (emb.forward == TRIAD_TENSOR_IDENTITY || emb.forward == TRIAD_TENSOR_ALL_REDUCE) {
    dev_.embedding_forward(x0, s.inputs.data(), wte, wpe, B, T, C, vocab_, act_);
    exchange(emb.forward, x0, nullptr, N, C, act_, &volume_.activations);
  } else {
    dev_.embedding_forward(row_partial_.data(), s.inputs.data(), wte, wpe, B, T, C, vocab_, act_);
    exchange(emb.forward, row_partial_.data(), x0, N, C, act_, &volume_.activations);
  }
}

void GPT::block_forward(size_t i, ActSet& s, void* out, bool fuse_norms) {
  const int B = s.B, T = T_, C = C_, N = B * T;
  const int Ns = sp_ ? N / tp_.size : N;
  const int Cl = Cl_, Fl = Fl_;
  const float eps = static_cast<float>(cfg_.layernorm_epsilon);
  LayerActs& a = recompute_ == Recompute::full ? work_ : s.layers[i];
  const void* in = s.layers[i].res_in.data();  // the block's input
  const BlockParams p = state_.block_params(chunk_.first_block + i);
  if (!fuse_norms || i == 0)
    dev_.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), in, p.ln1_w, p.ln1_b,
                           Ns, C, eps, act_);
  // qkv (N,3Cl) = ln1 @ Wqkv^T + b   (this rank's heads of q, k and v)
  const bool attn_split = shards_.attention > 1, mlp_split = shards_.mlp > 1;
  column_forward(a.ln1, col_full_, N, attn_split, [&](const void* x, size_t row0, int rows) {
    dev_.matmul_forward(advance(a.qkv.data(), row0 * size_t(3 * Cl), act_), x, p.attn_w, p.attn_b,
                        rows, C, 3 * Cl, act_);
  });
  if (rope_) {
    rotate_qk(a.qkv, B, false);
  }
  attention_forward(a, B);
  // res_mid = res_in + attn_out @ Wproj^T + b   (use `out` as the projection scratch)
  row_parallel_forward(out, attention_core(a).attn_out.data(), p.attn_proj_w, p.attn_proj_b, N, Cl,
                       attn_split);
  // ln2 = layernorm(res_mid) in the same pass
  dev_.residual_layernorm_forward(a.res_mid.data(), a.ln2.data(), a.ln2_mean.data(),
                                  a.ln2_rstd.data(), in, out, p.ln2_w, p.ln2_b, Ns, C, eps, act_);
  column_forward(a.ln2, col_full_, N, mlp_split, [&](const void* x, size_t row0, int rows) {
    const size_t off = row0 * size_t(Fl);
    dev_.matmul_gelu_forward(advance(a.mlp_act.data(), off, act_),
                             advance(a.mlp_pre.data(), off, act_), x, p.fc_w, p.fc_b, rows, C, Fl,
                             act_);
  });
  // out = res_mid + mlp_act @ Wfcproj^T + b
  row_parallel_forward(out, a.mlp_act.data(), p.fc_proj_w, p.fc_proj_b, N, Fl, mlp_split);
  const bool next_block = i + 1 < s.layers.size();
  if (!fuse_norms || (!next_block && !has_head_)) {  // the output leaves the stage
    dev_.residual_forward(out, a.res_mid.data(), out, size_t(Ns) * C, act_);
    return;
  }
  // ... and the layernorm that reads it, in the same pass. The next block's weights are asked
  // for only now, so a ZeRO-3 gather of them still overlaps this block's compute.
  if (next_block) {
    LayerActs& n = recompute_ == Recompute::full ? work_ : s.layers[i + 1];
    const BlockParams q = state_.block_params(chunk_.first_block + i + 1);
    dev_.residual_layernorm_forward(out, n.ln1.data(), n.ln1_mean.data(), n.ln1_rstd.data(),
                                    a.res_mid.data(), out, q.ln1_w, q.ln1_b, Ns, C, eps, act_);
  } else {
    dev_.residual_layernorm_forward(out, s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(),
                                    a.res_mid.data(), out, state_.weight(lnf_w_),
                                    state_.weight(lnf_b_), Ns, C, eps, act_);
  }
}

float GPT::head_forward(ActSet& s, bool lnf_ready) {
  const int N = s.B * T_, C = C_, t = tp_.size;
  const int Ns = sp_ ? N / t : N;
  if (!lnf_ready)
    dev_.layernorm_forward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), s.res_out.data(),
                           state_.weight(lnf_w_), state_.weight(lnf_b_), Ns, C,
                           static_cast<float>(cfg_.layernorm_epsilon), act_);
  // logits (N,Vl) = lnf @ wte^T  (tied head, no bias; this rank's vocabulary columns)
  const void* lnf = column_input(s.lnf, s.lnf_full, N, shards_.vocab > 1);
  dev_.matmul_forward(s.logits.data(), lnf, state_.weight(wte_), nullptr, N, C, vocab_.rows, act_);
  const auto& lg = at(TRIAD_TENSOR_BOUNDARY_LOGITS);
  if (!vocab_parallel_ce()) {
    dev_.crossentropy_forward(s.losses.data(), s.ce_lse.data(), s.logits.data(), s.targets.data(),
                              N, vocab_, act_);
  } else {
    // Vocab-parallel: the row max, then the sums of exponentials and the target logits, each
    // reduced over the group; no rank ever holds a whole row of logits.
    float* sums = s.ce_sums.data();
    dev_.crossentropy_row_max(s.ce_max.data(), s.logits.data(), N, vocab_, act_);
    tp_.comm
        ->all_reduce(s.ce_max.data(), s.ce_max.data(), N, dl_float32(), TRIAD_REDUCE_MAX,
                     dev_.dl_device())
        .wait(tp_.timeout);
    volume_.logits += 2.0 * (t - 1) / t * N * sizeof(float);
    dev_.crossentropy_row_sums(sums, sums + N, s.logits.data(), s.ce_max.data(), s.targets.data(),
                               N, vocab_, act_);
    exchange(lg.forward, sums, nullptr, 1, 2 * N, DType::f32, &volume_.logits);
    dev_.crossentropy_finish(s.losses.data(), s.ce_lse.data(), s.ce_max.data(), sums, sums + N, N);
  }
  return static_cast<float>(dev_.sum(s.losses.data(), N) / N);
}

void* GPT::stage_in(ActSet& s) {
  return s.layers.empty() ? s.res_in.data() : s.layers[0].res_in.data();
}

float GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int set) {
  ActSet& s = act_set(set);
  const int N = B * T_;
  s.B = B;
  // ZeRO-3: each unit's weights are gathered before use (the next one's while this one
  // computes) and freed after; the tied word embedding stays until the head has used it.
  const ParamSpec& spec = state_.spec();
  const size_t nl = s.layers.size();
  auto block_range = [&](size_t i) { return spec.layers[chunk_.first_block + i].range; };
  // The targets go to the device before any layer is queued: a copy from host memory waits for
  // the device's queue to drain, which after the blocks would stall the host (on a GPU) until
  // the whole forward had run instead of letting it queue the head and the backward ahead.
  if (has_head_)
    dev_.to_device(s.targets.data(), own_tokens(targets, B, own_targets_), sizeof(int32_t) * N);
  if (has_embedding_) {
    state_.prefetch(spec.embedding);
    if (nl) state_.prefetch(block_range(0));
    dev_.to_device(s.inputs.data(), own_tokens(inputs, B, own_inputs_), sizeof(int32_t) * N);
    const TraceSpan span(TraceKind::compute, "forward embedding");
    embedding_forward(s);
    if (!has_head_) state_.release(spec.embedding);
  }
  // else: the previous stage's output was received into the stage's input.
  for (size_t i = 0; i < nl; ++i) {
    state_.prefetch(i + 1 < nl ? block_range(i + 1) : spec.head);
    const TraceSpan span(TraceKind::compute, "forward block",
                         spec.layers[chunk_.first_block + i].layer);
    block_forward(i, s, i + 1 < nl ? s.layers[i + 1].res_in.data() : s.res_out.data(), true);
    state_.release(block_range(i));
    progress();
  }
  if (nl == 0) dev_.copy(s.res_out.data(), stage_in(s), stage_bytes(B));
  if (!has_head_) return 0.0f;  // the output goes to the next stage
  const float loss = [&] {
    const TraceSpan span(TraceKind::compute, "forward head");
    return head_forward(s, nl > 0);
  }();
  state_.release(spec.head);
  state_.release(spec.embedding);
  return loss;
}

size_t GPT::stage_bytes(int B) const {
  const size_t N = size_t(B) * T_;
  return (sp_ ? N / tp_.size : N) * C_ * dtype_bytes(act_);
}

BoundaryUse GPT::boundary_use() const {
  return {pipelined_, has_embedding_, has_head_,
          recompute_ != Recompute::full && chunk_.blocks > 0};
}

void GPT::bind_boundaries(int set, const std::array<int, kBoundaries>& slots) {
  if (!pipelined_) return;
  ActSet& s = act_set(set);
  const size_t n = stage_bytes(maxB_) / dtype_bytes(act_);
  const auto view = [&](Boundary b) {
    const int slot = slots[size_t(b)];
    return ActBuffer::view(slot < 0 ? nullptr : pool_->boundary(slot), n, act_);
  };
  s.res_out = view(Boundary::output);
  s.grad_in = view(Boundary::input_grad);
  s.grad_out = view(Boundary::output_grad);
}

GPT::StageIO GPT::stage_io(int set) {
  ActSet& s = act_set(set);
  return {stage_in(s), s.res_out.data(), s.grad_in.data(), s.grad_out.data()};
}

void GPT::head_backward(ActSet& s, float loss_scale, bool reduce_now, Half half) {
  const int N = s.B * T_, C = C_;
  const int Ns = sp_ ? N / tp_.size : N;
  // dlogits (in place over logits) = scale/N * (softmax - onehot), this rank's columns; the first
  // half leaves them there for head_weights().
  dev_.crossentropy_backward(s.logits.data(), s.logits.data(), s.ce_lse.data(), s.targets.data(),
                             loss_scale / N, N, vocab_, act_);
  // The first writes into dcol_ and dres_ overwrite them: no zeroing pass before.
  const void* dlnf =
      column_backward(s.logits.data(), s.lnf, s.lnf_full, gemm_input(s.lnf, s.lnf_full),
                      state_.weight(wte_), half == Half::whole ? state_.grad(wte_) : nullptr,
                      nullptr, N, vocab_.rows, shards_.vocab > 1);
  dev_.layernorm_backward(dres_.data(), state_.grad(lnf_w_), state_.grad(lnf_b_), dlnf,
                          s.res_out.data(), state_.weight(lnf_w_), s.lnf_mean.data(),
                          s.lnf_rstd.data(), Ns, C, act_, GradWrite::overwrite);
  if (reduce_now && half == Half::whole)
    reduce_replicated({state_.grad(lnf_w_), state_.grad(lnf_b_)});
}

void GPT::head_weights(ActSet& s, bool reduce_now) {
  const int N = s.B * T_;
  const void* lnf = gemm_input(s.lnf, s.lnf_full);
  dev_.matmul_backward(nullptr, state_.grad(wte_), nullptr, s.logits.data(), lnf, nullptr, N, C_,
                       vocab_.rows, act_, GradWrite::overwrite);
  if (reduce_now) reduce_replicated({state_.grad(lnf_w_), state_.grad(lnf_b_)});
}

std::vector<float*> GPT::block_partial_grads(size_t i) const {
  // A projection's bias is partial when its block is split (added on this rank's tokens after
  // the reduction), whole when the block is (from every token's gradient).
  const BlockGrads g = state_.block_grads(chunk_.first_block + i);
  std::vector<float*> partial{g.ln1_w, g.ln1_b, g.ln2_w, g.ln2_b};
  if (shards_.attention > 1) partial.push_back(g.attn_proj_b);
  if (shards_.mlp > 1) partial.push_back(g.fc_proj_b);
  return partial;
}

GPT::DeferredWeights GPT::deferred_weights() const {
  if (recompute_ == Recompute::full) return {};
  return {true, row_output_grad_op(shards_.mlp > 1) == TRIAD_TENSOR_IDENTITY,
          recompute_ == Recompute::none &&
              row_output_grad_op(shards_.attention > 1) == TRIAD_TENSOR_IDENTITY};
}

// dres_ holds d loss / d (residual stream) at the block's output; turns it into the gradient at
// its input (the residual adds pass it through unchanged). The first half (Half::input) leaves
// each GEMM's output gradient where block_weights() finds it: the MLP projection's in
// block_out_grad(), the first MLP GEMM's over mlp_pre, the attention projection's over res_mid, the
// qkv GEMM's over qkv, each copied there once the first half read that activation last.
void GPT::block_backward(size_t i, ActSet& s, bool reduce_now, Half half) {
  const int B = s.B, T = T_, C = C_, N = B * T;
  const int Ns = sp_ ? N / tp_.size : N;
  const int Cl = Cl_, Fl = Fl_;
  const bool full = recompute_ == Recompute::full;
  if (full) block_forward(i, s, recompute_out_.data(), false);  // this block's activations again
  LayerActs& a = full ? work_ : s.layers[i];
  const void* in = s.layers[i].res_in.data();
  const BlockParams p = state_.block_params(chunk_.first_block + i);
  const BlockGrads g = state_.block_grads(chunk_.first_block + i);
  // What waits for block_weights() (deferred_weights()), in the first half only.
  const DeferredWeights deferred = half == Half::input ? deferred_weights() : DeferredWeights{};
  const auto keep = [&](void* to, const ActBuffer& from, size_t rows, size_t width) {
    dev_.copy(to, from.data(), rows * width * dtype_bytes(act_));
  };
  // MLP: out = res_mid + c_proj(gelu(c_fc(ln2(res_mid))))
  const bool attn_split = shards_.attention > 1, mlp_split = shards_.mlp > 1;
  // Scratch gradients (dmlp_pre_, dcol_) are overwritten by their first write; dres_, the residual
  // stream's, accumulates each branch's part. dmlp_pre_ is the gradient at the GELU's input.
  if (deferred.mlp_proj) keep(block_out_grad(s, i), dres_, size_t(Ns), size_t(C));
  row_parallel_backward(dmlp_pre_.data(), dres_.data(), a.mlp_act.data(), p.fc_proj_w,
                        deferred.mlp_proj ? nullptr : g.fc_proj_w,
                        deferred.mlp_proj ? nullptr : g.fc_proj_b, N, Fl, mlp_split,
                        a.mlp_pre.data());
  if (deferred.column) keep(a.mlp_pre.data(), dmlp_pre_, size_t(N), size_t(Fl));
  // The input only the weight gradient reads: gathered again when the forward gathered it.
  const void* dln2 = column_backward(dmlp_pre_.data(), a.ln2, col_full_, nullptr, p.fc_w,
                                     deferred.column ? nullptr : g.fc_w,
                                     deferred.column ? nullptr : g.fc_b, N, Fl, mlp_split);
  dev_.layernorm_backward(dres_.data(), g.ln2_w, g.ln2_b, dln2, a.res_mid.data(), p.ln2_w,
                          a.ln2_mean.data(), a.ln2_rstd.data(), Ns, C, act_, GradWrite::accumulate);
  // Attention: res_mid = res_in + c_proj(attn(c_attn(ln1(res_in))))
  // Selective recomputation: the attention core's output and lse again, from the kept (rotated)
  // q, k and v; the same plugin call on the same inputs, so the same bits.
  if (recompute_ == Recompute::selective) attention_forward(a, B);
  if (deferred.attn_proj) keep(a.res_mid.data(), dres_, size_t(Ns), size_t(C));
  row_parallel_backward(dattn_out_.data(), dres_.data(), attention_core(a).attn_out.data(),
                        p.attn_proj_w, deferred.attn_proj ? nullptr : g.attn_proj_w,
                        deferred.attn_proj ? nullptr : g.attn_proj_b, N, Cl, attn_split);
  attention_backward(a, dqkv_.data(), dattn_out_.data(), B);
  if (rope_) rotate_qk(dqkv_, B, true);
  if (deferred.column) keep(a.qkv.data(), dqkv_, size_t(N), size_t(3 * Cl));
  const void* dln1 = column_backward(dqkv_.data(), a.ln1, col_full_, nullptr, p.attn_w,
                                     deferred.column ? nullptr : g.attn_w,
                                     deferred.column ? nullptr : g.attn_b, N, 3 * Cl, attn_split);
  dev_.layernorm_backward(dres_.data(), g.ln1_w, g.ln1_b, dln1, in, p.ln1_w, a.ln1_mean.data(),
                          a.ln1_rstd.data(), Ns, C, act_, GradWrite::accumulate);
  if (reduce_now && half == Half::whole) reduce_replicated(block_partial_grads(i));
}

// The weight and bias gradients block_backward(Half::input) left, from the output gradients it
// kept and the inputs the set kept.
void GPT::block_weights(size_t i, ActSet& s, bool reduce_now) {
  const DeferredWeights deferred = deferred_weights();
  if (deferred.column) {
    const int N = s.B * T_, C = C_;
    LayerActs& a = s.layers[i];
    const BlockGrads g = state_.block_grads(chunk_.first_block + i);
    const bool mlp_split = shards_.mlp > 1, attn_split = shards_.attention > 1;
    if (deferred.mlp_proj)
      row_parallel_weights(block_out_grad(s, i), a.mlp_act.data(), g.fc_proj_w, g.fc_proj_b, N, Fl_,
                           mlp_split);
    // Each gathered input again, just before the weight gradient that reads it.
    const void* ln2 = column_input(a.ln2, col_full_, N, mlp_split);
    dev_.matmul_backward(nullptr, g.fc_w, g.fc_b, a.mlp_pre.data(), ln2, nullptr, N, C, Fl_, act_,
                         GradWrite::overwrite);
    if (deferred.attn_proj)
      row_parallel_weights(a.res_mid.data(), a.attn_out.data(), g.attn_proj_w, g.attn_proj_b, N,
                           Cl_, attn_split);
    const void* ln1 = column_input(a.ln1, col_full_, N, attn_split);
    dev_.matmul_backward(nullptr, g.attn_w, g.attn_b, a.qkv.data(), ln1, nullptr, N, C, 3 * Cl_,
                         act_, GradWrite::overwrite);
  }
  if (reduce_now) reduce_replicated(block_partial_grads(i));
}

// The embedding's gradient: every token's row (gathered over the group under sequence
// parallelism), into this rank's vocabulary rows and the whole position table.
void GPT::embedding_backward(ActSet& s) {
  const int c =
      shards_.vocab > 1 ? at(TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT).backward : whole_part_input();
  const void* dx =
      exchange(c, dres_.data(), drow_full_.data(), s.B * T_, C_, act_, &volume_.activations);
  float* dwpe = rope_ ? nullptr : state_.grad(wpe_);
  float* dwpe_into = dwpe && ctx_ ? dwpe_own_.data() : dwpe;
  if (dwpe && ctx_) dev_.fill_zero(dwpe_into, size_t(T_) * C_ * sizeof(float));
  dev_.embedding_backward(state_.grad(wte_), dwpe_into, dx, s.inputs.data(), s.B, T_, C_, vocab_,
                          act_);
  if (dwpe && ctx_)  // this rank's positions' rows, added into wpe's gradient
    for (const TokenRun& r : runs_) {
      float* row = dwpe + size_t(r.pos) * C_;
      dev_.residual_forward(row, row, dwpe_into + size_t(r.local) * C_, size_t(r.len) * C_,
                            DType::f32);
    }
}

void GPT::backward(float loss_scale, const GradsReady& grads_ready, bool last_micro, int set) {
  backward_pass(loss_scale, set, Half::whole, &grads_ready, last_micro);
}

void GPT::backward_input(float loss_scale, int set) {
  backward_pass(loss_scale, set, Half::input, nullptr, false);
}

void GPT::backward_weight(const GradsReady& grads_ready, bool last_micro, int set) {
  ActSet& s = act_set(set);
  const ParamSpec& spec = state_.spec();
  const auto reduce_now = [&](const ArenaRange& r) { return reduce_replicated_now(r, last_micro); };
  if (has_head_) {
    const TraceSpan span(TraceKind::compute, "weight gradients head");
    head_weights(s, reduce_now(spec.head));
    if (grads_ready) grads_ready(spec.head.begin, spec.head.size());
  }
  for (size_t i = s.layers.size(); i-- > 0;) {
    const ArenaRange& r = spec.layers[chunk_.first_block + i].range;
    const TraceSpan span(TraceKind::compute, "weight gradients block",
                         spec.layers[chunk_.first_block + i].layer);
    block_weights(i, s, reduce_now(r));
    if (grads_ready) grads_ready(r.begin, r.size());
    progress();
  }
  if (has_embedding_ && grads_ready) grads_ready(spec.embedding.begin, spec.embedding.size());
}

// backward() (Half::whole: reports each range final as it goes) or backward_input()'s half.
void GPT::backward_pass(float loss_scale, int set, Half half, const GradsReady* ready,
                        bool last_micro) {
  ActSet& s = act_set(set);
  const ParamSpec& spec = state_.spec();
  const bool whole = half == Half::whole;
  const auto done = [&](const ArenaRange& r) {
    if (whole && *ready) (*ready)(r.begin, r.size());
  };
  const auto reduce_now = [&](const ArenaRange& r) { return reduce_replicated_now(r, last_micro); };
  auto block_range = [&](size_t i) { return spec.layers[chunk_.first_block + i].range; };
  const size_t nl = s.layers.size();
  if (nl) state_.prefetch(block_range(nl - 1));
  if (has_head_) {
    state_.prefetch(spec.head);
    state_.prefetch(spec.embedding);
    const TraceSpan span(TraceKind::compute, "backward head");
    head_backward(s, loss_scale, reduce_now(spec.head), half);
    state_.release(spec.head);
    state_.release(spec.embedding);  // embedding_backward reads no weights
    done(spec.head);
  } else {
    // The next stage sent the gradient of this stage's output.
    dev_.copy(dres_.data(), s.grad_out.data(), stage_bytes(s.B));
  }
  for (size_t i = nl; i-- > 0;) {
    if (i > 0) state_.prefetch(block_range(i - 1));
    const TraceSpan span(TraceKind::compute, "backward block",
                         spec.layers[chunk_.first_block + i].layer);
    block_backward(i, s, reduce_now(block_range(i)), half);
    state_.release(block_range(i));
    done(block_range(i));
    progress();
  }
  if (has_embedding_) {
    const TraceSpan span(TraceKind::compute, "backward embedding");
    embedding_backward(s);
    // wte (and wpe) are final only now: the tied LM head wrote into wte first.
    done(spec.embedding);
  } else {
    // For the previous stage: the gradient of this stage's input.
    dev_.copy(s.grad_in.data(), dres_.data(), stage_bytes(s.B));
  }
}

}  // namespace triad
