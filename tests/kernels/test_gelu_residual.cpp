#include <cmath>

#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

// GPT-2's GELU exactly as written: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Inputs spanning the tails (large |x|, where the exp in the kernel saturates) and the middle.
Vec gelu_inputs() {
  Vec x = randn(301, 1, 2.0);
  for (double e : {-100.0, -30.0, -12.0, -5.0, -1e-3, 0.0, 1e-3, 5.0, 12.0, 30.0, 100.0})
    x.push_back(e);
  return x;
}

template <class F>
class Gelu : public ::testing::Test {};
TYPED_TEST_SUITE(Gelu, FloatTypes);

TYPED_TEST(Gelu, ForwardMatchesTanhFormula) {
  using F = TypeParam;
  auto fx = cast<F>(gelu_inputs());
  std::vector<F> out(fx.size());
  gelu_forward(out.data(), fx.data(), fx.size());
  Vec ref(fx.size());
  for (size_t i = 0; i < fx.size(); ++i) ref[i] = gelu_ref(fx[i]);
  expect_close(out, ref, kRtol<F>, kRtol<F>, "gelu");
}

TYPED_TEST(Gelu, BackwardMatchesDerivativeAndAccumulates) {
  using F = TypeParam;
  const Vec x = gelu_inputs();
  auto fx = cast<F>(x);
  const auto fd = cast<F>(randn(x.size(), 2));
  std::vector<F> g0 = cast<F>(randn(x.size(), 3)), g = g0;
  gelu_backward(g.data(), fx.data(), fd.data(), fx.size());
  gelu_backward(g.data(), fx.data(), fd.data(), fx.size());
  for (size_t i = 0; i < x.size(); ++i) {
    // Derivative of the reference by a central difference at a large-enough step.
    const double xi = fx[i], h = 1e-5 * std::max(1.0, std::abs(xi));
    const double d = (gelu_ref(xi + h) - gelu_ref(xi - h)) / (2 * h);
    const double expect = double(g0[i]) + 2 * d * double(fd[i]);
    EXPECT_NEAR(g[i], expect, 5 * kRtol<F> + 1e-8 + 5 * kRtol<F> * std::abs(expect)) << xi;
  }
}

TEST(Gelu, BackwardOverwritesWhenAsked) {
  const auto fx = cast<float>(gelu_inputs());
  const auto fd = cast<float>(randn(fx.size(), 4));
  std::vector<float> zeros(fx.size(), 0.f), over(fx.size(), std::nanf(""));
  gelu_backward(zeros.data(), fx.data(), fd.data(), fx.size());
  gelu_backward(over.data(), fx.data(), fd.data(), fx.size(), false);
  EXPECT_EQ(over, zeros);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  Vec x = randn(13, 4, 2.0);
  const Vec r = randn(13, 5);
  Vec out(13);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), x.size());
    return dot(r, out);
  };
  Vec dx(13);
  gelu_backward(dx.data(), x.data(), r.data(), x.size());
  expect_matches_fd(x, dx, loss, "dinp");
}

TEST(Residual, ForwardIsSum) {
  const size_t n = 1001;
  const Vec a = randn(n, 6), b = randn(n, 7);
  Vec out(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  std::vector<float> fo(n);
  const auto fa = cast<float>(a), fb = cast<float>(b);
  residual_forward(fo.data(), fa.data(), fb.data(), n);
  expect_close(fo, out, 1e-6, 1e-6, "float out");
}

TEST(Residual, BackwardMatchesFiniteDifferences) {
  const size_t n = 17;
  Vec a = randn(n, 8), b = randn(n, 9);
  const Vec r = randn(n, 10);
  Vec out(n);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), n);
    return dot(r, out);
  };
  Vec da(n), db(n);
  residual_backward(da.data(), db.data(), r.data(), n);
  expect_matches_fd(a, da, loss, "da");
  expect_matches_fd(b, db, loss, "db");
}

TEST(Residual, BackwardAccumulates) {
  const size_t n = 1001;
  const Vec dout = randn(n, 11), g0a = randn(n, 12), g0b = randn(n, 13);
  Vec da = g0a, db = g0b;
  for (int k = 0; k < 2; ++k) residual_backward(da.data(), db.data(), dout.data(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_DOUBLE_EQ(da[i], g0a[i] + dout[i] + dout[i]);
    EXPECT_DOUBLE_EQ(db[i], g0b[i] + dout[i] + dout[i]);
  }
}

}  // namespace
}  // namespace triad::kernels::cpu::test
