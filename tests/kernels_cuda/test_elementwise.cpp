// GELU, residual, AdamW, and the whole-buffer reductions/scaling against kernels::cpu in
// double, over sizes that are not multiples of 4 and offsets that break float4 alignment
// (the same for every operand, and different ones, which forces the scalar path).
#include <tuple>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

// n, offset of the output, offset of the input(s).
const std::vector<std::tuple<size_t, size_t, size_t>> kCases = {
    {0, 0, 0},    {1, 0, 0},    {3, 1, 1},    {1003, 0, 0}, {1003, 1, 1},    {1003, 3, 3},
    {1003, 0, 1}, {1003, 2, 1}, {4099, 2, 2}, {4096, 0, 0}, {3000001, 1, 1}, {3000001, 0, 3}};

class Elementwise : public CudaTest {};

TEST_F(Elementwise, GeluForward) {
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE("n=" + std::to_string(n) + " offsets " + std::to_string(oo) + "," +
                 std::to_string(io));
    const FVec x = randn(n, 1, 2.0);
    DFloat din(x, io), dout(n, oo);
    dout.poison();
    gelu_forward(dout.get(), din.get(), n, stream);
    sync();
    Vec want(n);
    cpu::gelu_forward(want.data(), to_double(x).data(), n);
    EXPECT_TRUE(close_rel(dout.download(), want, kTol));
    EXPECT_TRUE(dout.guards_intact());
  }
}

TEST_F(Elementwise, GeluForwardInPlace) {
  const size_t n = 1003;
  const FVec x = randn(n, 2, 2.0);
  DFloat d(x, 1);
  gelu_forward(d.get(), d.get(), n, stream);
  sync();
  Vec want(n);
  cpu::gelu_forward(want.data(), to_double(x).data(), n);
  EXPECT_TRUE(close_rel(d.download(), want, kTol));
}

TEST_F(Elementwise, GeluBackwardAccumulates) {
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const FVec x = randn(n, 3, 2.0), g = randn(n, 4), g0 = randn(n, 5);
    DFloat dx(x, io), dg(g, io + 1), ddinp(g0, oo);
    gelu_backward(ddinp.get(), dx.get(), dg.get(), n, stream);
    sync();
    Vec want = to_double(g0);
    cpu::gelu_backward(want.data(), to_double(x).data(), to_double(g).data(), n);
    EXPECT_TRUE(close_rel(ddinp.download(), want, kTol));
    EXPECT_TRUE(ddinp.guards_intact());
  }
}

TEST_F(Elementwise, GeluExtremeInputsStayFinite) {
  const FVec x = {-1e4f, -100.f, -30.f, -10.f, 0.f, 10.f, 30.f, 100.f, 1e4f};
  const size_t n = x.size();
  DFloat dx(x, 0), dy(n, 0), dg(FVec(n, 0.0f), 0), ddout(FVec(n, 1.0f), 0);
  dy.poison();
  gelu_forward(dy.get(), dx.get(), n, stream);
  gelu_backward(dg.get(), dx.get(), ddout.get(), n, stream);
  sync();
  Vec wy(n), wg(n, 0.0);
  cpu::gelu_forward(wy.data(), to_double(x).data(), n);
  cpu::gelu_backward(wg.data(), to_double(x).data(), Vec(n, 1.0).data(), n);
  EXPECT_TRUE(close_rel(dy.download(), wy, kTol));
  EXPECT_TRUE(close_rel(dg.download(), wg, kTol));
}

TEST_F(Elementwise, ResidualForward) {
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const FVec a = randn(n, 6), b = randn(n, 7);
    DFloat da(a, io), db(b, io), dout(n, oo);
    dout.poison();
    residual_forward(dout.get(), da.get(), db.get(), n, stream);
    sync();
    Vec want(n);
    cpu::residual_forward(want.data(), to_double(a).data(), to_double(b).data(), n);
    EXPECT_TRUE(close_rel(dout.download(), want, kTol));
    EXPECT_TRUE(dout.guards_intact());
  }
}

TEST_F(Elementwise, ResidualForwardAliases) {
  const size_t n = 1003;
  const FVec a = randn(n, 8), b = randn(n, 9);
  Vec want(n);
  cpu::residual_forward(want.data(), to_double(a).data(), to_double(b).data(), n);
  {
    DFloat da(a, 1), db(b, 2);
    residual_forward(da.get(), da.get(), db.get(), n, stream);  // out = a
    sync();
    EXPECT_TRUE(close_rel(da.download(), want, kTol));
  }
  {
    DFloat da(a, 3), db(b, 3);
    residual_forward(db.get(), da.get(), db.get(), n, stream);  // out = b
    sync();
    EXPECT_TRUE(close_rel(db.download(), want, kTol));
  }
}

TEST_F(Elementwise, ResidualBackwardAccumulates) {
  for (auto [n, oo, io] : kCases) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const FVec d = randn(n, 10), a0 = randn(n, 11), b0 = randn(n, 12);
    DFloat dd(d, io), da(a0, oo), db(b0, oo);
    residual_backward(da.get(), db.get(), dd.get(), n, stream);
    sync();
    Vec wa = to_double(a0), wb = to_double(b0);
    cpu::residual_backward(wa.data(), wb.data(), to_double(d).data(), n);
    EXPECT_TRUE(close_rel(da.download(), wa, kTol));
    EXPECT_TRUE(close_rel(db.download(), wb, kTol));
    EXPECT_TRUE(da.guards_intact());
    EXPECT_TRUE(db.guards_intact());
  }
}

TEST_F(Elementwise, AdamwMatchesCpuOverSteps) {
  for (auto [n, oo, io] : kCases) {
    if (n > 100000) continue;
    SCOPED_TRACE("n=" + std::to_string(n));
    const FVec p0 = randn(n, 13), m0 = randn(n, 14, 0.01);
    FVec v0 = randn(n, 15, 0.01);
    for (auto& x : v0) x = x * x;
    DFloat dp(p0, oo), dm(m0, oo), dv(v0, oo);
    Vec wp = to_double(p0), wm = to_double(m0), wv = to_double(v0);
    for (int t = 1; t <= 3; ++t) {
      const FVec g = randn(n, 100 + t);
      DFloat dg(g, io);
      adamw_update(dp.get(), dg.get(), dm.get(), dv.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t,
                   stream);
      cpu::adamw_update(wp.data(), to_double(g).data(), wm.data(), wv.data(), n, double(1e-3f),
                        double(0.9f), double(0.95f), double(1e-8f), double(0.1f), t);
    }
    sync();
    EXPECT_TRUE(close_rel(dp.download(), wp, kTol));
    EXPECT_TRUE(close_rel(dm.download(), wm, kTol));
    EXPECT_TRUE(close_rel(dv.download(), wv, kTol));
    EXPECT_TRUE(dp.guards_intact());
    EXPECT_TRUE(dm.guards_intact());
    EXPECT_TRUE(dv.guards_intact());
  }
}

class Reductions : public CudaTest {};

TEST_F(Reductions, SumAndSumSquaresAreExactInDoubleAndDeterministic) {
  for (size_t n : {size_t(0), size_t(1), size_t(5), size_t(1003), size_t(262147), size_t(5000003)})
    for (size_t off : {0, 1, 2, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(off));
      const FVec x = randn(n, 20 + n + off);
      DFloat dx(x, off);
      DeviceArray<double> out(2);
      out.poison();
      sum(out.get(), dx.get(), n, stream);
      sum_squares(out.get() + 1, dx.get(), n, stream);
      sync();
      const std::vector<double> got = out.download();
      double s = 0, ss = 0, abs_sum = 0;
      for (float v : x) {
        s += double(v);
        ss += double(v) * double(v);
        abs_sum += std::abs(double(v));
      }
      // Only the order of double additions differs from the host's.
      EXPECT_NEAR(got[0], s, 1e-12 * abs_sum + 1e-300);
      EXPECT_NEAR(got[1], ss, 1e-12 * ss + 1e-300);
      EXPECT_NEAR(got[1], cpu::sum_squares(x.data(), n), 1e-12 * ss + 1e-300);
      // Same input, same bits.
      DeviceArray<double> again(2);
      sum(again.get(), dx.get(), n, stream);
      sum_squares(again.get() + 1, dx.get(), n, stream);
      sync();
      const std::vector<double> got2 = again.download();
      EXPECT_EQ(std::memcmp(got.data(), got2.data(), 2 * sizeof(double)), 0);
    }
}

TEST_F(Reductions, ScaleInplaceAndFill) {
  for (auto [n, oo, io] : kCases) {
    (void)io;
    SCOPED_TRACE("n=" + std::to_string(n));
    const FVec x = randn(n, 30);
    DFloat dx(x, oo);
    scale_inplace(dx.get(), n, 0.37f, stream);
    sync();
    FVec want = x;
    cpu::scale_inplace(want.data(), n, 0.37f);
    EXPECT_TRUE(bit_equal(dx.download(), want));  // one IEEE multiply either way
    EXPECT_TRUE(dx.guards_intact());

    dx.poison();
    fill(dx.get(), n, -2.5f, stream);
    sync();
    EXPECT_TRUE(bit_equal(dx.download(), FVec(n, -2.5f)));
    EXPECT_TRUE(dx.guards_intact());
  }
}

}  // namespace
}  // namespace triad::kernels::cuda::test
