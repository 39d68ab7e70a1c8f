#include <cmath>

#include "kernel_test_util.hpp"
#include "triad/kernels/cpu.hpp"

namespace triad::kernels::cpu::test {
namespace {

// out (N,OC) = inp (N,C) @ w(OC,C)^T + b, by the definition.
Vec matmul_ref(const Vec& inp, const Vec& w, const Vec* b, int N, int C, int OC) {
  Vec out(size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int c = 0; c < C; ++c) s += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
  return out;
}

template <class F>
class Matmul : public ::testing::Test {};
TYPED_TEST_SUITE(Matmul, FloatTypes);

TYPED_TEST(Matmul, ForwardMatchesDefinition) {
  using F = TypeParam;
  for (auto [N, C, OC] : {std::tuple{5, 7, 3}, std::tuple{37, 65, 19}}) {
    const Vec inp = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), b = randn(OC, 3);
    auto fi = cast<F>(inp), fw = cast<F>(w), fb = cast<F>(b);
    std::vector<F> out(size_t(N) * OC, F(7));  // garbage: forward must overwrite
    matmul_forward(out.data(), fi.data(), fw.data(), fb.data(), N, C, OC);
    expect_close(out, matmul_ref(inp, w, &b, N, C, OC), kRtol<F>, kRtol<F>, "out+bias");
    matmul_forward(out.data(), fi.data(), fw.data(), static_cast<const F*>(nullptr), N, C, OC);
    expect_close(out, matmul_ref(inp, w, nullptr, N, C, OC), kRtol<F>, kRtol<F>, "out");
  }
}

// dinp = dout @ w, dweight = dout^T @ inp, dbias = column sums of dout, by the definition in
// long double: independent of matmul_backward, so its double instantiation is checked too.
struct MatmulGrads {
  Vec dinp, dweight, dbias;
};
MatmulGrads matmul_backward_ref(const Vec& dout, const Vec& inp, const Vec& w, int N, int C,
                                int OC) {
  MatmulGrads g{Vec(size_t(N) * C), Vec(size_t(OC) * C), Vec(OC)};
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      long double s = 0;
      for (int o = 0; o < OC; ++o) s += (long double)dout[n * OC + o] * w[o * C + c];
      g.dinp[n * C + c] = double(s);
    }
  for (int o = 0; o < OC; ++o) {
    for (int c = 0; c < C; ++c) {
      long double s = 0;
      for (int n = 0; n < N; ++n) s += (long double)dout[n * OC + o] * inp[n * C + c];
      g.dweight[o * C + c] = double(s);
    }
    long double s = 0;
    for (int n = 0; n < N; ++n) s += dout[n * OC + o];
    g.dbias[o] = double(s);
  }
  return g;
}

TYPED_TEST(Matmul, BackwardMatchesDefinition) {
  using F = TypeParam;
  // The second shape spans two of add_column_sums' 32-column blocks for dbias.
  for (auto [N, C, OC] : {std::tuple{9, 13, 6}, std::tuple{37, 65, 45}}) {
    const Vec inp = randn(size_t(N) * C, 4), w = randn(size_t(OC) * C, 5),
              dout = randn(size_t(N) * OC, 6);
    const MatmulGrads ref = matmul_backward_ref(dout, inp, w, N, C, OC);
    auto fi = cast<F>(inp), fw = cast<F>(w), fd = cast<F>(dout);
    std::vector<F> gi(size_t(N) * C), gw(size_t(OC) * C), gb(OC);
    matmul_backward(gi.data(), gw.data(), gb.data(), fd.data(), fi.data(), fw.data(), N, C, OC);
    expect_close(gi, ref.dinp, kRtol<F>, kRtol<F>, "dinp");
    expect_close(gw, ref.dweight, kRtol<F>, kRtol<F>, "dweight");
    expect_close(gb, ref.dbias, kRtol<F>, kRtol<F>, "dbias");
  }
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  const int N = 5, C = 7, OC = 3;
  Vec inp = randn(N * C, 7), w = randn(OC * C, 8), b = randn(OC, 9);
  const Vec r = randn(N * OC, 10);
  Vec out(N * OC);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(r, out);
  };
  Vec di(N * C), dw(OC * C), db(OC);
  matmul_backward(di.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  expect_matches_fd(inp, di, loss, "dinp");
  expect_matches_fd(w, dw, loss, "dweight");
  expect_matches_fd(b, db, loss, "dbias");
}

TEST(Matmul, BackwardAccumulatesAndSkipsNulls) {
  const int N = 5, C = 7, OC = 3;
  const Vec inp = randn(N * C, 11), w = randn(OC * C, 12), dout = randn(N * OC, 13);
  Vec di(N * C), dw(OC * C), db(OC);
  matmul_backward(di.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  const Vec g0i = randn(N * C, 14), g0w = randn(OC * C, 15), g0b = randn(OC, 16);
  Vec ai = g0i, aw = g0w, ab = g0b;
  for (int k = 0; k < 2; ++k)
    matmul_backward(ai.data(), aw.data(), ab.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  for (size_t i = 0; i < ai.size(); ++i) EXPECT_NEAR(ai[i], g0i[i] + 2 * di[i], 1e-12);
  for (size_t i = 0; i < aw.size(); ++i) EXPECT_NEAR(aw[i], g0w[i] + 2 * dw[i], 1e-12);
  for (size_t i = 0; i < ab.size(); ++i) EXPECT_NEAR(ab[i], g0b[i] + 2 * db[i], 1e-12);

  Vec only_w(OC * C);
  matmul_backward(static_cast<double*>(nullptr), only_w.data(), static_cast<double*>(nullptr),
                  dout.data(), inp.data(), w.data(), N, C, OC);
  expect_close(only_w, dw, 1e-12, 1e-12, "dweight without dinp/dbias");
}

// accumulate = false: dinp gets exactly what accumulating into zeros gives (the GEMM's beta is
// 0, so whatever dinp held is never read), and dweight and dbias still accumulate.
TEST(Matmul, BackwardOverwritesDinpWhenAsked) {
  const int N = 37, C = 70, OC = 45;
  const auto inp = cast<float>(randn(N * C, 21)), w = cast<float>(randn(OC * C, 22)),
             dout = cast<float>(randn(N * OC, 23));
  for (Gemm lib : {Gemm::onednn, Gemm::openblas}) {
    std::vector<float> zi(N * C, 0.f), zw(OC * C, 0.f), zb(OC, 0.f);
    matmul_backward(zi.data(), zw.data(), zb.data(), dout.data(), inp.data(), w.data(), N, C, OC,
                    lib);
    std::vector<float> oi(N * C, std::nanf("")), ow = zw, ob = zb;
    matmul_backward(oi.data(), ow.data(), ob.data(), dout.data(), inp.data(), w.data(), N, C, OC,
                    lib, false);
    EXPECT_EQ(oi, zi);
    for (size_t i = 0; i < ow.size(); ++i) EXPECT_FLOAT_EQ(ow[i], 2 * zw[i]);
    for (size_t i = 0; i < ob.size(); ++i) EXPECT_FLOAT_EQ(ob[i], 2 * zb[i]);
  }
}

}  // namespace
}  // namespace triad::kernels::cpu::test
