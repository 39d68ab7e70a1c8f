// The config schema as data: every section, key, alias, type (from the Config member it fills)
// and range. The reader, the checks and to_yaml all walk this one table, so a key added here is
// parsed, validated and written back without further code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "triad/core/config.hpp"

namespace triad::config_detail {

// Where a key's value lives in Config; its alternative is the YAML type the key takes.
using Slot = std::variant<int*, double*, uint64_t*, bool*, std::string*>;

struct Field {
  std::string_view name;  // canonical (Megatron-LM / DeepSpeed) spelling
  Slot (*slot)(Config&) = nullptr;
  std::vector<std::string_view> aliases;
  // Numeric range; unset bounds are open.
  std::optional<double> at_least;         // value >= at_least
  std::optional<double> above;            // value > above
  std::optional<double> below;            // value < below
  std::vector<std::string_view> choices;  // for text keys: the only values allowed
};

struct Section {
  std::string_view name;  // "" = keys at the top level (device, precision)
  std::vector<Field> fields;
};

// All sections in the order to_yaml writes them. "attention" is not here: it is a plugin
// choice whose keys belong to the plugin (see reader.cpp).
const std::vector<Section>& schema();

const Section* find_section(std::string_view name);
// By canonical name or alias.
const Field* find_field(const Section& s, std::string_view key);

// The candidate closest to `word` by edit distance, or "" when none is close enough to be a
// plausible typo.
std::string closest(std::string_view word, const std::vector<std::string_view>& candidates);

// Shortest text that reads back as the same double, always with a '.' or exponent so YAML
// 1.1 readers see a float ("0.003", "1.0e-08", "10000.0").
std::string format_double(double v);

// Every name (canonical and aliases) a section accepts, for suggestions.
std::vector<std::string_view> names_of(const Section& s);

}  // namespace triad::config_detail
