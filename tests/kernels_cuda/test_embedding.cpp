// Token + position embedding against kernels::cpu: forward with and without wpe, backward
// bit-identical to the CPU's float result (same summation order) and to itself across runs,
// with many repeated tokens, and enough hits on one vocabulary chunk to need several passes.
#include <tuple>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

struct Shape {
  int B, T, C, V;
  int tok_lo, tok_hi;  // tokens drawn from [tok_lo, tok_hi)
  size_t off;
};
const std::vector<Shape> kShapes = {
    {3, 37, 99, 1003, 0, 1003, 1},   // awkward sizes, unaligned
    {2, 16, 64, 1003, 0, 1003, 0},   // aligned float4 path
    {3, 37, 99, 50, 0, 50, 3},       // every token repeats
    {4, 1000, 12, 300, 64, 128, 0},  // 4000 hits on one 64-row chunk: several segments
    {2, 5, 8, 70000, 65000, 70000, 2}};

std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
         " V=" + std::to_string(s.V);
}

class Embedding : public CudaTest {};

TEST_F(Embedding, ForwardMatchesCpu) {
  for (const Shape& s : kShapes)
    for (bool with_wpe : {true, false}) {
      SCOPED_TRACE(name(s) + (with_wpe ? " wpe" : " no wpe"));
      const size_t BT = size_t(s.B) * s.T;
      const auto tokens = rand_tokens(BT, s.tok_lo, s.tok_hi, 1);
      const FVec wte = randn(size_t(s.V) * s.C, 2), wpe = randn(size_t(s.T) * s.C, 3);
      DeviceArray<int32_t> dtok(tokens, 0);
      DFloat dwte(wte, s.off), dwpe(wpe, s.off), dout(BT * s.C, s.off);
      dout.poison();
      embedding_forward(dout.get(), dtok.get(), dwte.get(), with_wpe ? dwpe.get() : nullptr, s.B,
                        s.T, s.C, stream);
      sync();
      FVec want(BT * s.C);
      cpu::embedding_forward(want.data(), tokens.data(), wte.data(),
                             with_wpe ? wpe.data() : nullptr, s.B, s.T, s.C);
      EXPECT_TRUE(bit_equal(dout.download(), want));  // one addition per element
      EXPECT_TRUE(dout.guards_intact());
    }
}

TEST_F(Embedding, BackwardIsBitIdenticalToCpuAndDeterministic) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t BT = size_t(s.B) * s.T;
    const auto tokens = rand_tokens(BT, s.tok_lo, s.tok_hi, 4);
    const FVec dout = randn(BT * s.C, 5);
    const FVec dwte0 = randn(size_t(s.V) * s.C, 6), dwpe0 = randn(size_t(s.T) * s.C, 7);
    DeviceArray<int32_t> dtok(tokens, 0);
    DFloat ddout(dout, s.off);
    FVec got[2][2];
    for (auto& g : got) {
      DFloat ddwte(dwte0, s.off), ddwpe(dwpe0, s.off + 1);
      embedding_backward(ddwte.get(), ddwpe.get(), ddout.get(), dtok.get(), s.B, s.T, s.C, s.V,
                         stream);
      sync();
      g[0] = ddwte.download();
      g[1] = ddwpe.download();
      EXPECT_TRUE(ddwte.guards_intact());
      EXPECT_TRUE(ddwpe.guards_intact());
    }
    FVec want_wte = dwte0, want_wpe = dwpe0;
    cpu::embedding_backward(want_wte.data(), want_wpe.data(), dout.data(), tokens.data(), s.B, s.T,
                            s.C);
    EXPECT_TRUE(bit_equal(got[0][0], want_wte));
    EXPECT_TRUE(bit_equal(got[0][1], want_wpe));
    EXPECT_TRUE(bit_equal(got[0][0], got[1][0]));
    EXPECT_TRUE(bit_equal(got[0][1], got[1][1]));
    // And against double (the CPU float result is one rounding order of it).
    Vec wte_d = to_double(dwte0), wpe_d = to_double(dwpe0);
    cpu::embedding_backward(wte_d.data(), wpe_d.data(), to_double(dout).data(), tokens.data(), s.B,
                            s.T, s.C);
    EXPECT_TRUE(close_rel(got[0][0], wte_d, kTol));
    EXPECT_TRUE(close_rel(got[0][1], wpe_d, kTol));
  }
}

TEST_F(Embedding, BackwardWithoutWpe) {
  const Shape s = kShapes[0];
  const size_t BT = size_t(s.B) * s.T;
  const auto tokens = rand_tokens(BT, 0, s.V, 8);
  const FVec dout = randn(BT * s.C, 9), dwte0 = randn(size_t(s.V) * s.C, 10);
  DeviceArray<int32_t> dtok(tokens, 0);
  DFloat ddout(dout, 0), ddwte(dwte0, 2);
  embedding_backward(ddwte.get(), nullptr, ddout.get(), dtok.get(), s.B, s.T, s.C, s.V, stream);
  sync();
  FVec want = dwte0, wpe_scratch(size_t(s.T) * s.C, 0.f);
  cpu::embedding_backward(want.data(), wpe_scratch.data(), dout.data(), tokens.data(), s.B, s.T,
                          s.C);
  EXPECT_TRUE(bit_equal(ddwte.download(), want));
  EXPECT_TRUE(ddwte.guards_intact());
}

}  // namespace
}  // namespace triad::kernels::cuda::test
