// The YAML config reader and the --set override parser (triad::load_config).
//
// Input: the config file's bytes, then optionally "\n#--set\n" and the overrides, one per line.
// Checks: load_config succeeds or throws UserError; a config it accepts is written back by
// to_yaml as a config that it accepts again and that writes back the same text.
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "triad/core/config/config.hpp"

namespace {

std::vector<std::string> lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty() && out.size() < 16) {
    auto [line, rest] = triad::fuzz::split_once(text, "\n");
    out.emplace_back(line);
    text = rest;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace triad::fuzz;
  const auto [yaml, sets] = split_once({reinterpret_cast<const char*>(data), size}, "\n#--set\n");
  const std::vector<std::string> overrides = lines(sets);
  const std::string path = scratch_path("config.yaml");
  write_file(path, yaml);
  std::string first;
  expect_success_or_user_error([&] {
    const triad::Config c = triad::load_config(path, overrides);
    first = triad::to_yaml(c);
  });
  if (first.empty()) return 0;
  // The resolved config is what --dry-run prints and a run folder keeps as config.yaml: it must
  // read back as itself.
  const std::string again_path = scratch_path("resolved.yaml");
  write_file(again_path, first);
  std::string second;
  try {
    triad::Config c = triad::load_config(again_path, {});
    c.source_path = path;  // the comment naming the source, as in the first
    second = triad::to_yaml(c);
  } catch (const std::exception& e) {
    fail("to_yaml wrote a config that load_config refuses: " + std::string(e.what()) +
         "\n--- written ---\n" + first);
  }
  check(second == first, "to_yaml of the reloaded config differs:\n--- first ---\n" + first +
                             "--- second ---\n" + second);
  return 0;
}
