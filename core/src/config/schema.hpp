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

#include "triad/core/config/config.hpp"

namespace triad::config_detail {

// Where a key's value lives in Config; its alternative is the YAML type the key takes.
using Slot = std::variant<int*, int64_t*, double*, uint64_t*, bool*, std::string*>;

struct Field {
  std::string_view name;  // canonical (Megatron-LM / DeepSpeed) spelling
  Slot (*slot)(Config&) = nullptr;
  std::vector<std::string_view> aliases;
  // Numeric range; unset bounds are open.
  std::optional<double> at_least;         // value >= at_least
  std::optional<double> above;            // value > above
  std::optional<double> below;            // value < below
  std::optional<double> at_most;          // value <= at_most
  std::vector<std::string_view> choices;  // for text keys: the only values allowed
  // A text key that also takes a list of text values (data.path's blend): the list goes here
  // and the text is cleared; a single value clears the list.
  std::vector<std::string>* (*list)(Config&) = nullptr;
};

struct Section {
  std::string_view name;  // "" = keys at the top level (device, precision)
  std::vector<Field> fields;
};

// All sections in the order to_yaml writes them. Plugin choices are not here: their keys
// belong to the plugin (see plugin_choices()).
const std::vector<Section>& schema();

// A top-level key that chooses a plugin of one kind: `attention: naive` or
// `attention: {name: flash2, block_q: 64}`. The name is the YAML key and the plugin kind.
struct PluginSection {
  std::string_view name;
  PluginChoice* (*slot)(Config&) = nullptr;
  std::string_view other;        // a second plugin name, for the examples in messages
  std::string_view example_map;  // a real plugin with a real parameter, for the same
};

// Every plugin choice, in the order to_yaml writes them (just before "output").
const std::vector<PluginSection>& plugin_choices();
const PluginSection* find_plugin_choice(std::string_view name);

const Section* find_section(std::string_view name);
// The key a bare value sets in a section that takes one (`device: cpu` = `device: {name: cpu}`);
// "" for a section that takes only keys.
std::string_view shorthand_key(std::string_view section);
// By canonical name or alias.
const Field* find_field(const Section& s, std::string_view key);

// The candidate closest to `word` by edit distance, or "" when none is close enough to be a
// plausible typo.
std::string closest(std::string_view word, const std::vector<std::string_view>& candidates);

// Shortest text that reads back as the same double, always with a '.' or exponent so YAML
// 1.1 readers see a float ("0.003", "1.0e-08", "10000.0").
std::string format_double(double v);

// A count for a message (steps, samples): whole ones as integers ("512"), others with 4
// significant digits ("2.5").
std::string count_text(double v);

// The pieces of `text` between its `sep`s, empty ones included ("3," is "3" and "").
std::vector<std::string> split_on(const std::string& text, char sep);

// `s` in lower case (ASCII): text keys with choices take them in any case.
std::string lower(std::string s);

// Every name (canonical and aliases) a section accepts, for suggestions.
std::vector<std::string_view> names_of(const Section& s);

}  // namespace triad::config_detail
