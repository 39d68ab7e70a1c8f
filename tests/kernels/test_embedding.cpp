#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

template <class F>
class Embedding : public ::testing::Test {};
TYPED_TEST_SUITE(Embedding, FloatTypes);

TYPED_TEST(Embedding, ForwardLooksUpAndAdds) {
  using F = TypeParam;
  const int B = 2, T = 5, C = 7, V = 11;
  const auto tok = rand_tokens(B * T, V, 1);
  const Vec wte = randn(V * C, 2), wpe = randn(T * C, 3);
  auto fte = cast<F>(wte), fpe = cast<F>(wpe);
  std::vector<F> out(B * T * C);
  embedding_forward(out.data(), tok.data(), fte.data(), fpe.data(), B, T, C);
  Vec ref(B * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        ref[(b * T + t) * C + c] = wte[tok[b * T + t] * C + c] + wpe[t * C + c];
  expect_close(out, ref, kRtol<F>, kRtol<F>, "out");

  embedding_forward(out.data(), tok.data(), fte.data(), static_cast<const F*>(nullptr), B, T, C);
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) EXPECT_EQ(out[bt * C + c], fte[tok[bt] * C + c]);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int B = 3, T = 5, C = 7, V = 4;  // V < B*T: tokens repeat, gradients must add up
  const auto tok = rand_tokens(B * T, V, 4);
  Vec wte = randn(V * C, 5), wpe = randn(T * C, 6);
  const Vec r = randn(B * T * C, 7);
  Vec out(B * T * C);
  auto loss = [&] {
    embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(r, out);
  };
  Vec dwte(V * C), dwpe(T * C);
  embedding_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), B, T, C);
  expect_matches_fd(wte, dwte, loss, "dwte");
  expect_matches_fd(wpe, dwpe, loss, "dwpe");
}

TEST(Embedding, BackwardAccumulatesWideRowsAndNoPositions) {
  // C spans several column blocks, with a ragged last one.
  const int B = 2, T = 9, C = 75, V = 5;
  const auto tok = rand_tokens(B * T, V, 8);
  const Vec dout = randn(B * T * C, 9);
  Vec ref_te(V * C, 0.0), ref_pe(T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        ref_te[tok[b * T + t] * C + c] += dout[(b * T + t) * C + c];
        ref_pe[t * C + c] += dout[(b * T + t) * C + c];
      }
  const Vec g0te = randn(V * C, 10), g0pe = randn(T * C, 11);
  Vec dte = g0te, dpe = g0pe;
  for (int k = 0; k < 2; ++k)
    embedding_backward(dte.data(), dpe.data(), dout.data(), tok.data(), B, T, C);
  for (size_t i = 0; i < dte.size(); ++i) EXPECT_NEAR(dte[i], g0te[i] + 2 * ref_te[i], 1e-12);
  for (size_t i = 0; i < dpe.size(); ++i) EXPECT_NEAR(dpe[i], g0pe[i] + 2 * ref_pe[i], 1e-12);

  std::vector<float> fte(V * C, 0.0f);
  const auto fd = cast<float>(dout);
  embedding_backward(fte.data(), static_cast<float*>(nullptr), fd.data(), tok.data(), B, T, C);
  expect_close(fte, ref_te, 1e-5, 1e-5, "float dwte");
}

// Vocab-parallel: each shard looks up only its rows (zeros for the others) and takes only their
// gradient; the shards' outputs sum to the whole lookup and their dwte rows are the whole one's.
TEST(EmbeddingShards, SumToTheWholeLookup) {
  const int B = 2, T = 5, C = 8, V = 12, Vl = 4;  // 3 shards
  const Vec wte = randn(size_t(V) * C, 11), wpe = randn(size_t(T) * C, 12);
  const auto tok = rand_tokens(size_t(B) * T, V, 13);
  Vec whole(size_t(B) * T * C), sum(whole.size(), 0.0);
  embedding_forward(whole.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  const Vec dout = randn(whole.size(), 14);
  Vec dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  for (int r = 0; r < V / Vl; ++r) {
    Vec out(whole.size()), d(size_t(Vl) * C, 0.0);
    // Positions are added by shard 0 only (the engine's rule), so the sum counts them once.
    embedding_forward(out.data(), tok.data(), wte.data() + size_t(r) * Vl * C,
                      r == 0 ? wpe.data() : static_cast<const double*>(nullptr), B, T, C,
                      int64_t(r) * Vl, Vl);
    for (size_t i = 0; i < out.size(); ++i) sum[i] += out[i];
    embedding_backward(d.data(), static_cast<double*>(nullptr), dout.data(), tok.data(), B, T, C,
                       int64_t(r) * Vl, Vl);
    for (size_t i = 0; i < d.size(); ++i)
      ASSERT_DOUBLE_EQ(d[i], dwte[size_t(r) * Vl * C + i]) << "shard " << r;
  }
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(sum[i], whole[i], 1e-12) << i;
}

}  // namespace
}  // namespace triad::kernels::cpu::test
