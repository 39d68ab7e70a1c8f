// The tensor conformance suite. The plan of every layout is asked in this process (a tensor
// plugin computes nothing and communicates nothing); the numerics run the plan: each rank
// holds its slices of a small GPT's tensors (ParamSpec's slice_of_global with the plan's
// splits) and executes the plan's collectives on a real communicator, tp forked processes over
// a transport plugin (ranks.hpp, as the transport suite does), or at tp 1 a one-rank group here.
// The same templates, run in double on one rank with nothing split, are the reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "ranks.hpp"
#include "triad/core/conformance/conformance.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/plugins/tensor_backend.hpp"

namespace triad::conformance {

namespace {

constexpr int64_t kHeads = 4;   // of the suite's model: divisible by every tp swept
constexpr int64_t kTokens = 8;  // tokens of the numeric cases: divisible by every tp swept
constexpr double kFloor = 1e-3;

using Report = std::function<void(Outcome, const std::string& name, const std::string& detail)>;

// ---------------------------------------------------------------------------------------
// Groups: what a plan's collective runs on. Solo is the one-rank group (every collective is
// the identity); CommGroup runs on a transport communicator.

template <class T>
struct Solo {
  int rank() const { return 0; }
  int size() const { return 1; }
  void all_reduce(std::vector<T>&, int) {}
  std::vector<T> all_gather(const std::vector<T>& v) { return v; }
  std::vector<T> reduce_scatter(const std::vector<T>& v) { return v; }
};

class CommGroup {
 public:
  CommGroup(Communicator& c, std::chrono::milliseconds timeout) : c_(c), timeout_(timeout) {}
  int rank() const { return c_.rank(); }
  int size() const { return c_.size(); }
  void all_reduce(std::vector<float>& v, int op) {
    c_.all_reduce(v.data(), v.data(), v.size(), dl_float32(), op).wait(timeout_);
  }
  std::vector<float> all_gather(const std::vector<float>& v) {
    std::vector<float> out(v.size() * size_t(size()));
    c_.all_gather(v.data(), out.data(), out.size(), dl_float32()).wait(timeout_);
    return out;
  }
  std::vector<float> reduce_scatter(const std::vector<float>& v) {
    std::vector<float> out(v.size() / size_t(size()));
    c_.reduce_scatter(v.data(), out.data(), v.size(), dl_float32()).wait(timeout_);
    return out;
  }

 private:
  Communicator& c_;
  std::chrono::milliseconds timeout_;
};

// A (rows × cols) row-major activation; rows are tokens.
template <class T>
struct Act {
  std::vector<T> v;
  int64_t rows = 0, cols = 0;
};

// Runs collective `c` on `a` in place: all-gather concatenates the ranks' token blocks,
// reduce-scatter sums and keeps this rank's block. "" or why it cannot.
template <class T, class G>
std::string apply(G& g, int32_t c, Act<T>& a, const std::string& where) {
  const int n = g.size();
  switch (c) {
    case TRIAD_TENSOR_IDENTITY:
      return "";
    case TRIAD_TENSOR_ALL_REDUCE:
      g.all_reduce(a.v, TRIAD_REDUCE_SUM);
      return "";
    case TRIAD_TENSOR_ALL_GATHER:
      a.v = g.all_gather(a.v);
      a.rows *= n;
      return "";
    case TRIAD_TENSOR_REDUCE_SCATTER:
      if (a.rows % n != 0)
        return where + ": reduce-scatter of " + std::to_string(a.rows) + " rows over " +
               std::to_string(n) + " ranks";
      a.v = g.reduce_scatter(a.v);
      a.rows /= n;
      return "";
    default:
      return where + ": collective " + std::to_string(c) + " is unknown";
  }
}

// A gradient of a replicated weight, through the replicated-grads boundary's backward.
template <class T, class G>
std::string reduce_grad(G& g, const TensorPlan& plan, std::vector<T>& grad, const char* what) {
  Act<T> a{std::move(grad), 1, 0};
  const std::string e = apply(g, plan.boundary[TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS].backward, a,
                              std::string("replicated-grads backward of ") + what);
  grad = std::move(a.v);
  return e;
}

// A part every rank holds whole (the core's own rule, model.hpp): it reads every token, gathered
// under sequence parallelism (whole_in), and each rank keeps its own block of what comes out.
template <class G>
int32_t whole_in(const G& g, const TensorPlan& plan) {
  return plan.layout.sequence_parallel && g.size() > 1 ? TRIAD_TENSOR_ALL_GATHER
                                                       : TRIAD_TENSOR_IDENTITY;
}

template <class T, class G>
void keep_own_tokens(const G& g, const TensorPlan& plan, Act<T>& a) {
  if (whole_in(g, plan) == TRIAD_TENSOR_IDENTITY) return;
  const int64_t rows = a.rows / g.size();
  a.v = std::vector<T>(a.v.begin() + g.rank() * rows * a.cols,
                       a.v.begin() + (g.rank() + 1) * rows * a.cols);
  a.rows = rows;
}

std::string rows_mismatch(const std::string& where, int64_t got, int64_t want) {
  return where + " leaves " + std::to_string(got) + " token rows where " + std::to_string(want) +
         " are needed";
}

// ---------------------------------------------------------------------------------------
// Dense helpers, accumulating in T.

// out (n × m) = A · B with A (n × k) and B (k × m), each read from its row-major array or, when
// flagged, from the row-major array of its transpose.
template <class T>
std::vector<T> matmul(const std::vector<T>& a, bool a_t, const std::vector<T>& b, bool b_t,
                      int64_t n, int64_t k, int64_t m) {
  std::vector<T> out(size_t(n * m), T(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t l = 0; l < k; ++l) {
      const T x = a[size_t(a_t ? l * n + i : i * k + l)];
      for (int64_t j = 0; j < m; ++j)
        out[size_t(i * m + j)] += x * b[size_t(b_t ? j * k + l : l * m + j)];
    }
  return out;
}
template <class T>  // a (n × k) · bᵀ, b (m × k): x Wᵀ
std::vector<T> mul_nt(const std::vector<T>& a, const std::vector<T>& b, int64_t n, int64_t k,
                      int64_t m) {
  return matmul(a, false, b, true, n, k, m);
}
template <class T>  // a (n × k) · b, b (k × m): dy W
std::vector<T> mul_nn(const std::vector<T>& a, const std::vector<T>& b, int64_t n, int64_t k,
                      int64_t m) {
  return matmul(a, false, b, false, n, k, m);
}
template <class T>  // aᵀ · b, a (n × k), b (n × m), giving (k × m): dyᵀ x
std::vector<T> mul_tn(const std::vector<T>& a, const std::vector<T>& b, int64_t n, int64_t k,
                      int64_t m) {
  return matmul(a, true, b, false, k, n, m);
}

template <class T>
std::vector<T> col_sum(const std::vector<T>& a, int64_t n, int64_t m) {
  std::vector<T> out(size_t(m), T(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) out[size_t(j)] += a[size_t(i * m + j)];
  return out;
}

template <class T>
T gelu(T x) {
  const T c = T(0.7978845608028654), u = c * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}
template <class T>
T gelu_grad(T x) {
  const T c = T(0.7978845608028654), u = c * (x + T(0.044715) * x * x * x);
  const T t = std::tanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
}

// ---------------------------------------------------------------------------------------
// A block y = x + mid(LN(x) W1ᵀ + b1) W2ᵀ + b2 and its gradients for the loss sum(y · dy):
// the MLP (mid = gelu) and attention (W1 the fused qkv, mid = causal softmax attention over the
// tokens, one sequence). x and dy hold this rank's tokens (all of them, or its block under
// sequence parallelism); W1/b1/W2 this rank's slices (F its share of W1's output width).

template <class T>
struct BlockWeights {
  std::vector<T> gamma, beta, w1, b1, w2, b2;
  int64_t C = 0, F = 0;
};

template <class T>
struct BlockResult {
  std::vector<T> y, dx, dgamma, dbeta, dw1, db1, dw2, db2;
};

// The part between the two matmuls, on the first's output `pre` (n × F): its output width,
// forward and backward (d pre from d out).
template <class T>
struct Gelu {
  int64_t width(int64_t F) const { return F; }
  std::vector<T> forward(const std::vector<T>& pre, int64_t, int64_t) const {
    std::vector<T> h(pre.size());
    std::transform(pre.begin(), pre.end(), h.begin(), gelu<T>);
    return h;
  }
  std::vector<T> backward(const std::vector<T>& pre, std::vector<T> dh, int64_t, int64_t) const {
    for (size_t k = 0; k < dh.size(); ++k) dh[k] *= gelu_grad(pre[k]);
    return dh;
  }
};

// pre holds this rank's q, k and v side by side (F = 3 × its heads × d); the output its heads'
// attention over the n tokens, causal, each row of F / 3.
template <class T>
struct CausalAttention {
  int64_t d = 1;  // head width
  int64_t width(int64_t F) const { return F / 3; }
  // P (n × n) of head h: softmax over j <= i of q_i · k_j / sqrt(d).
  std::vector<T> probs(const std::vector<T>& pre, int64_t n, int64_t F, int64_t h) const {
    const int64_t W = F / 3;
    const T scale = T(1) / std::sqrt(T(d));
    std::vector<T> P(size_t(n * n), T(0));
    for (int64_t i = 0; i < n; ++i) {
      T mx = -std::numeric_limits<T>::infinity(), sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        T dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += pre[size_t(i * F + h * d + c)] * pre[size_t(j * F + W + h * d + c)];
        P[size_t(i * n + j)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      for (int64_t j = 0; j <= i; ++j)
        sum += (P[size_t(i * n + j)] = std::exp(P[size_t(i * n + j)] - mx));
      for (int64_t j = 0; j <= i; ++j) P[size_t(i * n + j)] /= sum;
    }
    return P;
  }
  std::vector<T> forward(const std::vector<T>& pre, int64_t n, int64_t F) const {
    const int64_t W = F / 3;
    std::vector<T> out(size_t(n * W), T(0));
    for (int64_t h = 0; h < W / d; ++h) {
      const std::vector<T> P = probs(pre, n, F, h);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < d; ++c)
            out[size_t(i * W + h * d + c)] +=
                P[size_t(i * n + j)] * pre[size_t(j * F + 2 * W + h * d + c)];
    }
    return out;
  }
  std::vector<T> backward(const std::vector<T>& pre, const std::vector<T>& dout, int64_t n,
                          int64_t F) const {
    const int64_t W = F / 3;
    const T scale = T(1) / std::sqrt(T(d));
    std::vector<T> dpre(pre.size(), T(0));
    auto q = [&](int64_t i, int64_t h, int64_t c) { return size_t(i * F + h * d + c); };
    for (int64_t h = 0; h < W / d; ++h) {
      const std::vector<T> P = probs(pre, n, F, h);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<T> dP(size_t(i + 1), T(0));
        T dot = 0;  // sum_j dP_ij P_ij
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            dP[size_t(j)] += dout[size_t(i * W + h * d + c)] * pre[q(j, h, c) + size_t(2 * W)];
            dpre[q(j, h, c) + size_t(2 * W)] +=
                P[size_t(i * n + j)] * dout[size_t(i * W + h * d + c)];  // dv
          }
          dot += dP[size_t(j)] * P[size_t(i * n + j)];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const T dS = P[size_t(i * n + j)] * (dP[size_t(j)] - dot) * scale;
          for (int64_t c = 0; c < d; ++c) {
            dpre[q(i, h, c)] += dS * pre[q(j, h, c) + size_t(W)];  // dq
            dpre[q(j, h, c) + size_t(W)] += dS * pre[q(i, h, c)];  // dk
          }
        }
      }
    }
    return dpre;
  }
};

constexpr double kLnEps = 1e-5;

// `first`: the role of the block's first weight (qkv or fc), whose split says the block's.
template <class T, class G, class Mid>
std::string block(G& g, const TensorPlan& plan, int32_t first, const Mid& mid,
                  const BlockWeights<T>& w, const Act<T>& x, const std::vector<T>& dy,
                  BlockResult<T>* out) {
  const int64_t C = w.C, F = w.F, rows = x.rows, H = mid.width(F);
  const bool split = plan.split[size_t(first)] == TRIAD_TENSOR_SPLIT_COLUMN;
  const auto& ci = plan.boundary[TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT];
  const auto& ro = plan.boundary[TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT];
  // Layernorm.
  std::vector<T> xhat(size_t(rows * C)), rstd(static_cast<size_t>(rows));
  Act<T> a{std::vector<T>(size_t(rows * C)), rows, C};
  for (int64_t i = 0; i < rows; ++i) {
    T mean = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) mean += x.v[size_t(i * C + j)];
    mean /= T(C);
    for (int64_t j = 0; j < C; ++j) {
      const T d = x.v[size_t(i * C + j)] - mean;
      var += d * d;
    }
    rstd[size_t(i)] = T(1) / std::sqrt(var / T(C) + T(kLnEps));
    for (int64_t j = 0; j < C; ++j) {
      const size_t k = size_t(i * C + j);
      xhat[k] = (x.v[k] - mean) * rstd[size_t(i)];
      a.v[k] = xhat[k] * w.gamma[size_t(j)] + w.beta[size_t(j)];
    }
  }
  std::string e;
  const int32_t in = split ? ci.forward : whole_in(g, plan);
  if (!(e = apply(g, in, a, "column-input forward")).empty()) return e;
  const int64_t n = a.rows;
  std::vector<T> pre = mul_nt(a.v, w.w1, n, C, F);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < F; ++j) pre[size_t(i * F + j)] += w.b1[size_t(j)];
  const std::vector<T> h = mid.forward(pre, n, F);
  Act<T> z{mul_nt(h, w.w2, n, H, C), n, C};
  if (split && !(e = apply(g, ro.forward, z, "row-output forward")).empty()) return e;
  if (!split) keep_own_tokens(g, plan, z);
  if (z.rows != rows) return rows_mismatch("the block's forward", z.rows, rows);
  out->y.resize(size_t(rows * C));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < C; ++j) {
      const size_t k = size_t(i * C + j);
      out->y[k] = z.v[k] + w.b2[size_t(j)] + x.v[k];
    }

  // Backward.
  out->db2 = col_sum(dy, rows, C);
  Act<T> dz{dy, rows, C};
  const int32_t dout = split ? ro.backward : whole_in(g, plan);
  if (!(e = apply(g, dout, dz, "row-output backward")).empty()) return e;
  if (dz.rows != n) return rows_mismatch("row-output backward", dz.rows, n);
  if (!split) out->db2 = col_sum(dz.v, n, C);  // every token's: whole
  out->dw2 = mul_tn(dz.v, h, n, C, H);
  const std::vector<T> dpre = mid.backward(pre, mul_nn(dz.v, w.w2, n, C, H), n, F);
  out->db1 = col_sum(dpre, n, F);
  out->dw1 = mul_tn(dpre, a.v, n, F, C);
  Act<T> da{mul_nn(dpre, w.w1, n, F, C), n, C};
  if (split && !(e = apply(g, ci.backward, da, "column-input backward")).empty()) return e;
  if (!split) keep_own_tokens(g, plan, da);
  if (da.rows != rows) return rows_mismatch("column-input backward", da.rows, rows);
  out->dgamma.assign(size_t(C), T(0));
  out->dbeta.assign(size_t(C), T(0));
  out->dx.resize(size_t(rows * C));
  for (int64_t i = 0; i < rows; ++i) {
    T m1 = 0, m2 = 0;  // means of dxhat and dxhat · xhat
    for (int64_t j = 0; j < C; ++j) {
      const size_t k = size_t(i * C + j);
      const T dxh = da.v[k] * w.gamma[size_t(j)];
      m1 += dxh;
      m2 += dxh * xhat[k];
      out->dgamma[size_t(j)] += da.v[k] * xhat[k];
      out->dbeta[size_t(j)] += da.v[k];
    }
    m1 /= T(C);
    m2 /= T(C);
    for (int64_t j = 0; j < C; ++j) {
      const size_t k = size_t(i * C + j);
      const T dxh = da.v[k] * w.gamma[size_t(j)];
      out->dx[k] = rstd[size_t(i)] * (dxh - m1 - xhat[k] * m2) + dy[k];
    }
  }
  // Replicated weights used on this rank's tokens: their gradients through replicated-grads
  // (a whole block's saw every token: its gradients are whole already).
  for (auto [grad, what] :
       {std::pair{&out->dgamma, "the layernorm weight"},
        std::pair{&out->dbeta, "the layernorm bias"}, std::pair{&out->db2, "the projection bias"}})
    if ((split || grad != &out->db2) && !(e = reduce_grad(g, plan, *grad, what)).empty()) return e;
  return "";
}

// ---------------------------------------------------------------------------------------
// The embedding lookup, the tied LM head and the mean cross-entropy over the tokens, with
// the word embedding vocab-parallel (this rank holds rows [begin, begin + rows) of the padded
// vocabulary) or replicated. Entries of the padding never receive probability.

template <class T>
struct CeInput {
  std::vector<int> ids, targets;  // kTokens each, every rank all of them
  std::vector<T> wte;             // this rank's rows × C
  int64_t begin = 0, rows = 0, vocab = 0, C = 0;
};

template <class T>
struct CeResult {
  T loss = 0;
  std::vector<T> dwte;  // this rank's rows × C
};

template <class T, class G>
std::string embedding_ce(G& g, const TensorPlan& plan, const CeInput<T>& in, CeResult<T>* out) {
  const int64_t C = in.C, N = kTokens, V = in.rows;
  const bool split = plan.split[TRIAD_TENSOR_ROLE_WORD_EMBEDDING] == TRIAD_TENSOR_SPLIT_VOCAB;
  const auto& eo = plan.boundary[TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT];
  const auto& ci = plan.boundary[TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT];
  const auto& lg = plan.boundary[TRIAD_TENSOR_BOUNDARY_LOGITS];
  auto mine = [&](int id) { return id >= in.begin && id < in.begin + V; };
  // Lookup: each rank its own rows, zeros for the others' tokens.
  Act<T> e{std::vector<T>(size_t(N * C), T(0)), N, C};
  for (int64_t t = 0; t < N; ++t)
    if (mine(in.ids[size_t(t)]))
      std::copy_n(in.wte.begin() + (in.ids[size_t(t)] - in.begin) * C, C, e.v.begin() + t * C);
  std::string err;
  if (split && !(err = apply(g, eo.forward, e, "embedding-output forward")).empty()) return err;
  if (!split) keep_own_tokens(g, plan, e);
  const int64_t hrows = e.rows;
  Act<T> h = e;
  const int32_t head_in = split ? ci.forward : whole_in(g, plan);
  if (!(err = apply(g, head_in, h, "column-input forward")).empty()) return err;
  // Which token each row of h is: all of them, or this rank's block.
  const int n = g.size();
  int64_t first = 0;
  if (h.rows == N / n && n > 1) {
    first = g.rank() * (N / n);
  } else if (h.rows != N) {
    return rows_mismatch("the LM head's input", h.rows, N);
  }
  const int64_t R = h.rows;
  // Logits over this rank's vocabulary rows, padding masked out of the softmax.
  std::vector<T> logits = mul_nt(h.v, in.wte, R, C, V);
  const T lowest = -std::numeric_limits<T>::infinity();
  std::vector<T> mx(size_t(R), lowest), sum(size_t(R), T(0)), target(size_t(R), T(0));
  auto real = [&](int64_t j) { return in.begin + j < in.vocab; };
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < V; ++j)
      if (real(j)) mx[size_t(i)] = std::max(mx[size_t(i)], logits[size_t(i * V + j)]);
  // The per-token statistics through the logits boundary: max for the max, sum for the rest.
  auto stats = [&](std::vector<T>& v, int op) {
    if (!split || lg.forward == TRIAD_TENSOR_IDENTITY) return std::string();
    if (lg.forward != TRIAD_TENSOR_ALL_REDUCE)
      return std::string("the logits' forward is ") + tensor_collective_name(lg.forward);
    g.all_reduce(v, op);
    return std::string();
  };
  if (!(err = stats(mx, TRIAD_REDUCE_MAX)).empty()) return err;
  for (int64_t i = 0; i < R; ++i) {
    const int tgt = in.targets[size_t(first + i)];
    for (int64_t j = 0; j < V; ++j)
      if (real(j)) sum[size_t(i)] += std::exp(logits[size_t(i * V + j)] - mx[size_t(i)]);
    if (mine(tgt)) target[size_t(i)] = logits[size_t(i * V + (tgt - in.begin))];
  }
  if (!(err = stats(sum, TRIAD_REDUCE_SUM)).empty()) return err;
  if (!(err = stats(target, TRIAD_REDUCE_SUM)).empty()) return err;
  out->loss = 0;
  for (int64_t i = 0; i < R; ++i)
    out->loss += (std::log(sum[size_t(i)]) + mx[size_t(i)] - target[size_t(i)]) / T(N);

  // Backward: d loss / d logit = (softmax - onehot) / N on this rank's vocabulary rows.
  Act<T> dlogits{std::vector<T>(size_t(R * V), T(0)), R, V};
  for (int64_t i = 0; i < R; ++i) {
    const int tgt = in.targets[size_t(first + i)];
    for (int64_t j = 0; j < V; ++j) {
      if (!real(j)) continue;
      T p = std::exp(logits[size_t(i * V + j)] - mx[size_t(i)]) / sum[size_t(i)];
      if (in.begin + j == tgt) p -= T(1);
      dlogits.v[size_t(i * V + j)] = p / T(N);
    }
  }
  if (split && !(err = apply(g, lg.backward, dlogits, "logits backward")).empty()) return err;
  out->dwte = mul_tn(dlogits.v, h.v, R, V, C);  // the LM head's part
  Act<T> dh{mul_nn(dlogits.v, in.wte, R, V, C), R, C};
  if (split && !(err = apply(g, ci.backward, dh, "column-input backward")).empty()) return err;
  if (!split) keep_own_tokens(g, plan, dh);
  if (dh.rows != hrows) return rows_mismatch("column-input backward", dh.rows, hrows);
  const int32_t dout = split ? eo.backward : whole_in(g, plan);
  if (!(err = apply(g, dout, dh, "embedding-output backward")).empty()) return err;
  if (dh.rows != N) return rows_mismatch("the embedding backward", dh.rows, N);
  for (int64_t t = 0; t < N; ++t)
    if (mine(in.ids[size_t(t)]))
      for (int64_t j = 0; j < C; ++j)
        out->dwte[size_t((in.ids[size_t(t)] - in.begin) * C + j)] += dh.v[size_t(t * C + j)];
  return "";  // a whole embedding saw every token: its gradient is whole already
}

// ---------------------------------------------------------------------------------------
// The model the suite places, and each tensor split as the plan says.

ModelConfig suite_model(const triad_tensor_layout_v1& layout) {
  std::mt19937 rng(uint32_t(7919 * layout.tp_size + layout.sequence_parallel));
  ModelConfig m;
  m.num_layers = 1;
  m.num_attention_heads = int(kHeads);
  m.hidden_size = 4 * int(2 + rng() % 3);  // divisible by every tp swept
  m.seq_length = int(kTokens);
  m.vocab_size = int(23 + rng() % 30);  // odd sizes pad
  m.position_embedding = "learned";
  return m;
}

// Every tensor of the suite's model on tp rank 0, split per the plan by the core's placement (the
// split is the same on every rank; slice_of_global / place_in_global take the rank).
std::string planned_spec(const TensorPlan& plan, ParamSpec* out) {
  Placement p;
  p.tp_size = plan.layout.tp_size;
  p.make_vocab_size_divisible_by = 1;
  p.split = plan.split;
  try {  // the core's own placement, and its check of the plan's splits
    *out = build_param_spec(suite_model(plan.layout), p);
  } catch (const std::exception& e) {
    return std::string("the core cannot place the plan: ") + e.what();
  }
  return "";
}

// Deterministic values, the same in every process.
std::vector<float> randoms(size_t n, uint32_t seed, float scale, float offset = 0.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = offset + scale * u(rng);
  return v;
}

template <class T>
std::vector<T> cast(const std::vector<float>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The elements of global tensor `ref` that rank r holds, in its local order (positions found
// by slicing the indices, which floats hold exactly at these sizes).
std::vector<double> slice_ref(const TensorSpec& t, int r, const std::vector<double>& ref) {
  std::vector<float> idx(t.global_numel()), local(t.numel);
  std::iota(idx.begin(), idx.end(), 0.f);
  slice_of_global(t, r, idx.data(), local.data());
  std::vector<double> out(local.size());
  for (size_t i = 0; i < local.size(); ++i) out[i] = ref[size_t(local[i])];
  return out;
}

template <class T>
std::vector<T> slice(const TensorSpec& t, int r, const std::vector<float>& global) {
  std::vector<float> local(t.numel);
  slice_of_global(t, r, global.data(), local.data());
  return cast<T>(local);
}

// max|got - ref| / max(max|ref|, kFloor)
double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = kFloor;
  for (size_t i = 0; i < ref.size(); ++i) {
    den = std::max(den, std::abs(ref[i]));
    num = std::max(num, i < got.size() ? std::abs(double(got[i]) - ref[i]) : INFINITY);
  }
  return got.size() == ref.size() ? num / den : INFINITY;
}

// Compares named tensors, returns "" (and the worst error in *worst) or the first too far off.
struct Comparison {
  explicit Comparison(double t) : tolerance(t) {}
  double tolerance;
  double worst = 0;
  std::string worst_name, failure;
  void check(const std::string& name, const std::vector<float>& got,
             const std::vector<double>& ref) {
    const double e = rel_error(got, ref);
    if (e > worst || worst_name.empty()) worst = e, worst_name = name;
    if (failure.empty() && !(e <= tolerance)) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s is off by %.3g relative (tolerance %.1g)", name.c_str(),
                    e, tolerance);
      failure = buf;
    }
  }
  std::string detail() const {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "max error %.2g (%s)", worst, worst_name.c_str());
    return buf;
  }
};

// ---------------------------------------------------------------------------------------
// The numeric cases of one layout, on one rank of group g.

// One of a layer's two blocks: its tensors' names, its first weight's role, and names for messages.
struct BlockKind {
  const char* what;                 // "mlp block"
  const char *ln, *first, *second;  // tensor name prefixes
  int32_t first_role;
  const char *first_label, *second_label;  // "fc", "fc proj"
};
constexpr BlockKind kMlp{
    "mlp block", "h.0.ln_2", "h.0.mlp.c_fc", "h.0.mlp.c_proj", TRIAD_TENSOR_ROLE_FC_WEIGHT,
    "fc",        "fc proj"};
constexpr BlockKind kAttention{"attention block",
                               "h.0.ln_1",
                               "h.0.attn.c_attn",
                               "h.0.attn.c_proj",
                               TRIAD_TENSOR_ROLE_QKV_WEIGHT,
                               "qkv",
                               "attention proj"};

struct BlockProblem {
  ParamSpec spec;
  BlockKind kind;
  const TensorSpec *gamma, *beta, *w1, *b1, *w2, *b2;
  std::vector<float> x, dy, g_gamma, g_beta, g_w1, g_b1, g_w2, g_b2;  // global
  int64_t C = 0, F = 0;
};

BlockProblem block_problem(const ParamSpec& spec, const BlockKind& kind, uint32_t seed) {
  BlockProblem p;
  p.spec = spec;
  p.kind = kind;
  auto& s = p.spec;
  auto find = [&](const char* prefix, const char* what) {
    return &s.find(std::string(prefix) + "." + what);
  };
  p.gamma = find(kind.ln, "weight"), p.beta = find(kind.ln, "bias");
  p.w1 = find(kind.first, "weight"), p.b1 = find(kind.first, "bias");
  p.w2 = find(kind.second, "weight"), p.b2 = find(kind.second, "bias");
  p.C = p.gamma->global_shape[0], p.F = p.w1->global_shape[0];
  p.x = randoms(size_t(kTokens * p.C), seed + 1, 1.f);
  p.dy = randoms(size_t(kTokens * p.C), seed + 2, 1.f);
  p.g_gamma = randoms(size_t(p.C), seed + 3, 0.2f, 1.f);
  p.g_beta = randoms(size_t(p.C), seed + 4, 0.2f);
  p.g_w1 = randoms(p.w1->global_numel(), seed + 5, float(1.7 / std::sqrt(double(p.C))));
  p.g_b1 = randoms(size_t(p.F), seed + 6, 0.2f);
  const double K2 = double(p.w2->global_shape[1]);  // the second matmul's inputs
  p.g_w2 = randoms(p.w2->global_numel(), seed + 7, float(1.7 / std::sqrt(K2)));
  p.g_b2 = randoms(size_t(p.C), seed + 8, 0.2f);
  return p;
}

// Rank r's weights (tp: the plan's group size; r = 0 and tp 1 for the whole model).
template <class T>
BlockWeights<T> block_weights(const BlockProblem& p, int r) {
  BlockWeights<T> w;
  w.C = p.C;
  w.gamma = slice<T>(*p.gamma, r, p.g_gamma), w.beta = slice<T>(*p.beta, r, p.g_beta);
  w.w1 = slice<T>(*p.w1, r, p.g_w1), w.b1 = slice<T>(*p.b1, r, p.g_b1);
  w.w2 = slice<T>(*p.w2, r, p.g_w2), w.b2 = slice<T>(*p.b2, r, p.g_b2);
  w.F = p.w1->local_shape[0];
  return w;
}

// The block of `p` on group g: gelu between the MLP's matmuls, causal attention over heads of
// C / kHeads between the attention's.
template <class T, class G>
std::string run_block(G& g, const TensorPlan& plan, const BlockProblem& p, const BlockWeights<T>& w,
                      const Act<T>& x, const std::vector<T>& dy, BlockResult<T>* out) {
  if (p.kind.first_role == TRIAD_TENSOR_ROLE_FC_WEIGHT)
    return block(g, plan, p.kind.first_role, Gelu<T>{}, w, x, dy, out);
  return block(g, plan, p.kind.first_role, CausalAttention<T>{p.C / kHeads}, w, x, dy, out);
}

// The token rows [first, first + rows) of a (kTokens × C) tensor.
template <class T>
std::vector<T> rows_of(const std::vector<T>& v, int64_t first, int64_t rows, int64_t C) {
  return std::vector<T>(v.begin() + first * C, v.begin() + (first + rows) * C);
}

// The unsplit plan of a layout's reference: tp 1, nothing split, every collective identity.
TensorPlan unsplit_plan() {
  return TensorPlan{};
}

struct CeProblem {
  const TensorSpec* wte;
  std::vector<float> g_wte;
  std::vector<int> ids, targets;
  int64_t vocab = 0, padded = 0, C = 0;
};

CeProblem ce_problem(const ParamSpec& spec, uint32_t seed) {
  CeProblem p;
  p.wte = &spec.find("wte.weight");
  p.vocab = spec.vocab_size, p.padded = p.wte->global_shape[0], p.C = p.wte->global_shape[1];
  p.g_wte = randoms(p.wte->global_numel(), seed + 11, 1.f);
  std::mt19937 rng(seed + 12);
  for (int64_t t = 0; t < kTokens; ++t) {
    p.ids.push_back(int(rng() % uint32_t(p.vocab)));
    p.targets.push_back(int(rng() % uint32_t(p.vocab)));
  }
  return p;
}

template <class T>
CeInput<T> ce_input(const CeProblem& p, int r) {
  CeInput<T> in;
  in.ids = p.ids, in.targets = p.targets;
  in.wte = slice<T>(*p.wte, r, p.g_wte);
  in.rows = p.wte->local_shape[0];
  in.begin = p.wte->split.is_split() ? r * in.rows : 0;
  in.vocab = p.vocab, in.C = p.C;
  return in;
}

uint32_t layout_seed(const triad_tensor_layout_v1& l) {
  return uint32_t(1000 * l.tp_size + 10 * l.sequence_parallel + 17);
}

template <class G>
void numeric_cases(G& g, const TensorPlan& plan, const std::string& label, double tolerance,
                   const Report& report) {
  // spec: this layout's slices; whole: the same tensors (the vocabulary padded for this tp)
  // unsplit, for the reference, which runs the unsplit plan on one rank.
  ParamSpec spec, whole;
  TensorPlan whole_plan = plan;
  whole_plan.split.fill(TRIAD_TENSOR_SPLIT_REPLICATED);
  std::string e1 = planned_spec(plan, &spec);
  if (e1.empty()) e1 = planned_spec(whole_plan, &whole);
  const TensorPlan ref_plan = unsplit_plan();
  const int r = g.rank(), n = g.size();
  const bool sp = plan.layout.sequence_parallel != 0;
  const uint32_t seed = layout_seed(plan.layout);
  for (const char* what : {" mlp block", " attention block", " vocab-parallel cross-entropy"}) {
    const std::string name = label + what;
    if (!e1.empty()) {
      report(Outcome::kFail, name, e1);
      continue;
    }
    std::string err;
    Comparison cmp(tolerance);
    Solo<double> solo;
    if (std::string(what) != " vocab-parallel cross-entropy") {
      const BlockKind& kind = std::string(what) == " mlp block" ? kMlp : kAttention;
      const BlockProblem mp = block_problem(spec, kind, seed),
                         mref = block_problem(whole, kind, seed);
      BlockResult<double> ref;
      const std::string re = run_block(solo, ref_plan, mref, block_weights<double>(mref, 0),
                                       Act<double>{cast<double>(mref.x), kTokens, mref.C},
                                       cast<double>(mref.dy), &ref);
      // This rank's tokens: all, or its block under sequence parallelism.
      const int64_t rows = sp ? kTokens / n : kTokens, first = sp ? r * rows : 0;
      BlockResult<float> got;
      err = run_block(g, plan, mp, block_weights<float>(mp, r),
                      Act<float>{rows_of(mp.x, first, rows, mp.C), rows, mp.C},
                      rows_of(mp.dy, first, rows, mp.C), &got);
      if (!re.empty()) err = "reference: " + re;
      if (err.empty()) {
        const std::string w1 = kind.first_label, w2 = kind.second_label;
        cmp.check("y", got.y, rows_of(ref.y, first, rows, mp.C));
        cmp.check("dx", got.dx, rows_of(ref.dx, first, rows, mp.C));
        cmp.check("d ln weight", got.dgamma, ref.dgamma);
        cmp.check("d ln bias", got.dbeta, ref.dbeta);
        cmp.check("d " + w1 + " weight", got.dw1, slice_ref(*mp.w1, r, ref.dw1));
        cmp.check("d " + w1 + " bias", got.db1, slice_ref(*mp.b1, r, ref.db1));
        cmp.check("d " + w2 + " weight", got.dw2, slice_ref(*mp.w2, r, ref.dw2));
        cmp.check("d " + w2 + " bias", got.db2, slice_ref(*mp.b2, r, ref.db2));
      }
    } else {
      const CeProblem cp = ce_problem(spec, seed), cref = ce_problem(whole, seed);
      CeResult<double> ref;
      const std::string re = embedding_ce(solo, ref_plan, ce_input<double>(cref, 0), &ref);
      CeResult<float> got;
      err = embedding_ce(g, plan, ce_input<float>(cp, r), &got);
      if (!re.empty()) err = "reference: " + re;
      if (err.empty()) {
        cmp.check("loss", {got.loss}, {ref.loss});
        cmp.check("d word embedding", got.dwte, slice_ref(*cp.wte, r, ref.dwte));
      }
    }
    if (err.empty()) err = cmp.failure;
    report(err.empty() ? Outcome::kPass : Outcome::kFail, name, err.empty() ? cmp.detail() : err);
  }
}

// ---------------------------------------------------------------------------------------
// Cases in this process.

// The reference itself: the unsplit double computation against central differences of its
// loss (sum(y · dy) for the MLP, the mean cross-entropy), so a wrong reference cannot hide a
// wrong plan.
CaseResult reference_case(const std::string& name) {
  CaseResult res{name + " reference gradients", Outcome::kPass, ""};
  const TensorPlan plan = unsplit_plan();
  ParamSpec spec;
  planned_spec(plan, &spec);
  Solo<double> solo;
  double worst = 0;
  auto fd = [&](const char* what, std::vector<double>& param, const std::vector<double>& grad,
                const std::function<double()>& loss) {
    double scale = kFloor, err = 0;
    for (size_t i = 0; i < param.size(); ++i) {
      const double keep = param[i], h = 1e-6;
      param[i] = keep + h;
      const double up = loss();
      param[i] = keep - h;
      const double down = loss();
      param[i] = keep;
      scale = std::max(scale, std::abs(grad[i]));
      err = std::max(err, std::abs((up - down) / (2 * h) - grad[i]));
    }
    worst = std::max(worst, err / scale);
    if (err / scale > 1e-6 && res.outcome == Outcome::kPass) {
      res.outcome = Outcome::kFail;
      res.detail = std::string("d ") + what + " differs from finite differences by " +
                   std::to_string(err / scale) + " relative";
    }
  };
  for (const BlockKind* kind : {&kMlp, &kAttention}) {
    const BlockProblem mp = block_problem(spec, *kind, 1);
    BlockWeights<double> w = block_weights<double>(mp, 0);
    Act<double> x{cast<double>(mp.x), kTokens, mp.C};
    const std::vector<double> dy = cast<double>(mp.dy);
    BlockResult<double> g;
    run_block(solo, plan, mp, w, x, dy, &g);
    auto loss = [&] {
      BlockResult<double> o;
      run_block(solo, plan, mp, w, x, dy, &o);
      return std::inner_product(o.y.begin(), o.y.end(), dy.begin(), 0.0);
    };
    const std::string w1 = kind->first_label, w2 = kind->second_label;
    fd((std::string(kind->what) + " x").c_str(), x.v, g.dx, loss);
    fd("ln weight", w.gamma, g.dgamma, loss);
    fd("ln bias", w.beta, g.dbeta, loss);
    fd((w1 + " weight").c_str(), w.w1, g.dw1, loss);
    fd((w1 + " bias").c_str(), w.b1, g.db1, loss);
    fd((w2 + " weight").c_str(), w.w2, g.dw2, loss);
    fd((w2 + " bias").c_str(), w.b2, g.db2, loss);
  }
  const CeProblem cp = ce_problem(spec, 1);
  CeInput<double> in = ce_input<double>(cp, 0);
  CeResult<double> c;
  embedding_ce(solo, plan, in, &c);
  fd("word embedding", in.wte, c.dwte, [&] {
    CeResult<double> o;
    embedding_ce(solo, plan, in, &o);
    return o.loss;
  });
  if (res.outcome == Outcome::kPass) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "max error %.2g", worst);
    res.detail = buf;
  }
  return res;
}

// Every split reassembles its global tensor exactly, the slices disjoint and covering.
CaseResult splits_case(const std::string& name, const TensorPlan& plan) {
  ParamSpec spec;
  if (std::string e = planned_spec(plan, &spec); !e.empty()) return {name, Outcome::kFail, e};
  const int tp = plan.layout.tp_size;
  int split = 0;
  for (const TensorSpec& t : spec.tensors) {
    const std::vector<float> global = randoms(t.global_numel(), uint32_t(t.offset + 5), 1.f);
    std::vector<float> back(global.size(), NAN), local(t.numel), cover(global.size(), 0.f),
        mark(global.size()), ones(t.numel, 1.f);
    for (int r = 0; r < tp; ++r) {
      slice_of_global(t, r, global.data(), local.data());
      place_in_global(t, r, local.data(), back.data());
      std::fill(mark.begin(), mark.end(), 0.f);
      place_in_global(t, r, ones.data(), mark.data());
      for (size_t i = 0; i < mark.size(); ++i) cover[i] += mark[i];
    }
    const float want = t.split.is_split() ? 1.f : float(tp);
    for (size_t i = 0; i < global.size(); ++i) {
      if (cover[i] != want)
        return {name, Outcome::kFail,
                t.name + " element " + std::to_string(i) + " is held by " +
                    std::to_string(int(cover[i])) + " ranks, expected " +
                    std::to_string(int(want))};
      if (back[i] != global[i])
        return {name, Outcome::kFail,
                t.name + " element " + std::to_string(i) + " does not come back"};
    }
    if (t.split.is_split() && t.numel * size_t(tp) != t.global_numel())
      return {name, Outcome::kFail, t.name + ": the slices do not add up to the tensor"};
    split += t.split.is_split();
  }
  return {name, Outcome::kPass,
          std::to_string(spec.tensors.size()) + " tensors, " + std::to_string(split) + " split"};
}

// A layout the capabilities exclude: every call must say UNSUPPORTED, with a message.
CaseResult refuses_case(const std::string& name, const TensorBackend& be,
                        const triad_tensor_layout_v1& layout) {
  auto check = [&](int status, const std::string& what) -> std::string {
    if (status == TRIAD_ERR_UNSUPPORTED) {
      if (be.last_error() == "no message") return what + " says UNSUPPORTED without a message";
      return "";
    }
    return what + " returned " + status_name(status) + " instead of UNSUPPORTED";
  };
  for (int32_t r = 0; r < TRIAD_TENSOR_ROLE_COUNT; ++r) {
    int32_t kind = 0;
    const std::string e =
        check(be.try_split(layout, r, &kind), std::string("split(") + tensor_role_name(r) + ")");
    if (!e.empty()) return {name, Outcome::kFail, e};
  }
  for (int32_t b = 0; b < TRIAD_TENSOR_BOUNDARY_COUNT; ++b) {
    triad_tensor_collectives_v1 c{};
    const std::string e = check(be.try_boundary(layout, b, &c),
                                std::string("boundary(") + tensor_boundary_name(b) + ")");
    if (!e.empty()) return {name, Outcome::kFail, e};
  }
  return {name, Outcome::kPass, "UNSUPPORTED: " + be.last_error()};
}

std::string plan_summary(const TensorPlan& p) {
  std::string s;
  for (int32_t r : {TRIAD_TENSOR_ROLE_QKV_WEIGHT, TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT,
                    TRIAD_TENSOR_ROLE_FC_WEIGHT, TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT,
                    TRIAD_TENSOR_ROLE_WORD_EMBEDDING})
    s += (s.empty() ? "" : ", ") + std::string(tensor_role_name(r)) + " " +
         tensor_split_name(p.split[size_t(r)]);
  for (int32_t b = 0; b < TRIAD_TENSOR_BOUNDARY_COUNT; ++b)
    s += std::string("; ") + tensor_boundary_name(b) + " " +
         tensor_collective_name(p.boundary[size_t(b)].forward) + "/" +
         tensor_collective_name(p.boundary[size_t(b)].backward);
  return s;
}

}  // namespace

Summary run_tensor_suite(const std::string& so_path, const TensorSuiteOptions& o) {
  Summary sum;
  const auto emit = counting(sum, o.on_case);
  auto plugin = PluginLoader().load_file(so_path, "tensor");
  const ResolvedParams params = resolve_params(plugin->descriptor(), o.params, "tensor");
  CoreServices services;
  TensorBackend be(plugin, params, services.c_services());
  const triad_tensor_caps_v1 caps = be.capabilities();
  const std::string name = be.name();

  emit(reference_case(name));
  for (int tp : o.tp_sizes) {
    for (bool sp : {false, true}) {
      const triad_tensor_layout_v1 layout{tp, sp ? 1 : 0};
      const std::string label = name + " tp=" + std::to_string(tp) + (sp ? " sp" : "");
      const char* const kCases[] = {" plan", " splits reassemble", " mlp block", " attention block",
                                    " vocab-parallel cross-entropy"};
      if ((caps.max_tp_size > 0 && tp > caps.max_tp_size) || (sp && !caps.sequence_parallel)) {
        emit(refuses_case(label + " refuses", be, layout));
        for (const char* c : kCases)
          emit({label + c, Outcome::kSkip,
                "the plugin's capabilities exclude it (" + describe_capabilities(caps) + ")"});
        continue;
      }
      TensorPlan plan;
      std::string why = be.try_plan(tp, sp, &plan);
      if (why.empty()) why = tensor_plan_error(plan);
      emit({label + kCases[0], why.empty() ? Outcome::kPass : Outcome::kFail,
            why.empty() ? plan_summary(plan) : why});
      if (!why.empty()) {
        for (size_t i = 1; i < std::size(kCases); ++i)
          emit({label + kCases[i], Outcome::kFail,
                "no usable plan (see" + std::string(kCases[0]) + ")"});
        continue;
      }
      emit(splits_case(label + kCases[1], plan));
      if (tp == 1) {
        Solo<float> self;
        numeric_cases(self, plan, label, o.tolerance,
                      [&](Outcome out, const std::string& n, const std::string& d) {
                        emit({n, out, d});
                      });
        continue;
      }
      ranks::run_world(
          tp, label, o.world_timeout_ms,
          [&](const ranks::RankContext& c) {
            const std::chrono::milliseconds timeout(o.op_timeout_ms);
            ranks::RankWorld rw(c, o.transport, o.transport_params, "tensor/", timeout);
            CommGroup group(rw.world(), timeout);
            numeric_cases(group, plan, label, o.tolerance,
                          [&](Outcome out, const std::string& n, const std::string& d) {
                            ranks::report(c.fd, out, n, d);
                          });
            rw.world().barrier().wait(timeout);
            return 0;
          },
          emit);
    }
  }
  return sum;
}

}  // namespace triad::conformance
