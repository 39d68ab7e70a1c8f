// The text loader and the sample layout every windowed loader shares: windows, wrap-around,
// micro-batch / data-parallel placement and per-epoch shuffling.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "test_util.hpp"
#include "triad/core/data/data.hpp"

namespace triad {
namespace {

using test::user_error;
using ::testing::HasSubstr;

constexpr int kT = 8;
constexpr int kBytes = 1000;
constexpr int kWindows = (kBytes - 1) / kT;  // 124

using Row = std::vector<int32_t>;

class TextLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(42);
    bytes_.resize(kBytes);
    for (auto& b : bytes_) b = static_cast<uint8_t>(rng() & 0xff);
    path_ = dir_.file("corpus.txt");
    test::write_vector(path_, bytes_);
    // Random bytes make every window distinct, so a row tells which window it came from.
    for (int w = 0; w < kWindows; ++w) window_of_[expected_inputs(w)] = w;
    ASSERT_EQ(window_of_.size(), size_t{kWindows});
  }

  std::unique_ptr<DataLoader> make(int B, int G, int rank, int dp, bool shuffle = false,
                                   uint64_t data_seed = 0, uint64_t seed = 1234) const {
    DataConfig d;
    d.kind = "text";
    d.path = path_;
    d.shuffle = shuffle;
    d.seed = data_seed;
    ModelConfig m;
    m.seq_length = kT;
    m.vocab_size = 256;
    return make_data_loader(d, m, B, G, seed, rank, dp);
  }

  Row expected_inputs(int64_t w) const {
    return {bytes_.begin() + w * kT, bytes_.begin() + w * kT + kT};
  }
  Row expected_targets(int64_t w) const {
    return {bytes_.begin() + w * kT + 1, bytes_.begin() + w * kT + kT + 1};
  }

  // Rows of one micro-batch: (inputs, targets) per sample.
  static std::vector<std::pair<Row, Row>> rows(DataLoader& l, int64_t step, int micro, int B) {
    std::vector<int32_t> in(size_t(B) * kT, -1), tg(size_t(B) * kT, -1);
    l.micro_batch(step, micro, in.data(), tg.data());
    std::vector<std::pair<Row, Row>> out;
    for (int j = 0; j < B; ++j)
      out.push_back({Row(in.begin() + j * kT, in.begin() + (j + 1) * kT),
                     Row(tg.begin() + j * kT, tg.begin() + (j + 1) * kT)});
    return out;
  }

  // The windows that step `step` visits, in sample order, through the (B, dp) layout.
  std::vector<int> step_windows(int B, int G, int dp, int64_t step, bool shuffle = false,
                                uint64_t data_seed = 0) {
    std::vector<int> w(G, -1);
    for (int r = 0; r < dp; ++r) {
      auto l = make(B, G, r, dp, shuffle, data_seed);
      for (int i = 0; i < G / (B * dp); ++i) {
        auto rs = rows(*l, step, i, B);
        for (int j = 0; j < B; ++j) {
          const int64_t n = (int64_t{i} * dp + r) * B + j;  // position in the global batch
          EXPECT_EQ(w[n], -1);
          w[n] = window_of_.at(rs[j].first);
          EXPECT_EQ(rs[j].second, expected_targets(w[n]));
        }
      }
    }
    return w;
  }

  test::ScratchDir dir_;
  std::string path_;
  std::vector<uint8_t> bytes_;
  std::map<Row, int> window_of_;
};

TEST_F(TextLoader, SamplesAreConsecutiveWindowsAndWrapAround) {
  const int B = 2, G = 8;
  auto l = make(B, G, 0, 1);
  EXPECT_EQ(l->num_tokens(), kBytes);
  // 40 steps × 8 samples = 320 samples: more than two passes over the 124 windows.
  for (int64_t s = 0; s < 40; ++s)
    for (int i = 0; i < G / B; ++i) {
      auto rs = rows(*l, s, i, B);
      for (int j = 0; j < B; ++j) {
        const int64_t n = s * G + i * B + j;
        ASSERT_EQ(rs[j].first, expected_inputs(n % kWindows)) << "sample " << n;
        ASSERT_EQ(rs[j].second, expected_targets(n % kWindows)) << "sample " << n;
      }
    }
}

TEST_F(TextLoader, WindowBoundaries) {
  auto l = make(1, 1, 0, 1);
  // Window w covers bytes [w*T, w*T+T+1): the target row is the input row shifted by one.
  auto first = rows(*l, 0, 0, 1)[0];
  EXPECT_EQ(first.first, Row(bytes_.begin(), bytes_.begin() + kT));
  EXPECT_EQ(first.second, Row(bytes_.begin() + 1, bytes_.begin() + kT + 1));
  auto last = rows(*l, kWindows - 1, 0, 1)[0];
  EXPECT_EQ(last.second.back(), bytes_[kWindows * kT]);  // byte 992, the last one used
  auto wrapped = rows(*l, kWindows, 0, 1)[0];
  EXPECT_EQ(wrapped, first);
}

TEST_F(TextLoader, EveryDataParallelLayoutSeesTheSameGlobalBatch) {
  const int G = 16;
  for (int64_t step : {0, 3, 17}) {
    const auto reference = step_windows(16, G, 1, step);
    for (int w = 0; w < G; ++w) ASSERT_EQ(reference[w], (step * G + w) % kWindows);
    for (auto [B, dp] : {std::pair{1, 1}, {2, 1}, {2, 2}, {4, 2}, {1, 4}, {2, 4}, {4, 4}}) {
      auto got = step_windows(B, G, dp, step);
      EXPECT_EQ(got, reference) << "B " << B << " dp " << dp << " step " << step;
      std::multiset<int> a(got.begin(), got.end()), b(reference.begin(), reference.end());
      EXPECT_EQ(a, b);
    }
  }
}

TEST_F(TextLoader, MicroBatchPlacementFollowsTheHeaderFormula) {
  // Micro-batch i on rank r holds samples s*G + (i*dp + r)*B + j.
  const int B = 2, G = 16, dp = 2;
  auto l = make(B, G, 1, dp);
  auto rs = rows(*l, 5, 3, B);
  for (int j = 0; j < B; ++j)
    EXPECT_EQ(rs[j].first, expected_inputs((5 * G + (3 * dp + 1) * B + j) % kWindows));
  std::vector<int32_t> buf(size_t(B) * kT);
  EXPECT_THROW(l->micro_batch(0, G / (B * dp), buf.data(), buf.data()), std::out_of_range);
  EXPECT_THROW(l->micro_batch(-1, 0, buf.data(), buf.data()), std::out_of_range);
}

TEST_F(TextLoader, ShuffleIsASeededPermutationPerEpoch) {
  const int B = 4, G = 4;
  auto order = [&](uint64_t data_seed, uint64_t seed) {
    auto l = make(B, G, 0, 1, true, data_seed, seed);
    std::vector<int> w;
    for (int64_t s = 0; s < 3 * kWindows / G; ++s)
      for (auto& r : rows(*l, s, 0, B)) {
        w.push_back(window_of_.at(r.first));
        EXPECT_EQ(r.second, expected_targets(w.back()));
      }
    return w;
  };
  const auto a = order(7, 1234);
  ASSERT_EQ(a.size(), size_t{3 * kWindows});
  std::vector<std::vector<int>> epochs;
  std::vector<int> identity(kWindows);
  std::iota(identity.begin(), identity.end(), 0);
  for (int e = 0; e < 3; ++e) {
    std::vector<int> ep(a.begin() + e * kWindows, a.begin() + (e + 1) * kWindows);
    std::vector<int> sorted = ep;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e << " is not a permutation";
    EXPECT_NE(ep, identity) << "epoch " << e << " is not shuffled";
    epochs.push_back(ep);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_EQ(order(7, 1234), a);  // deterministic
  EXPECT_EQ(order(0, 7), a);     // data.seed 0 falls back to the run's seed
  EXPECT_NE(order(8, 1234), a);
}

TEST_F(TextLoader, ShuffledBatchesAgreeAcrossDataParallelLayouts) {
  const int G = 16;
  for (int64_t step : {0, 7, 8, 30}) {  // 124 / 16: step 7 straddles epochs 0 and 1
    const auto reference = step_windows(16, G, 1, step, true, 99);
    EXPECT_EQ(step_windows(2, G, 4, step, true, 99), reference);
    EXPECT_EQ(step_windows(4, G, 2, step, true, 99), reference);
  }
}

TEST_F(TextLoader, Describe) {
  EXPECT_EQ(make(1, 1, 0, 1)->describe(), "text " + path_ + " (1000 tokens, 124 windows of 8+1)");
  EXPECT_THAT(make(1, 1, 0, 1, true)->describe(), HasSubstr("shuffled"));
}

TEST_F(TextLoader, Errors) {
  DataConfig d;
  d.kind = "text";
  d.path = path_;
  ModelConfig m;
  m.seq_length = kT;
  m.vocab_size = 100;
  EXPECT_EQ(user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); }),
            "data.kind text uses byte tokens 0..255 but model.vocab_size is 100; set "
            "vocab_size ≥ 256");
  m.vocab_size = 256;
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 4, 10, 1, 0, 1); }),
              HasSubstr("global batch size 10 is not a multiple of micro-batch size 4 × "
                        "data-parallel size 1"));
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 2, 6, 1, 0, 2); }),
              HasSubstr("not a multiple of micro-batch size 2 × data-parallel size 2 = 4"));
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 2, 1, 2, 2); }),
              HasSubstr("rank 2 is not in [0, 2)"));

  d.path = dir_.file("missing.txt");
  auto msg = user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); });
  EXPECT_THAT(msg, HasSubstr(d.path));
  EXPECT_THAT(msg, HasSubstr("No such file"));

  d.path = dir_.path().string();
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); }),
              HasSubstr("is a directory, not a regular file"));

  // A FIFO is refused at once, not opened for a read that waits for a writer forever.
  d.path = dir_.file("pipe.txt");
  ASSERT_EQ(::mkfifo(d.path.c_str(), 0600), 0);
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); }),
              HasSubstr("is a FIFO (named pipe), not a regular file"));

  d.path = dir_.file("empty.txt");
  test::write_bytes(d.path, "", 0);
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); }),
              HasSubstr("text file '" + d.path + "' is empty"));

  d.path = dir_.file("short.txt");
  test::write_bytes(d.path, "hello", 5);
  msg = user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); });
  EXPECT_THAT(msg, HasSubstr("has 5 tokens but one sample of model.seq_length 8 needs 9"));
  EXPECT_THAT(msg, HasSubstr(d.path));

  d.path = "";
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); }),
              HasSubstr("data.kind text needs data.path"));
  d.kind = "parquet";
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 1, 1, 0, 1); }),
              HasSubstr("data.kind 'parquet' is unknown"));
}

TEST_F(TextLoader, ShortestPossibleFileHasOneWindow) {
  DataConfig d;
  d.kind = "text";
  d.path = dir_.file("nine.txt");
  test::write_bytes(d.path, "abcdefghi", 9);
  ModelConfig m;
  m.seq_length = kT;
  auto l = make_data_loader(d, m, 1, 2, 1, 0, 1);
  EXPECT_THAT(l->describe(), HasSubstr("(9 tokens, 1 windows of 8+1)"));
  std::vector<int32_t> in(2 * kT), tg(2 * kT);
  l->micro_batch(3, 1, in.data(), tg.data());
  EXPECT_EQ(Row(in.begin(), in.begin() + kT), Row({'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}));
  EXPECT_EQ(Row(tg.begin(), tg.begin() + kT), Row({'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i'}));
}

}  // namespace
}  // namespace triad

namespace triad {
namespace {

// Megatron-DeepSpeed's get_train_valid_test_split_ (data.builder megatron-deepspeed, the
// default): round(w/sum · n) per part, Python's rounding, the parts moved so that they end at n.
TEST(DataSplit, MegatronDeepSpeedRule) {
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(split_range("969,30,1", 1000, DataPart::train), P(0, 969));
  EXPECT_EQ(split_range("969,30,1", 1000, DataPart::valid), P(969, 999));
  EXPECT_EQ(split_range("969, 30, 1", 1000, DataPart::test), P(999, 1000));
  // 124 · 0.969 = 120.16 → 120, 124 · 0.03 = 3.72 → 4, 0.124 → 0.
  EXPECT_EQ(split_range("969,30,1", 124, DataPart::valid), P(120, 124));
  EXPECT_EQ(split_range("969,30,1", 124, DataPart::test), P(124, 124));
  // 10/3 → 3 each, 9 in all: every boundary moves up by one.
  EXPECT_EQ(split_range("1,1,1", 10, DataPart::train), P(0, 4));
  EXPECT_EQ(split_range("1,1,1", 10, DataPart::valid), P(4, 7));
  EXPECT_EQ(split_range("1/1/1", 10, DataPart::test), P(7, 10));
  // 2.5 rounds to 2 (half to even), then the parts move up by one.
  EXPECT_EQ(split_range("1,1", 5, DataPart::train), P(0, 3));
  EXPECT_EQ(split_range("1,1", 5, DataPart::valid), P(3, 5));
  EXPECT_EQ(split_range("", 7, DataPart::train), P(0, 7));
  EXPECT_EQ(split_range("", 7, DataPart::valid), P(7, 7));
  for (const char* bad : {"a,b", "1,2,3,4", "0,0,0", "-1,2", "1,,2x"})
    EXPECT_THAT(user_error([&] { split_range(bad, 10, DataPart::train); }),
                HasSubstr("data.split '" + std::string(bad) + "'"))
        << bad;
}

// Megatron-LM core (data.builder megatron-lm): round(c · n) of each cumulative boundary c
// (convert_split_vector_to_split_matrix, _build_megatron_dataset_splits); values from a
// pure-Python copy of both rules.
// The samples each part's indices are built for, as Megatron's
// get_train_valid_test_num_samples counts them: --train-samples itself when given.
TEST(DataSplit, MegatronSampleCounts) {
  TrainingConfig t;
  t.train_iters = 10;
  t.global_batch_size = 4;
  t.eval_interval = 3;
  t.eval_iters = 2;
  EXPECT_EQ(megatron_num_samples(t, DataPart::train), 40);
  EXPECT_EQ(megatron_num_samples(t, DataPart::valid), (10 / 3 + 1) * 2 * 4);
  EXPECT_EQ(megatron_num_samples(t, DataPart::test), 8);
  t.train_samples = 43;
  EXPECT_EQ(megatron_num_samples(t, DataPart::train), 43);
  EXPECT_EQ(megatron_num_samples(t, DataPart::valid), (10 / 3 + 1) * 2 * 4);
}

TEST(DataSplit, MegatronLmRule) {
  using P = std::pair<int64_t, int64_t>;
  const std::string lm = "megatron-lm";
  // 10/3 = 3.33 → 3, 20/3 = 6.67 → 7: the boundaries round, nothing moves.
  EXPECT_EQ(split_range("1,1,1", 10, DataPart::train, lm), P(0, 3));
  EXPECT_EQ(split_range("1,1,1", 10, DataPart::valid, lm), P(3, 7));
  EXPECT_EQ(split_range("1,1,1", 10, DataPart::test, lm), P(7, 10));
  EXPECT_EQ(split_range("98,1,1", 250, DataPart::train, lm), P(0, 245));  // DeepSpeed: 246
  EXPECT_EQ(split_range("98,1,1", 250, DataPart::train), P(0, 246));
  EXPECT_EQ(split_range("98,1,1", 250, DataPart::valid, lm), P(245, 248));
  EXPECT_EQ(split_range("1,1", 5, DataPart::train, lm), P(0, 2));  // 2.5 → 2
  EXPECT_EQ(split_range("1,1", 5, DataPart::valid, lm), P(2, 5));
  EXPECT_EQ(split_range("969,30,1", 124, DataPart::valid, lm), P(120, 124));
  EXPECT_EQ(split_range("969,30,1", 124, DataPart::test, lm), P(124, 124));
}

// Training and validation read disjoint windows that together are the file's.
TEST_F(TextLoader, SplitPartsAreDisjoint) {
  DataConfig d;
  d.kind = "text";
  d.path = path_;
  d.split = "90,10,0";  // 124 windows: 112 | 12 | 0
  ModelConfig m;
  m.seq_length = kT;
  m.vocab_size = 256;
  std::set<int> seen[2];
  for (int part = 0; part < 2; ++part) {
    auto l = make_data_loader(d, m, 1, 1, 1234, 0, 1, DataPart(part));
    for (int64_t s = 0; s < 200; ++s) seen[part].insert(window_of_.at(rows(*l, s, 0, 1)[0].first));
  }
  EXPECT_EQ(seen[0].size(), 112u);
  EXPECT_EQ(*seen[0].rbegin(), 111);
  EXPECT_EQ(seen[1].size(), 12u);
  EXPECT_EQ(*seen[1].begin(), 112);
  d.split = "100,0,0";
  EXPECT_THAT(user_error([&] { make_data_loader(d, m, 1, 1, 1234, 0, 1, DataPart::valid); }),
              HasSubstr("leaves the validation part of text file"));
}

}  // namespace
}  // namespace triad
