// Residual connection: out = a + b.
#include <cstddef>

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

template void residual_forward<float>(float*, const float*, const float*, size_t);
template void residual_forward<double>(double*, const double*, const double*, size_t);
template void residual_backward<float>(float*, float*, const float*, size_t);
template void residual_backward<double>(double*, double*, const double*, size_t);

}  // namespace triad::kernels::cpu
