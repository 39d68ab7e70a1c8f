// YAML tree -> Config, key by key against the schema: unknown keys, duplicates, wrong types,
// out-of-range values and bad choices are errors here. Relations between keys are checked
// afterwards (checks.hpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "triad/core/config/config.hpp"

namespace triad::config_detail {

// A key path (as the user spelled it) written by something other than the YAML file, and how
// messages name that source: "--set 'a.b=c'", "ds_config.json: train_batch_size".
struct Origin {
  std::string key_path;
  std::string where;
};

// Turns a key path and a YAML mark into the place a user should look: "file:line:column"
// (1-based), "--set 'a.b=c'" (an Origin's where), or the file alone for values it never wrote.
class Locator {
 public:
  Locator(std::string file, std::vector<Origin> overrides)
      : file_(std::move(file)), overrides_(std::move(overrides)) {}
  std::string where(const std::string& key_path, const YAML::Mark& mark) const;
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<Origin> overrides_;
};

// A key the user gave, by canonical path ("training.micro_batch_size").
struct GivenKey {
  std::string key_path;  // as written, e.g. "training.train_micro_batch_size_per_gpu"
  std::string where;
  std::string text;  // the value as written
};
using Given = std::map<std::string, GivenKey>;

// Fills `c` from `root` (a map); returns what was given and where, for later messages.
Given read_config(const YAML::Node& root, const Locator& loc, Config& c);

}  // namespace triad::config_detail
