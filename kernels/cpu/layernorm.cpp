// LayerNorm over the last dimension (llm.c layernorm_forward/backward).
#include <cmath>
#include <cstddef>

#include "column_sums.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C, F eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* x = inp + size_t(n) * C;
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
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
}

template <class F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C) {
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
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const F norm = (x[c] - m) * s;
      di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  // Parameter gradients sum over rows: a separate pass split by columns avoids races.
  detail::add_column_sums(dbias, N, C, [=](int n, int c) { return dout[size_t(n) * C + c]; });
  detail::add_column_sums(dweight, N, C, [=](int n, int c) {
    const size_t i = size_t(n) * C + c;
    return dout[i] * (inp[i] - mean[n]) * rstd[n];
  });
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int, int, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int, int, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int, int);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int, int);

}  // namespace triad::kernels::cpu
