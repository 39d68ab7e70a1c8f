// Attention over a context-parallel group: DeepSpeed-Ulysses and ring attention around the
// attention plugin (layout, traffic and workspace in context_attention.hpp).
//
// Ring backward is exact with the plugins' own backward: given the FINAL out and lse of a query
// chunk, every (query chunk, key chunk) pair's backward recomputes P = exp(S - lse) and uses
// delta = rowsum(dout o out), both of the whole row, so the pairs' dq, dk, dv simply add up
// (naive, flash1 and flash2 all take lse and out as given, on the CPU and in their CUDA kernels;
// none recomputes them from q and k).
#include "triad/core/model/context_attention.hpp"

#include <algorithm>

#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugins/attention.hpp"

namespace triad {

namespace {

// The ring's messages on the group's communicator (key/value blocks and their gradients) carry
// tag 0 and match in the order they are posted, the same on every rank: nccl takes no other tag.
constexpr uint32_t kRingTag = 0;

std::string num(int64_t v) {
  return std::to_string(v);
}

// A (B, H, T, D) or (B, H, T) tensor for the plugin, viewing memory it does not own.
struct Tensor {
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t strides[4] = {0, 0, 0, 1};
  DLTensor t{};
  Tensor(void* data, int64_t B, int64_t H, int64_t T, int64_t D, int64_t sb, int64_t sh, int64_t st,
         DLDevice dev, DLDataType dtype) {
    shape[0] = B, shape[1] = H, shape[2] = T, shape[3] = D;
    strides[0] = sb, strides[1] = sh, strides[2] = st;
    init(data, 4, dev, dtype);
  }
  // Contiguous (B, H, T, D).
  Tensor(void* data, int64_t B, int64_t H, int64_t T, int64_t D, DLDevice dev, DLDataType dtype)
      : Tensor(data, B, H, T, D, H * T * D, T * D, D, dev, dtype) {}
  // Contiguous fp32 lse (B, H, T).
  static Tensor lse(float* data, int64_t B, int64_t H, int64_t T, DLDevice dev) {
    Tensor l(data, B, H, T, 1, dev, dl_float32());
    l.t.ndim = 3;
    l.t.strides = nullptr;
    return l;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& o) noexcept : t(o.t) {
    std::copy(o.shape, o.shape + 4, shape);
    std::copy(o.strides, o.strides + 4, strides);
    t.shape = shape;
    t.strides = t.ndim == 4 ? strides : nullptr;
  }

 private:
  void init(void* data, int ndim, DLDevice dev, DLDataType dtype) {
    t.data = data;
    t.device = dev;
    t.ndim = ndim;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = ndim == 4 ? strides : nullptr;
    t.byte_offset = 0;
  }
};

using Rows = Device::RowBox;
using Strides = Device::RowStrides;

// Contiguous (B, H, T, D): the strides of its (b, h, t) rows.
Strides packed(int64_t H, int64_t T, int64_t D) {
  return {{H * T * D, T * D, D}};
}

}  // namespace

// A caller's (B, H, T, D) view of `act` elements on the component's device, strides in
// elements.
struct detail::ContextView {
  void* data = nullptr;
  DType act = DType::f32;
  DLDevice device{};
  int64_t B = 0, H = 0, T = 0, D = 0;
  int64_t sb = 0, sh = 0, st = 0;
  void* row(int64_t b, int64_t h, int64_t t) const {
    return advance(data, size_t(b * sb + h * sh + t * st), act);
  }
  Device::RowStrides strides() const { return {{sb, sh, st}}; }
  // Tokens [t0, t0 + n) as a tensor for the plugin.
  Tensor tokens(int64_t t0, int64_t n) const {
    return Tensor(row(0, 0, t0), B, H, n, D, sb, sh, st, device, dl_dtype(act));
  }
};

namespace {

using View = detail::ContextView;

bool same_device(const DLTensor* t, DLDevice d) {
  return t->device.device_type == d.device_type && t->device.device_id == d.device_id;
}

bool of_type(const DLTensor* t, DLDataType dt) {
  return t->dtype.code == dt.code && t->dtype.bits == dt.bits && t->dtype.lanes == dt.lanes;
}

View view_of(const DLTensor* t, const char* what, int64_t H, int64_t T, int64_t D, DLDevice dev,
             DType act) {
  if (!t) throw UserError(std::string("context attention: ") + what + " is null");
  if (!same_device(t, dev) || !of_type(t, dl_dtype(act)))
    throw UserError(std::string("context attention: ") + what + " must be " + dtype_name(act) +
                    " on the device the component was built for");
  if (t->ndim != 4 || t->shape[1] != H || t->shape[2] != T || t->shape[3] != D)
    throw UserError(std::string("context attention: ") + what + " must be (B, " + num(H) + ", " +
                    num(T) + ", " + num(D) + ")");
  View v;
  v.data = static_cast<char*>(t->data) + t->byte_offset;
  v.act = act;
  v.device = dev;
  v.B = t->shape[0], v.H = H, v.T = T, v.D = D;
  if (t->strides) {
    if (t->strides[3] != 1)
      throw UserError(std::string("context attention: ") + what + " needs unit stride along D");
    v.sb = t->strides[0], v.sh = t->strides[1], v.st = t->strides[2];
  } else {
    v.st = D, v.sh = T * D, v.sb = H * T * D;
  }
  return v;
}

float* lse_of(const DLTensor* t, int64_t B, int64_t H, int64_t T, DLDevice dev) {
  if (!t || !same_device(t, dev) || !of_type(t, dl_float32()) || t->ndim != 3 || t->shape[0] != B ||
      t->shape[1] != H || t->shape[2] != T ||
      (t->strides && (t->strides[2] != 1 || t->strides[1] != T || t->strides[0] != H * T)))
    throw UserError("context attention: lse must be contiguous float32 (" + num(B) + ", " + num(H) +
                    ", " + num(T) + ") on the component's device");
  return reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
}

// One call's tensors as views of this rank's Tl tokens (with bwd, the gradients too), and its
// lse (B, H, Tl).
struct CallViews {
  View q, k, v, out, dout, dq, dk, dv;
  float* lse = nullptr;
};

template <class Args>
CallViews call_views(const Args& a, const triad_attention_bwd_args_v1* bwd, int64_t B, int64_t H,
                     int64_t Tl, int64_t D, DLDevice dev, DType act) {
  auto view = [&](const DLTensor* x, const char* what) {
    return view_of(x, what, H, Tl, D, dev, act);
  };
  CallViews c;
  c.q = view(a.q, "q"), c.k = view(a.k, "k"), c.v = view(a.v, "v"), c.out = view(a.out, "out");
  if (bwd) {
    c.dout = view(bwd->dout, "dout"), c.dq = view(bwd->dq, "dq");
    c.dk = view(bwd->dk, "dk"), c.dv = view(bwd->dv, "dv");
  }
  c.lse = lse_of(a.lse, B, H, Tl, dev);
  return c;
}

}  // namespace

const char* context_method_name(ContextMethod m) {
  return m == ContextMethod::ulysses ? "ulysses" : "ring";
}

ContextMethod parse_context_method(const std::string& name) {
  if (name == "ulysses") return ContextMethod::ulysses;
  if (name == "ring") return ContextMethod::ring;
  throw UserError("context-parallel method '" + name +
                  "' is unknown; the methods are ulysses, ring");
}

void check_context_shape(ContextMethod m, const ContextShape& s, int cp) {
  if (cp < 1) throw UserError("context_parallel_size " + num(cp) + " must be at least 1");
  if (s.max_batch < 1 || s.heads < 1 || s.seq_len < 1 || s.head_dim < 1)
    throw UserError("context attention: batch, heads, sequence and head dim must be positive");
  if (m == ContextMethod::ulysses) {
    if (s.heads % cp)
      throw UserError("context_parallel_size " + num(cp) + " (ulysses) must divide the " +
                      num(s.heads) + " attention heads of this rank; choose a cp that does");
    if (s.seq_len % cp)
      throw UserError("context_parallel_size " + num(cp) + " must divide seq_length " +
                      num(s.seq_len));
  } else if (s.seq_len % (2 * cp)) {
    throw UserError("ring attention splits seq_length " + num(s.seq_len) + " into 2 x " + num(cp) +
                    " equal chunks; choose a seq_length divisible by " + num(2 * cp));
  }
}

std::vector<int64_t> context_token_positions(ContextMethod m, int64_t seq_len, int cp, int rank) {
  std::vector<int64_t> pos;
  const int64_t local = seq_len / cp;
  pos.reserve(size_t(local));
  if (m == ContextMethod::ulysses) {
    for (int64_t t = 0; t < local; ++t) pos.push_back(rank * local + t);
  } else {
    const int64_t C = seq_len / (2 * cp);
    for (int64_t chunk : {int64_t{rank}, int64_t{2 * cp - 1 - rank}})
      for (int64_t t = 0; t < C; ++t) pos.push_back(chunk * C + t);
  }
  return pos;
}

triad_attention_shape_v1 context_plugin_shape(ContextMethod m, const ContextShape& s, int cp,
                                              int causal, DLDataType dtype, DLDevice device) {
  if (m == ContextMethod::ulysses)
    return {s.max_batch, s.heads / cp, s.seq_len, s.head_dim, causal, dtype, device};
  return {s.max_batch, s.heads, s.seq_len / (2 * cp), s.head_dim, causal, dtype, device};
}

size_t context_workspace_bytes(ContextMethod m, const ContextShape& s, int cp, size_t elem_bytes) {
  const size_t N = size_t(s.max_batch) * s.heads * (s.seq_len / cp) * s.head_dim;
  if (m == ContextMethod::ulysses) return 10 * N * elem_bytes;
  // 9.5 N: N is even (T/cp = 2 C).
  return 19 * N / 2 * elem_bytes +
         context_lse_bytes(size_t(s.max_batch) * s.heads * (s.seq_len / cp));
}

ContextTraffic expected_context_traffic(ContextMethod m, bool backward, const ContextShape& s,
                                        int cp, int64_t batch, size_t elem_bytes) {
  // One b s h / cp tensor: this rank's share of q (or k, v, out) in bytes.
  const uint64_t share = uint64_t(batch) * s.seq_len * s.heads * s.head_dim / cp * elem_bytes;
  if (m == ContextMethod::ulysses) {
    const uint64_t n = backward ? 8 : 4;
    return {n * share, n};
  }
  // One k/v block is k and v of T/cp tokens; backward adds the cp dk/dv blocks.
  const uint64_t blocks = backward ? uint64_t(cp - 1) + uint64_t(cp) : uint64_t(cp - 1);
  return {blocks * 2 * share, blocks};
}

ContextAttention::ContextAttention(ContextMethod method, AttentionBackend& attention,
                                   Communicator& group, Device& dev, DType act,
                                   const ContextShape& shape, int causal,
                                   std::chrono::milliseconds timeout)
    : method_(method),
      attention_(attention),
      group_(group),
      dev_(dev),
      act_(act),
      shape_(shape),
      cp_(group.size()),
      rank_(group.rank()),
      timeout_(timeout) {
  check_context_shape(method, shape, cp_);
  const triad_attention_shape_v1 ps =
      context_plugin_shape(method, shape, cp_, causal, dl_dtype(act), dev.dl_device());
  attention_.check_supported(ps);
  if (method == ContextMethod::ring && causal) {
    // Pairs of chunks entirely in the past run without a mask.
    triad_attention_shape_v1 full = ps;
    full.causal = 0;
    attention_.check_supported(full);
  }
  size_t fwd = 0, bwd = 0;
  attention_.workspace_size(ps, &fwd, &bwd);
  const size_t plugin = std::max(fwd, bwd);
  if (plugin) plugin_work_ = Buffer<uint8_t>(dev, plugin, "attention workspace");
  work_ = Buffer<uint8_t>(dev, context_workspace_bytes(method, shape, cp_, dtype_bytes(act)),
                          "context-parallel attention workspace");
}

std::vector<int64_t> ContextAttention::token_positions() const {
  return context_token_positions(method_, shape_.seq_len, cp_, rank_);
}

size_t ContextAttention::workspace_bytes() const {
  return work_.size() + plugin_work_.size();
}

void* ContextAttention::work(int64_t elems) const {
  return advance(work_.data(), size_t(elems), act_);
}

namespace {

int64_t batch_of(const DLTensor* q, int64_t max_batch) {
  if (!q) throw UserError("context attention: q is null");
  const int64_t B = q->ndim == 4 ? q->shape[0] : -1;
  if (B < 0 || B > max_batch)
    throw UserError("context attention: batch " + num(B) + " is not within the micro-batch " +
                    num(max_batch) + " the workspace was sized for");
  return B;
}

}  // namespace

void ContextAttention::forward(const triad_attention_fwd_args_v1& args) {
  const int64_t B = batch_of(args.q, shape_.max_batch);
  if (method_ == ContextMethod::ulysses)
    ulysses_forward(args, B);
  else
    ring_forward(args, B);
}

void ContextAttention::backward(const triad_attention_bwd_args_v1& args) {
  const int64_t B = batch_of(args.q, shape_.max_batch);
  if (method_ == ContextMethod::ulysses)
    ulysses_backward(args, B);
  else
    ring_backward(args, B);
}

// ---------------------------------------------------------------------------------------
// Ulysses. The all-to-all's block p is rank p's share, (B, H/cp, T/cp, D) contiguous: going to
// heads, rank p gets its heads of this rank's tokens; coming back, rank p gets its tokens of
// this rank's heads. The head-split tensor (B, H/cp, T, D) has token p T/cp + t at block p's t.

namespace {

// x (B, H, T/cp, D) <-> the blocked buffer [p][b][h'][t][d] (block p: heads p H/cp + h').
void copy_sequence_blocks(Device& dev, const View& x, void* blocks, int cp, bool into_blocks) {
  const int64_t Hc = x.H / cp;
  const Rows box{{x.B, Hc, x.T}, x.D};
  const Strides buf_rows = packed(Hc, x.T, x.D);
  for (int64_t p = 0; p < cp; ++p) {
    void* buf = advance(blocks, size_t(p * x.B * Hc * x.T * x.D), x.act);
    void* mine = x.row(0, p * Hc, 0);
    if (into_blocks)
      dev.copy_rows(buf, buf_rows, mine, x.strides(), box, false, x.act);
    else
      dev.copy_rows(mine, x.strides(), buf, buf_rows, box, false, x.act);
  }
}

// head (B, H/cp, T, D) contiguous <-> the blocked buffer [p][b][h][t][d] (block p: tokens
// p T/cp + t): runs of T/cp rows.
void copy_head_blocks(Device& dev, void* head, void* blocks, int64_t B, int64_t Hc, int64_t Tl,
                      int64_t D, int cp, bool into_blocks, DType act) {
  const Rows box{{B, Hc, 1}, Tl * D};
  const Strides buf_rows{{Hc * Tl * D, Tl * D, 0}}, head_rows{{Hc * Tl * cp * D, Tl * cp * D, 0}};
  for (int64_t p = 0; p < cp; ++p) {
    void* buf = advance(blocks, size_t(p * B * Hc * Tl * D), act);
    void* mine = advance(head, size_t(p * Tl * D), act);
    if (into_blocks)
      dev.copy_rows(buf, buf_rows, mine, head_rows, box, false, act);
    else
      dev.copy_rows(mine, head_rows, buf, buf_rows, box, false, act);
  }
}

}  // namespace

void ContextAttention::to_heads(const View& x, void* head, ContextTraffic& t) {
  void* send = work(8 * shape_.max_batch * x.H * x.T * x.D);
  void* recv = advance(send, size_t(x.B * x.H * x.T * x.D), act_);
  copy_sequence_blocks(dev_, x, send, cp_, true);
  all_to_all(send, recv, x.B * x.H * x.T * x.D / cp_, t);
  copy_head_blocks(dev_, head, recv, x.B, x.H / cp_, x.T, x.D, cp_, false, act_);
}

void ContextAttention::to_sequence(void* head, const View& x, ContextTraffic& t) {
  void* send = work(8 * shape_.max_batch * x.H * x.T * x.D);
  void* recv = advance(send, size_t(x.B * x.H * x.T * x.D), act_);
  copy_head_blocks(dev_, head, send, x.B, x.H / cp_, x.T, x.D, cp_, true, act_);
  all_to_all(send, recv, x.B * x.H * x.T * x.D / cp_, t);
  copy_sequence_blocks(dev_, x, recv, cp_, false);
}

void ContextAttention::all_to_all(const void* send, void* recv, int64_t block, ContextTraffic& t) {
  TransportRequest r =
      group_.all_to_all(send, recv, uint64_t(block), dl_dtype(act_), dev_.dl_device());
  t.bytes += uint64_t(block) * cp_ * dtype_bytes(act_);
  t.operations += 1;
  r.wait(timeout_);
}

void ContextAttention::ulysses_forward(const triad_attention_fwd_args_v1& args, int64_t B) {
  const int64_t H = shape_.heads, Hc = H / cp_, T = shape_.seq_len, Tl = T / cp_,
                D = shape_.head_dim;
  const DLDevice dv = dev_.dl_device();
  const DLDataType dt = dl_dtype(act_);
  const CallViews c = call_views(args, nullptr, B, H, Tl, D, dv, act_);
  float* lse = c.lse;                // holds the head-split (B, H/cp, T)
  const int64_t N = B * H * Tl * D;  // one head-split tensor at this batch
  void *hq = work(0), *hk = work(N), *hv = work(2 * N), *hout = work(3 * N);
  to_heads(c.q, hq, fwd_traffic_);
  to_heads(c.k, hk, fwd_traffic_);
  to_heads(c.v, hv, fwd_traffic_);
  Tensor tq(hq, B, Hc, T, D, dv, dt), tk(hk, B, Hc, T, D, dv, dt), tv(hv, B, Hc, T, D, dv, dt),
      tout(hout, B, Hc, T, D, dv, dt);
  Tensor tlse = Tensor::lse(lse, B, Hc, T, dv);
  attention_.forward({&tq.t, &tk.t, &tv.t, &tout.t, &tlse.t, args.causal, args.scale,
                      plugin_work_.data(), plugin_work_.size()});
  to_sequence(hout, c.out, fwd_traffic_);
}

void ContextAttention::ulysses_backward(const triad_attention_bwd_args_v1& args, int64_t B) {
  const int64_t H = shape_.heads, Hc = H / cp_, T = shape_.seq_len, Tl = T / cp_,
                D = shape_.head_dim;
  const DLDevice dv = dev_.dl_device();
  const DLDataType dt = dl_dtype(act_);
  const CallViews c = call_views(args, &args, B, H, Tl, D, dv, act_);
  const int64_t N = B * H * Tl * D;
  void* h[8];
  for (int i = 0; i < 8; ++i) h[i] = work(i * N);
  const View* in[5] = {&c.q, &c.k, &c.v, &c.out, &c.dout};
  for (int i = 0; i < 5; ++i) to_heads(*in[i], h[i], bwd_traffic_);
  auto head = [&](int i) { return Tensor(h[i], B, Hc, T, D, dv, dt); };
  Tensor t[8] = {head(0), head(1), head(2), head(3), head(4), head(5), head(6), head(7)};
  Tensor tlse = Tensor::lse(c.lse, B, Hc, T, dv);
  attention_.backward({&t[0].t, &t[1].t, &t[2].t, &t[3].t, &tlse.t, &t[4].t, &t[5].t, &t[6].t,
                       &t[7].t, args.causal, args.scale, plugin_work_.data(), plugin_work_.size()});
  to_sequence(h[5], c.dq, bwd_traffic_);
  to_sequence(h[6], c.dk, bwd_traffic_);
  to_sequence(h[7], c.dv, bwd_traffic_);
}

// ---------------------------------------------------------------------------------------
// Ring. Rank r holds query chunks r and 2cp-1-r (local chunks 0 and 1). At step i it holds the
// key/value block of rank (r - i) mod cp, [k (B,H,T/cp,D) | v (B,H,T/cp,D)] contiguous, while
// the next one arrives from rank r - 1 and this one leaves for rank r + 1.

namespace {

// What a (query chunk, key chunk) pair runs: the diagonal causal, a key chunk wholly in the
// past unmasked, one wholly in the future not at all.
enum class Pair { skip, causal, full };

Pair pair_kind(int64_t q_chunk, int64_t k_chunk, bool causal) {
  if (!causal) return Pair::full;
  return k_chunk == q_chunk ? Pair::causal : k_chunk < q_chunk ? Pair::full : Pair::skip;
}

int64_t global_chunk(int owner, int local, int cp) {
  return local == 0 ? owner : 2 * cp - 1 - owner;
}

// One ring pass at batch B over the workspace (context_workspace_bytes() sizes it at max_batch,
// in this order): the lse scratch (fp32), then blocks of k|v and of dk|dv, each with the one
// arriving, and a pair's partials. Step by step: pass() posts a block's exchange, pairs() runs
// this rank's query chunks against the block in hand, end_step() waits and takes the arrived
// blocks.
class Ring {
 public:
  float* lse;  // a pair's lse (B,H,C), or both query chunks' final lse: 2 x (B,H,C)
  void* kv[2];
  void* dkv[2];
  void* part;   // a pair's out, or its dq | dk | dv: (B,H,C,D) each
  int cur = 0;  // which of each pair of blocks is in hand

  Ring(void* base, const ContextShape& s, int64_t B, Communicator& group, Device& dev, DType act,
       std::chrono::milliseconds timeout, const std::function<void()>& progress)
      : B_(B),
        H_(s.heads),
        Tl_(s.seq_len / group.size()),
        D_(s.head_dim),
        n_(B * H_ * Tl_ * D_),
        cp_(group.size()),
        rank_(group.rank()),
        group_(group),
        dev_(dev),
        act_(act),
        timeout_(timeout),
        progress_(progress) {
    const int64_t max_n = s.max_batch * H_ * Tl_ * D_;
    lse = static_cast<float*>(base);
    void* blocks = static_cast<char*>(base) + context_lse_bytes(size_t(s.max_batch * H_ * Tl_));
    auto at = [&](int64_t elems) { return advance(blocks, size_t(elems), act); };
    kv[0] = at(0), kv[1] = at(2 * max_n);
    dkv[0] = at(4 * max_n), dkv[1] = at(6 * max_n);
    part = at(8 * max_n);
  }

  // This rank's own k and v into the block in hand.
  void load(const View& k, const View& v) {
    const Rows box{{B_, H_, Tl_}, D_};
    const View kb = block_k(), vb = block_v();
    dev_.copy_rows(kb.data, kb.strides(), k.data, k.strides(), box, false, act_);
    dev_.copy_rows(vb.data, vb.strides(), v.data, v.strides(), box, false, act_);
  }
  View block_k() const { return blocked(kv[cur]); }
  View block_v() const { return blocked(advance(kv[cur], size_t(n_), act_)); }
  View grad_k() const { return blocked(dkv[cur]); }
  View grad_v() const { return blocked(advance(dkv[cur], size_t(n_), act_)); }

  // Sends blocks[cur] to rank r + 1 and receives blocks[1 - cur] from rank r - 1, started at
  // once (progress_) so that they move while the step's attention runs.
  void pass(void* const blocks[2], ContextTraffic& t) {
    const int next = (rank_ + 1) % cp_, prev = (rank_ + cp_ - 1) % cp_;
    const DLDataType dt = dl_dtype(act_);
    const DLDevice d = dev_.dl_device();
    pending_.push_back(group_.recv(blocks[1 - cur], uint64_t(2 * n_), dt, prev, kRingTag, d));
    pending_.push_back(group_.send(blocks[cur], uint64_t(2 * n_), dt, next, kRingTag, d));
    if (progress_) progress_();
    t.bytes += uint64_t(2 * n_) * dtype_bytes(act_);
    t.operations += 1;
  }
  void end_step() {
    for (TransportRequest& r : pending_) r.wait(timeout_);
    if (!pending_.empty()) cur = 1 - cur;
    pending_.clear();
  }

  // f(qc, kc, causal) for each pair of this rank's query chunk qc and the key chunk kc of the
  // block in hand at `step` that is not wholly in the query chunk's future.
  template <class F>
  void pairs(int step, bool causal, F f) const {
    const int owner = (rank_ - step + cp_) % cp_;
    for (int qc = 0; qc < 2; ++qc)
      for (int kc = 0; kc < 2; ++kc) {
        const Pair kind =
            pair_kind(global_chunk(rank_, qc, cp_), global_chunk(owner, kc, cp_), causal);
        if (kind != Pair::skip) f(qc, kc, kind == Pair::causal);
      }
  }

 private:
  // One rank's contiguous (B, H, T/cp, D) block of k, v or their gradients.
  View blocked(void* data) const {
    const Strides s = packed(H_, Tl_, D_);
    return View{data, act_, dev_.dl_device(), B_, H_, Tl_, D_, s.s[0], s.s[1], s.s[2]};
  }
  int64_t B_, H_, Tl_, D_, n_;
  int cp_, rank_;
  Communicator& group_;
  Device& dev_;
  DType act_;
  std::chrono::milliseconds timeout_;
  const std::function<void()>& progress_;
  std::vector<TransportRequest> pending_;
};

}  // namespace

void ContextAttention::ring_forward(const triad_attention_fwd_args_v1& args, int64_t B) {
  const int64_t H = shape_.heads, Tl = shape_.seq_len / cp_, C = Tl / 2, D = shape_.head_dim;
  const DLDevice dv = dev_.dl_device();
  const CallViews c = call_views(args, nullptr, B, H, Tl, D, dv, act_);
  const View &q = c.q, &out = c.out;
  Ring ring(work_.data(), shape_, B, group_, dev_, act_, timeout_, progress_);
  ring.load(c.k, c.v);
  bool seen[2] = {false, false};
  for (int step = 0; step < cp_; ++step) {
    if (step < cp_ - 1) ring.pass(ring.kv, fwd_traffic_);
    const View kb = ring.block_k(), vb = ring.block_v();
    ring.pairs(step, args.causal != 0, [&](int qc, int kc, bool causal) {
      Tensor tq = q.tokens(qc * C, C), tk = kb.tokens(kc * C, C), tv = vb.tokens(kc * C, C);
      Tensor tout(ring.part, B, H, C, D, dv, dl_dtype(act_));
      Tensor tlse = Tensor::lse(ring.lse, B, H, C, dv);
      attention_.forward({&tq.t, &tk.t, &tv.t, &tout.t, &tlse.t, causal, args.scale,
                          plugin_work_.data(), plugin_work_.size()});
      // Merge into this chunk's rows of out and lse by their log-sum-exp.
      dev_.attention_merge(out.row(0, 0, qc * C), out.strides(), c.lse + qc * C, {{H * Tl, Tl, 1}},
                           ring.part, ring.lse, B, H, C, D, !seen[qc], act_);
      seen[qc] = true;
    });
    ring.end_step();
  }
}

void ContextAttention::ring_backward(const triad_attention_bwd_args_v1& args, int64_t B) {
  const int64_t H = shape_.heads, Tl = shape_.seq_len / cp_, C = Tl / 2, D = shape_.head_dim;
  const DLDevice dv = dev_.dl_device();
  const DLDataType dt = dl_dtype(act_);
  const CallViews c = call_views(args, &args, B, H, Tl, D, dv, act_);
  const View &q = c.q, &out = c.out, &dout = c.dout, &dq = c.dq;
  const float* lse = c.lse;
  Ring ring(work_.data(), shape_, B, group_, dev_, act_, timeout_, progress_);
  ring.load(c.k, c.v);
  const int64_t NC = B * H * C * D;  // one chunk's (B,H,C,D)
  // The final lse of each query chunk, contiguous (B,H,C) as the plugin takes it.
  for (int qc = 0; qc < 2; ++qc)
    dev_.copy_rows(ring.lse + qc * B * H * C, {{C, 0, 0}}, lse + qc * C, {{Tl, 0, 0}},
                   {{B * H, 1, 1}, C}, false, DType::f32);
  const Rows whole{{B, H, Tl}, D}, chunk{{B, H, C}, D};
  dev_.copy_rows(dq.data, dq.strides(), nullptr, {}, whole, false, act_);
  dev_.fill_zero(ring.dkv[0], size_t(4 * NC) * dtype_bytes(act_));  // dk | dv of this rank's block
  void* pdq = ring.part;
  void* pdk = advance(pdq, size_t(NC), act_);
  void* pdv = advance(pdk, size_t(NC), act_);
  const Strides part_rows = packed(H, C, D);
  for (int step = 0; step < cp_; ++step) {
    if (step < cp_ - 1) ring.pass(ring.kv, bwd_traffic_);
    const View kb = ring.block_k(), vb = ring.block_v(), gk = ring.grad_k(), gv = ring.grad_v();
    ring.pairs(step, args.causal != 0, [&](int qc, int kc, bool causal) {
      Tensor tq = q.tokens(qc * C, C), tk = kb.tokens(kc * C, C), tv = vb.tokens(kc * C, C);
      Tensor tout = out.tokens(qc * C, C), tdout = dout.tokens(qc * C, C);
      Tensor tlse = Tensor::lse(ring.lse + qc * B * H * C, B, H, C, dv);
      Tensor tdq(pdq, B, H, C, D, dv, dt), tdk(pdk, B, H, C, D, dv, dt),
          tdv(pdv, B, H, C, D, dv, dt);
      attention_.backward({&tq.t, &tk.t, &tv.t, &tout.t, &tlse.t, &tdout.t, &tdq.t, &tdk.t, &tdv.t,
                           causal, args.scale, plugin_work_.data(), plugin_work_.size()});
      dev_.copy_rows(dq.row(0, 0, qc * C), dq.strides(), pdq, part_rows, chunk, true, act_);
      dev_.copy_rows(gk.row(0, 0, kc * C), gk.strides(), pdk, part_rows, chunk, true, act_);
      dev_.copy_rows(gv.row(0, 0, kc * C), gv.strides(), pdv, part_rows, chunk, true, act_);
    });
    // This block's gradients go on with it; after the last step they go home to their owner,
    // rank r + 1, as this rank's own arrive from rank r - 1.
    if (cp_ > 1) ring.pass(ring.dkv, bwd_traffic_);
    ring.end_step();
  }
  const View gk = ring.grad_k(), gv = ring.grad_v();
  dev_.copy_rows(c.dk.data, c.dk.strides(), gk.data, gk.strides(), whole, false, act_);
  dev_.copy_rows(c.dv.data, c.dv.strides(), gv.data, gv.strides(), whole, false, act_);
}

}  // namespace triad
