// uint16 token files: nanoGPT's raw array and llm.c's 256-int32 header, and every way such
// a file can be broken.
#include <cstring>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "triad/core/data/data.hpp"

namespace triad {
namespace {

using test::user_error;
using ::testing::HasSubstr;

constexpr int kT = 16;
constexpr int kCount = 777;
constexpr int kVocab = 50304;

std::vector<uint8_t> llmc_file(const std::vector<uint16_t>& tokens, int32_t declared,
                               int32_t version = 1) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = version;
  header[2] = declared;
  std::vector<uint8_t> out(1024 + 2 * tokens.size());
  std::memcpy(out.data(), header.data(), 1024);
  if (!tokens.empty())  // an empty vector's data() may be null, which memcpy may not take
    std::memcpy(out.data() + 1024, tokens.data(), 2 * tokens.size());
  return out;
}

class TokensLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(7);
    tokens_.resize(kCount);
    for (auto& t : tokens_) t = static_cast<uint16_t>(rng() % 50257);
    tokens_[0] = 50256;  // the largest GPT-2 id is legal
  }

  std::unique_ptr<DataLoader> open(const std::string& path, int vocab = kVocab, int T = kT) const {
    DataConfig d;
    d.kind = "tokens";
    d.path = path;
    ModelConfig m;
    m.vocab_size = vocab;
    m.seq_length = T;
    return make_data_loader(d, m, 2, 4, 1, 0, 1);
  }
  std::string error(const std::string& path, int vocab = kVocab, int T = kT) const {
    return user_error([&] { open(path, vocab, T); });
  }

  // Every sample of two epochs against the token array.
  void expect_windows(DataLoader& l) const {
    const int W = (kCount - 1) / kT;
    std::vector<int32_t> in(2 * kT), tg(2 * kT);
    for (int64_t s = 0; s < W; ++s)
      for (int i = 0; i < 2; ++i) {
        l.micro_batch(s, i, in.data(), tg.data());
        for (int j = 0; j < 2; ++j) {
          const int64_t w = (s * 4 + i * 2 + j) % W;
          for (int t = 0; t < kT; ++t) {
            ASSERT_EQ(in[j * kT + t], tokens_[w * kT + t]);
            ASSERT_EQ(tg[j * kT + t], tokens_[w * kT + t + 1]);
          }
        }
      }
  }

  test::ScratchDir dir_;
  std::vector<uint16_t> tokens_;
};

TEST_F(TokensLoader, NanoGptRawArray) {
  const auto path = dir_.file("train.bin");
  test::write_vector(path, tokens_);
  auto l = open(path);
  EXPECT_EQ(l->num_tokens(), kCount);
  EXPECT_EQ(l->describe(), "tokens " + path + " [nanoGPT] (777 tokens, 48 windows of 16+1)");
  expect_windows(*l);
}

TEST_F(TokensLoader, LlmcHeader) {
  const auto path = dir_.file("train.bin");
  test::write_vector(path, llmc_file(tokens_, kCount));
  auto l = open(path);
  EXPECT_EQ(l->num_tokens(), kCount);
  EXPECT_EQ(l->describe(), "tokens " + path + " [llm.c] (777 tokens, 48 windows of 16+1)");
  expect_windows(*l);
}

TEST_F(TokensLoader, MissingOrEmpty) {
  auto msg = error(dir_.file("nope.bin"));
  EXPECT_THAT(msg, HasSubstr(dir_.file("nope.bin")));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));

  const auto path = dir_.file("empty.bin");
  test::write_bytes(path, "", 0);
  EXPECT_THAT(error(path), HasSubstr("tokens file '" + path + "' is empty"));

  test::write_vector(path, llmc_file({}, 0));
  EXPECT_THAT(error(path), HasSubstr("holds no tokens"));
}

TEST_F(TokensLoader, OddByteCountIsTruncated) {
  const auto path = dir_.file("odd.bin");
  auto bytes = std::vector<uint8_t>(reinterpret_cast<uint8_t*>(tokens_.data()),
                                    reinterpret_cast<uint8_t*>(tokens_.data() + kCount));
  bytes.pop_back();
  test::write_vector(path, bytes);
  auto msg = error(path);
  EXPECT_THAT(msg, HasSubstr("'" + path + "' has 1553 bytes, an odd count"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST_F(TokensLoader, LlmcHeaderDisagreesWithTheFile) {
  const auto path = dir_.file("llmc.bin");
  test::write_vector(path, llmc_file(tokens_, 800));
  auto msg = error(path);
  EXPECT_THAT(msg, HasSubstr("'" + path + "' is truncated"));
  EXPECT_THAT(msg, HasSubstr("declares 800 tokens but the file holds 777"));

  auto bytes = llmc_file(tokens_, kCount);
  bytes.pop_back();  // half a token short
  test::write_vector(path, bytes);
  EXPECT_THAT(error(path), HasSubstr("declares 777 tokens but the file holds 776"));

  test::write_vector(path, llmc_file(tokens_, 700));
  EXPECT_THAT(error(path), HasSubstr("declares 700 tokens but 1554 bytes follow the header"));

  test::write_vector(path, llmc_file(tokens_, kCount, 2));
  EXPECT_THAT(error(path), HasSubstr("llm.c header version 2"));
}

TEST_F(TokensLoader, TokenIdAtOrAboveVocab) {
  const auto path = dir_.file("big.bin");
  tokens_[123] = 60000;
  tokens_[500] = 65535;
  test::write_vector(path, tokens_);
  auto msg = error(path);
  EXPECT_THAT(msg, HasSubstr("'" + path +
                             "': token 123 is 60000, not below model.vocab_size "
                             "50304; set model.vocab_size ≥ 65536"));
  tokens_[123] = tokens_[500] = 1;
  test::write_vector(path, llmc_file(tokens_, kCount));
  EXPECT_THAT(error(path, 50256),
              HasSubstr("token 0 is 50256, not below model.vocab_size 50256; set "
                        "model.vocab_size ≥ 50257"));
}

TEST_F(TokensLoader, TooFewTokensForOneSample) {
  const auto path = dir_.file("short.bin");
  test::write_vector(path, std::vector<uint16_t>(16, 3));
  auto msg = error(path);
  EXPECT_THAT(msg, HasSubstr("'" + path +
                             "' has 16 tokens but one sample of model.seq_length "
                             "16 needs 17"));
  test::write_vector(path, std::vector<uint16_t>(17, 3));
  EXPECT_EQ(open(path)->num_tokens(), 17);
}

}  // namespace
}  // namespace triad
