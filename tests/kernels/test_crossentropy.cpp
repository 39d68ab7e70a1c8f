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

// A row longer than the forward's chunk (one pass, online max and sum): the max rising
// chunk after chunk (every earlier sum rescaled), falling, and a GPT-2-sized vocabulary.
TYPED_TEST(CrossEntropy, ForwardOnePassOverLongRows) {
  using F = TypeParam;
  const int N = 3, V = 50257;
  Vec z = randn(size_t(N) * V, 5, 2.0);
  for (int v = 0; v < V; ++v) {
    z[v] += 30.0 * v / V;
    z[V + v] -= 30.0 * v / V;
  }
  const auto fz = cast<F>(z);
  const auto tgt = rand_tokens(N, V, 6);
  std::vector<F> loss(N), lse(N);
  crossentropy_forward(loss.data(), lse.data(), fz.data(), tgt.data(), N, V);
  Vec rloss, rlse;
  crossentropy_ref(rloss, rlse, Vec(fz.begin(), fz.end()), tgt, N, V);
  expect_close(loss, rloss, 4 * kRtol<F>, 4 * kRtol<F>, "loss");
  expect_close(lse, rlse, 4 * kRtol<F>, 4 * kRtol<F>, "lse");
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

// A padded vocabulary: the columns past `valid` get no probability and no gradient, and the loss
// is the unpadded row's.
TYPED_TEST(CrossEntropy, PaddingColumnsAreIgnored) {
  using F = TypeParam;
  const int N = 6, V = 37, Vp = 64;
  const auto z = logits(N, V, 7);
  const auto tgt = rand_tokens(N, V, 8);
  std::vector<F> padded(size_t(N) * Vp, F(50));  // large: any leak into the softmax shows
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) padded[n * Vp + v] = F(z[n * V + v]);
  std::vector<F> loss(N), lse(N);
  crossentropy_forward(loss.data(), lse.data(), padded.data(), tgt.data(), N, Vp, V);
  Vec rloss, rlse;
  const auto zf = cast<F>(z);
  crossentropy_ref(rloss, rlse, Vec(zf.begin(), zf.end()), tgt, N, V);
  expect_close(loss, rloss, kRtol<F>, kRtol<F>, "loss");
  crossentropy_backward(padded.data(), padded.data(), lse.data(), tgt.data(), F(1), N, Vp, V);
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) ASSERT_EQ(padded[n * Vp + v], F(0)) << n << "," << v;
}

// Vocab-parallel: the vocabulary split over 3 shards (the last one padding only past `valid`),
// the row max and sums reduced across them as the tensor group does, gives the fused result;
// each shard's backward is its columns of the whole gradient.
TYPED_TEST(CrossEntropy, VocabShardsReduceToTheWholeRow) {
  using F = TypeParam;
  const int N = 5, V = 50, shards = 3, Vl = 20;  // padded to 60: shard 2 holds 10 real + 10 pad
  const auto zd = logits(N, V, 9);
  const auto z = cast<F>(zd);
  const auto tgt = rand_tokens(N, V, 10);
  std::vector<F> loss(N), lse(N);
  crossentropy_forward(loss.data(), lse.data(), z.data(), tgt.data(), N, V);
  std::vector<std::vector<F>> part(shards, std::vector<F>(size_t(N) * Vl, F(-7)));
  for (int r = 0; r < shards; ++r)
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vl && r * Vl + v < V; ++v) part[r][n * Vl + v] = z[n * V + r * Vl + v];
  auto valid = [&](int r) { return std::max(0, std::min(Vl, V - r * Vl)); };
  std::vector<F> mx(N, -INFINITY), sums(N, F(0)), target(N, F(0));
  for (int r = 0; r < shards; ++r) {
    std::vector<F> m(N);
    crossentropy_row_max(m.data(), part[r].data(), N, Vl, valid(r));
    for (int n = 0; n < N; ++n) mx[n] = std::max(mx[n], m[n]);
  }
  for (int r = 0; r < shards; ++r) {
    std::vector<F> s(N), t(N);
    crossentropy_row_sums(s.data(), t.data(), part[r].data(), mx.data(), tgt.data(), N, Vl,
                          valid(r), int64_t(r) * Vl);
    for (int n = 0; n < N; ++n) sums[n] += s[n], target[n] += t[n];
  }
  std::vector<F> ploss(N), plse(N);
  crossentropy_finish(ploss.data(), plse.data(), mx.data(), sums.data(), target.data(), N);
  expect_close(ploss, Vec(loss.begin(), loss.end()), kRtol<F>, kRtol<F>, "loss");
  expect_close(plse, Vec(lse.begin(), lse.end()), kRtol<F>, kRtol<F>, "lse");
  std::vector<F> whole(size_t(N) * V);
  crossentropy_backward(whole.data(), z.data(), lse.data(), tgt.data(), F(0.5), N, V);
  for (int r = 0; r < shards; ++r) {
    crossentropy_backward(part[r].data(), part[r].data(), plse.data(), tgt.data(), F(0.5), N, Vl,
                          valid(r), int64_t(r) * Vl);
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < Vl; ++v) {
        const double want = r * Vl + v < V ? double(whole[n * V + r * Vl + v]) : 0.0;
        ASSERT_NEAR(double(part[r][n * Vl + v]), want, 10 * kRtol<F> * (1 + std::abs(want)))
            << "shard " << r << " row " << n << " col " << v;
      }
  }
}

}  // namespace
}  // namespace triad::kernels::cpu::test
