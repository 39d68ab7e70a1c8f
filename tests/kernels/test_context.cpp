// attention_merge (the ring's log-sum-exp merge of a partial attention output) against the
// definition: two parts over disjoint keys merge into the softmax over their union, and a part
// that saw no keys (lse -inf) changes nothing.
#include <cmath>
#include <limits>
#include <vector>

#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(AttentionMerge, EqualsTheSoftmaxOverBothPartsKeys) {
  // One (b, h) with 4 rows of D = 3; out and lse contiguous.
  const int64_t S = 4, D = 3;
  const RowStrides os{{S * D, S * D, D}}, ls{{S, S, 1}};
  std::vector<double> out(size_t(S * D)), part(size_t(S * D));
  std::vector<double> lse{0.5, -1.0, 3.0, -kInf}, plse{1.5, -kInf, -2.0, 0.25};
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = std::sin(double(i) + 1.0);
    part[i] = std::cos(2.0 * double(i));
  }
  const std::vector<double> out0 = out, lse0 = lse;
  attention_merge(out.data(), os, lse.data(), ls, part.data(), plse.data(), 1, 1, S, D, false);
  for (int64_t s = 0; s < S; ++s) {
    SCOPED_TRACE(s);
    // Each part's output is its keys' softmax average; its weight in the union is e^lse.
    const double w0 = std::exp(lse0[size_t(s)]), w1 = std::exp(plse[size_t(s)]);
    EXPECT_NEAR(lse[size_t(s)], std::log(w0 + w1), 1e-12);
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(s * D + d);
      EXPECT_NEAR(out[i], (w0 * out0[i] + w1 * part[i]) / (w0 + w1), 1e-12);
    }
  }
}

TEST(AttentionMerge, FirstPartIsCopied) {
  const int64_t S = 2, D = 2;
  const RowStrides os{{S * D, S * D, D}}, ls{{S, S, 1}};
  std::vector<double> out(4, 7.0), lse(2, 9.0);
  const std::vector<double> part{1, 2, 3, 4}, plse{-kInf, 0.5};
  attention_merge(out.data(), os, lse.data(), ls, part.data(), plse.data(), 1, 1, S, D, true);
  EXPECT_EQ(out, part);
  EXPECT_EQ(lse, plse);
}

}  // namespace
}  // namespace triad::kernels::cpu::test
