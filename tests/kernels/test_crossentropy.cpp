#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

// Per row: lse = log sum_v exp(z_v) (shifted by the row max), loss = lse - z[target].
void crossentropy_ref(Vec& loss, Vec& lse, const Vec& z, const std::vector<int32_t>& tgt, int N,
                      int V) {
  loss.assign(N, 0.0);
  lse.assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    double mx = z[n * V];
    for (int v = 1; v < V; ++v) mx = std::max(mx, z[n * V + v]);
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(z[n * V + v] - mx);
    lse[n] = mx + std::log(s);
    loss[n] = lse[n] - z[n * V + tgt[n]];
  }
}

// Logits with a large common offset in some rows: a softmax without the max shift overflows.
Vec logits(int N, int V, uint64_t seed) {
  Vec z = randn(size_t(N) * V, seed, 3.0);
  for (int v = 0; v < V; ++v) z[v] += 1000.0;
  if (N > 1)
    for (int v = 0; v < V; ++v) z[V + v] -= 500.0;
  return z;
}

template <class F>
class CrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropy, FloatTypes);

TYPED_TEST(CrossEntropy, ForwardMatchesDefinition) {
  using F = TypeParam;
  for (auto [N, V] : {std::pair{5, 11}, std::pair{7, 1003}}) {
    const auto fz = cast<F>(logits(N, V, 1));
    const auto tgt = rand_tokens(N, V, 2);
    std::vector<F> loss(N), lse(N);
    crossentropy_forward(loss.data(), lse.data(), fz.data(), tgt.data(), N, V);
    Vec rloss, rlse;
    crossentropy_ref(rloss, rlse, Vec(fz.begin(), fz.end()), tgt, N, V);
    expect_close(loss, rloss, kRtol<F>, kRtol<F>, "loss");
    expect_close(lse, rlse, kRtol<F>, kRtol<F>, "lse");
  }
}

TYPED_TEST(CrossEntropy, BackwardIsSoftmaxMinusOneHotInPlaceOrNot) {
  using F = TypeParam;
  const int N = 7, V = 1003;
  const F dloss = F(0.37);
  const auto z = cast<F>(logits(N, V, 3));
  const auto tgt = rand_tokens(N, V, 4);
  std::vector<F> loss(N), lse(N);
  crossentropy_forward(loss.data(), lse.data(), z.data(), tgt.data(), N, V);
  std::vector<F> dz(size_t(N) * V, F(123));  // garbage: backward overwrites
  crossentropy_backward(dz.data(), z.data(), lse.data(), tgt.data(), dloss, N, V);
  std::vector<F> inplace = z;
  crossentropy_backward(inplace.data(), inplace.data(), lse.data(), tgt.data(), dloss, N, V);
  EXPECT_EQ(inplace, dz);

  Vec rloss, rlse;
  const Vec zd(z.begin(), z.end());
  crossentropy_ref(rloss, rlse, zd, tgt, N, V);
  Vec ref(size_t(N) * V);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v)
      ref[n * V + v] = double(dloss) * (std::exp(zd[n * V + v] - rlse[n]) - (v == tgt[n]));
  expect_close(dz, ref, 10 * kRtol<F>, 1e-3 * kRtol<F>, "dlogits");
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int N = 5, V = 11;
  const double dloss = 0.37;
  Vec z = randn(N * V, 5, 2.0);
  const auto tgt = rand_tokens(N, V, 6);
  Vec loss(N), lse(N);
  auto f = [&] {
    crossentropy_forward(loss.data(), lse.data(), z.data(), tgt.data(), N, V);
    double s = 0;
    for (double l : loss) s += dloss * l;
    return s;
  };
  f();
  Vec dz(N * V);
  crossentropy_backward(dz.data(), z.data(), lse.data(), tgt.data(), dloss, N, V);
  expect_matches_fd(z, dz, f, "dlogits");
}

}  // namespace
}  // namespace triad::kernels::cpu::test
