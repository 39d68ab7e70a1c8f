// The double-precision reference the conformance suite trusts, checked independently:
// closed forms where they exist, central finite differences for the gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "triad/core/conformance/conformance.hpp"

namespace triad::conformance {
namespace {

AttentionProblem random_problem(int64_t B, int64_t H, int64_t T, int64_t D, bool causal,
                                uint32_t seed) {
  AttentionProblem p;
  p.B = B, p.H = H, p.T = T, p.D = D, p.causal = causal;
  p.scale = 1.0 / std::sqrt(double(D));
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  for (auto* x : {&p.q, &p.k, &p.v, &p.dout}) {
    x->resize(B * H * T * D);
    for (auto& e : *x) e = n(rng);
  }
  return p;
}

double loss(const AttentionProblem& p) {
  auto r = reference_attention(p);
  double l = 0;
  for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * p.dout[i];
  return l;
}

TEST(ReferenceAttention, SingleKeyIsACopyOfV) {
  auto p = random_problem(1, 2, 1, 4, true, 1);
  auto r = reference_attention(p);
  for (size_t i = 0; i < p.v.size(); ++i) {
    EXPECT_DOUBLE_EQ(r.out[i], p.v[i]);
    EXPECT_DOUBLE_EQ(r.dv[i], p.dout[i]);
    EXPECT_DOUBLE_EQ(r.dq[i], 0.0);
    EXPECT_DOUBLE_EQ(r.dk[i], 0.0);
  }
  for (int h = 0; h < 2; ++h) {
    double s = 0;
    for (int d = 0; d < 4; ++d) s += double(p.q[h * 4 + d]) * p.k[h * 4 + d];
    EXPECT_NEAR(r.lse[h], p.scale * s, 1e-12);
  }
}

TEST(ReferenceAttention, ZeroQueriesAverageTheVisibleValues) {
  for (bool causal : {true, false}) {
    auto p = random_problem(1, 1, 6, 3, causal, 2);
    std::fill(p.q.begin(), p.q.end(), 0.f);
    auto r = reference_attention(p);
    for (int i = 0; i < 6; ++i) {
      const int n = causal ? i + 1 : 6;
      EXPECT_NEAR(r.lse[i], std::log(double(n)), 1e-12);
      for (int d = 0; d < 3; ++d) {
        double mean = 0;
        for (int j = 0; j < n; ++j) mean += p.v[j * 3 + d];
        EXPECT_NEAR(r.out[i * 3 + d], mean / n, 1e-12);
      }
    }
  }
}

// d(sum(out * dout)) / dx against central differences, for x in q, k, v.
TEST(ReferenceAttention, GradientsMatchFiniteDifferences) {
  for (bool causal : {true, false}) {
    const auto p = random_problem(2, 2, 5, 3, causal, causal ? 3 : 4);
    const auto r = reference_attention(p);
    struct Input {
      std::vector<float> AttentionProblem::*x;
      const std::vector<double>* grad;
      const char* name;
    } inputs[] = {{&AttentionProblem::q, &r.dq, "q"},
                  {&AttentionProblem::k, &r.dk, "k"},
                  {&AttentionProblem::v, &r.dv, "v"}};
    for (const auto& in : inputs) {
      for (size_t i = 0; i < (p.*in.x).size(); ++i) {
        AttentionProblem plus = p, minus = p;
        const float h = 1.0f / 1024;  // exact in float, so the step is exactly 2h
        (plus.*in.x)[i] += h;
        (minus.*in.x)[i] -= h;
        const double fd = (loss(plus) - loss(minus)) / (double((plus.*in.x)[i]) - (minus.*in.x)[i]);
        EXPECT_NEAR((*in.grad)[i], fd, 2e-5) << in.name << "[" << i << "] causal " << causal;
      }
    }
  }
}

TEST(ReferenceAttention, CausalFirstRowIgnoresLaterKeys) {
  auto p = random_problem(1, 1, 4, 2, true, 5);
  auto a = reference_attention(p);
  for (size_t i = 2; i < p.k.size(); ++i) p.k[i] += 10.f, p.v[i] -= 3.f;  // keys 1..3 move
  auto b = reference_attention(p);
  EXPECT_DOUBLE_EQ(a.out[0], b.out[0]);
  EXPECT_DOUBLE_EQ(a.out[1], b.out[1]);
  EXPECT_DOUBLE_EQ(a.lse[0], b.lse[0]);
  EXPECT_NE(a.out[2], b.out[2]);
}

}  // namespace
}  // namespace triad::conformance
