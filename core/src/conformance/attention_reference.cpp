#include <cmath>
#include <limits>

#include "triad/core/conformance/conformance.hpp"

namespace triad::conformance {

AttentionReference reference_attention(const AttentionProblem& p) {
  const int64_t B = p.B, H = p.H, T = p.T, D = p.D;
  AttentionReference r;
  r.out.assign(B * H * T * D, 0.0);
  r.dq.assign(B * H * T * D, 0.0);
  r.dk.assign(B * H * T * D, 0.0);
  r.dv.assign(B * H * T * D, 0.0);
  r.lse.assign(B * H * T, 0.0);

#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t base = (b * H + h) * T * D;
      auto at = [&](const auto& x, int64_t t, int64_t d) { return double(x[base + t * D + d]); };
      std::vector<double> P(T * T, 0.0);  // probabilities; masked entries stay 0
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = p.causal ? i + 1 : T;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d) s += at(p.q, i, d) * at(p.k, j, d);
          P[i * T + j] = p.scale * s;
          m = std::max(m, P[i * T + j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) sum += (P[i * T + j] = std::exp(P[i * T + j] - m));
        for (int64_t j = 0; j < n; ++j) P[i * T + j] /= sum;
        r.lse[(b * H + h) * T + i] = m + std::log(sum);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < n; ++j) o += P[i * T + j] * at(p.v, j, d);
          r.out[base + i * D + d] = o;
        }
      }
      // dS = P o (dP - rowsum(dO o O)) with dP = dO V^T.
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = p.causal ? i + 1 : T;
        double di = 0.0;
        for (int64_t d = 0; d < D; ++d) di += at(p.dout, i, d) * r.out[base + i * D + d];
        for (int64_t j = 0; j < n; ++j) {
          double dp = 0.0;
          for (int64_t d = 0; d < D; ++d) dp += at(p.dout, i, d) * at(p.v, j, d);
          const double pij = P[i * T + j], ds = pij * (dp - di);
          for (int64_t d = 0; d < D; ++d) {
            r.dv[base + j * D + d] += pij * at(p.dout, i, d);
            r.dq[base + i * D + d] += p.scale * ds * at(p.k, j, d);
            r.dk[base + j * D + d] += p.scale * ds * at(p.q, i, d);
          }
        }
      }
    }
  }
  return r;
}

}  // namespace triad::conformance
