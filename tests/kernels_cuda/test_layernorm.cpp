// LayerNorm forward/backward against kernels::cpu in double: awkward (N,C), offsets that
// break float4 alignment, poisoned outputs, accumulating gradients.
#include <tuple>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

// N, C, offset.
const std::vector<std::tuple<int, int, size_t>> kShapes = {
    {37, 99, 1}, {37, 99, 0}, {5, 768, 3}, {1, 1, 0}, {129, 33, 2}, {300, 1024, 0}};

class LayerNorm : public CudaTest {};

TEST_F(LayerNorm, ForwardMatchesCpu) {
  for (auto [N, C, off] : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    // An offset mean makes the two-pass variance matter.
    FVec x = randn(NC, 1, 2.0);
    for (auto& v : x) v += 3.0f;
    const FVec w = randn(C, 2), b = randn(C, 3);
    DFloat dx(x, off), dw(w, off + 1), db(b, off + 2), dout(NC, off), dmean(N, 1), drstd(N, 3);
    dout.poison();
    dmean.poison();
    drstd.poison();
    layernorm_forward(dout.get(), dmean.get(), drstd.get(), dx.get(), dw.get(), db.get(), N, C,
                      1e-5f, stream);
    sync();
    Vec out(NC), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), to_double(x).data(),
                           to_double(w).data(), to_double(b).data(), N, C, double(1e-5f));
    EXPECT_TRUE(close_rel(dout.download(), out, kTol));
    EXPECT_TRUE(close_rel(dmean.download(), mean, kTol));
    EXPECT_TRUE(close_rel(drstd.download(), rstd, kTol));
    EXPECT_TRUE(dout.guards_intact());
    EXPECT_TRUE(dmean.guards_intact());
    EXPECT_TRUE(drstd.guards_intact());
  }
}

TEST_F(LayerNorm, BackwardAccumulatesAndMatchesCpu) {
  for (auto [N, C, off] : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    const FVec x = randn(NC, 4, 2.0), w = randn(C, 5), g = randn(NC, 6);
    // mean/rstd from the double forward, rounded to float: both sides get the same inputs.
    Vec out(NC), mean_d(N), rstd_d(N);
    cpu::layernorm_forward(out.data(), mean_d.data(), rstd_d.data(), to_double(x).data(),
                           to_double(w).data(), Vec(C, 0.0).data(), N, C, 1e-5);
    const FVec mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());
    const FVec di0 = randn(NC, 7), dw0 = randn(C, 8), db0 = randn(C, 9);
    DFloat dx(x, off), dw(w, off), dg(g, off + 1), dmean(mean, 0), drstd(rstd, 1);
    DFloat ddi(di0, off), ddw(dw0, 2), ddb(db0, 3);
    layernorm_backward(ddi.get(), ddw.get(), ddb.get(), dg.get(), dx.get(), dw.get(), dmean.get(),
                       drstd.get(), N, C, stream);
    sync();
    Vec wi = to_double(di0), ww = to_double(dw0), wb = to_double(db0);
    cpu::layernorm_backward(wi.data(), ww.data(), wb.data(), to_double(g).data(),
                            to_double(x).data(), to_double(w).data(), to_double(mean).data(),
                            to_double(rstd).data(), N, C);
    EXPECT_TRUE(close_rel(ddi.download(), wi, kTol));
    EXPECT_TRUE(close_rel(ddw.download(), ww, kTol));
    EXPECT_TRUE(close_rel(ddb.download(), wb, kTol));
    EXPECT_TRUE(ddi.guards_intact());
    EXPECT_TRUE(ddw.guards_intact());
    EXPECT_TRUE(ddb.guards_intact());
  }
}

// The residual-fused forward: res = a + b and the layernorm of it, the bits of the two kernels
// one after the other, also in place (res written over b, as the model does).
TEST_F(LayerNorm, ResidualFusedIsBitIdenticalToSeparate) {
  for (auto [N, C, off] : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    const FVec a = randn(NC, 21, 2.0), b = randn(NC, 22), w = randn(C, 23), bias = randn(C, 24);
    DFloat da(a, off), db(b, off), dw(w, off + 1), dbias(bias, off + 2);
    DFloat res(NC, off), out(NC, off), mean(N, 1), rstd(N, 3);
    residual_forward(res.get(), da.get(), db.get(), NC, stream);
    layernorm_forward(out.get(), mean.get(), rstd.get(), res.get(), dw.get(), dbias.get(), N, C,
                      1e-5f, stream);
    DFloat fres(NC, off), fout(NC, off), fmean(N, 1), frstd(N, 3), inplace(b, off);
    fres.poison();
    fout.poison();
    residual_layernorm_forward(fres.get(), fout.get(), fmean.get(), frstd.get(), da.get(), db.get(),
                               dw.get(), dbias.get(), N, C, 1e-5f, stream);
    DFloat iout(NC, off), imean(N, 1), irstd(N, 3);
    residual_layernorm_forward(inplace.get(), iout.get(), imean.get(), irstd.get(), da.get(),
                               inplace.get(), dw.get(), dbias.get(), N, C, 1e-5f, stream);
    sync();
    EXPECT_TRUE(bit_equal(fres.download(), res.download()));
    EXPECT_TRUE(bit_equal(fout.download(), out.download()));
    EXPECT_TRUE(bit_equal(fmean.download(), mean.download()));
    EXPECT_TRUE(bit_equal(frstd.download(), rstd.download()));
    EXPECT_TRUE(bit_equal(inplace.download(), res.download()));
    EXPECT_TRUE(bit_equal(iout.download(), out.download()));
    EXPECT_TRUE(fres.guards_intact());
    EXPECT_TRUE(fout.guards_intact());
  }
}

// accumulate = false: dinp is what accumulating into zeros gives; what it held is never read.
TEST_F(LayerNorm, BackwardOverwritesDinpWhenAsked) {
  for (auto [N, C, off] : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    const FVec x = randn(NC, 31, 2.0), w = randn(C, 32), g = randn(NC, 33), mean = randn(N, 34);
    const FVec rstd = uniform(N, 35, 0.5, 2.0);
    DFloat dx(x, off), dw(w, off), dg(g, off + 1), dmean(mean, 0), drstd(rstd, 1);
    DFloat zi(FVec(NC, 0.f), off), zw(FVec(C, 0.f), 2), zb(FVec(C, 0.f), 3);
    DFloat oi(NC, off), ow(FVec(C, 0.f), 2), ob(FVec(C, 0.f), 3);
    oi.poison();
    layernorm_backward(zi.get(), zw.get(), zb.get(), dg.get(), dx.get(), dw.get(), dmean.get(),
                       drstd.get(), N, C, stream);
    layernorm_backward(oi.get(), ow.get(), ob.get(), dg.get(), dx.get(), dw.get(), dmean.get(),
                       drstd.get(), N, C, stream, false);
    sync();
    EXPECT_TRUE(bit_equal(oi.download(), zi.download()));
    EXPECT_TRUE(bit_equal(ow.download(), zw.download()));
    EXPECT_TRUE(bit_equal(ob.download(), zb.download()));
    EXPECT_TRUE(oi.guards_intact());
  }
}

TEST_F(LayerNorm, BackwardParameterGradientsAreDeterministic) {
  const int N = 4099, C = 99;
  const size_t NC = size_t(N) * C;
  const FVec x = randn(NC, 10), w = randn(C, 11), g = randn(NC, 12), mean = randn(N, 13);
  FVec rstd = uniform(N, 14, 0.5, 2.0);
  DFloat dx(x, 1), dw(w, 0), dg(g, 0), dmean(mean, 0), drstd(rstd, 0);
  FVec results[2][2];
  for (auto& r : results) {
    DFloat ddi(NC, 0), ddw(FVec(C, 0.f), 0), ddb(FVec(C, 0.f), 0);
    ddi.upload(FVec(NC, 0.f));
    layernorm_backward(ddi.get(), ddw.get(), ddb.get(), dg.get(), dx.get(), dw.get(), dmean.get(),
                       drstd.get(), N, C, stream);
    sync();
    r[0] = ddw.download();
    r[1] = ddb.download();
  }
  EXPECT_TRUE(bit_equal(results[0][0], results[1][0]));
  EXPECT_TRUE(bit_equal(results[0][1], results[1][1]));
}

}  // namespace
}  // namespace triad::kernels::cuda::test
