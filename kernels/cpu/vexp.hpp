// exp that GCC vectorises inside `#pragma omp simd` loops. glibc's expf has a vector variant
// only under -ffast-math, and the softmax over the vocabulary and GELU spend most of their
// time in exp, so float gets a branch-free Cephes-style expf (about 1 ulp on its range).
// double (used by the finite-difference tests) keeps the libm exp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace triad::kernels::cpu::detail {

// Ternaries rather than std::min/max: a reference to a temporary inside an `omp simd` loop
// becomes a per-lane array and stops the vectoriser.
template <class F>
inline F min_of(F a, F b) {
  return a < b ? a : b;
}
template <class F>
inline F max_of(F a, F b) {
  return a > b ? a : b;
}

inline float vexp(float x) {
  // Below kLo the result is flushed to 0; above kHi it saturates at exp(kHi) ~ 2.4e38
  // (n must stay <= 127 so the exponent bits below cannot overflow into inf/NaN).
  constexpr float kLo = -87.33654f;
  constexpr float kHi = 88.37626f;
  const float xc = min_of(max_of(x, kLo), kHi);
  // n = round(x / ln2) by adding and removing 1.5 * 2^23 (no -ffast-math, so not folded).
  constexpr float kShift = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + kShift) - kShift;
  // r = x - n ln2, with ln2 split in two so n * ln2_hi is exact.
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < kLo ? 0.0f : y * scale;
}

inline double vexp(double x) {
  return std::exp(x);
}

}  // namespace triad::kernels::cpu::detail
