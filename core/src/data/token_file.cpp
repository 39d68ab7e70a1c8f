#include "token_file.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "triad/core/error.hpp"

namespace triad::data {

namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and are read in place");

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

std::string quoted(const std::string& path) {
  return "tokens file '" + path + "'";
}

// A raw nanoGPT file could start with the two ids that spell the magic (55240, 308), but
// only alongside a version and a count that also fit, so a false positive is not a concern.
bool has_llmc_header(const MappedFile& f) {
  if (f.size() < kLlmcHeaderBytes) return false;
  int32_t magic;
  std::memcpy(&magic, f.data(), sizeof magic);
  return magic == kLlmcMagic;
}

void check_ids(const TokenFile& t, const std::string& path, int vocab_size) {
  const uint16_t* b = t.tokens;
  const uint16_t* e = b + t.count;
  // One vectorizable pass for the common case; the slow search only on failure.
  const uint16_t largest = *std::max_element(b, e);
  if (largest < vocab_size) return;
  const uint16_t* bad =
      std::find_if(b, e, [&](uint16_t v) { return static_cast<int>(v) >= vocab_size; });
  throw UserError(quoted(path) + ": token " + std::to_string(bad - b) + " is " +
                  std::to_string(*bad) + ", not below model.vocab_size " +
                  std::to_string(vocab_size) + "; set model.vocab_size ≥ " +
                  std::to_string(largest + 1) +
                  " (the largest id in the file + 1) or use a file from a matching tokenizer");
}

}  // namespace

TokenFile open_token_file(const std::string& path, int vocab_size) {
  TokenFile t{MappedFile(path, "data.path (data.kind tokens)")};
  const MappedFile& f = t.file;
  if (f.size() == 0)
    throw UserError(quoted(path) +
                    " is empty; point data.path at a uint16 token file (nanoGPT .bin or llm.c)");
  size_t offset = 0;
  if (has_llmc_header(f)) {
    int32_t header[3];
    std::memcpy(header, f.data(), sizeof header);
    t.format = "llm.c";
    if (header[1] != 1)
      throw UserError(quoted(path) + " has llm.c header version " + std::to_string(header[1]) +
                      "; only version 1 (uint16 tokens) is supported");
    offset = kLlmcHeaderBytes;
    const size_t payload = f.size() - offset;
    const int64_t declared = header[2];
    const int64_t present = static_cast<int64_t>(payload / 2);
    if (declared > present)
      throw UserError(quoted(path) + " is truncated: its llm.c header declares " +
                      std::to_string(declared) + " tokens but the file holds " +
                      std::to_string(present) + " (" + std::to_string(f.size()) +
                      " bytes, expected " + std::to_string(offset + 2 * size_t(declared)) +
                      "); regenerate it");
    if (declared < 0 || payload != 2 * size_t(declared))
      throw UserError(quoted(path) + ": its llm.c header declares " + std::to_string(declared) +
                      " tokens but " + std::to_string(payload) +
                      " bytes follow the header; the header or the file is corrupt, "
                      "regenerate it");
    t.count = declared;
  } else {
    t.format = "nanoGPT";
    if (f.size() % 2 != 0)
      throw UserError(quoted(path) + " has " + std::to_string(f.size()) +
                      " bytes, an odd count: uint16 tokens take 2 bytes each, so the file is "
                      "truncated; regenerate it");
    t.count = static_cast<int64_t>(f.size() / 2);
  }
  if (t.count == 0)
    throw UserError(quoted(path) + " holds no tokens; point data.path at a non-empty file");
  t.tokens = reinterpret_cast<const uint16_t*>(f.data() + offset);
  check_ids(t, path, vocab_size);
  return t;
}

}  // namespace triad::data
