// --set key.path=value: edits the YAML tree before it is read, so an override is validated
// exactly like the same key written in the file.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "reader.hpp"

namespace triad::config_detail {

// Applies each "a.b=c" in order to `root` (a map). Returns what each one set, for messages
// that point at the override instead of the file.
std::vector<Origin> apply_overrides(YAML::Node& root, const std::vector<std::string>& args);

}  // namespace triad::config_detail
