// Megatron indexed datasets (.bin/.idx): the writer and reader round trip, every way an index
// can be broken, GPT sample construction against hand-computed indices, Megatron's blend, and
// data.kind indexed in the loader (vocabulary check, data-parallel layouts).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data/gpt_samples.hpp"
#include "test_util.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/data/indexed_dataset.hpp"

namespace triad {
namespace {

using test::user_error;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using Docs = std::vector<std::vector<int32_t>>;

void write_dataset(const std::string& prefix, const Docs& docs,
                   IndexedDType dtype = IndexedDType::uint16) {
  IndexedDatasetWriter w(prefix, dtype);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
}

// The four documents of the hand-computed case: lengths 3, 5, 2, 4 (14 tokens).
const Docs kHand = {{100, 101, 102}, {200, 201, 202, 203, 204}, {300, 301}, {400, 401, 402, 403}};

class IndexedFiles : public ::testing::Test {
 protected:
  std::string prefix(const std::string& name = "ds") const { return dir_.file(name); }
  std::vector<uint8_t> idx() const { return test::read_bytes(prefix() + ".idx"); }
  void put_idx(const std::vector<uint8_t>& b) const { test::write_vector(prefix() + ".idx", b); }
  std::string open_error() const {
    return user_error([&] { IndexedDataset ds(prefix()); });
  }
  test::ScratchDir dir_;
};

TEST_F(IndexedFiles, RoundTripEveryIntegerDtype) {
  std::mt19937 rng(3);
  for (IndexedDType dt : {IndexedDType::uint8, IndexedDType::int8, IndexedDType::int16,
                          IndexedDType::int32, IndexedDType::int64, IndexedDType::uint16}) {
    SCOPED_TRACE(dtype_name(uint8_t(dt)));
    Docs docs;
    for (int d = 0; d < 50; ++d) {
      docs.emplace_back(rng() % 40);  // some empty
      for (auto& t : docs.back()) t = int32_t(rng() % 100);
    }
    const std::string p = prefix(dtype_name(uint8_t(dt)));
    write_dataset(p, docs, dt);
    IndexedDataset ds(p);
    EXPECT_EQ(ds.dtype(), dt);
    ASSERT_EQ(ds.num_sequences(), 50);
    EXPECT_EQ(ds.num_documents(), 50);
    int64_t tokens = 0, ptr = 0;
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(ds.sequence(i), docs[size_t(i)]);
      EXPECT_EQ(ds.sequence_pointer(i), ptr);
      EXPECT_EQ(ds.document_index(i + 1), i + 1);
      ptr += int64_t(docs[size_t(i)].size()) * dtype_size(uint8_t(dt));
      tokens += int64_t(docs[size_t(i)].size());
    }
    EXPECT_EQ(ds.document_index(0), 0);
    EXPECT_EQ(ds.num_tokens(), tokens);
    std::vector<int32_t> part(3);
    ds.read(1, 1, 3, part.data());
    EXPECT_EQ(part, std::vector<int32_t>(docs[1].begin() + 1, docs[1].begin() + 4));
  }
  EXPECT_EQ(dir_.listing().size(), 12u);  // six .bin/.idx pairs, no temporary files
}

TEST_F(IndexedFiles, LayoutIsMegatrons) {
  IndexedDatasetWriter w(prefix(), IndexedDType::uint16);
  const std::vector<int32_t> two_sentences = {1, 2, 3, 50256};
  w.add_document(two_sentences.data(), two_sentences.size(), {1, 3});
  w.add_document({7, 8});
  w.finish();
  const std::vector<uint8_t> b = idx();
  ASSERT_EQ(b.size(), 34u + 3 * 4 + 3 * 8 + 3 * 8);
  EXPECT_EQ(std::memcmp(b.data(), "MMIDIDX\0\0", 9), 0);
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  };
  EXPECT_EQ(u64(9), 1u);   // version
  EXPECT_EQ(b[17], 8);     // uint16
  EXPECT_EQ(u64(18), 3u);  // sequences
  EXPECT_EQ(u64(26), 3u);  // document index: 0, 2, 3
  int32_t lengths[3];
  std::memcpy(lengths, b.data() + 34, 12);
  EXPECT_THAT(lengths, ElementsAre(1, 3, 2));
  EXPECT_EQ(u64(46), 0u);  // pointers, in bytes
  EXPECT_EQ(u64(54), 2u);
  EXPECT_EQ(u64(62), 8u);
  EXPECT_EQ(u64(70), 0u);
  EXPECT_EQ(u64(78), 2u);
  EXPECT_EQ(u64(86), 3u);
  EXPECT_EQ(test::read_bytes(prefix() + ".bin").size(), 12u);
  IndexedDataset ds(prefix());
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.document_index(1), 2);
  EXPECT_EQ(ds.token_range(), std::make_pair(int64_t{1}, int64_t{50256}));
}

TEST_F(IndexedFiles, WriterLeavesNothingWithoutFinish) {
  {
    IndexedDatasetWriter w(prefix(), IndexedDType::uint16);
    w.add_document({1, 2, 3});
    EXPECT_EQ(dir_.listing().size(), 2u);  // the two temporary files
  }
  EXPECT_TRUE(dir_.listing().empty());
  // An id the dtype cannot hold is refused, and nothing is written.
  {
    IndexedDatasetWriter w(prefix(), IndexedDType::uint16);
    EXPECT_THAT(
        user_error([&] {
          w.add_document({1, 70000});
        }),
        AllOf(HasSubstr("token id 70000 does not fit the dataset's dtype uint16 (0..65535)"),
              HasSubstr("int32")));
  }
  EXPECT_TRUE(dir_.listing().empty());
}

TEST_F(IndexedFiles, WriterRefusesBadOutputs) {
  EXPECT_THAT(
      user_error([&] { IndexedDatasetWriter(dir_.file("no/such/ds"), IndexedDType::uint16); }),
      AllOf(HasSubstr("no/such' does not exist"), HasSubstr("create it first")));
  test::write_bytes(dir_.file("file"), "x", 1);
  EXPECT_THAT(user_error([&] { IndexedDatasetWriter(dir_.file("file/ds"), IndexedDType::uint16); }),
              HasSubstr("is not a folder"));
  EXPECT_THAT(user_error([&] { IndexedDatasetWriter(dir_.file("ds/"), IndexedDType::uint16); }),
              HasSubstr("names a folder"));
  EXPECT_THAT(user_error([&] { IndexedDatasetWriter(prefix(), IndexedDType::float32); }),
              HasSubstr("cannot hold token ids"));
  if (::geteuid() != 0) {  // root writes anywhere
    ::mkdir(dir_.file("ro").c_str(), 0555);
    EXPECT_THAT(user_error([&] { IndexedDatasetWriter(dir_.file("ro/ds"), IndexedDType::uint16); }),
                HasSubstr("choose a folder you can write"));
  }
}

TEST_F(IndexedFiles, MissingFilesAndExtensionSlip) {
  EXPECT_THAT(open_error(), AllOf(HasSubstr("indexed dataset '" + prefix() + "': " + prefix() +
                                            ".idx cannot be opened: No such file"),
                                  HasSubstr("P.bin and P.idx")));
  write_dataset(prefix(), kHand);
  EXPECT_THAT(user_error([&] { IndexedDataset ds(prefix() + ".bin"); }),
              HasSubstr("data.path is the prefix without .bin/.idx: write '" + prefix() + "'"));
  std::remove((prefix() + ".bin").c_str());
  EXPECT_THAT(open_error(), HasSubstr(prefix() + ".bin cannot be opened"));
}

TEST_F(IndexedFiles, BadIndexMessages) {
  write_dataset(prefix(), kHand);
  const std::vector<uint8_t> good = idx();
  auto with = [&](auto edit) {
    std::vector<uint8_t> b = good;
    edit(b);
    put_idx(b);
    return open_error();
  };
  auto set_u64 = [](std::vector<uint8_t>& b, size_t at, uint64_t v) {
    std::memcpy(b.data() + at, &v, 8);
  };
  const std::string ip = prefix() + ".idx";
  EXPECT_THAT(with([](auto& b) { b[0] = 'X'; }),
              AllOf(HasSubstr("indexed dataset '" + prefix() + "': " + ip),
                    HasSubstr("does not start with the magic of Megatron's MMIDIDX format "
                              "(found \"XMIDIDX\\x00\\x00\")"),
                    HasSubstr("regenerate the dataset")));
  EXPECT_THAT(with([](auto& b) { std::memcpy(b.data(), "TNTIDX\0\0", 8); }),
              HasSubstr("older fairseq/Megatron 'TNTIDX'"));
  EXPECT_THAT(with([&](auto& b) { set_u64(b, 9, 2); }),
              HasSubstr("has format version 2; only version 1 is defined"));
  EXPECT_THAT(with([](auto& b) { b[17] = 9; }),
              HasSubstr("has dtype code 9, not one of Megatron's codes 1-8"));
  EXPECT_THAT(with([](auto& b) { b[17] = 7; }),
              HasSubstr("stores float32 tokens; token ids must be integers"));
  EXPECT_THAT(with([](auto& b) { b.resize(20); }),
              HasSubstr("is 20 bytes, shorter than the 34-byte header"));
  EXPECT_THAT(with([](auto& b) { b.pop_back(); }),
              AllOf(HasSubstr("is 121 bytes, not what its header's counts need (4 sequences, 5 "
                              "document-index entries need 122 bytes)"),
                    HasSubstr("truncated")));
  EXPECT_THAT(with([&](auto& b) { set_u64(b, 18, 1000); }),
              HasSubstr("but its header declares 1000 sequences"));
  EXPECT_THAT(with([](auto& b) { b.insert(b.end(), 4, 0); }),
              HasSubstr("one per sequence: the modes of a multimodal dataset"));
  EXPECT_THAT(with([&](auto& b) { set_u64(b, 34 + 48, 1); }),
              HasSubstr("has a document index starting at 1, not 0"));
  EXPECT_THAT(with([&](auto& b) { set_u64(b, 34 + 48 + 32, 3); }),
              HasSubstr("has a document index ending at sequence 3 but holds 4 sequences"));
  EXPECT_THAT(with([&](auto& b) { set_u64(b, 34 + 48 + 16, 0); }),
              HasSubstr("has document-index entry 2 = 0 after 1; the entries must not decrease"));
  EXPECT_THAT(with([&](auto& b) { set_u64(b, 34 + 16 + 8, 1000); }),
              HasSubstr("puts sequence 1 (5 tokens) at byte 1000"));
  EXPECT_THAT(with([&](auto& b) {
                const int32_t neg = -1;
                std::memcpy(b.data() + 34 + 4, &neg, 4);
              }),
              HasSubstr("gives sequence 1 a negative length -1"));
  put_idx(good);
  std::vector<uint8_t> bin = test::read_bytes(prefix() + ".bin");
  bin.resize(bin.size() - 2);
  test::write_vector(prefix() + ".bin", bin);
  EXPECT_THAT(open_error(), AllOf(HasSubstr(prefix() + ".bin is 26 bytes but " + ip +
                                            " puts sequence 3 (4 tokens) at byte 20"),
                                  HasSubstr("do not belong together")));
  bin.resize(bin.size() + 4);
  test::write_vector(prefix() + ".bin", bin);
  EXPECT_THAT(open_error(),
              HasSubstr(".bin is 30 bytes but the sequences of " + ip + " end at byte 28"));
  bin.resize(bin.size() - 1);
  test::write_vector(prefix() + ".bin", bin);
  EXPECT_THAT(open_error(), HasSubstr("not a whole number of uint16 tokens"));
}

// NumPy's RandomState.shuffle, values from numpy 1.24 (the algorithm has been stable since
// the legacy generator was frozen).
TEST(NumpyShuffle, MatchesRandomState) {
  std::mt19937 rng(1234);
  std::vector<int32_t> a(10);
  std::iota(a.begin(), a.end(), 0);
  data::numpy_shuffle(a, rng);
  EXPECT_THAT(a,
              ElementsAre(7, 2, 9, 1, 0, 8, 4, 5, 6, 3));  // RandomState(1234).shuffle(arange(10))
  std::vector<int64_t> b(7);
  std::iota(b.begin(), b.end(), 0);
  data::numpy_shuffle(b, rng);  // then the same state shuffles arange(7)
  EXPECT_THAT(b, ElementsAre(6, 4, 0, 5, 3, 2, 1));
}

class GptSampleIndices : public IndexedFiles {
 protected:
  void SetUp() override { write_dataset(prefix(), kHand); }
};

// Lengths 3, 5, 2, 4 (E 14), T 4: S = (14 - 1) / 4 = 3 samples of 5 tokens starting at tokens
// 0, 4, 8 of the epoch's stream; token 13 is dropped.
TEST_F(GptSampleIndices, HandComputedWithoutShuffle) {
  IndexedDataset ds(prefix());
  data::GptSamples s(ds, 4, false, 1234);
  EXPECT_EQ(s.samples_per_epoch(), 3);
  const auto& e = s.indices();
  EXPECT_THAT(e.document_index, ElementsAre(0, 1, 2, 3));
  // (position in the document index, offset): sample k+1 starts at sample k's last token.
  EXPECT_THAT(e.sample_index, ElementsAre(0, 0, 1, 1, 2, 0, 3, 2));
  EXPECT_TRUE(e.shuffle_index.empty());
  std::vector<int32_t> out(5);
  const std::vector<std::vector<int32_t>> want = {
      {100, 101, 102, 200, 201}, {201, 202, 203, 204, 300}, {300, 301, 400, 401, 402}};
  for (int n = 0; n < 7; ++n) {  // a run of unknown length: one epoch, then over again
    s.sample(n, out.data());
    EXPECT_EQ(out, want[size_t(n % 3)]) << "sample " << n;
  }
}

// Seed 3: numpy.random.RandomState(3) shuffles arange(4) into [3, 1, 0, 2], then arange(3)
// into [1, 2, 0]. The stream is 400..403 | 200..204 | 100..102 | 300 301.
TEST_F(GptSampleIndices, HandComputedWithMegatronShuffle) {
  IndexedDataset ds(prefix());
  data::GptSamples s(ds, 4, true, 3);
  const auto& e = s.indices();
  EXPECT_THAT(e.document_index, ElementsAre(3, 1, 0, 2));
  EXPECT_THAT(e.sample_index, ElementsAre(0, 0, 1, 0, 1, 4, 3, 0));
  EXPECT_THAT(e.shuffle_index, ElementsAre(1, 2, 0));
  std::vector<int32_t> out(5);
  s.sample(0, out.data());
  EXPECT_THAT(out, ElementsAre(200, 201, 202, 203, 204));
  s.sample(1, out.data());
  EXPECT_THAT(out, ElementsAre(204, 100, 101, 102, 300));
  s.sample(2, out.data());
  EXPECT_THAT(out, ElementsAre(400, 401, 402, 403, 200));
}

// A part of data.split: documents [1, 3) (lengths 5, 2; E 7), T 2: S = 3 samples over the
// stream 200..204 | 300 301, as Megatron's GPTDataset builds them for documents arange(1, 3).
TEST_F(GptSampleIndices, DocumentRangeOfASplit) {
  IndexedDataset ds(prefix());
  data::GptSamples s(ds, 2, false, 1234, 1, 3);
  EXPECT_EQ(s.samples_per_epoch(), 3);
  EXPECT_EQ(s.tokens_per_epoch(), 7);
  const auto& e = s.indices();
  EXPECT_THAT(e.document_index, ElementsAre(1, 2));
  EXPECT_THAT(e.sample_index, ElementsAre(0, 0, 0, 2, 0, 4, 1, 1));
  std::vector<int32_t> out(3);
  s.sample(0, out.data());
  EXPECT_THAT(out, ElementsAre(200, 201, 202));
  s.sample(2, out.data());
  EXPECT_THAT(out, ElementsAre(204, 300, 301));
  // Shuffled: RandomState(3).shuffle(arange(1, 3)) draws as for arange(2) and keeps the ids.
  data::GptSamples shuffled(ds, 2, true, 3, 1, 3);
  const auto& se = shuffled.indices();
  std::vector<int32_t> ids(se.document_index);
  std::sort(ids.begin(), ids.end());
  EXPECT_THAT(ids, ElementsAre(1, 2));
}

// Runs longer than an epoch: Megatron builds every epoch at once (expected values from a
// pure-Python GPTDataset over numpy's RandomState(3)). 5 samples need 5·4 + 1 = 21 tokens, two
// epochs of 14; the final one gives 2 samples, not under int(0.8 · 3) = 2, so both epochs are
// shuffled together and samples straddle the epoch boundary.
TEST_F(GptSampleIndices, MultiEpochShuffledTogetherAsMegatron) {
  IndexedDataset ds(prefix());
  data::GptSamples s(ds, 4, true, 3, 0, -1, 5);
  EXPECT_EQ(s.num_epochs(), 2);
  EXPECT_FALSE(s.separate_final_epoch());
  const auto& e = s.indices();
  EXPECT_THAT(e.document_index, ElementsAre(1, 3, 0, 2, 3, 1, 0, 2));
  EXPECT_THAT(e.sample_index, ElementsAre(0, 0, 0, 4, 1, 3, 3, 0, 4, 2, 5, 2, 6, 1));
  EXPECT_THAT(e.shuffle_index, ElementsAre(0, 4, 1, 2, 3, 5));
  const std::vector<std::vector<int32_t>> want = {{200, 201, 202, 203, 204},
                                                  {402, 403, 200, 201, 202},
                                                  {204, 400, 401, 402, 403},
                                                  {403, 100, 101, 102, 300},
                                                  {300, 301, 400, 401, 402}};
  std::vector<int32_t> out(5);
  for (int n = 4; n >= 0; --n) {  // any order: a resumed run reads from where it stopped
    s.sample(n, out.data());
    EXPECT_EQ(out, want[size_t(n)]) << "sample " << n;
  }
}

// 7 samples need three epochs; the third gives 7 - (2·14 - 1) / 4 = 1 sample, under 2: the first
// two epochs are shuffled together and the third apart, documents and samples alike.
TEST_F(GptSampleIndices, MultiEpochFinalEpochApartAsMegatron) {
  IndexedDataset ds(prefix());
  data::GptSamples s(ds, 4, true, 3, 0, -1, 7);
  EXPECT_EQ(s.num_epochs(), 3);
  EXPECT_TRUE(s.separate_final_epoch());
  EXPECT_EQ(s.size(), 10);
  const auto& e = s.indices();
  EXPECT_THAT(e.document_index, ElementsAre(1, 3, 0, 2, 3, 1, 0, 2, 0, 2, 3, 1));
  EXPECT_THAT(e.shuffle_index, ElementsAre(5, 0, 4, 1, 3, 2, 9, 6, 8, 7));
  const std::vector<std::vector<int32_t>> want = {
      {202, 203, 204, 100, 101}, {200, 201, 202, 203, 204}, {402, 403, 200, 201, 202},
      {204, 400, 401, 402, 403}, {300, 301, 400, 401, 402}, {403, 100, 101, 102, 300},
      {403, 200, 201, 202, 203}};
  std::vector<int32_t> out(5);
  for (int n = 0; n < 7; ++n) {
    s.sample(n, out.data());
    EXPECT_EQ(out, want[size_t(n)]) << "sample " << n;
  }
}

// A part of --split (documents 1, 2) over three epochs for 8 samples of T 2.
TEST_F(GptSampleIndices, MultiEpochSplitPartAsMegatron) {
  IndexedDataset ds(prefix());
  data::GptSamples s(ds, 2, true, 3, 1, 3, 8);
  EXPECT_EQ(s.num_epochs(), 3);
  EXPECT_THAT(s.indices().document_index, ElementsAre(2, 2, 1, 2, 1, 1));
  EXPECT_THAT(s.indices().shuffle_index, ElementsAre(7, 9, 4, 1, 6, 2, 3, 8, 5, 0));
  const std::vector<std::vector<int32_t>> want = {{203, 204, 200}, {202, 203, 204}, {204, 300, 301},
                                                  {300, 301, 200}, {201, 202, 203}, {200, 201, 202},
                                                  {202, 203, 204}, {200, 201, 202}};
  std::vector<int32_t> out(3);
  for (int n = 0; n < 8; ++n) {
    s.sample(n, out.data());
    EXPECT_EQ(out, want[size_t(n)]) << "sample " << n;
  }
}

// The indices are kept narrow (int32 sample pairs, uint32 shuffle index) while the values fit, as
// Megatron keeps them; the wide ones (int64, past 2^31 document positions or 2^32 - 1 samples)
// give the same samples, and past the samples built both start over.
TEST_F(GptSampleIndices, WideIndicesGiveTheSameSamples) {
  IndexedDataset ds(prefix());
  for (int64_t run : {5, 7}) {  // epochs shuffled together; the final one apart
    SCOPED_TRACE(run);
    const data::GptSamples narrow(ds, 4, true, 3, 0, -1, run);
    data::GptSamples::force_wide_indices = true;
    const data::GptSamples wide(ds, 4, true, 3, 0, -1, run);
    data::GptSamples::force_wide_indices = false;
    const int64_t docs = int64_t(narrow.indices().document_index.size()), S = narrow.size();
    EXPECT_EQ(narrow.index_bytes(), docs * 4 + 2 * (S + 1) * 4 + S * 4);
    EXPECT_EQ(wide.index_bytes(), docs * 4 + 2 * (S + 1) * 8 + S * 8);
    EXPECT_EQ(wide.indices().sample_index, narrow.indices().sample_index);
    EXPECT_EQ(wide.indices().shuffle_index, narrow.indices().shuffle_index);
    std::vector<int32_t> a(5), b(5), again(5);
    for (int64_t n = 0; n < 3 * S; ++n) {
      narrow.sample(n, a.data());
      wide.sample(n, b.data());
      narrow.sample(n % S, again.data());
      EXPECT_EQ(a, b) << "sample " << n;
      EXPECT_EQ(a, again) << "sample " << n;
    }
  }
}

TEST_F(GptSampleIndices, EmptyDocumentsAreSkipped) {
  write_dataset(prefix("gaps"), {{}, {1, 2}, {}, {}, {3, 4, 5}, {}});
  IndexedDataset ds(prefix("gaps"));
  data::GptSamples s(ds, 2, false, 0);
  EXPECT_EQ(s.samples_per_epoch(), 2);
  std::vector<int32_t> out(3);
  s.sample(0, out.data());
  EXPECT_THAT(out, ElementsAre(1, 2, 3));
  s.sample(1, out.data());
  EXPECT_THAT(out, ElementsAre(3, 4, 5));
}

// build_blending_indices by hand for weights 0.3 / 0.7: at sample i (x = max(i, 1)) the dataset
// with the largest w*x - drawn: B A B B A B B A B B.
TEST(BlendOrder, MegatronGreedy) {
  data::BlendOrder b({3, 7});  // normalized
  std::vector<std::pair<int, int64_t>> got;
  for (int i = 0; i < 10; ++i) got.emplace_back(b.at(i).dataset, b.at(i).sample);
  EXPECT_THAT(got, ElementsAre(std::pair{1, 0}, std::pair{0, 0}, std::pair{1, 1}, std::pair{1, 2},
                               std::pair{0, 1}, std::pair{1, 3}, std::pair{1, 4}, std::pair{0, 2},
                               std::pair{1, 5}, std::pair{1, 6}));
  // Far ahead and back again (a restart) give the same picks; the shares hold.
  int64_t from_a = 0;
  for (int64_t i = 0; i < 100000; ++i) from_a += b.at(i).dataset == 0;
  EXPECT_NEAR(from_a, 30000, 1);
  EXPECT_EQ(b.at(3).sample, 2);
  EXPECT_EQ(b.at(99999).dataset, data::BlendOrder({0.3, 0.7}).at(99999).dataset);
}

class IndexedLoaderTest : public IndexedFiles {
 protected:
  std::unique_ptr<DataLoader> open(const DataConfig& d, int vocab, int T, int B, int G,
                                   int rank = 0, int dp = 1, uint64_t seed = 5) const {
    ModelConfig m;
    m.vocab_size = vocab;
    m.seq_length = T;
    return make_data_loader(d, m, B, G, seed, rank, dp);
  }
  static DataConfig indexed(const std::string& path, bool shuffle = true) {
    DataConfig d;
    d.kind = "indexed";
    d.path = path;
    d.shuffle = shuffle;
    return d;
  }
};

TEST_F(IndexedLoaderTest, InputsAndTargetsOverlapByT) {
  write_dataset(prefix(), kHand);
  auto l = open(indexed(prefix(), false), 1000, 4, 3, 3);
  std::vector<int32_t> in(12), tg(12);
  l->micro_batch(0, 0, in.data(), tg.data());
  EXPECT_THAT(in, ElementsAre(100, 101, 102, 200, 201, 202, 203, 204, 300, 301, 400, 401));
  EXPECT_THAT(tg, ElementsAre(101, 102, 200, 201, 202, 203, 204, 300, 301, 400, 401, 402));
  EXPECT_EQ(l->num_tokens(), 14);
  EXPECT_THAT(l->describe(), AllOf(HasSubstr("indexed " + prefix() +
                                             " (4 documents, 14 tokens, "
                                             "uint16, 3 samples of 4+1 per epoch)")));
}

// A blend of 11 samples asks each dataset for its share and a 0.5% surplus, which decides the
// dataset's epochs: Megatron-LM ceil(ceil(11·w)·1.005) = 5 and 9 (both epochs shuffled
// together), Megatron-DeepSpeed ceil(11·w·1.005) = 4 and 8 (final epochs apart). Expected
// samples from a pure-Python BlendedDataset over GPTDataset, seed 5, T 4.
TEST_F(IndexedLoaderTest, BlendSizesFollowTheBuilder) {
  write_dataset(prefix("a"), kHand);
  write_dataset(
      prefix("b"),
      {{500, 501, 502, 503, 504, 505, 506}, {600, 601, 602}, {700, 701, 702, 703, 704, 705}});
  const std::vector<std::vector<int32_t>> lm = {
      {602, 700, 701, 702, 703}, {203, 204, 300, 301, 400}, {503, 504, 505, 506, 700},
      {704, 705, 500, 501, 502}, {300, 301, 100, 101, 102}, {703, 704, 705, 600, 601},
      {502, 503, 504, 505, 506}, {102, 200, 201, 202, 203}, {602, 500, 501, 502, 503},
      {704, 705, 600, 601, 602}, {102, 200, 201, 202, 203}};
  const std::vector<std::vector<int32_t>> ds = {
      {502, 503, 504, 505, 506}, {300, 301, 400, 401, 402}, {702, 703, 704, 705, 600},
      {704, 705, 700, 701, 702}, {201, 202, 203, 204, 300}, {600, 601, 602, 600, 601},
      {601, 602, 500, 501, 502}, {100, 101, 102, 200, 201}, {506, 500, 501, 502, 503},
      {700, 701, 702, 703, 704}, {402, 403, 100, 101, 102}};
  for (const auto& [builder, want] : {std::pair{"megatron-lm", lm}, {"megatron-deepspeed", ds}}) {
    DataConfig d = indexed("");
    d.path_list = {"0.3", prefix("a"), "0.7", prefix("b")};
    d.builder = builder;
    ModelConfig m;
    m.vocab_size = 1000;
    m.seq_length = 4;
    auto l = make_data_loader(d, m, 1, 1, 5, 0, 1, DataPart::train, 11);
    std::vector<int32_t> in(4), tg(4);
    for (int n = 0; n < 11; ++n) {
      l->micro_batch(n, 0, in.data(), tg.data());
      in.push_back(tg.back());
      EXPECT_EQ(in, want[size_t(n)]) << builder << " sample " << n;
      in.resize(4);
    }
  }
}

TEST_F(IndexedLoaderTest, DataParallelRanksSplitTheSameGlobalBatch) {
  std::mt19937 rng(11);
  Docs docs(60);
  for (auto& d : docs) {
    d.resize(1 + rng() % 30);
    for (auto& t : d) t = int32_t(rng() % 50257);
  }
  write_dataset(prefix(), docs);
  const int T = 8, G = 8;
  // dp 1 × 4 micro-batches of 2 against dp 2 × 2 and dp 4 × 1 over 30 steps (several epochs).
  auto global = [&](int dp, int step) {
    std::vector<std::vector<int32_t>> rows(G);
    const int B = 2, micro = G / (B * dp);
    for (int r = 0; r < dp; ++r) {
      auto l = open(indexed(prefix()), 50257, T, B, G, r, dp);
      std::vector<int32_t> in(B * T), tg(B * T);
      for (int s = 0; s <= step; ++s)
        for (int i = 0; i < micro; ++i) {
          l->micro_batch(s, i, in.data(), tg.data());
          if (s != step) continue;
          for (int j = 0; j < B; ++j) {
            auto& row = rows[size_t((i * dp + r) * B + j)];
            row.assign(in.begin() + j * T, in.begin() + (j + 1) * T);
            row.push_back(tg[size_t((j + 1) * T - 1)]);
          }
        }
    }
    return rows;
  };
  for (int step : {0, 7, 29}) {
    const auto one = global(1, step);
    EXPECT_EQ(one, global(2, step)) << "step " << step;
    EXPECT_EQ(one, global(4, step)) << "step " << step;
  }
}

TEST_F(IndexedLoaderTest, IdsAtOrAboveTheVocabularyAreRefused) {
  write_dataset(prefix(), {{5, 50256, 7}, {1, 2, 3, 4, 5, 6}});
  EXPECT_THAT(user_error([&] { open(indexed(prefix()), 50000, 4, 1, 1); }),
              AllOf(HasSubstr("indexed dataset '" + prefix() + "': the largest token id in " +
                              prefix() + ".bin is 50256, not below model.vocab_size 50000"),
                    HasSubstr("set model.vocab_size ≥ 50257")));
  EXPECT_NO_THROW(open(indexed(prefix()), 50257, 4, 1, 1));
  write_dataset(prefix("neg"), {{5, -3, 7, 1, 1, 1}}, IndexedDType::int32);
  EXPECT_THAT(user_error([&] { open(indexed(prefix("neg")), 50257, 4, 1, 1); }),
              HasSubstr("holds the negative token id -3"));
  EXPECT_THAT(user_error([&] { open(indexed(prefix()), 50257, 9, 1, 1); }),
              HasSubstr("has 9 tokens but one sample of model.seq_length 9 needs 10"));
}

TEST_F(IndexedLoaderTest, BlendFollowsTheWeights) {
  write_dataset(prefix("a"), {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}});
  write_dataset(prefix("b"), {{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}});
  DataConfig d = indexed("");
  d.path_list = {"0.3", prefix("a"), "0.7", prefix("b")};
  auto l = open(d, 100, 4, 1, 1);
  std::string picks;
  std::vector<int32_t> in(4), tg(4);
  for (int s = 0; s < 10; ++s) {
    l->micro_batch(s, 0, in.data(), tg.data());
    picks += in[0] == 1 ? 'A' : 'B';
  }
  EXPECT_EQ(picks, "BABBABBABB");
  EXPECT_THAT(l->describe(), HasSubstr("indexed blend of 2: 0.3 " + prefix("a")));
  // Prefixes alone: weighted by their samples per epoch (3 and 3), the first dataset winning a
  // tie.
  d.path_list = {prefix("a"), prefix("b")};
  l = open(d, 100, 4, 1, 1);
  picks.clear();
  for (int s = 0; s < 6; ++s) {
    l->micro_batch(s, 0, in.data(), tg.data());
    picks += in[0] == 1 ? 'A' : 'B';
  }
  EXPECT_EQ(picks, "ABABAB");
  d.path_list = {"0.3", prefix("a"), prefix("b")};
  EXPECT_THAT(user_error([&] { open(d, 100, 4, 1, 1); }),
              HasSubstr("data.path has 3 items, mixing weights (item 1, '0.3') and prefixes"));
  d.path_list = {"0", prefix("a"), "1", prefix("b")};
  EXPECT_THAT(user_error([&] { open(d, 100, 4, 1, 1); }),
              HasSubstr("weight '0' (item 1, for '" + prefix("a") + "') is not a positive number"));
  d.kind = "tokens";
  EXPECT_THAT(user_error([&] { open(d, 100, 4, 1, 1); }),
              HasSubstr("data.path is a list, which only data.kind indexed takes"));
}

}  // namespace
}  // namespace triad
