#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

TEST(SumSquares, MatchesLoop) {
  const Vec x = randn(100003, 1);
  double ref = 0;
  for (double e : x) ref += e * e;
  EXPECT_NEAR(sum_squares(x.data(), x.size()), ref, 1e-12 * ref);
  const auto fx = cast<float>(x);
  double fref = 0;
  for (float e : fx) fref += double(e) * double(e);
  EXPECT_NEAR(sum_squares(fx.data(), fx.size()), fref, 1e-12 * fref);
  EXPECT_EQ(sum_squares(fx.data(), 0), 0.0);
}

TEST(SumSquares, AccumulatesFloatInDouble) {
  // 4096^2 = 2^24: a float accumulator stops counting the ones that follow.
  std::vector<float> x(1001, 1.0f);
  x[0] = 4096.0f;
  EXPECT_EQ(sum_squares(x.data(), x.size()), 16777216.0 + 1000.0);
}

TEST(ScaleInplace, ScalesEveryElement) {
  const Vec x = randn(1001, 2);
  Vec y = x;
  scale_inplace(y.data(), y.size(), 0.25);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], 0.25 * x[i]);
  auto fy = cast<float>(x);
  scale_inplace(fy.data(), fy.size(), 3.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(fy[i], float(x[i]) * 3.0f);
}

}  // namespace
}  // namespace triad::kernels::cpu::test
