// Mixed precision (bf16 and fp16, each test once per type S) instantiations of layernorm, matmul,
// cross-entropy, rope and naive attention (the embedding's: test_embedding.cpp), against
// kernels::cpu (double, or float where the result must be bit-exact) on the inputs rounded to
// S: 16-bit outputs within S::kOut, fp32 accumulations within S::kAcc (see cuda_test_util.hpp),
// pre-filled gradients accumulate, poisoned outputs are fully written, in-place cross-entropy,
// unaligned operands.
#include <cmath>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "attention_reference.hpp"
#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

// --- layernorm ----------------------------------------------------------------------------

// N, C, offset. Offset 0 with C % 8 == 0 puts every operand on 16 bytes: the 8-wide path.
const std::vector<std::tuple<int, int, size_t>> kLnShapes = {
    {37, 99, 1}, {37, 96, 0}, {5, 768, 3}, {64, 768, 0}, {1, 1, 0}, {129, 33, 2}, {300, 1024, 0}};

template <class S>
class HalfLayerNorm : public CudaTest {};
TYPED_TEST_SUITE(HalfLayerNorm, HalfStorages, StorageName);

TYPED_TEST(HalfLayerNorm, ForwardMatchesCpu) {
  using S = TypeParam;
  for (auto [N, C, off] : kLnShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    FVec x = randn(NC, 1, 2.0);
    for (auto& v : x) v += 3.0f;
    x = S::round(x);
    const FVec w = S::round(randn(C, 2)), b = S::round(randn(C, 3));
    const size_t woff = off == 0 ? 0 : off + 1;  // weight/bias misaligned from x when off != 0
    typename S::Array dx(x, off), dw(w, woff), db(b, woff), dout(NC, off);
    DFloat dmean(N, 1), drstd(N, 3);
    dout.poison();
    dmean.poison();
    drstd.poison();
    layernorm_forward(dout.ptr(), dmean.get(), drstd.get(), dx.ptr(), dw.ptr(), db.ptr(), N, C,
                      1e-5f, this->stream);
    this->sync();
    Vec out(NC), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), to_double(x).data(),
                           to_double(w).data(), to_double(b).data(), N, C, double(1e-5f));
    EXPECT_TRUE(close_rel(dout.values(), out, S::kOut));
    // fp32 statistics of exactly representable inputs.
    EXPECT_TRUE(close_rel(dmean.download(), mean, S::kAcc));
    EXPECT_TRUE(close_rel(drstd.download(), rstd, S::kAcc));
    EXPECT_TRUE(dout.guards_intact());
    EXPECT_TRUE(dmean.guards_intact());
    EXPECT_TRUE(drstd.guards_intact());
  }
}

// The residual-fused forward in 16 bits: res = a + b rounded once, as residual_forward rounds it,
// and the layernorm of that; the bits of the two kernels one after the other, also in place
// (res written over b, as the model does).
TYPED_TEST(HalfLayerNorm, ResidualFusedIsBitIdenticalToSeparate) {
  using S = TypeParam;
  for (auto [N, C, off] : kLnShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    const FVec a = S::round(randn(NC, 21, 2.0)), b = S::round(randn(NC, 22)),
               w = S::round(randn(C, 23)), bias = S::round(randn(C, 24));
    const size_t woff = off == 0 ? 0 : off + 1;
    typename S::Array da(a, off), db(b, off), dw(w, woff), dbias(bias, woff), res(NC, off),
        out(NC, off), fres(NC, off), fout(NC, off), inplace(b, off), iout(NC, off);
    DFloat mean(N, 1), rstd(N, 3), fmean(N, 1), frstd(N, 3), imean(N, 1), irstd(N, 3);
    residual_forward(res.ptr(), da.ptr(), db.ptr(), NC, this->stream);
    layernorm_forward(out.ptr(), mean.get(), rstd.get(), res.ptr(), dw.ptr(), dbias.ptr(), N, C,
                      1e-5f, this->stream);
    fres.poison();
    fout.poison();
    residual_layernorm_forward(fres.ptr(), fout.ptr(), fmean.get(), frstd.get(), da.ptr(), db.ptr(),
                               dw.ptr(), dbias.ptr(), N, C, 1e-5f, this->stream);
    residual_layernorm_forward(inplace.ptr(), iout.ptr(), imean.get(), irstd.get(), da.ptr(),
                               inplace.ptr(), dw.ptr(), dbias.ptr(), N, C, 1e-5f, this->stream);
    this->sync();
    EXPECT_TRUE(bit_equal(fres.values(), res.values()));
    EXPECT_TRUE(bit_equal(fout.values(), out.values()));
    EXPECT_TRUE(bit_equal(fmean.download(), mean.download()));
    EXPECT_TRUE(bit_equal(frstd.download(), rstd.download()));
    EXPECT_TRUE(bit_equal(inplace.values(), res.values()));
    EXPECT_TRUE(bit_equal(iout.values(), out.values()));
    EXPECT_TRUE(fres.guards_intact());
    EXPECT_TRUE(fout.guards_intact());
  }
}

TYPED_TEST(HalfLayerNorm, BackwardAccumulatesAndMatchesCpu) {
  using S = TypeParam;
  for (auto [N, C, off] : kLnShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const size_t NC = size_t(N) * C;
    const FVec x = S::round(randn(NC, 4, 2.0)), w = S::round(randn(C, 5)),
               g = S::round(randn(NC, 6));
    Vec out(NC), mean_d(N), rstd_d(N);
    cpu::layernorm_forward(out.data(), mean_d.data(), rstd_d.data(), to_double(x).data(),
                           to_double(w).data(), Vec(C, 0.0).data(), N, C, 1e-5);
    const FVec mean(mean_d.begin(), mean_d.end()), rstd(rstd_d.begin(), rstd_d.end());
    const FVec di0 = S::round(randn(NC, 7)), dw0 = randn(C, 8), db0 = randn(C, 9);
    typename S::Array dx(x, off), dw(w, off), dg(g, off + 8), ddi(di0, off);
    DFloat dmean(mean, 0), drstd(rstd, 1), ddw(dw0, 2), ddb(db0, 3);
    layernorm_backward(ddi.ptr(), ddw.get(), ddb.get(), dg.ptr(), dx.ptr(), dw.ptr(), dmean.get(),
                       drstd.get(), N, C, this->stream);
    this->sync();
    Vec wi = to_double(di0), ww = to_double(dw0), wb = to_double(db0);
    cpu::layernorm_backward(wi.data(), ww.data(), wb.data(), to_double(g).data(),
                            to_double(x).data(), to_double(w).data(), to_double(mean).data(),
                            to_double(rstd).data(), N, C);
    EXPECT_TRUE(close_rel(ddi.values(), wi, S::kOut));
    // Column sums in double of float terms of exact inputs.
    EXPECT_TRUE(close_rel(ddw.download(), ww, S::kAcc));
    EXPECT_TRUE(close_rel(ddb.download(), wb, S::kAcc));
    EXPECT_TRUE(ddi.guards_intact());
    EXPECT_TRUE(ddw.guards_intact());
    EXPECT_TRUE(ddb.guards_intact());
  }
}

// --- matmul -------------------------------------------------------------------------------

struct MmShape {
  int N, C, OC;
  size_t off;  // element offset of every operand
};
const std::vector<MmShape> kMmShapes = {{37, 99, 67, 0},     {37, 99, 67, 1},   {64, 128, 96, 0},
                                        {64, 128, 96, 3},    {5, 7, 3, 2},      {1, 1, 1, 0},
                                        {256, 768, 2304, 0}, {130, 3072, 65, 1}};

std::string name(const MmShape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC) +
         " offset=" + std::to_string(s.off);
}

template <class S>
class HalfMatmul : public CudaTest {};
TYPED_TEST_SUITE(HalfMatmul, HalfStorages, StorageName);

template <class S>
void mm_forward_case(cudaStream_t stream, const MmShape& s, bool with_bias, size_t bias_off) {
  SCOPED_TRACE(name(s) + (with_bias ? " bias at " + std::to_string(bias_off) : " no bias"));
  const auto [N, C, OC, off] = s;
  const FVec x = S::round(randn(size_t(N) * C, 1)), w = S::round(randn(size_t(OC) * C, 2)),
             b = S::round(randn(OC, 3));
  typename S::Array dx(x, off), dw(w, off), db(b, bias_off), dout(size_t(N) * OC, off);
  dout.poison();
  Blas blas(stream, /*allow_tf32=*/true);  // no effect on 16-bit GEMMs
  matmul_forward(blas, dout.ptr(), dx.ptr(), dw.ptr(), with_bias ? db.ptr() : nullptr, N, C, OC);
  check(cudaStreamSynchronize(stream), "sync");
  Vec want(size_t(N) * OC);
  const Vec bd = to_double(b);
  cpu::matmul_forward(want.data(), to_double(x).data(), to_double(w).data(),
                      with_bias ? bd.data() : nullptr, N, C, OC);
  EXPECT_TRUE(close_rel(dout.values(), want, S::kOut));
  EXPECT_TRUE(dout.guards_intact());
}

TYPED_TEST(HalfMatmul, Forward) {
  using S = TypeParam;
  for (const MmShape& s : kMmShapes)
    for (bool bias : {true, false}) mm_forward_case<S>(this->stream, s, bias, s.off);
  // The bias alone misaligned (the epilogue may refuse it; the result must not change).
  mm_forward_case<S>(this->stream, {33, 64, 48, 0}, true, 1);
}

TYPED_TEST(HalfMatmul, ForwardWithEmptyInnerDimIsTheBias) {
  using S = TypeParam;
  const int N = 7, OC = 5;
  const FVec b = S::round(randn(OC, 7));
  typename S::Array db(b, 0), dout(size_t(N) * OC, 0), dx(1, 0), dw(1, 0);
  dout.poison();
  Blas blas(this->stream);
  matmul_forward(blas, dout.ptr(), dx.ptr(), dw.ptr(), db.ptr(), N, 0, OC);
  this->sync();
  Vec want(size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) want[size_t(n) * OC + o] = b[o];
  EXPECT_TRUE(close_rel(dout.values(), want, 0.0));
  matmul_forward(blas, dout.ptr(), dx.ptr(), dw.ptr(), nullptr, N, 0, OC);
  this->sync();
  EXPECT_TRUE(close_rel(dout.values(), Vec(want.size(), 0.0), 0.0));
}

// dout_shift: dout's offset past the others' (1 breaks its 16-byte alignment: the scalar column
// sums; 0 with OC % 8 == 0 and an aligned offset: the 8-wide ones).
template <class S>
void mm_backward_case(cudaStream_t stream, const MmShape& s, bool want_di, bool want_dw,
                      bool want_db, size_t dout_shift = 1) {
  SCOPED_TRACE(name(s) + " dinp " + std::to_string(want_di) + " dweight " +
               std::to_string(want_dw) + " dbias " + std::to_string(want_db) + " dout shift " +
               std::to_string(dout_shift));
  const auto [N, C, OC, off] = s;
  const size_t NC = size_t(N) * C, OCC = size_t(OC) * C, NOC = size_t(N) * OC;
  const FVec x = S::round(randn(NC, 10)), w = S::round(randn(OCC, 11)),
             g = S::round(randn(NOC, 12));
  const FVec di0 = S::round(randn(NC, 13)), dw0 = randn(OCC, 14), db0 = randn(OC, 15);
  typename S::Array dx(x, off), dw(w, off), dg(g, off + dout_shift), ddi(di0, off);
  DFloat ddw(dw0, off), ddb(db0, off + 3);
  Blas blas(stream);
  matmul_backward(blas, want_di ? ddi.ptr() : nullptr, want_dw ? ddw.get() : nullptr,
                  want_db ? ddb.get() : nullptr, dg.ptr(), dx.ptr(), dw.ptr(), N, C, OC);
  check(cudaStreamSynchronize(stream), "sync");
  Vec wi = to_double(di0), ww = to_double(dw0), wb = to_double(db0);
  Vec scratch_w = ww;  // the CPU always writes dweight
  cpu::matmul_backward(want_di ? wi.data() : nullptr, want_dw ? ww.data() : scratch_w.data(),
                       want_db ? wb.data() : nullptr, to_double(g).data(), to_double(x).data(),
                       to_double(w).data(), N, C, OC);
  EXPECT_TRUE(close_rel(ddi.values(), wi, S::kOut));    // 16-bit +=
  EXPECT_TRUE(close_rel(ddw.download(), ww, S::kAcc));  // fp32 += 16-bit x 16-bit products
  EXPECT_TRUE(close_rel(ddb.download(), wb, kTol));     // double column sums of 16-bit values
  if (!want_di) {
    EXPECT_TRUE(bit_equal(ddi.download(), S::bits(di0)));
  }
  if (!want_dw) {
    EXPECT_TRUE(bit_equal(ddw.download(), dw0));
  }
  if (!want_db) {
    EXPECT_TRUE(bit_equal(ddb.download(), db0));
  }
  EXPECT_TRUE(ddi.guards_intact());
  EXPECT_TRUE(ddw.guards_intact());
  EXPECT_TRUE(ddb.guards_intact());
}

TYPED_TEST(HalfMatmul, BackwardAccumulates) {
  using S = TypeParam;
  for (const MmShape& s : kMmShapes)
    for (size_t shift : {0, 1}) mm_backward_case<S>(this->stream, s, true, true, true, shift);
}

TYPED_TEST(HalfMatmul, BackwardSkipsNullGradients) {
  using S = TypeParam;
  const MmShape s{37, 99, 67, 1};
  for (int mask = 0; mask < 7; ++mask)  // 7 = all three: BackwardAccumulates
    mm_backward_case<S>(this->stream, s, mask & 1, mask & 2, mask & 4);
}

TYPED_TEST(HalfMatmul, BackwardBiasGradientIsDeterministic) {
  using S = TypeParam;
  const int N = 5000, C = 3, OC = 771;
  const FVec g = randn(size_t(N) * OC, 20);
  typename S::Array dg(g, 1), dx(FVec(size_t(N) * C, 0.f), 0), dw(FVec(size_t(OC) * C, 0.f), 0);
  Blas blas(this->stream);
  FVec r[2];
  for (auto& out : r) {
    DFloat db(FVec(OC, 0.f), 0);
    matmul_backward(blas, nullptr, nullptr, db.get(), dg.ptr(), dx.ptr(), dw.ptr(), N, C, OC);
    this->sync();
    out = db.download();
  }
  EXPECT_TRUE(bit_equal(r[0], r[1]));
}

// --- the MLP's GEMM + GELU, fused in cuBLASLt's epilogues where it has an algorithm ----------

// pre = x @ w^T + b and out = gelu(pre), against the CPU's GEMM and GELU in double.
template <class S>
void mm_gelu_forward_case(cudaStream_t stream, const MmShape& s, bool with_bias) {
  SCOPED_TRACE(name(s) + (with_bias ? " bias" : " no bias"));
  const auto [N, C, OC, off] = s;
  const FVec x = S::round(randn(size_t(N) * C, 40)), w = S::round(randn(size_t(OC) * C, 41)),
             b = S::round(randn(OC, 42));
  typename S::Array dx(x, off), dw(w, off), db(b, off), out(size_t(N) * OC, off),
      pre(size_t(N) * OC, off);
  out.poison();
  pre.poison();
  Blas blas(stream);
  matmul_gelu_forward(blas, out.ptr(), pre.ptr(), dx.ptr(), dw.ptr(),
                      with_bias ? db.ptr() : nullptr, N, C, OC);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  Vec want_pre(size_t(N) * OC), want_out(want_pre.size());
  const Vec bd = to_double(b);
  cpu::matmul_forward(want_pre.data(), to_double(x).data(), to_double(w).data(),
                      with_bias ? bd.data() : nullptr, N, C, OC);
  cpu::gelu_forward(want_out.data(), want_pre.data(), want_out.size());
  EXPECT_TRUE(close_rel(pre.values(), want_pre, S::kOut));
  EXPECT_TRUE(close_rel(out.values(), want_out, S::kOut));
  EXPECT_TRUE(out.guards_intact());
  EXPECT_TRUE(pre.guards_intact());
}

TYPED_TEST(HalfMatmul, GeluForwardMatchesCpu) {
  using S = TypeParam;
  for (const MmShape& s : kMmShapes)
    for (bool bias : {true, false}) mm_gelu_forward_case<S>(this->stream, s, bias);
}

// dinp = (dout @ w) * gelu'(pre), overwritten; dweight and dbias accumulate.
template <class S>
void mm_dgelu_case(cudaStream_t stream, const MmShape& s) {
  SCOPED_TRACE(name(s));
  const auto [N, C, OC, off] = s;
  const size_t NC = size_t(N) * C, OCC = size_t(OC) * C, NOC = size_t(N) * OC;
  const FVec x = S::round(randn(NC, 50)), w = S::round(randn(OCC, 51)),
             g = S::round(randn(NOC, 52)), pre = S::round(randn(NC, 53));
  const FVec dw0 = randn(OCC, 54), db0 = randn(OC, 55);
  typename S::Array dx(x, off), dw(w, off), dg(g, off), dpre(pre, off), ddi(NC, off), dact(NC, off);
  DFloat ddw(dw0, off), ddb(db0, off);
  ddi.poison();
  dact.poison();
  Blas blas(stream);
  matmul_backward_dgelu(blas, ddi.ptr(), dact.ptr(), dpre.ptr(), ddw.get(), ddb.get(), dg.ptr(),
                        dx.ptr(), dw.ptr(), N, C, OC);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  Vec dgelu(NC, 0.0), wi(NC), ww = to_double(dw0), wb = to_double(db0);
  cpu::matmul_backward(dgelu.data(), ww.data(), wb.data(), to_double(g).data(), to_double(x).data(),
                       to_double(w).data(), N, C, OC);
  cpu::gelu_backward(wi.data(), to_double(pre).data(), dgelu.data(), NC, false);
  EXPECT_TRUE(close_rel(ddi.values(), wi, S::kOut));
  EXPECT_TRUE(close_rel(ddw.download(), ww, S::kAcc));
  EXPECT_TRUE(close_rel(ddb.download(), wb, kTol));
  EXPECT_TRUE(ddi.guards_intact());
  EXPECT_TRUE(dact.guards_intact());
  EXPECT_TRUE(ddw.guards_intact());
  EXPECT_TRUE(ddb.guards_intact());
}

TYPED_TEST(HalfMatmul, BackwardThroughGeluMatchesCpu) {
  using S = TypeParam;
  for (const MmShape& s : kMmShapes) mm_dgelu_case<S>(this->stream, s);
}

// The fused pair is deterministic: the same inputs give the same bits.
TYPED_TEST(HalfMatmul, GeluForwardAndBackwardAreDeterministic) {
  using S = TypeParam;
  const int N = 256, C = 768, OC = 3072;
  const FVec x = randn(size_t(N) * C, 60), w = randn(size_t(OC) * C, 61), b = randn(OC, 62),
             g = randn(size_t(N) * C, 63);
  typename S::Array dx(x, 0), dw(w, 0), db(b, 0), dg(g, 0);
  Blas blas(this->stream);
  FVec out[2], pre[2], di[2], dwt[2];
  for (int r = 0; r < 2; ++r) {
    typename S::Array o(size_t(N) * OC, 0), p(size_t(N) * OC, 0), d(size_t(N) * OC, 0),
        a(size_t(N) * OC, 0);
    DFloat gw(FVec(size_t(OC) * C, 0.f), 0);
    matmul_gelu_forward(blas, o.ptr(), p.ptr(), dx.ptr(), dw.ptr(), db.ptr(), N, C, OC);
    // the backward of a (C -> OC) GEMM's transpose: dout (N,C), weight (C,OC) as stored
    matmul_backward_dgelu(blas, d.ptr(), a.ptr(), p.ptr(), gw.get(), nullptr, dg.ptr(), o.ptr(),
                          dw.ptr(), N, OC, C);
    this->sync();
    out[r] = o.values(), pre[r] = p.values(), di[r] = d.values(), dwt[r] = gw.download();
  }
  EXPECT_TRUE(bit_equal(out[0], out[1]));
  EXPECT_TRUE(bit_equal(pre[0], pre[1]));
  EXPECT_TRUE(bit_equal(di[0], di[1]));
  EXPECT_TRUE(bit_equal(dwt[0], dwt[1]));
}

// The fused pair's plans are reused with each call's aux (pre-activation) buffer: a second call
// on other buffers gives the bits a fresh Blas gives and leaves the first call's outputs alone.
TYPED_TEST(HalfMatmul, GeluPlansAreReusedWithEachCallsAux) {
  using S = TypeParam;
  const int N = 128, C = 256, OC = 512;
  const FVec x = randn(size_t(N) * C, 70), w = randn(size_t(OC) * C, 71), b = randn(OC, 72),
             x2 = randn(size_t(N) * C, 73);
  typename S::Array dx(x, 0), dw(w, 0), db(b, 0), dx2(x2, 0);
  typename S::Array o1(size_t(N) * OC, 0), p1(size_t(N) * OC, 0), o2(size_t(N) * OC, 0),
      p2(size_t(N) * OC, 0), o3(size_t(N) * OC, 0), p3(size_t(N) * OC, 0);
  Blas shared(this->stream);
  matmul_gelu_forward(shared, o1.ptr(), p1.ptr(), dx.ptr(), dw.ptr(), db.ptr(), N, C, OC);
  this->sync();
  const FVec first_out = o1.values(), first_pre = p1.values();
  matmul_gelu_forward(shared, o2.ptr(), p2.ptr(), dx2.ptr(), dw.ptr(), db.ptr(), N, C, OC);
  {
    Blas fresh(this->stream);
    matmul_gelu_forward(fresh, o3.ptr(), p3.ptr(), dx2.ptr(), dw.ptr(), db.ptr(), N, C, OC);
    this->sync();
  }
  EXPECT_TRUE(bit_equal(o1.values(), first_out));
  EXPECT_TRUE(bit_equal(p1.values(), first_pre));
  EXPECT_TRUE(bit_equal(o2.values(), o3.values()));
  EXPECT_TRUE(bit_equal(p2.values(), p3.values()));
  EXPECT_FALSE(bit_equal(p2.values(), first_pre));
}

// --- cross-entropy ------------------------------------------------------------------------

// N, V, offset of the logits. V % 8 == 0 (the 8-wide path) aligned and not, V % 4 == 0 only,
// odd V.
const std::vector<std::tuple<int, int, size_t>> kCeShapes = {
    {37, 1003, 1}, {37, 1004, 0}, {37, 1008, 0}, {37, 1008, 3},
    {3, 50304, 2}, {2, 50304, 0}, {5, 1, 0},     {9, 7, 3}};

template <class S>
class HalfCrossEntropy : public CudaTest {};
TYPED_TEST_SUITE(HalfCrossEntropy, HalfStorages, StorageName);

TYPED_TEST(HalfCrossEntropy, ForwardMatchesCpu) {
  using S = TypeParam;
  for (auto [N, V, off] : kCeShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V));
    const FVec z = S::round(randn(size_t(N) * V, 1, 3.0));
    const auto t = rand_tokens(N, 0, V, 2);
    typename S::Array dz(z, off);
    DFloat dloss(N, 1), dlse(N, 2);
    DeviceArray<int32_t> dt(t, 0);
    dloss.poison();
    dlse.poison();
    crossentropy_forward(dloss.get(), dlse.get(), dz.ptr(), dt.get(), N, V, this->stream);
    this->sync();
    Vec loss(N), lse(N);
    cpu::crossentropy_forward(loss.data(), lse.data(), to_double(z).data(), t.data(), N, V);
    // fp32 arithmetic on exactly representable logits.
    EXPECT_TRUE(close_rel(dloss.download(), loss, S::kAcc));
    EXPECT_TRUE(close_rel(dlse.download(), lse, S::kAcc));
    EXPECT_TRUE(dloss.guards_intact());
    EXPECT_TRUE(dlse.guards_intact());
  }
}

TYPED_TEST(HalfCrossEntropy, BackwardMatchesCpuSeparateAndInPlace) {
  using S = TypeParam;
  for (auto [N, V, off] : kCeShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V));
    const size_t NV = size_t(N) * V;
    const FVec z = S::round(randn(NV, 4, 3.0));
    const auto t = rand_tokens(N, 0, V, 5);
    const float dloss = 1.0f / float(N);
    Vec loss_d(N), lse_d(N);
    cpu::crossentropy_forward(loss_d.data(), lse_d.data(), to_double(z).data(), t.data(), N, V);
    const FVec lse(lse_d.begin(), lse_d.end());
    Vec want(NV);
    cpu::crossentropy_backward(want.data(), to_double(z).data(), to_double(lse).data(), t.data(),
                               double(dloss), N, V);
    DeviceArray<int32_t> dt(t, 0);
    DFloat dlse(lse, 1);
    {
      typename S::Array dz(z, off),
          dgrad(NV, off == 0 ? 1 : 0);  // different alignment from the logits
      dgrad.poison();
      crossentropy_backward(dgrad.ptr(), dz.ptr(), dlse.get(), dt.get(), dloss, N, V, this->stream);
      this->sync();
      EXPECT_TRUE(close_rel(dgrad.values(), want, S::kOut));
      EXPECT_TRUE(dgrad.guards_intact());
      EXPECT_TRUE(bit_equal(dz.download(), S::bits(z)));  // the logits are only read
    }
    {
      typename S::Array dz(z, off);
      crossentropy_backward(dz.ptr(), dz.ptr(), dlse.get(), dt.get(), dloss, N, V, this->stream);
      this->sync();
      EXPECT_TRUE(close_rel(dz.values(), want, S::kOut));
      EXPECT_TRUE(dz.guards_intact());
    }
    {
      typename S::Array dz(z, off),
          dgrad(NV, off + 8);  // same alignment as the logits: the vector path
      dgrad.poison();
      crossentropy_backward(dgrad.ptr(), dz.ptr(), dlse.get(), dt.get(), dloss, N, V, this->stream);
      this->sync();
      EXPECT_TRUE(close_rel(dgrad.values(), want, S::kOut));
      EXPECT_TRUE(dgrad.guards_intact());
    }
  }
}

// --- rope ---------------------------------------------------------------------------------

template <class S>
class HalfRope : public CudaTest {};
TYPED_TEST_SUITE(HalfRope, HalfStorages, StorageName);

TYPED_TEST(HalfRope, ForwardAndBackwardOnInterleavedQkv) {
  using S = TypeParam;
  struct RopeShape {
    int B, T, H, D;
  };
  for (const RopeShape s :
       {RopeShape{2, 37, 3, 24}, RopeShape{1, 130, 2, 64}, RopeShape{3, 5, 4, 6}}) {
    SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                 " H=" + std::to_string(s.H) + " D=" + std::to_string(s.D));
    const int C = s.H * s.D;
    const int64_t sb = int64_t(s.T) * 3 * C, st = 3 * C, sh = s.D;
    const size_t n = size_t(s.B) * s.T * 3 * C;
    const FVec qkv = S::round(randn(n, 1));
    const BVec qkv_bits = S::bits(qkv);
    for (bool backward : {false, true}) {
      typename S::Array d(qkv, 1);
      Vec want = to_double(qkv);
      for (int part = 0; part < 2; ++part) {  // q then k
        if (backward) {
          rope_backward(d.ptr() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0, this->stream);
          cpu::rope_backward(want.data() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0);
        } else {
          rope_forward(d.ptr() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0, this->stream);
          cpu::rope_forward(want.data() + part * C, s.B, s.T, s.H, s.D, sb, st, sh, 10000.0);
        }
      }
      this->sync();
      EXPECT_TRUE(close_rel(d.values(), want, S::kOut)) << (backward ? "backward" : "forward");
      const BVec got = d.download();
      for (size_t bt = 0; bt < size_t(s.B) * s.T; ++bt)
        for (int c = 2 * C; c < 3 * C; ++c)
          ASSERT_EQ(got[bt * 3 * C + c], qkv_bits[bt * 3 * C + c]) << "v was touched";
      EXPECT_TRUE(d.guards_intact());
    }
  }
}

// --- naive attention ----------------------------------------------------------------------

template <class S>
class HalfAttentionNaive : public CudaTest {};
TYPED_TEST_SUITE(HalfAttentionNaive, HalfStorages, StorageName);

template <class S>
void attention_case(cudaStream_t stream, const AttentionShape& s, bool causal, size_t off) {
  SCOPED_TRACE("B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) +
               " T=" + std::to_string(s.T) + " D=" + std::to_string(s.D) +
               (causal ? " causal" : " full") + " offset=" + std::to_string(off));
  const int B = s.B, H = s.H, T = s.T, D = s.D, C = H * D;
  const double scale = 1.0 / std::sqrt(double(D));
  const size_t n3 = size_t(B) * T * 3 * C, n1 = size_t(B) * T * C;
  const FVec qkv = S::round(randn(n3, 1)), dout = S::round(randn(n1, 2));
  const Reference want = reference(qkv, dout, s, causal, scale);

  typename S::Array dqkv_in(qkv, off), ddout(dout, off + 1), dout_buf(n1, off), dgrad(n3, off + 2);
  DFloat dlse(size_t(B) * H * T, off);
  dout_buf.poison();
  dlse.poison();
  dgrad.poison();
  const int64_t sb3 = int64_t(T) * 3 * C, st3 = 3 * C, sb1 = int64_t(T) * C, st1 = C;
  typename S::Elem* in = dqkv_in.ptr();
  typename S::Elem* g = dgrad.ptr();
  const HeadViewOf<typename S::Elem> q{in, sb3, D, st3}, k{in + C, sb3, D, st3},
      v{in + 2 * C, sb3, D, st3};
  const HeadViewOf<typename S::Elem> out{dout_buf.ptr(), sb1, D, st1}, go{ddout.ptr(), sb1, D, st1};
  const HeadViewOf<typename S::Elem> dq{g, sb3, D, st3}, dk{g + C, sb3, D, st3},
      dv{g + 2 * C, sb3, D, st3};

  const size_t ws_bytes = attention_naive_workspace_bytes_half(B, H, T, D);
  DeviceArray<float> ws(ws_bytes / sizeof(float) + 1, 0);
  Blas blas(stream);
  attention_naive_forward(blas, out, dlse.get(), q, k, v, B, H, T, D, causal, float(scale),
                          ws.get(), ws_bytes);
  check(cudaStreamSynchronize(stream), "sync");
  EXPECT_TRUE(close_rel(dout_buf.values(), want.out, S::kOut)) << "out";
  // fp32 scores of 16-bit q, k (exact products), fp32 softmax statistics.
  EXPECT_TRUE(close_rel(dlse.download(), want.lse, S::kAcc)) << "lse";

  attention_naive_backward(blas, dq, dk, dv, q, k, v, out, dlse.get(), go, B, H, T, D, causal,
                           float(scale), ws.get(), ws_bytes);
  check(cudaStreamSynchronize(stream), "sync");
  const FVec got = dgrad.values();
  for (int part = 0; part < 3; ++part) {
    FVec got_part;
    Vec want_part;
    for (size_t bt = 0; bt < size_t(B) * T; ++bt)
      for (int c = part * C; c < (part + 1) * C; ++c) {
        got_part.push_back(got[bt * 3 * C + c]);
        want_part.push_back(want.dqkv[bt * 3 * C + c]);
      }
    EXPECT_TRUE(close_rel(got_part, want_part, S::kOut, 0.05)) << (part == 0   ? "dq"
                                                                   : part == 1 ? "dk"
                                                                               : "dv");
  }
  EXPECT_TRUE(dout_buf.guards_intact());
  EXPECT_TRUE(dlse.guards_intact());
  EXPECT_TRUE(dgrad.guards_intact());
  EXPECT_TRUE(dqkv_in.guards_intact());
}

const AttentionShape kAttnShapes[] = {
    {2, 3, 37, 24}, {1, 2, 128, 64}, {3, 2, 1, 8}, {1, 4, 200, 80}};

TYPED_TEST(HalfAttentionNaive, ForwardBackwardCausal) {
  using S = TypeParam;
  for (const AttentionShape& s : kAttnShapes)
    for (size_t off : {0, 1}) attention_case<S>(this->stream, s, true, off);
}

TYPED_TEST(HalfAttentionNaive, ForwardBackwardNonCausal) {
  using S = TypeParam;
  for (const AttentionShape& s : kAttnShapes)
    for (size_t off : {0, 1}) attention_case<S>(this->stream, s, false, off);
}

TYPED_TEST(HalfAttentionNaive, WorkspaceCoversBothDtypesAndIsChecked) {
  using S = TypeParam;
  const int B = 1, H = 2, T = 16, D = 8, C = H * D;
  const size_t need = attention_naive_workspace_bytes_half(B, H, T, D);
  EXPECT_GE(need, attention_naive_workspace_bytes(B, H, T, D));
  EXPECT_EQ(attention_naive_workspace_bytes_half(B, 0, T, D), 0u);
  typename S::Array qkv(randn(size_t(B) * T * 3 * C, 3), 0), out(size_t(B) * T * C, 0);
  DFloat lse(size_t(H) * T, 0);
  const int64_t sb3 = int64_t(T) * 3 * C;
  const HeadViewOf<typename S::Elem> q{qkv.ptr(), sb3, D, 3 * C}, k{qkv.ptr() + C, sb3, D, 3 * C},
      v{qkv.ptr() + 2 * C, sb3, D, 3 * C}, o{out.ptr(), int64_t(T) * C, D, C};
  DFloat ws(need / sizeof(float), 0);
  Blas blas(this->stream);
  // The fp32 path's sizes are not enough for the 16-bit path (it stages P and dS in 16 bits).
  EXPECT_THROW(attention_naive_forward(blas, o, lse.get(), q, k, v, B, H, T, D, true, 0.3f,
                                       ws.get(), size_t(H) * T * T * sizeof(float)),
               std::runtime_error);
  EXPECT_THROW(attention_naive_backward(blas, q, k, v, q, k, v, o, lse.get(), o, B, H, T, D, true,
                                        0.3f, ws.get(), need - 2),
               std::runtime_error);
}

}  // namespace
}  // namespace triad::kernels::cuda::test
