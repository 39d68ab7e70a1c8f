// LayerNorm over the last dimension (llm.c layernorm_forward/backward).
#include <cmath>
#include <cstddef>

#include "column_sums.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

namespace {

// Row n of the layernorm: x (C) -> out, mean[n], rstd[n], given sum = the sum of x.
template <class F>
inline void normalize_row(F* out, F* mean, F* rstd, const F* x, F sum, const F* weight,
                          const F* bias, int n, int C, F eps) {
  const F m = sum / F(C);
  // Two passes: the variance about the mean does not cancel the way E[x^2] - m^2 does.
  F var = 0;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  const F s = F(1) / std::sqrt(var / F(C) + eps);
  F* o = out + size_t(n) * C;
#pragma omp simd
  for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  mean[n] = m;
  rstd[n] = s;
}

}  // namespace

template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C, F eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + size_t(n) * C;
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    normalize_row(out, mean, rstd, x, sum, weight, bias, n, C, eps);
  }
}

template <class F>
void residual_layernorm_forward(F* res, F* out, F* mean, F* rstd, const F* a, const F* b,
                                const F* weight, const F* bias, int N, int C, F eps) {
  // The sum is written and summed in the same sweep; the layernorm's other two sweeps read
  // the row back from L1 instead of from memory.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const size_t row = size_t(n) * C;
    F* x = res + row;
    const F* ar = a + row;
    const F* br = b + row;
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) {
      const F r = ar[c] + br[c];
      x[c] = r;
      sum += r;
    }
    normalize_row(out, mean, rstd, x, sum, weight, bias, n, C, eps);
  }
}

template <class F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + size_t(n) * C;
    const F* d = dout + size_t(n) * C;
    const F m = mean[n];
    const F s = rstd[n];
    F dnorm_sum = 0;
    F dnorm_norm_sum = 0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
    for (int c = 0; c < C; ++c) {
      const F dnorm = weight[c] * d[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (x[c] - m) * s;
    }
    const F dnorm_mean = dnorm_sum / F(C);
    const F dnorm_norm_mean = dnorm_norm_sum / F(C);
    F* di = dinp + size_t(n) * C;
    if (accumulate) {
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const F norm = (x[c] - m) * s;
        di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const F norm = (x[c] - m) * s;
        di[c] = (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  // Parameter gradients sum over rows: a separate pass split by columns avoids races; both in
  // one sweep over dout and inp.
  detail::add_column_sums2(dbias, dweight, N, C, [=](int n, int c, double& db, double& dw) {
    const size_t i = size_t(n) * C + c;
    db += dout[i];
    dw += dout[i] * (inp[i] - mean[n]) * rstd[n];
  });
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int, bool);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int,
                                         bool);
template void residual_layernorm_forward<float>(float*, float*, float*, float*, const float*,
                                                const float*, const float*, const float*, int, int,
                                                float);
template void residual_layernorm_forward<double>(double*, double*, double*, double*, const double*,
                                                 const double*, const double*, const double*, int,
                                                 int, double);

}  // namespace triad::kernels::cpu
