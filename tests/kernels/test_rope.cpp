#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

// q of a packed (B,T,3,H,D) qkv buffer: the strided view attention applies RoPE to.
struct QkvView {
  int B, T, H, D;
  int64_t sb() const { return int64_t(T) * st(); }
  int64_t st() const { return 3 * int64_t(H) * D; }
  int64_t sh() const { return D; }
  size_t size() const { return size_t(B) * sb(); }
  size_t at(int b, int t, int h, int d) const { return b * sb() + t * st() + h * sh() + d; }
};

template <class F>
void fwd(std::vector<F>& x, const QkvView& q, double base = 10000.0) {
  rope_forward(x.data(), q.B, q.T, q.H, q.D, q.sb(), q.st(), q.sh(), base);
}
template <class F>
void bwd(std::vector<F>& x, const QkvView& q, double base = 10000.0) {
  rope_backward(x.data(), q.B, q.T, q.H, q.D, q.sb(), q.st(), q.sh(), base);
}

// Direct formula from the header, in double.
Vec rope_ref(const Vec& x, const QkvView& q, double base) {
  Vec out = x;
  const int half = q.D / 2;
  for (int b = 0; b < q.B; ++b)
    for (int t = 0; t < q.T; ++t)
      for (int h = 0; h < q.H; ++h)
        for (int i = 0; i < half; ++i) {
          const double a = t * std::pow(base, -2.0 * i / q.D);
          const double x1 = x[q.at(b, t, h, i)], x2 = x[q.at(b, t, h, i + half)];
          out[q.at(b, t, h, i)] = x1 * std::cos(a) - x2 * std::sin(a);
          out[q.at(b, t, h, i + half)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
  return out;
}

TEST(Rope, ForwardMatchesFormulaAndLeavesKvAlone) {
  for (int D : {8, 6}) {
    const QkvView q{2, 5, 3, D};
    const Vec x = randn(q.size(), 1);
    for (double base : {10000.0, 500.0}) {
      Vec y = x;
      fwd(y, q, base);
      // Checks the rotated q entries, and that k and v (outside the view) are untouched.
      const Vec ref = rope_ref(x, q, base);
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-13) << i;
    }
  }
}

// Tokens that start at position pos0 (a context-parallel rank's) rotate as the same tokens do
// inside a longer sequence that starts at 0, bit for bit, forward and backward.
TEST(Rope, PositionOffsetEqualsTheSameRowsOfALongerSequence) {
  const QkvView whole{2, 24, 3, 8}, part{2, 7, 3, 8};
  const int pos0 = 13;
  for (bool backward : {false, true}) {
    const Vec r = randn(whole.size(), 3);
    std::vector<float> w(r.begin(), r.end());
    std::vector<float> p(part.size());
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < part.T; ++t)
        for (size_t k = 0; k < size_t(part.st()); ++k)
          p[b * part.sb() + t * part.st() + k] = w[b * whole.sb() + (pos0 + t) * whole.st() + k];
    auto apply = [&](std::vector<float>& x, const QkvView& q, int64_t at) {
      if (backward)
        rope_backward(x.data(), q.B, q.T, q.H, q.D, q.sb(), q.st(), q.sh(), 10000.0, at);
      else
        rope_forward(x.data(), q.B, q.T, q.H, q.D, q.sb(), q.st(), q.sh(), 10000.0, at);
    };
    apply(w, whole, 0);
    apply(p, part, pos0);
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < part.T; ++t)
        for (size_t k = 0; k < size_t(part.st()); ++k)
          ASSERT_EQ(p[b * part.sb() + t * part.st() + k],
                    w[b * whole.sb() + (pos0 + t) * whole.st() + k])
              << "b " << b << " t " << t << " k " << k << (backward ? " backward" : " forward");
  }
}

TEST(Rope, ForwardPreservesNormsAndFloatAgreesAtLongPositions) {
  const QkvView q{1, 4096, 2, 16};
  const Vec x = randn(q.size(), 2);
  Vec y = x;
  fwd(y, q);
  for (int t = 0; t < q.T; t += 97)
    for (int h = 0; h < q.H; ++h) {
      double nx = 0, ny = 0;
      for (int d = 0; d < q.D; ++d) {
        nx += x[q.at(0, t, h, d)] * x[q.at(0, t, h, d)];
        ny += y[q.at(0, t, h, d)] * y[q.at(0, t, h, d)];
      }
      EXPECT_NEAR(ny, nx, 1e-12 * nx);
    }
  auto fy = cast<float>(x);
  fwd(fy, q);
  expect_close(fy, y, 1e-5, 1e-5, "float rope");
}

TEST(Rope, BackwardIsTheTranspose) {
  const QkvView q{2, 7, 3, 10};
  const Vec x = randn(q.size(), 3), g = randn(q.size(), 4);
  Vec rx = x, rtg = g;
  fwd(rx, q);
  bwd(rtg, q);
  EXPECT_NEAR(dot(rx, g), dot(x, rtg), 1e-12 * std::sqrt(dot(x, x) * dot(g, g)));
  bwd(rx, q);  // orthogonal: the transpose undoes the rotation
  expect_close(rx, x, 1e-13, 1e-13, "R^T R x");
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const QkvView q{1, 5, 2, 6};
  Vec x = randn(q.size(), 5);
  const Vec r = randn(q.size(), 6);
  auto loss = [&] {
    Vec y = x;
    fwd(y, q);
    return dot(r, y);
  };
  Vec dx = r;
  bwd(dx, q);
  // Entries outside the q view pass through unchanged, so their gradient is r itself.
  expect_matches_fd(x, dx, loss, "dx");
}

}  // namespace
}  // namespace triad::kernels::cpu::test
