// The 16-bit floating-point formats a plugin may be handed (bf16, IEEE fp16), converted to and
// from float by bit manipulation, for any compiler (clang 14 on x86-64 has no _Float16). Both
// directions round to nearest, ties to even, as the hardware and the compilers' own conversions
// do; a NaN stays a (quiet) NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace triad::sdk {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) {
  return bits_float(uint32_t(h) << 16);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  // A select, not a branch, so that loops over it vectorise.
  const uint32_t nan = (u >> 16) | 0x40;                            // quiet NaN
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest-even
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant x 2^-24, exact in float
    const float f = float(mant) * 0x1p-24f;
    return sign ? -f : f;
  }
  if (exp == 31)  // infinity, or a NaN (made quiet)
    return bits_float(sign | 0x7f800000u | (mant ? 0x400000u : 0u) | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520: infinity
  if (ax >= 0x38800000u) {                                 // >= 2^-14: normal
    const uint32_t h = (ax - (112u << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
    return uint16_t(sign | h);
  }
  if (ax <= 0x33000000u) return sign;  // <= 2^-25 (a tie to the even 0): zero
  // Subnormal: the value in units of 2^-24, rounded.
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (ax >> 23);  // 14..24
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  if (rest > tie || (rest == tie && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

}  // namespace triad::sdk
