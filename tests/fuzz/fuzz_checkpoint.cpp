// The checkpoint loader (triad::Checkpoint on an iteration folder).
//
// Input: metadata.json's bytes, then optionally "\n#--rank-file\n" and the bytes of
// rank_00000.safetensors beside it. Checks: opening succeeds or throws UserError, and so do
// describe() (triad-checkpoint info) and verify() on a checkpoint it opened.
#include <filesystem>
#include <optional>

#include "fuzz_common.hpp"
#include "triad/core/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace triad::fuzz;
  const auto [meta, rank_file] =
      split_once({reinterpret_cast<const char*>(data), size}, "\n#--rank-file\n");
  const std::string dir = scratch_path("iter_0000001");
  std::filesystem::create_directories(dir);
  write_file(dir + "/metadata.json", meta);
  write_file(dir + "/rank_00000.safetensors", rank_file);
  std::optional<triad::Checkpoint> ck;
  expect_success_or_user_error([&] { ck.emplace(dir); });
  if (!ck) return 0;
  expect_success_or_user_error([&] { (void)ck->describe(); });
  expect_success_or_user_error([&] { ck->verify(); });
  return 0;
}
