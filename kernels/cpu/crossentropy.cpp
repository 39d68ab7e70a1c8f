// Softmax + cross-entropy fused over the vocabulary. Forward keeps only the log-sum-exp of
// each row; backward recomputes the probabilities from it, so no (N,V) softmax buffer exists.
#include <cmath>
#include <cstddef>
#include <limits>

#include "triad/kernels/cpu.hpp"
#include "vexp.hpp"

namespace triad::kernels::cpu {

template <class F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N,
                          int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const F* z = logits + size_t(n) * V;
    F zmax = -std::numeric_limits<F>::infinity();
#pragma omp simd reduction(max : zmax)
    for (int v = 0; v < V; ++v) zmax = z[v] > zmax ? z[v] : zmax;
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; ++v) sum += detail::vexp(z[v] - zmax);
    lse[n] = zmax + std::log(sum);
    losses[n] = lse[n] - z[targets[n]];
  }
}

template <class F>
void crossentropy_backward(F* dlogits, const F* logits, const F* lse, const int32_t* targets,
                           F dloss, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    // Each element is read before it is written, so dlogits may alias logits.
    const F* z = logits + size_t(n) * V;
    F* dz = dlogits + size_t(n) * V;
    const F l = lse[n];
#pragma omp simd
    for (int v = 0; v < V; ++v) dz[v] = dloss * detail::vexp(z[v] - l);
    dz[targets[n]] -= dloss;
  }
}

template void crossentropy_forward<float>(float*, float*, const float*, const int32_t*, int, int);
template void crossentropy_forward<double>(double*, double*, const double*, const int32_t*, int,
                                           int);
template void crossentropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                           float, int, int);
template void crossentropy_backward<double>(double*, const double*, const double*, const int32_t*,
                                            double, int, int);

}  // namespace triad::kernels::cpu
