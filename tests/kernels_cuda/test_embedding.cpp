// Token + position embedding against kernels::cpu, in fp32 and bf16 storage: forward with and
// without wpe (the float sum, rounded once), backward bit-identical to the CPU's float result
// (same summation order) and to itself across runs, with many repeated tokens, enough hits on
// one vocabulary chunk to need several passes, and vocabulary shards (tensor parallelism) that
// start at 0 and in the middle, with tokens inside and outside them.
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

struct Shape {
  int B, T, C;
  int V;               // the vocabulary
  int tok_lo, tok_hi;  // tokens drawn from [tok_lo, tok_hi)
  size_t off;
  int64_t start = 0;  // wte holds the rows [start, start + rows); rows < 0: all V
  int rows = -1;
  int wte_rows() const { return rows < 0 ? V : rows; }
};
const std::vector<Shape> kShapes = {
    {3, 37, 99, 1003, 0, 1003, 1},   // awkward sizes, unaligned
    {2, 16, 64, 1003, 0, 1003, 0},   // aligned: the vector path
    {2, 16, 12, 1003, 0, 1003, 0},   // C % 8 != 0: scalar for bf16
    {3, 37, 99, 50, 0, 50, 3},       // every token repeats
    {4, 1000, 12, 300, 64, 128, 0},  // 4000 hits on one 64-row chunk: several segments
    {4, 1000, 16, 300, 64, 128, 0},
    {2, 5, 8, 70000, 65000, 70000, 2},
    // Vocabulary shards.
    {3, 37, 99, 1004, 0, 1004, 1, 0, 251},           // the first, awkward sizes, unaligned
    {2, 16, 64, 1004, 0, 1004, 0, 502, 251},         // a middle one, aligned
    {2, 16, 64, 1004, 0, 1004, 3, 753, 251},         // the last one, unaligned
    {2, 8, 16, 1000, 300, 1000, 0, 100, 50},         // no token in the shard
    {2, 8, 16, 1000, 100, 150, 2, 100, 50},          // every token in the shard
    {4, 1000, 16, 3000, 1064, 1128, 0, 1000, 300}};  // 4000 hits on one chunk of the shard

std::string name(const Shape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
         " V=" + std::to_string(s.V) + " start=" + std::to_string(s.start) +
         " rows=" + std::to_string(s.rows);
}

template <class S>
class Embedding : public CudaTest {};
TYPED_TEST_SUITE(Embedding, Storages, StorageName);

TYPED_TEST(Embedding, ForwardIsTheRoundedFloatSum) {
  using S = TypeParam;
  for (const Shape& s : kShapes)
    for (bool with_wpe : {true, false}) {
      SCOPED_TRACE(name(s) + (with_wpe ? " wpe" : " no wpe"));
      const size_t BT = size_t(s.B) * s.T;
      const auto tokens = rand_tokens(BT, s.tok_lo, s.tok_hi, 1);
      const FVec wte = S::round(randn(size_t(s.wte_rows()) * s.C, 2)),
                 wpe = S::round(randn(size_t(s.T) * s.C, 3));
      DeviceArray<int32_t> dtok(tokens, 0);
      typename S::Array dwte(wte, s.off), dwpe(wpe, s.off), dout(BT * s.C, s.off);
      dout.poison();
      embedding_forward(S::ptr(dout), dtok.get(), S::ptr(dwte), with_wpe ? S::ptr(dwpe) : nullptr,
                        s.B, s.T, s.C, this->stream, s.start, s.rows);
      this->sync();
      FVec want(BT * s.C);
      cpu::embedding_forward(want.data(), tokens.data(), wte.data(),
                             with_wpe ? wpe.data() : nullptr, s.B, s.T, s.C, s.start, s.rows);
      EXPECT_TRUE(bit_equal(S::values(dout), S::round(want)));  // one float addition, rounded
      EXPECT_TRUE(dout.guards_intact());
    }
}

// dwte and dwpe after one backward from dwte0/dwpe0 (dwpe null: not asked for).
template <class S>
std::vector<FVec> backward(const Shape& s, const typename S::Array& dout,
                           const DeviceArray<int32_t>& tokens, const FVec& dwte0, const FVec* dwpe0,
                           cudaStream_t stream) {
  DFloat dwte(dwte0, s.off), dwpe(dwpe0 ? *dwpe0 : FVec{}, s.off + 1);
  embedding_backward(dwte.get(), dwpe0 ? dwpe.get() : nullptr, S::ptr(dout), tokens.get(), s.B, s.T,
                     s.C, s.wte_rows(), stream, s.start);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  EXPECT_TRUE(dwte.guards_intact());
  EXPECT_TRUE(dwpe.guards_intact());
  return {dwte.download(), dwpe.download()};
}

TYPED_TEST(Embedding, BackwardIsBitIdenticalToCpuFloatAndDeterministic) {
  using S = TypeParam;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t BT = size_t(s.B) * s.T;
    const auto tokens = rand_tokens(BT, s.tok_lo, s.tok_hi, 4);
    const FVec dout = S::round(randn(BT * s.C, 5));
    const FVec dwte0 = randn(size_t(s.wte_rows()) * s.C, 6), dwpe0 = randn(size_t(s.T) * s.C, 7);
    DeviceArray<int32_t> dtok(tokens, 0);
    typename S::Array ddout(dout, s.off);
    const auto got = backward<S>(s, ddout, dtok, dwte0, &dwpe0, this->stream);
    const auto again = backward<S>(s, ddout, dtok, dwte0, &dwpe0, this->stream);
    // fp32 sums of the same values in the CPU's order: the CPU's float result exactly.
    FVec want_wte = dwte0, want_wpe = dwpe0;
    cpu::embedding_backward(want_wte.data(), want_wpe.data(), dout.data(), tokens.data(), s.B, s.T,
                            s.C, s.start, s.rows);
    EXPECT_TRUE(bit_equal(got[0], want_wte));
    EXPECT_TRUE(bit_equal(got[1], want_wpe));
    EXPECT_TRUE(bit_equal(got[0], again[0]));
    EXPECT_TRUE(bit_equal(got[1], again[1]));
    // And against double (the CPU float result is one rounding order of it).
    Vec wte_d = to_double(dwte0), wpe_d = to_double(dwpe0);
    cpu::embedding_backward(wte_d.data(), wpe_d.data(), to_double(dout).data(), tokens.data(), s.B,
                            s.T, s.C, s.start, s.rows);
    EXPECT_TRUE(close_rel(got[0], wte_d, kTol));
    EXPECT_TRUE(close_rel(got[1], wpe_d, kTol));
  }
}

TYPED_TEST(Embedding, BackwardWithoutWpe) {
  using S = TypeParam;
  for (const Shape& s : {kShapes[0], kShapes[9]}) {
    SCOPED_TRACE(name(s));
    const size_t BT = size_t(s.B) * s.T;
    const auto tokens = rand_tokens(BT, s.tok_lo, s.tok_hi, 8);
    const FVec dout = S::round(randn(BT * s.C, 9)), dwte0 = randn(size_t(s.wte_rows()) * s.C, 10);
    DeviceArray<int32_t> dtok(tokens, 0);
    typename S::Array ddout(dout, 0);
    const auto got = backward<S>(s, ddout, dtok, dwte0, nullptr, this->stream);
    FVec want = dwte0, wpe_scratch(size_t(s.T) * s.C, 0.f);
    cpu::embedding_backward(want.data(), wpe_scratch.data(), dout.data(), tokens.data(), s.B, s.T,
                            s.C, s.start, s.rows);
    EXPECT_TRUE(bit_equal(got[0], want));
  }
}

}  // namespace
}  // namespace triad::kernels::cuda::test
