// Attention forward and backward in double precision, straight from the definitions
// (full score matrix per head), and strided fp32 tensors to feed the plugins.
#pragma once

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace flash_test {

// A (B,H,T,D) fp32 tensor stored as (B,T,H,D+pad) — the layout of heads sliced out of a fused
// qkv projection — so every stride but D's differs from the packed one.
struct Strided {
  int B, H, T, D, pad;
  std::vector<float> buf;
  int64_t shape[4];
  int64_t strides[4];
  DLTensor t{};

  Strided(int B_, int H_, int T_, int D_, int pad_ = 3) : B(B_), H(H_), T(T_), D(D_), pad(pad_) {
    const int64_t row = D + pad;
    buf.assign(static_cast<size_t>(B) * T * H * row, std::numeric_limits<float>::quiet_NaN());
    shape[0] = B, shape[1] = H, shape[2] = T, shape[3] = D;
    strides[3] = 1;
    strides[1] = row;
    strides[2] = H * row;
    strides[0] = T * H * row;
    t.data = buf.data();
    t.device = {kDLCPU, 0};
    t.ndim = 4;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
    t.strides = strides;
  }
  Strided(const Strided&) = delete;
  float& at(int b, int h, int i, int d) {
    return buf[b * strides[0] + h * strides[1] + i * strides[2] + d];
  }
  float at(int b, int h, int i, int d) const {
    return buf[b * strides[0] + h * strides[1] + i * strides[2] + d];
  }
  void fill_uniform(std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i)
          for (int d = 0; d < D; ++d) at(b, h, i, d) = u(rng);
  }
  void fill(float v) {
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < T; ++i)
          for (int d = 0; d < D; ++d) at(b, h, i, d) = v;
  }
};

struct Lse {
  std::vector<float> buf;
  int64_t shape[3];
  DLTensor t{};
  Lse(int B, int H, int T) : buf(static_cast<size_t>(B) * H * T) {
    shape[0] = B, shape[1] = H, shape[2] = T;
    t.data = buf.data();
    t.device = {kDLCPU, 0};
    t.ndim = 3;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
  }
};

// Results of one head, indexed [i * D + d] (lse: [i]).
struct HeadRef {
  std::vector<double> out, lse, dq, dk, dv;
};

inline HeadRef reference_head(const Strided& q, const Strided& k, const Strided& v,
                              const Strided& dout, int b, int h, bool causal, double scale) {
  const int T = q.T, D = q.D;
  HeadRef r;
  r.out.assign(T * D, 0.0), r.lse.assign(T, 0.0);
  r.dq.assign(T * D, 0.0), r.dk.assign(T * D, 0.0), r.dv.assign(T * D, 0.0);
  std::vector<double> p(T), dp(T);
  for (int i = 0; i < T; ++i) {
    const int n = causal ? i + 1 : T;
    double m = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += double(q.at(b, h, i, d)) * k.at(b, h, j, d);
      p[j] = s * scale;
      m = std::max(m, p[j]);
    }
    double l = 0;
    for (int j = 0; j < n; ++j) l += (p[j] = std::exp(p[j] - m));
    for (int j = 0; j < n; ++j) p[j] /= l;
    r.lse[i] = m + std::log(l);
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < D; ++d) r.out[i * D + d] += p[j] * v.at(b, h, j, d);
    // dS = P * (dP - sum_j P dP), dP = dO V^T.
    double delta = 0;
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += double(dout.at(b, h, i, d)) * v.at(b, h, j, d);
      dp[j] = s;
      delta += p[j] * s;
    }
    for (int j = 0; j < n; ++j) {
      const double ds = p[j] * (dp[j] - delta) * scale;
      for (int d = 0; d < D; ++d) {
        r.dq[i * D + d] += ds * k.at(b, h, j, d);
        r.dk[j * D + d] += ds * q.at(b, h, i, d);
        r.dv[j * D + d] += p[j] * dout.at(b, h, i, d);
      }
    }
  }
  return r;
}

// max |got - want| / max(max |want|, 0.05): an error relative to the tensor's scale. The floor
// covers gradients that cancel to exactly 0 (T = 1: dq = dk = 0) yet are differences of O(1)
// fp32 terms, so they carry that rounding.
struct ErrorMeter {
  double max_err = 0, max_ref = 0;
  void add(double got, double want) {
    if (!std::isfinite(got)) max_err = std::numeric_limits<double>::infinity();
    max_err = std::max(max_err, std::abs(got - want));
    max_ref = std::max(max_ref, std::abs(want));
  }
  double relative() const { return max_err / std::max(max_ref, 0.05); }
};

}  // namespace flash_test
