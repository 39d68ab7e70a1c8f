// The vectorisable float exp behind softmax and GELU, against libm's exp in double.
#include <cmath>
#include <limits>

#include "kernel_test_util.hpp"
#include "vexp.hpp"

namespace triad::kernels::cpu::test {
namespace {

TEST(Vexp, WithinTwoUlpOfExactOnItsRange) {
  using detail::vexp;
  double worst = 0;
  for (float x = -87.0f; x <= 88.3f; x += 0.00731f) {
    const double exact = std::exp(double(x));
    const double ulp =
        std::nextafter(float(exact), std::numeric_limits<float>::infinity()) - float(exact);
    worst = std::max(worst, std::abs(double(vexp(x)) - exact) / ulp);
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(vexp(0.0f), 1.0f);
}

TEST(Vexp, TailsAreFiniteOrZero) {
  using detail::vexp;
  EXPECT_EQ(vexp(-88.0f), 0.0f);
  EXPECT_EQ(vexp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isfinite(vexp(89.0f)));
  EXPECT_TRUE(std::isfinite(vexp(1e30f)));
  EXPECT_GT(vexp(89.0f), 1e38f);
}

}  // namespace
}  // namespace triad::kernels::cpu::test
