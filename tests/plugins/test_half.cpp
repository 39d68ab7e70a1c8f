// The SDK's 16-bit float conversions (triad/sdk/half.hpp) against the compiler's _Float16 (every
// fp16 value, every tie between two, random floats) and bf16 against nearest-even computed in
// double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "triad/sdk/half.hpp"

namespace sdk = triad::sdk;

namespace {

#if defined(__FLT16_MANT_DIG__)
uint16_t ref_to_fp16(float f) {
  const _Float16 h = _Float16(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float ref_fp16_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return float(h);
}

// Equal bits, or both NaN with the same sign (the payload's quiet bit may differ).
bool same_fp16(uint16_t a, uint16_t b) {
  auto nan = [](uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); };
  return a == b || (nan(a) && nan(b) && (a & 0x8000u) == (b & 0x8000u));
}
#endif

}  // namespace

TEST(Half, Fp16ToFloatEveryValue) {
#if defined(__FLT16_MANT_DIG__)
  for (uint32_t u = 0; u < 0x10000u; ++u) {
    const float got = sdk::fp16_to_float(uint16_t(u)), want = ref_fp16_to_float(uint16_t(u));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << u;
    } else {
      ASSERT_EQ(sdk::float_bits(got), sdk::float_bits(want)) << std::hex << u;
    }
  }
#else
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#endif
}

TEST(Half, FloatToFp16RoundTripsTiesAndRandom) {
#if defined(__FLT16_MANT_DIG__)
  for (uint32_t u = 0; u < 0x10000u; ++u) {
    const float f = ref_fp16_to_float(uint16_t(u));
    ASSERT_TRUE(same_fp16(sdk::float_to_fp16(f), ref_to_fp16(f))) << std::hex << u;
    // The midpoint to the next value up (a tie) and the floats either side of it.
    if ((u & 0x7fffu) >= 0x7c00u) continue;
    const double mid = (double(f) + double(ref_fp16_to_float(uint16_t(u + 1)))) / 2;
    const float m = float(mid);  // exact: fp16 midpoints fit in a float
    for (float g :
         {m, std::nextafter(m, 0.0f), std::nextafter(m, 1e30f), std::nextafter(m, -1e30f)})
      ASSERT_EQ(sdk::float_to_fp16(g), ref_to_fp16(g)) << std::hex << u << " " << g;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = sdk::bits_float(rng());
    ASSERT_TRUE(same_fp16(sdk::float_to_fp16(f), ref_to_fp16(f))) << std::hex << sdk::float_bits(f);
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  0x1p-25f, 0x1.000002p-25f, 0x1p-24f, 0x1.8p-24f, 0x1p-14f, -0.0f})
    EXPECT_EQ(sdk::float_to_fp16(f), ref_to_fp16(f)) << f;
#else
  GTEST_SKIP() << "this compiler has no _Float16 to compare with";
#endif
}

TEST(Half, Bf16NearestEven) {
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t u = rng();
    const float f = sdk::bits_float(u);
    const uint16_t got = sdk::float_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(sdk::bf16_to_float(got))) << std::hex << u;
      continue;
    }
    if (std::isinf(f)) {
      ASSERT_EQ(got, uint16_t(u >> 16));
      continue;
    }
    // The two bf16 values around f (truncation and the next one away from zero), the nearer one,
    // the even one on a tie; past the largest finite value the next one up is infinity.
    const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
    const double dlo = sdk::bf16_to_float(lo), d = f;
    const double dhi = (hi & 0x7fffu) == 0x7f80u ? std::copysign(0x1p128, d)  // as if unbounded
                                                 : double(sdk::bf16_to_float(hi));
    const double elo = std::fabs(d - dlo), ehi = std::fabs(dhi - d);
    const uint16_t want = elo < ehi ? lo : ehi < elo ? hi : (lo & 1u) ? hi : lo;
    ASSERT_EQ(got, want) << std::hex << u;
    ASSERT_EQ(sdk::float_bits(sdk::bf16_to_float(got)), uint32_t(got) << 16);
  }
}
