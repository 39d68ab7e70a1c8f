// Residual connection: out = a + b; and a bias broadcast over rows (added after the
// tensor-parallel reduction of a row-parallel matmul).
#include <cstddef>

#include "column_sums.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

template <class F>
void residual_forward(F* out, const F* a, const F* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class F>
void residual_backward(F* da, F* db, const F* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <class F>
void bias_forward(F* out, const F* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    F* o = out + size_t(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
}

template <class F>
void bias_backward(F* dbias, const F* dout, int N, int C) {
  detail::add_column_sums(dbias, N, C, [=](int n, int c) { return dout[size_t(n) * C + c]; });
}

template void bias_forward<float>(float*, const float*, int, int);
template void bias_forward<double>(double*, const double*, int, int);
template void bias_backward<float>(float*, const float*, int, int);
template void bias_backward<double>(double*, const double*, int, int);
template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void residual_backward<float>(float*, float*, const float*, size_t);
template void residual_backward<double>(double*, double*, const double*, size_t);

}  // namespace triad::kernels::cpu
