#include <cmath>

#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

Vec layernorm_ref(const Vec& x, const Vec& w, const Vec& b, int N, int C, double eps) {
  Vec out(x.size());
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;  // biased variance, as torch.nn.LayerNorm
    for (int c = 0; c < C; ++c)
      out[n * C + c] = (x[n * C + c] - m) / std::sqrt(v + eps) * w[c] + b[c];
  }
  return out;
}

template <class F>
class LayerNorm : public ::testing::Test {};
TYPED_TEST_SUITE(LayerNorm, FloatTypes);

TYPED_TEST(LayerNorm, ForwardMatchesDefinition) {
  using F = TypeParam;
  const int N = 6, C = 33;
  // An offset row mean tests the variance does not cancel.
  Vec x = randn(N * C, 1);
  for (auto& e : x) e += 100.0;
  const Vec w = randn(C, 2), b = randn(C, 3);
  auto fx = cast<F>(x), fw = cast<F>(w), fb = cast<F>(b);
  std::vector<F> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), fx.data(), fw.data(), fb.data(), N, C);
  // The float input is the rounded x; compare against the reference on that same input.
  const Vec xin(fx.begin(), fx.end());
  expect_close(out, layernorm_ref(xin, w, b, N, C, 1e-5), 5 * kRtol<F>, 5 * kRtol<F>, "out");
  for (int n = 0; n < N; ++n) {
    double m = 0;
    for (int c = 0; c < C; ++c) m += xin[n * C + c];
    EXPECT_NEAR(mean[n], m / C, 100 * kRtol<F>);
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int N = 5, C = 7;
  Vec x = randn(N * C, 4), w = randn(C, 5), b = randn(C, 6);
  const Vec r = randn(N * C, 7);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(r, out);
  };
  loss();
  Vec dx(N * C), dw(C), db(C);
  layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_matches_fd(x, dx, loss, "dinp");
  expect_matches_fd(w, dw, loss, "dweight");
  expect_matches_fd(b, db, loss, "dbias");
}

TEST(LayerNorm, BackwardAccumulatesAndFloatAgrees) {
  // C > 32 and N odd so the column blocks of the parameter gradients have a ragged end.
  const int N = 9, C = 70;
  const Vec x = randn(N * C, 8), w = randn(C, 9), b = randn(C, 10), dout = randn(N * C, 11);
  Vec out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  Vec dx(N * C), dw(C), db(C);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  const Vec g0x = randn(N * C, 12), g0w = randn(C, 13), g0b = randn(C, 14);
  Vec ax = g0x, aw = g0w, ab = g0b;
  for (int k = 0; k < 2; ++k)
    layernorm_backward(ax.data(), aw.data(), ab.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
  for (size_t i = 0; i < ax.size(); ++i) EXPECT_NEAR(ax[i], g0x[i] + 2 * dx[i], 1e-12);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(aw[c], g0w[c] + 2 * dw[c], 1e-12);
  for (int c = 0; c < C; ++c) EXPECT_NEAR(ab[c], g0b[c] + 2 * db[c], 1e-12);

  auto fx = cast<float>(x), fw = cast<float>(w), fb = cast<float>(b), fd = cast<float>(dout);
  std::vector<float> fo(N * C), fm(N), fr(N), gx(N * C), gw(C), gb(C);
  layernorm_forward(fo.data(), fm.data(), fr.data(), fx.data(), fw.data(), fb.data(), N, C);
  layernorm_backward(gx.data(), gw.data(), gb.data(), fd.data(), fx.data(), fw.data(), fm.data(),
                     fr.data(), N, C);
  expect_close(gx, dx, 1e-4, 1e-4, "float dinp");
  expect_close(gw, dw, 1e-4, 1e-4, "float dweight");
  expect_close(gb, db, 1e-4, 1e-4, "float dbias");
}

// accumulate = false: dinp gets exactly what accumulating into zeros gives, never reading what it
// held; dweight and dbias still accumulate.
TEST(LayerNorm, BackwardOverwritesDinpWhenAsked) {
  const int N = 9, C = 70;
  const auto x = cast<float>(randn(N * C, 31)), w = cast<float>(randn(C, 32)),
             b = cast<float>(randn(C, 33)), dout = cast<float>(randn(N * C, 34));
  std::vector<float> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<float> zx(N * C, 0.f), zw(C, 0.f), zb(C, 0.f);
  layernorm_backward(zx.data(), zw.data(), zb.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  std::vector<float> ox(N * C, std::nanf("")), ow = zw, ob = zb;
  layernorm_backward(ox.data(), ow.data(), ob.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C, false);
  EXPECT_EQ(ox, zx);
  for (int c = 0; c < C; ++c) EXPECT_FLOAT_EQ(ow[c], 2 * zw[c]);
  for (int c = 0; c < C; ++c) EXPECT_FLOAT_EQ(ob[c], 2 * zb[c]);
}

// The fused residual add + layernorm gives the bits of the two kernels one after the other, also
// in place (the sum written over one of its operands, as the model does).
TEST(LayerNorm, ResidualFusedIsBitIdenticalToSeparate) {
  const int N = 11, C = 96;
  const auto a = cast<float>(randn(N * C, 41, 3.0)), b = cast<float>(randn(N * C, 42)),
             w = cast<float>(randn(C, 43)), bias = cast<float>(randn(C, 44));
  std::vector<float> res(N * C), out(N * C), mean(N), rstd(N);
  residual_forward(res.data(), a.data(), b.data(), res.size());
  layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), w.data(), bias.data(), N, C);
  std::vector<float> fres(N * C), fout(N * C), fmean(N), frstd(N);
  residual_layernorm_forward(fres.data(), fout.data(), fmean.data(), frstd.data(), a.data(),
                             b.data(), w.data(), bias.data(), N, C);
  EXPECT_EQ(fres, res);
  EXPECT_EQ(fout, out);
  EXPECT_EQ(fmean, mean);
  EXPECT_EQ(frstd, rstd);
  std::vector<float> inplace = b, iout(N * C), imean(N), irstd(N);
  residual_layernorm_forward(inplace.data(), iout.data(), imean.data(), irstd.data(), a.data(),
                             inplace.data(), w.data(), bias.data(), N, C);
  EXPECT_EQ(inplace, res);
  EXPECT_EQ(iout, out);
}

}  // namespace
}  // namespace triad::kernels::cpu::test
