// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Evaluated as x * sigmoid(2u), which is the same function, so that the only transcendental
// is exp, which vectorises (vexp.hpp).
#include <cmath>
#include <cstddef>

#include "triad/kernels/cpu.hpp"
#include "vexp.hpp"

namespace triad::kernels::cpu {
namespace {

constexpr double kScale = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kCubic = 0.044715;
// exp(-2u) is capped here: beyond it sigmoid(2u) < 2e-35, and the cap keeps exp finite so
// the backward's e * sigmoid^2 never becomes inf * 0.
constexpr double kMaxExp = 80.0;

}  // namespace

template <class F>
void gelu_forward(F* out, const F* inp, size_t n) {
  const F s = F(kScale), k = F(kCubic), cap = F(kMaxExp);
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const F x = inp[i];
    const F u = s * (x + k * x * x * x);
    const F e = detail::vexp(detail::min_of(F(-2) * u, cap));
    out[i] = x / (F(1) + e);
  }
}

namespace {

// d gelu(x) / dx.
template <class F>
inline F gelu_grad(F x) {
  const F s = F(kScale), k = F(kCubic), cap = F(kMaxExp);
  const F u = s * (x + k * x * x * x);
  const F e = detail::vexp(detail::min_of(F(-2) * u, cap));
  const F sig = F(1) / (F(1) + e);  // sigmoid(2u) = (1 + tanh u) / 2
  // d/dx [x sig] = sig + x * 2 sig (1 - sig) du/dx, with 1 - sig = e sig (no cancellation).
  const F du = s * (F(1) + F(3) * k * x * x);
  return sig + x * F(2) * e * sig * sig * du;
}

}  // namespace

template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, size_t n, bool accumulate) {
  // Two loops rather than a branch inside one: the overwriting one never reads dinp.
  if (accumulate) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) dinp[i] += gelu_grad(inp[i]) * dout[i];
  } else {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i) dinp[i] = gelu_grad(inp[i]) * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t, bool);
template void gelu_backward<double>(double*, const double*, const double*, size_t, bool);

}  // namespace triad::kernels::cpu
