// Synthetic tokens: a pure function of (seed, sample, position), uniform in [0, vocab).
#include <algorithm>
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "triad/core/data/data.hpp"

namespace triad {
namespace {

using Batch = std::pair<std::vector<int32_t>, std::vector<int32_t>>;

std::unique_ptr<DataLoader> synthetic(int V, int T, int B, int G, uint64_t seed, int rank = 0,
                                      int dp = 1) {
  DataConfig d;  // kind synthetic by default
  ModelConfig m;
  m.vocab_size = V;
  m.seq_length = T;
  return make_data_loader(d, m, B, G, seed, rank, dp);
}

Batch batch(DataLoader& l, int64_t step, int micro, int B, int T) {
  Batch b{std::vector<int32_t>(size_t(B) * T, -1), std::vector<int32_t>(size_t(B) * T, -1)};
  l.micro_batch(step, micro, b.first.data(), b.second.data());
  return b;
}

TEST(SyntheticLoader, TokensInRangeAndTargetsShiftedByOne) {
  for (int V : {1, 5, 256, 50257}) {
    const int T = 33, B = 3;
    auto l = synthetic(V, T, B, 6, 11);
    for (int64_t s = 0; s < 4; ++s)
      for (int i = 0; i < 2; ++i) {
        auto [in, tg] = batch(*l, s, i, B, T);
        for (size_t k = 0; k < in.size(); ++k) {
          ASSERT_GE(in[k], 0);
          ASSERT_LT(in[k], V);
          ASSERT_GE(tg[k], 0);
          ASSERT_LT(tg[k], V);
        }
        for (int j = 0; j < B; ++j)
          for (int t = 0; t + 1 < T; ++t) ASSERT_EQ(tg[j * T + t], in[j * T + t + 1]);
      }
  }
}

TEST(SyntheticLoader, DeterministicPerSeedAndDistinctPerSample) {
  const int V = 50257, T = 16, B = 2;
  auto a = synthetic(V, T, B, 4, 5), b = synthetic(V, T, B, 4, 5), c = synthetic(V, T, B, 4, 6);
  // Asked for out of order: the tokens depend on the sample, not on the call history.
  for (int64_t s : {9, 0, 3, 0})
    for (int i : {1, 0}) {
      auto x = batch(*a, s, i, B, T), y = batch(*b, s, i, B, T), z = batch(*c, s, i, B, T);
      EXPECT_EQ(x, y);
      EXPECT_NE(x.first, z.first);
      EXPECT_NE(std::vector<int32_t>(x.first.begin(), x.first.begin() + T),
                std::vector<int32_t>(x.first.begin() + T, x.first.end()));
    }
  EXPECT_NE(batch(*a, 0, 0, B, T), batch(*a, 1, 0, B, T));
  EXPECT_EQ(a->num_tokens(), 0);
  EXPECT_THAT(a->describe(), ::testing::HasSubstr("synthetic"));
}

TEST(SyntheticLoader, DataSeedOverridesRunSeed) {
  DataConfig d;
  d.seed = 77;
  ModelConfig m;
  auto a = make_data_loader(d, m, 1, 1, 1, 0, 1);
  auto b = synthetic(m.vocab_size, m.seq_length, 1, 1, 77);
  auto c = synthetic(m.vocab_size, m.seq_length, 1, 1, 1);
  EXPECT_EQ(batch(*a, 2, 0, 1, m.seq_length), batch(*b, 2, 0, 1, m.seq_length));
  EXPECT_NE(batch(*a, 2, 0, 1, m.seq_length), batch(*c, 2, 0, 1, m.seq_length));
}

TEST(SyntheticLoader, UniformOverTheVocabulary) {
  const int V = 16, T = 256, B = 64;
  auto l = synthetic(V, T, B, B, 3);
  auto [in, tg] = batch(*l, 0, 0, B, T);
  std::vector<double> count(V, 0.0);
  for (int32_t v : in) count[v] += 1;
  const double expect = double(in.size()) / V;
  double chi2 = 0;
  for (double c : count) chi2 += (c - expect) * (c - expect) / expect;
  // 15 degrees of freedom: P(chi2 > 45) is about 1e-4 for a uniform source.
  EXPECT_LT(chi2, 45.0);
}

TEST(SyntheticLoader, DataParallelRanksSplitTheSameGlobalBatch) {
  const int V = 1000, T = 8, G = 8;
  auto whole = synthetic(V, T, G, G, 21);
  for (int64_t s : {0, 4}) {
    auto ref = batch(*whole, s, 0, G, T);
    for (auto [B, dp] : {std::pair{1, 2}, {2, 2}, {2, 4}, {1, 8}}) {
      for (int r = 0; r < dp; ++r) {
        auto l = synthetic(V, T, B, G, 21, r, dp);
        for (int i = 0; i < G / (B * dp); ++i) {
          auto got = batch(*l, s, i, B, T);
          const int first = (i * dp + r) * B;  // position in the global batch
          EXPECT_TRUE(std::equal(got.first.begin(), got.first.end(), ref.first.begin() + first * T))
              << "B " << B << " dp " << dp << " rank " << r << " micro " << i;
          EXPECT_TRUE(
              std::equal(got.second.begin(), got.second.end(), ref.second.begin() + first * T));
        }
      }
    }
  }
}

}  // namespace
}  // namespace triad
