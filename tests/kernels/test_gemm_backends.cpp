// Both GEMM libraries of the CPU device against a double-precision reference, on this CPU: the
// environment pins OpenBLAS to its AVX2 kernels because older builds miscompute with AVX-512,
// and a fast wrong GEMM is exactly what a loss curve would not show for a while. Shapes: odd
// ones (remainders of every blocking) and GPT-2 small's (fewer rows, the same inner sizes).
#include <cmath>
#include <sstream>
#include <tuple>

#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu {
// Test names and failures say which library ran.
void PrintTo(Gemm g, std::ostream* os) {
  *os << (g == Gemm::onednn ? "onednn" : "openblas");
}

namespace test {
namespace {

struct Shape {
  int N, C, OC;
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << "N " << s.N << ", C " << s.C << ", OC " << s.OC;
}

// Uniform fp32 values in [-1, 1), held as the doubles they are exactly: the reference then sees
// the same inputs, and only the GEMM's own rounding is measured. A plain generator, as the LM
// head's weights alone are 39M values (normal variates would take most of the test's time).
Vec rand_f32(size_t n, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  Vec v(n);
  for (double& x : v) x = double(float(double(int32_t(rng())) / 2147483648.0));
  return v;
}

// A reference result and, per element, the sum of |terms| it added up: an fp32 dot product of
// K terms errs by at most about K * 2^-24 of that sum, whatever the order of summation.
struct Ref {
  Vec value, magnitude;
};

// out (N,OC) = init + inp (N,C) @ w (OC,C)^T, in double.
Ref forward_ref(const Vec& init, const Vec& inp, const Vec& w, const Shape& s) {
  Ref r{init, Vec(init.size())};
  for (int n = 0; n < s.N; ++n)
    for (int o = 0; o < s.OC; ++o) {
      double acc = 0, mag = 0;
      const double* x = &inp[size_t(n) * s.C];
      const double* y = &w[size_t(o) * s.C];
      for (int c = 0; c < s.C; ++c) {
        acc += x[c] * y[c];
        mag += std::abs(x[c] * y[c]);
      }
      r.value[size_t(n) * s.OC + o] += acc;
      r.magnitude[size_t(n) * s.OC + o] = mag + std::abs(init[size_t(n) * s.OC + o]);
    }
  return r;
}

// dinp (N,C) = init + dout (N,OC) @ w (OC,C).
Ref dinp_ref(const Vec& init, const Vec& dout, const Vec& w, const Shape& s) {
  Ref r{init, Vec(init.size())};
  for (size_t i = 0; i < init.size(); ++i) r.magnitude[i] = std::abs(init[i]);
  for (int n = 0; n < s.N; ++n)
    for (int o = 0; o < s.OC; ++o) {
      const double d = dout[size_t(n) * s.OC + o];
      for (int c = 0; c < s.C; ++c) {
        r.value[size_t(n) * s.C + c] += d * w[size_t(o) * s.C + c];
        r.magnitude[size_t(n) * s.C + c] += std::abs(d * w[size_t(o) * s.C + c]);
      }
    }
  return r;
}

// dweight (OC,C) = init + dout^T (OC,N) @ inp (N,C).
Ref dweight_ref(const Vec& init, const Vec& dout, const Vec& inp, const Shape& s) {
  Ref r{init, Vec(init.size())};
  for (size_t i = 0; i < init.size(); ++i) r.magnitude[i] = std::abs(init[i]);
  for (int n = 0; n < s.N; ++n)
    for (int o = 0; o < s.OC; ++o) {
      const double d = dout[size_t(n) * s.OC + o];
      for (int c = 0; c < s.C; ++c) {
        r.value[size_t(o) * s.C + c] += d * inp[size_t(n) * s.C + c];
        r.magnitude[size_t(o) * s.C + c] += std::abs(d * inp[size_t(n) * s.C + c]);
      }
    }
  return r;
}

// 32 units of fp32 rounding (2^-24) of the terms' magnitude: above what a correct GEMM of these
// sizes errs by (at most 6 units with either library, measured), far below a wrong one (the
// magnitude itself, 2^24 units).
constexpr double kTol = 32.0 / (1 << 24);

// The worst element's error in units of its magnitude; names it on failure.
void expect_matches(const std::vector<float>& got, const Ref& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.value.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - ref.value[i]) / (ref.magnitude[i] + 1e-30);
    // NaN compares false: count it as the worst.
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      at = i;
    }
  }
  EXPECT_LE(worst, kTol) << what << ": element " << at << " is " << got[at] << ", the reference "
                         << ref.value[at] << " (terms' magnitude " << ref.magnitude[at] << ")";
}

std::vector<float> to_f32(const Vec& v) {
  return std::vector<float>(v.begin(), v.end());
}

class GemmBackends : public ::testing::TestWithParam<std::tuple<Gemm, Shape>> {};

TEST_P(GemmBackends, MatchDoublePrecision) {
  const auto [gemm, s] = GetParam();
  const size_t NC = size_t(s.N) * s.C, OCC = size_t(s.OC) * s.C, NOC = size_t(s.N) * s.OC;
  const Vec inp = rand_f32(NC, 1), w = rand_f32(OCC, 2), b = rand_f32(s.OC, 3),
            dout = rand_f32(NOC, 4);
  const auto finp = to_f32(inp), fw = to_f32(w), fb = to_f32(b), fdout = to_f32(dout);

  // Forward with a bias (out seeded with it, the GEMM adding onto it) and without (the GEMM
  // overwriting whatever out held).
  Vec bias_rows(NOC);
  for (size_t i = 0; i < NOC; ++i) bias_rows[i] = b[i % s.OC];
  std::vector<float> out(NOC, 7.0f);
  matmul_forward(out.data(), finp.data(), fw.data(), fb.data(), s.N, s.C, s.OC, gemm);
  expect_matches(out, forward_ref(bias_rows, inp, w, s), "out with bias");
  std::fill(out.begin(), out.end(), NAN);
  matmul_forward(out.data(), finp.data(), fw.data(), static_cast<const float*>(nullptr), s.N, s.C,
                 s.OC, gemm);
  expect_matches(out, forward_ref(Vec(NOC), inp, w, s), "out");

  // Backward accumulates onto gradients that already hold something.
  const Vec dinp0 = rand_f32(NC, 5), dw0 = rand_f32(OCC, 6);
  std::vector<float> dinp = to_f32(dinp0), dw = to_f32(dw0), db(s.OC);
  matmul_backward(dinp.data(), dw.data(), db.data(), fdout.data(), finp.data(), fw.data(), s.N, s.C,
                  s.OC, gemm);
  expect_matches(dinp, dinp_ref(dinp0, dout, w, s), "dinp");
  expect_matches(dw, dweight_ref(dw0, dout, inp, s), "dweight");
}

std::string name_of(const ::testing::TestParamInfo<GemmBackends::ParamType>& info) {
  const auto [gemm, s] = info.param;
  std::ostringstream os;
  PrintTo(gemm, &os);
  os << "_N" << s.N << "_C" << s.C << "_OC" << s.OC;
  return os.str();
}

// Odd sizes leave remainders in every block and vector loop; K (C, or N for dweight) of 1.
INSTANTIATE_TEST_SUITE_P(
    OddShapes, GemmBackends,
    ::testing::Combine(::testing::Values(Gemm::onednn, Gemm::openblas),
                       ::testing::Values(Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{37, 65, 19},
                                         Shape{129, 257, 33}, Shape{1, 300, 517})),
    name_of);

// GPT-2 small (C 768, T 256): qkv, attention projection, MLP up and down, and the LM head over
// the real (odd) vocabulary; 64, 37 or 4 rows of the 1024 a batch of 4 has keep the reference
// quick while every inner size is the model's.
INSTANTIATE_TEST_SUITE_P(
    Gpt2Small, GemmBackends,
    ::testing::Combine(::testing::Values(Gemm::onednn, Gemm::openblas),
                       ::testing::Values(Shape{64, 768, 2304}, Shape{64, 768, 768},
                                         Shape{37, 768, 3072}, Shape{64, 3072, 768},
                                         Shape{4, 768, 50257})),
    name_of);

// gpt-tiny (C 128, T 64, batch 16): all 1024 rows, so dweight sums over a whole batch.
INSTANTIATE_TEST_SUITE_P(GptTiny, GemmBackends,
                         ::testing::Combine(::testing::Values(Gemm::onednn, Gemm::openblas),
                                            ::testing::Values(Shape{1024, 128, 384},
                                                              Shape{1024, 512, 128},
                                                              Shape{1024, 128, 256})),
                         name_of);

}  // namespace
}  // namespace test
}  // namespace triad::kernels::cpu
