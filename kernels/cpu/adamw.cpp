// AdamW with PyTorch's (torch.optim.AdamW) order of operations, so a run matches PyTorch to
// fp32 rounding: decay first (p *= 1 - lr wd), then the bias-corrected Adam step with
// denom = sqrt(v) / sqrt(1 - b2^t) + eps.
#include <cmath>
#include <cstddef>

#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {

template <class F>
void adamw_update(F* params, const F* grads, F* m, F* v, size_t n, F lr, F beta1, F beta2, F eps,
                  F weight_decay, int t) {
  // Scalars in double, then rounded once, as PyTorch does with its Python-float arguments.
  const double bc1 = 1.0 - std::pow(double(beta1), t);
  const double bc2 = 1.0 - std::pow(double(beta2), t);
  const F decay = F(1.0 - double(lr) * double(weight_decay));
  const F neg_step = F(-(double(lr) / bc1));
  const F bc2_sqrt = F(std::sqrt(bc2));
  const F one_minus_b1 = F(1.0 - double(beta1));
  const F one_minus_b2 = F(1.0 - double(beta2));
  // Biases and layernorm weights are a few thousand elements: waking the thread team (a
  // futex round trip per thread when threads wait passively) costs more than the update.
  constexpr size_t kParallelFrom = size_t(1) << 15;
#pragma omp parallel for simd schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) {
    const F g = grads[i];
    const F mi = beta1 * m[i] + one_minus_b1 * g;
    const F vi = beta2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const F denom = std::sqrt(vi) / bc2_sqrt + eps;
    const F p = params[i] * decay;
    params[i] = p + neg_step * mi / denom;  // addcdiv_'s order
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, size_t, float, float, float,
                                  float, float, int);
template void adamw_update<double>(double*, const double*, double*, double*, size_t, double, double,
                                   double, double, double, int);

}  // namespace triad::kernels::cpu
