// A flat file of uint16 token ids, in either of the two layouts in common use:
//   nanoGPT: the raw array (np.uint16 .tofile()).
//   llm.c:   256 int32 header {20240520, version 1, token count, 0...}, then the array.
#pragma once

#include <cstdint>
#include <string>

#include "mapped_file.hpp"

namespace triad::data {

struct TokenFile {
  MappedFile file;
  const uint16_t* tokens = nullptr;
  int64_t count = 0;
  const char* format = "";  // "nanoGPT" or "llm.c"
};

// Validates the whole file (not empty, not truncated, every id < vocab_size) and throws
// UserError naming the file, the problem and the fix.
TokenFile open_token_file(const std::string& path, int vocab_size);

}  // namespace triad::data
