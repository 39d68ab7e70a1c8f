// Tensor parallelism's kernels against kernels::cpu, in fp32 and bf16 storage: the
// vocab-parallel cross-entropy (row_max, row_sums, finish and the backward with vocab_start)
// and the row-parallel bias (the embedding over a vocabulary shard: test_embedding.cpp).
// Shards start at 0 and in the middle, have padding columns (or none valid at all), and
// targets inside and outside them; and a vocabulary split into 2 and 4 shards, reduced on the
// host as the all-reduces would, gives the whole-vocabulary forward's loss and lse.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "triad/kernels/cpu.hpp"
#include "triad/kernels/cuda.hpp"

namespace triad::kernels::cuda::test {
namespace {

template <class S>
class VocabParallel : public CudaTest {};
TYPED_TEST_SUITE(VocabParallel, Storages, StorageName);

// --- cross-entropy on one shard -----------------------------------------------------------

struct CeShard {
  int N, V, valid;  // logits (N,V): this rank's columns, the first `valid` real
  int64_t start;    // the vocabulary's column of logits' column 0
  size_t off;
};
const std::vector<CeShard> kCeShards = {
    {37, 251, 251, 0, 1},         // the first shard, odd width: scalar
    {37, 256, 256, 512, 0},       // a middle shard, aligned: the vector path
    {37, 256, 200, 768, 3},       // the last shard, with padding, unaligned
    {9, 256, 0, 768, 0},          // padding only: no valid column
    {3, 12576, 12529, 37728, 0},  // GPT-2's 50304 over 4 ranks, the last one
    {5, 7, 5, 14, 2}};

std::string name(const CeShard& s) {
  return "N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
         " valid=" + std::to_string(s.valid) + " start=" + std::to_string(s.start);
}

// Targets around the shard: in a third of the rows a valid column of it, in another third one
// of its padding columns (when it has some), the rest anywhere within 300 of it.
std::vector<int32_t> shard_targets(const CeShard& s, uint64_t seed) {
  const int lo = int(std::max<int64_t>(0, s.start - 300)), hi = int(s.start + s.V + 300);
  std::vector<int32_t> t = rand_tokens(s.N, lo, hi, seed);
  for (int n = 0; n < s.N; ++n) {
    if (n % 3 == 0 && s.valid > 0) t[n] = int32_t(s.start + (7 * n) % s.valid);
    if (n % 3 == 1 && s.valid < s.V) t[n] = int32_t(s.start + s.valid + n % (s.V - s.valid));
  }
  return t;
}

TYPED_TEST(VocabParallel, CrossEntropyRowMaxAndRowSumsMatchCpu) {
  using S = TypeParam;
  for (const CeShard& s : kCeShards) {
    SCOPED_TRACE(name(s));
    const FVec z = S::round(randn(size_t(s.N) * s.V, 1, 3.0));
    const auto t = shard_targets(s, 2);
    typename S::Array dz(z, s.off);
    DeviceArray<int32_t> dt(t, 0);
    DFloat drowmax(s.N, 1), dsumexp(s.N, 2), dtarget(s.N, 0);
    drowmax.poison();
    crossentropy_row_max(drowmax.get(), S::ptr(dz), s.N, s.V, s.valid, this->stream);
    this->sync();
    FVec want_max(s.N);  // a max is exact: the CPU's float result
    cpu::crossentropy_row_max(want_max.data(), z.data(), s.N, s.V, s.valid);
    EXPECT_TRUE(bit_equal(drowmax.download(), want_max));
    EXPECT_TRUE(drowmax.guards_intact());

    // The group's max is at least this shard's (and finite where the shard has no column).
    FVec rowmax = uniform(s.N, 3, 0.0, 2.0);
    for (int n = 0; n < s.N; ++n)
      if (s.valid > 0) rowmax[n] += want_max[n];
    drowmax.upload(rowmax);
    dsumexp.poison();
    dtarget.poison();
    crossentropy_row_sums(dsumexp.get(), dtarget.get(), S::ptr(dz), drowmax.get(), dt.get(), s.N,
                          s.V, s.valid, s.start, this->stream);
    this->sync();
    Vec want_sum(s.N), want_target(s.N);
    cpu::crossentropy_row_sums(want_sum.data(), want_target.data(), to_double(z).data(),
                               to_double(rowmax).data(), t.data(), s.N, s.V, s.valid, s.start);
    EXPECT_TRUE(close_rel(dsumexp.download(), want_sum, S::kAcc));
    const FVec got_target = dtarget.download();
    EXPECT_TRUE(bit_equal(got_target, FVec(want_target.begin(), want_target.end())));
    for (int n = 0; n < s.N; ++n) {  // the shard's own targets are there, the others 0
      const int64_t c = t[n] - s.start;
      EXPECT_EQ(got_target[n], c >= 0 && c < s.valid ? z[size_t(n) * s.V + c] : 0.0f) << n;
    }
    EXPECT_TRUE(dsumexp.guards_intact());
    EXPECT_TRUE(dtarget.guards_intact());
  }
}

class VocabParallelFinish : public CudaTest {};

TEST_F(VocabParallelFinish, MatchesCpu) {
  for (int N : {1, 37, 3000}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    const FVec rowmax = randn(N, 1, 5.0), sumexp = uniform(N, 2, 0.5, 5000.0),
               target = randn(N, 3, 5.0);
    DFloat dmax(rowmax, 1), dsum(sumexp, 0), dtarget(target, 3), dloss(N, 2), dlse(N, 0);
    dloss.poison();
    dlse.poison();
    crossentropy_finish(dloss.get(), dlse.get(), dmax.get(), dsum.get(), dtarget.get(), N, stream);
    sync();
    Vec loss(N), lse(N);
    cpu::crossentropy_finish(loss.data(), lse.data(), to_double(rowmax).data(),
                             to_double(sumexp).data(), to_double(target).data(), N);
    EXPECT_TRUE(close_rel(dloss.download(), loss, kTol));
    EXPECT_TRUE(close_rel(dlse.download(), lse, kTol));
    EXPECT_TRUE(dloss.guards_intact());
    EXPECT_TRUE(dlse.guards_intact());
  }
}

TYPED_TEST(VocabParallel, CrossEntropyBackwardOnAShardMatchesCpuSeparateAndInPlace) {
  using S = TypeParam;
  for (const CeShard& s : kCeShards) {
    SCOPED_TRACE(name(s));
    const size_t NV = size_t(s.N) * s.V;
    const FVec z = S::round(randn(NV, 4, 3.0));
    const auto t = shard_targets(s, 5);
    const float dloss = 1.0f / float(s.N);
    // The whole row's lse is at least the shard's: the shard's own plus up to 2.
    FVec lse = uniform(s.N, 6, 0.0, 2.0);
    if (s.valid > 0) {
      Vec loss_d(s.N), lse_d(s.N);
      const std::vector<int32_t> first(s.N, 0);  // the forward's targets must be in the row
      cpu::crossentropy_forward(loss_d.data(), lse_d.data(), to_double(z).data(), first.data(), s.N,
                                s.V, s.valid);
      for (int n = 0; n < s.N; ++n) lse[n] += float(lse_d[n]);
    }
    Vec want(NV);
    cpu::crossentropy_backward(want.data(), to_double(z).data(), to_double(lse).data(), t.data(),
                               double(dloss), s.N, s.V, s.valid, s.start);
    DeviceArray<int32_t> dt(t, 0);
    DFloat dlse(lse, 1);
    for (size_t grad_off : {s.off, s.off + 1}) {  // the vector path and the scalar one
      typename S::Array dz(z, s.off), dgrad(NV, grad_off);
      dgrad.poison();
      crossentropy_backward(S::ptr(dgrad), S::ptr(dz), dlse.get(), dt.get(), dloss, s.N, s.V,
                            this->stream, s.valid, s.start);
      this->sync();
      EXPECT_TRUE(close_rel(S::values(dgrad), want, S::kOut));
      EXPECT_TRUE(dgrad.guards_intact());
      EXPECT_TRUE(bit_equal(S::values(dz), z));  // the logits are only read
    }
    typename S::Array dz(z, s.off);
    crossentropy_backward(S::ptr(dz), S::ptr(dz), dlse.get(), dt.get(), dloss, s.N, s.V,
                          this->stream, s.valid, s.start);
    this->sync();
    EXPECT_TRUE(close_rel(S::values(dz), want, S::kOut));
    EXPECT_TRUE(dz.guards_intact());
  }
}

// --- the split forward against the whole vocabulary --------------------------------------

struct Split {
  int N, padded, valid, ranks;  // logits (N, padded), the first `valid` columns real
};
const std::vector<Split> kSplits = {
    {37, 1024, 1003, 2},  {37, 1024, 1003, 4},  {5, 1024, 700, 4},  // the last rank: padding only
    {3, 50304, 50257, 2}, {3, 50304, 50257, 4}, {9, 28, 25, 4}};

// Runs row_max, a host max over the ranks, row_sums, host sums in rank order (the all-reduces)
// and finish; returns {losses, lse}.
template <class S>
std::vector<FVec> split_forward(const Split& sp, const FVec& z, const std::vector<int32_t>& t,
                                cudaStream_t stream) {
  const int rows = sp.padded / sp.ranks;
  std::vector<std::unique_ptr<typename S::Array>> shard;
  for (int r = 0; r < sp.ranks; ++r) {
    FVec cols(size_t(sp.N) * rows);
    for (int n = 0; n < sp.N; ++n)
      std::copy_n(z.begin() + size_t(n) * sp.padded + size_t(r) * rows, rows,
                  cols.begin() + size_t(n) * rows);
    shard.push_back(std::make_unique<typename S::Array>(cols, size_t(r)));
  }
  auto valid = [&](int r) { return std::clamp(sp.valid - r * rows, 0, rows); };
  DeviceArray<int32_t> dt(t, 0);
  DFloat dmax(sp.N), dsum(sp.N), dtarget(sp.N), dloss(sp.N), dlse(sp.N);
  FVec rowmax(sp.N, -std::numeric_limits<float>::infinity());
  auto wait = [&] { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); };
  for (int r = 0; r < sp.ranks; ++r) {
    crossentropy_row_max(dmax.get(), S::ptr(*shard[r]), sp.N, rows, valid(r), stream);
    wait();
    const FVec m = dmax.download();
    for (int n = 0; n < sp.N; ++n) rowmax[n] = std::max(rowmax[n], m[n]);
  }
  DFloat dgroup_max(rowmax, 0);
  FVec sumexp(sp.N, 0.0f), target(sp.N, 0.0f);
  for (int r = 0; r < sp.ranks; ++r) {
    crossentropy_row_sums(dsum.get(), dtarget.get(), S::ptr(*shard[r]), dgroup_max.get(), dt.get(),
                          sp.N, rows, valid(r), int64_t(r) * rows, stream);
    wait();
    const FVec s = dsum.download(), g = dtarget.download();
    for (int n = 0; n < sp.N; ++n) {
      sumexp[n] += s[n];
      target[n] += g[n];
    }
  }
  DFloat dgroup_sum(sumexp, 0), dgroup_target(target, 0);
  crossentropy_finish(dloss.get(), dlse.get(), dgroup_max.get(), dgroup_sum.get(),
                      dgroup_target.get(), sp.N, stream);
  wait();
  return {dloss.download(), dlse.download()};
}

TYPED_TEST(VocabParallel, SplitForwardGivesTheWholeVocabularysLossAndLse) {
  using S = TypeParam;
  for (const Split& sp : kSplits) {
    SCOPED_TRACE("N=" + std::to_string(sp.N) + " padded=" + std::to_string(sp.padded) +
                 " valid=" + std::to_string(sp.valid) + " ranks=" + std::to_string(sp.ranks));
    FVec z = S::round(randn(size_t(sp.N) * sp.padded, 7, 3.0));
    z[0] = 60.0f;  // a large logit in the first rank's part of row 0 (exp overflows fp32)
    if (sp.N > 1) z[size_t(sp.padded) + sp.valid - 1] = 70.0f;  // and in the last valid column
    const auto t = rand_tokens(sp.N, 0, sp.valid, 8);
    typename S::Array dz(z, 0);
    DeviceArray<int32_t> dt(t, 0);
    DFloat dloss(sp.N), dlse(sp.N);
    crossentropy_forward(dloss.get(), dlse.get(), S::ptr(dz), dt.get(), sp.N, sp.padded,
                         this->stream, sp.valid);
    this->sync();
    const std::vector<FVec> got = split_forward<S>(sp, z, t, this->stream);
    const FVec whole_loss = dloss.download(), whole_lse = dlse.download();
    EXPECT_TRUE(close_rel(got[0], to_double(whole_loss), S::kAcc));
    EXPECT_TRUE(close_rel(got[1], to_double(whole_lse), S::kAcc));
  }
}

// --- the row-parallel bias ----------------------------------------------------------------

struct BiasShape {
  int N, C;
  size_t off, bias_off;
};
const std::vector<BiasShape> kBiasShapes = {
    {37, 99, 1, 1},   {64, 768, 0, 0}, {64, 768, 0, 1},
    {5, 8, 3, 3},     {1, 1, 0, 0},    {4100, 96, 0, 0},  // several row splits in the column sums
    {300, 1024, 3, 0}};

std::string name(const BiasShape& s) {
  return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
         " off=" + std::to_string(s.off) + "/" + std::to_string(s.bias_off);
}

TYPED_TEST(VocabParallel, BiasForwardIsTheRoundedFloatSum) {
  using S = TypeParam;
  for (const BiasShape& s : kBiasShapes) {
    SCOPED_TRACE(name(s));
    const FVec out0 = S::round(randn(size_t(s.N) * s.C, 1)), bias = S::round(randn(s.C, 2));
    typename S::Array dout(out0, s.off), dbias(bias, s.bias_off);
    bias_forward(S::ptr(dout), S::ptr(dbias), s.N, s.C, this->stream);
    this->sync();
    FVec want = out0;
    cpu::bias_forward(want.data(), bias.data(), s.N, s.C);
    EXPECT_TRUE(bit_equal(S::values(dout), S::round(want)));
    EXPECT_TRUE(dout.guards_intact());
  }
}

TYPED_TEST(VocabParallel, BiasBackwardAccumulatesDeterministicallyAndMatchesCpu) {
  using S = TypeParam;
  for (const BiasShape& s : kBiasShapes) {
    SCOPED_TRACE(name(s));
    const FVec dout = S::round(randn(size_t(s.N) * s.C, 3)), dbias0 = randn(s.C, 4);
    typename S::Array ddout(dout, s.off);
    FVec got[2];
    for (FVec& g : got) {
      DFloat ddbias(dbias0, s.bias_off);
      bias_backward(ddbias.get(), S::ptr(ddout), s.N, s.C, this->stream);
      this->sync();
      g = ddbias.download();
      EXPECT_TRUE(ddbias.guards_intact());
    }
    EXPECT_TRUE(bit_equal(got[0], got[1]));
    Vec want = to_double(dbias0);
    cpu::bias_backward(want.data(), to_double(dout).data(), s.N, s.C);
    // Double sums of exactly representable values, rounded once into fp32.
    EXPECT_TRUE(close_rel(got[0], want, kTol));
  }
}

}  // namespace
}  // namespace triad::kernels::cuda::test
