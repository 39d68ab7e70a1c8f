// The GPT-2 BPE tokenizer: decode(encode(s)) == s for any bytes s, every id in range, and
// decode() of arbitrary ids either succeeds or throws UserError.
//
// Input: the bytes to encode; the same bytes read as little-endian int32 ids are decoded too.
#include <cstring>
#include <optional>

#include "fuzz_common.hpp"
#include "triad/core/tokenizer/tokenizer.hpp"

namespace {

const triad::Gpt2Tokenizer& tokenizer() {
  static const triad::Gpt2Tokenizer t = [] {
    const std::string dir = TRIAD_GPT2_VOCAB_DIR;
    try {
      return triad::Gpt2Tokenizer::load(dir + "/encoder.json", dir + "/vocab.bpe");
    } catch (const std::exception& e) {
      triad::fuzz::fail(std::string("cannot load the GPT-2 vocabulary (run tools/bootstrap): ") +
                        e.what());
    }
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace triad::fuzz;
  const triad::Gpt2Tokenizer& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "encode gave an id out of range");
  check(tok.decode(ids) == text, "decode(encode(s)) != s");
  std::string joined;
  for (int32_t id : ids) joined += tok.token_bytes(id);
  check(joined == text, "the tokens' bytes do not add up to the text");

  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  std::optional<std::string> decoded;
  expect_success_or_user_error([&] { decoded = tok.decode(raw); });
  if (decoded) {
    std::string expect;
    for (int32_t id : raw) {
      check(id >= 0 && id < tok.vocab_size(), "decode accepted an id out of range");
      expect += tok.token_bytes(id);
    }
    check(*decoded == expect, "decode() differs from the tokens' bytes");
  }
  return 0;
}
