// Row operations on a score tile, shared by flash1 and flash2. Scores arrive already in base 2
// (q was scaled by scale * log2(e) when packed), so softmax needs exp2 only.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace triad::flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// 2^x to ~2 ulp, written so a loop over it vectorises (libm's exp2f does not without
// -ffast-math). Cephes exp2f: x = n + f with f in [-0.5, 0.5], 2^f by a degree-6 polynomial,
// 2^n by building the exponent bits. Inputs below -126 (masked scores are -inf) give exactly 0.
inline float exp2_approx(float x) {
  const float xc = x < -126.f ? -126.f : (x > 127.f ? 127.f : x);
  // Round to nearest through the float mantissa: exact for |x| < 2^22.
  const float n = (xc + 12582912.f) - 12582912.f;
  const float f = xc - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -126.f ? 0.f : p * two_n;
}

// Sets s[c] = -inf for c >= valid (keys past the end or, on the causal diagonal, in the future).
inline void mask_from(float* s, int valid, int width) {
#pragma omp simd
  for (int c = 0; c < width; ++c) s[c] = c < valid ? s[c] : kNegInf;
}

inline float row_max(const float* s, int width) {
  float m = kNegInf;
#pragma omp simd reduction(max : m)
  for (int c = 0; c < width; ++c) m = s[c] > m ? s[c] : m;
  return m;
}

// s[c] = 2^(s[c] - offset); returns the row sum.
inline float exp2_row(float* s, float offset, int width) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < width; ++c) {
    const float p = exp2_approx(s[c] - offset);
    s[c] = p;
    sum += p;
  }
  return sum;
}

// The offset a row subtracts before exp2: its max, or 0 while every key so far is masked
// (then all p are 0 and nothing is rescaled by -inf - -inf).
inline float safe_offset(float m) {
  return m == kNegInf ? 0.f : m;
}

}  // namespace triad::flash
