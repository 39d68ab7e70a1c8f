// Whole-buffer reductions and scaling, used for gradient-norm clipping.
#include <cstddef>

#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

template <class F>
double sum_squares(const F* x, size_t n) {
  double sum = 0.0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
  for (size_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

template <class F>
void scale_inplace(F* x, size_t n, F s) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

template double sum_squares<float>(const float*, size_t);
template double sum_squares<double>(const double*, size_t);
template void scale_inplace<float>(float*, size_t, float);
template void scale_inplace<double>(double*, size_t, double);

}  // namespace triad::kernels::cpu
