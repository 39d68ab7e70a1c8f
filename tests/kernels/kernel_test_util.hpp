// Helpers for the kernel tests: seeded random data, finite differences and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace triad::kernels::cpu::test {

using Vec = std::vector<double>;

inline Vec randn(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> rand_tokens(size_t n, int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

template <class F>
std::vector<F> cast(const Vec& v) {
  return std::vector<F>(v.begin(), v.end());
}

// Central differences of loss() with respect to every element of x (x is perturbed in place
// and restored), compared with the analytic gradient element by element.
inline void expect_matches_fd(Vec& x, const Vec& analytic, const std::function<double()>& loss,
                              const std::string& name, double h = 1e-5, double rtol = 1e-6) {
  ASSERT_EQ(x.size(), analytic.size()) << name;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = loss();
    x[i] = x0 - h;
    const double fm = loss();
    x[i] = x0;
    const double fd = (fp - fm) / (2 * h);
    EXPECT_NEAR(analytic[i], fd, rtol * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
  }
}

// Element-wise |a - b| <= atol + rtol |b|.
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol,
                  const std::string& name) {
  ASSERT_EQ(a.size(), b.size()) << name;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(double(a[i]), double(b[i]), atol + rtol * std::abs(double(b[i])))
        << name << "[" << i << "]";
}

// Forward tolerances against a double-precision reference: tight for double, fp32-level
// for float (which also checks float and double agree).
template <class F>
constexpr double kRtol = sizeof(F) == 4 ? 2e-5 : 1e-12;

using FloatTypes = ::testing::Types<float, double>;

}  // namespace triad::kernels::cpu::test
