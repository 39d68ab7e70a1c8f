// The Megatron indexed dataset reader (triad::IndexedDataset on PREFIX.idx + PREFIX.bin).
//
// Input: a 4-byte little-endian length L, then L bytes of .idx and the rest as .bin. Checks:
// opening succeeds or throws UserError; an accepted dataset's every sequence, document-index
// entry and token reads back within the .bin, consistently through read() and sequence(), and
// the token count agrees with the lengths.
#include <algorithm>
#include <cstring>
#include <optional>

#include "fuzz_common.hpp"
#include "triad/core/data/indexed_dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace triad::fuzz;
  if (size < 4) return 0;
  uint32_t idx_size;
  std::memcpy(&idx_size, data, 4);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 4, size - 4);
  const size_t n_idx = std::min<size_t>(idx_size, rest.size());
  const std::string prefix = scratch_path("data");
  write_file(prefix + ".idx", rest.substr(0, n_idx));
  write_file(prefix + ".bin", rest.substr(n_idx));
  std::optional<triad::IndexedDataset> ds;
  expect_success_or_user_error([&] { ds.emplace(prefix); });
  if (!ds) return 0;
  const int64_t n = ds->num_sequences(), d = ds->num_documents();
  check(n >= 0 && d >= 0, "negative counts");
  check(ds->document_index(0) == 0 && ds->document_index(d) == n,
        "the document index does not run from 0 to N");
  for (int64_t k = 1; k <= d; ++k)
    check(ds->document_index(k) >= ds->document_index(k - 1), "the document index decreases");
  const int item = triad::dtype_size(static_cast<uint8_t>(ds->dtype()));
  check(item > 0, "an accepted dataset has no dtype size");
  const int64_t bin_size = static_cast<int64_t>(rest.size() - n_idx);
  int64_t tokens = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t len = ds->sequence_length(i);
    const int64_t ptr = ds->sequence_pointer(i);
    check(len >= 0 && ptr >= 0 && ptr + int64_t{len} * item <= bin_size,
          "sequence " + std::to_string(i) + " lies outside the .bin");
    const std::vector<int32_t> seq = ds->sequence(i);
    check(seq.size() == static_cast<size_t>(len), "sequence() has the wrong length");
    if (len > 0) {
      std::vector<int32_t> tail(static_cast<size_t>(len - len / 2));
      ds->read(i, len / 2, len - len / 2, tail.data());
      check(std::equal(tail.begin(), tail.end(), seq.begin() + len / 2),
            "read() and sequence() disagree");
    }
    tokens += len;
  }
  check(tokens == ds->num_tokens(), "num_tokens() is not the sum of the lengths");
  // Over the whole .bin, which may hold tokens between sequences.
  const auto [lo, hi] = ds->token_range();
  check(bin_size == 0 ? lo == 0 && hi == -1 : lo <= hi, "token_range() is inconsistent");
  return 0;
}
