// matmul_forward/backward (cuBLASLt, fp32 and TF32) against kernels::cpu in double: odd shapes,
// operands at offsets that break 16-byte alignment, bias on and off, poisoned outputs,
// accumulation into pre-filled gradients, and each gradient skipped when its pointer is null.
#include <deque>
#include <tuple>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

struct Shape {
  int N, C, OC;
  size_t off;  // element offset of every operand
};
const std::vector<Shape> kShapes = {{37, 99, 67, 0},     {37, 99, 67, 1},   {64, 128, 96, 0},
                                    {64, 128, 96, 3},    {5, 7, 3, 2},      {1, 1, 1, 0},
                                    {256, 768, 2304, 0}, {130, 3072, 65, 1}};

std::string name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC) +
         " offset=" + std::to_string(s.off);
}

class Matmul : public CudaTest {};

void forward_case(cudaStream_t stream, bool tf32, const Shape& s, bool with_bias) {
  SCOPED_TRACE(name(s) + (with_bias ? " bias" : " no bias") + (tf32 ? " tf32" : " fp32"));
  const auto [N, C, OC, off] = s;
  const FVec x = randn(size_t(N) * C, 1), w = randn(size_t(OC) * C, 2), b = randn(OC, 3);
  DFloat dx(x, off), dw(w, off), db(b, off), dout(size_t(N) * OC, off);
  dout.poison();
  Blas blas(stream, tf32);
  matmul_forward(blas, dout.get(), dx.get(), dw.get(), with_bias ? db.get() : nullptr, N, C, OC);
  check(cudaStreamSynchronize(stream), "sync");
  Vec want(size_t(N) * OC);
  const Vec bd = to_double(b);
  cpu::matmul_forward(want.data(), to_double(x).data(), to_double(w).data(),
                      with_bias ? bd.data() : nullptr, N, C, OC);
  EXPECT_TRUE(close_rel(dout.download(), want, tf32 ? kTolTf32 : kTol));
  EXPECT_TRUE(dout.guards_intact());
}

TEST_F(Matmul, ForwardFp32) {
  for (const Shape& s : kShapes)
    for (bool bias : {true, false}) forward_case(stream, false, s, bias);
}

TEST_F(Matmul, ForwardTf32) {
  for (const Shape& s : kShapes)
    for (bool bias : {true, false}) forward_case(stream, true, s, bias);
}

TEST_F(Matmul, ForwardWithBiasAtOddOffset) {
  // The bias alone misaligned (the epilogue may refuse it; the result must not change).
  const int N = 33, C = 64, OC = 48;
  const FVec x = randn(size_t(N) * C, 4), w = randn(size_t(OC) * C, 5), b = randn(OC, 6);
  DFloat dx(x, 0), dw(w, 0), db(b, 1), dout(size_t(N) * OC, 0);
  dout.poison();
  Blas blas(stream);
  matmul_forward(blas, dout.get(), dx.get(), dw.get(), db.get(), N, C, OC);
  sync();
  Vec want(size_t(N) * OC);
  cpu::matmul_forward(want.data(), to_double(x).data(), to_double(w).data(), to_double(b).data(), N,
                      C, OC);
  EXPECT_TRUE(close_rel(dout.download(), want, kTol));
}

TEST_F(Matmul, ForwardWithEmptyInnerDimIsTheBias) {
  const int N = 7, OC = 5;
  const FVec b = randn(OC, 7);
  DFloat db(b, 0), dout(size_t(N) * OC, 0), dx(1, 0), dw(1, 0);
  dout.poison();
  Blas blas(stream);
  matmul_forward(blas, dout.get(), dx.get(), dw.get(), db.get(), N, 0, OC);
  sync();
  Vec want(size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) want[size_t(n) * OC + o] = b[o];
  EXPECT_TRUE(close_rel(dout.download(), want, 0.0));
  matmul_forward(blas, dout.get(), dx.get(), dw.get(), nullptr, N, 0, OC);
  sync();
  EXPECT_TRUE(close_rel(dout.download(), Vec(want.size(), 0.0), 0.0));
}

void backward_case(cudaStream_t stream, bool tf32, const Shape& s, bool want_di, bool want_dw,
                   bool want_db) {
  SCOPED_TRACE(name(s) + (tf32 ? " tf32" : " fp32") + " dinp " + std::to_string(want_di) +
               " dweight " + std::to_string(want_dw) + " dbias " + std::to_string(want_db));
  const auto [N, C, OC, off] = s;
  const size_t NC = size_t(N) * C, OCC = size_t(OC) * C, NOC = size_t(N) * OC;
  const FVec x = randn(NC, 10), w = randn(OCC, 11), g = randn(NOC, 12);
  const FVec di0 = randn(NC, 13), dw0 = randn(OCC, 14), db0 = randn(OC, 15);
  DFloat dx(x, off), dw(w, off), dg(g, off + 1);
  DFloat ddi(di0, off), ddw(dw0, off), ddb(db0, off + 3);
  Blas blas(stream, tf32);
  matmul_backward(blas, want_di ? ddi.get() : nullptr, want_dw ? ddw.get() : nullptr,
                  want_db ? ddb.get() : nullptr, dg.get(), dx.get(), dw.get(), N, C, OC);
  check(cudaStreamSynchronize(stream), "sync");
  Vec wi = to_double(di0), ww = to_double(dw0), wb = to_double(db0);
  Vec scratch_w = ww;  // the CPU always writes dweight
  cpu::matmul_backward(want_di ? wi.data() : nullptr, want_dw ? ww.data() : scratch_w.data(),
                       want_db ? wb.data() : nullptr, to_double(g).data(), to_double(x).data(),
                       to_double(w).data(), N, C, OC);
  // Accumulated on top of O(1) pre-fills; the gradients themselves are O(sqrt(K)).
  const double tol = tf32 ? kTolTf32 : kTol;
  EXPECT_TRUE(close_rel(ddi.download(), wi, tol));  // untouched when skipped: wi == di0
  EXPECT_TRUE(close_rel(ddw.download(), ww, tol));
  EXPECT_TRUE(close_rel(ddb.download(), wb, kTol));  // a column sum, never TF32
  if (!want_di) {
    EXPECT_TRUE(bit_equal(ddi.download(), di0));
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

TEST_F(Matmul, BackwardFp32Accumulates) {
  for (const Shape& s : kShapes) backward_case(stream, false, s, true, true, true);
}

TEST_F(Matmul, BackwardTf32Accumulates) {
  for (const Shape& s : kShapes) backward_case(stream, true, s, true, true, true);
}

TEST_F(Matmul, BackwardSkipsNullGradients) {
  const Shape s{37, 99, 67, 1};
  for (int mask = 0; mask < 8; ++mask)
    backward_case(stream, false, s, mask & 1, mask & 2, mask & 4);
}

TEST_F(Matmul, BackwardBiasGradientIsDeterministic) {
  const int N = 5000, C = 3, OC = 771;
  const FVec g = randn(size_t(N) * OC, 20), x = randn(size_t(N) * C, 21),
             w = randn(size_t(OC) * C, 22);
  DFloat dg(g, 1), dx(x, 0), dw(w, 0);
  Blas blas(stream);
  FVec r[2];
  for (auto& out : r) {
    DFloat db(FVec(OC, 0.f), 0);
    matmul_backward(blas, nullptr, nullptr, db.get(), dg.get(), dx.get(), dw.get(), N, C, OC);
    sync();
    out = db.download();
  }
  EXPECT_TRUE(bit_equal(r[0], r[1]));
}

// A Blas builds one cuBLASLt plan per problem and alignment and reuses it: each call still
// reads and writes its own operands and bias, and an operand at another alignment gets a plan
// of its own.
TEST_F(Matmul, PlansAreReusedWithEachCallsOperands) {
  const int N = 64, C = 128, OC = 96;
  Blas blas(stream);
  std::deque<DFloat> keep;  // every call's buffers stay alive: no address is reused
  auto call = [&](uint64_t seed, size_t off) {
    const FVec x = randn(size_t(N) * C, seed), w = randn(size_t(OC) * C, seed + 1),
               b = randn(OC, seed + 2);
    keep.emplace_back(x, off), keep.emplace_back(w, off), keep.emplace_back(b, off);
    keep.emplace_back(size_t(N) * OC, off);
    DFloat &dx = keep[keep.size() - 4], &dw = keep[keep.size() - 3], &db = keep[keep.size() - 2],
           &dout = keep.back();
    dout.poison();
    matmul_forward(blas, dout.get(), dx.get(), dw.get(), db.get(), N, C, OC);
    sync();
    Vec want(size_t(N) * OC);
    cpu::matmul_forward(want.data(), to_double(x).data(), to_double(w).data(), to_double(b).data(),
                        N, C, OC);
    EXPECT_TRUE(close_rel(dout.download(), want, kTol)) << "seed " << seed << " offset " << off;
  };
  call(10, 0);
  call(20, 0);
  EXPECT_EQ(blas.lt_plan_count(), 1u);
  call(30, 1);
  EXPECT_EQ(blas.lt_plan_count(), 2u);
  call(40, 0);
  EXPECT_EQ(blas.lt_plan_count(), 2u);
}

TEST_F(Matmul, BlasHandlesAndWorkspace) {
  Blas a(stream), b(stream, true);
  EXPECT_EQ(a.stream(), stream);
  EXPECT_FALSE(a.allow_tf32());
  EXPECT_TRUE(b.allow_tf32());
  EXPECT_NE(a.lt_handle(), nullptr);
  EXPECT_NE(a.blas_handle(), nullptr);
  EXPECT_NE(a.workspace(), nullptr);
  EXPECT_EQ(a.workspace_bytes(), size_t(32) << 20);
}

}  // namespace
}  // namespace triad::kernels::cuda::test
