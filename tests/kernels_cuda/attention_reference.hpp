// The double-precision reference of naive attention for the CUDA tests (fp32 and bf16), with
// q, k, v interleaved in one (B,T,3C) buffer and out in (B,T,C), as the model lays them out.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cuda_test_util.hpp"

namespace triad::kernels::cuda::test {

struct AttentionShape {
  int B, H, T, D;
};

// Everything the reference produces, in the device layouts: out (B,T,C), lse (B,H,T),
// dqkv (B,T,3C).
struct Reference {
  Vec out, lse, dqkv;
};

inline Reference reference(const FVec& qkv, const FVec& dout, const AttentionShape& s, bool causal,
                           double scale) {
  const int B = s.B, H = s.H, T = s.T, D = s.D, C = H * D;
  auto q = [&](int b, int h, int i, int d) {
    return double(qkv[(size_t(b) * T + i) * 3 * C + h * D + d]);
  };
  auto k = [&](int b, int h, int i, int d) {
    return double(qkv[(size_t(b) * T + i) * 3 * C + C + h * D + d]);
  };
  auto v = [&](int b, int h, int i, int d) {
    return double(qkv[(size_t(b) * T + i) * 3 * C + 2 * C + h * D + d]);
  };
  auto go = [&](int b, int h, int i, int d) {
    return double(dout[(size_t(b) * T + i) * C + h * D + d]);
  };
  Reference r;
  r.out.assign(size_t(B) * T * C, 0.0);
  r.lse.assign(size_t(B) * H * T, 0.0);
  r.dqkv.assign(size_t(B) * T * 3 * C, 0.0);
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const int n = causal ? i + 1 : T;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q(b, h, i, d) * k(b, h, j, d);
          p[j] = scale * dot;
          m = std::max(m, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j < n; ++j) p[j] /= sum;
        r.lse[(size_t(b) * H + h) * T + i] = m + std::log(sum);
        double* o = &r.out[(size_t(b) * T + i) * C + h * D];
        for (int j = 0; j < n; ++j)
          for (int d = 0; d < D; ++d) o[d] += p[j] * v(b, h, j, d);
        // dP = dO V^T; dS = P (dP - rowsum(dO o O)); dQ = scale dS K, dK = scale dS^T Q,
        // dV = P^T dO. rowsum(dO o O) = sum_j P dP.
        double delta = 0;
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += go(b, h, i, d) * v(b, h, j, d);
          dp[j] = dot;
          delta += p[j] * dot;
        }
        double* dq = &r.dqkv[(size_t(b) * T + i) * 3 * C + h * D];
        for (int j = 0; j < n; ++j) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          double* dk = &r.dqkv[(size_t(b) * T + j) * 3 * C + C + h * D];
          double* dv = &r.dqkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * D];
          for (int d = 0; d < D; ++d) {
            dq[d] += ds * k(b, h, j, d);
            dk[d] += ds * q(b, h, i, d);
            dv[d] += p[j] * go(b, h, i, d);
          }
        }
      }
  return r;
}

}  // namespace triad::kernels::cuda::test
