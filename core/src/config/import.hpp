// Other tools' configurations in Triad's keys: DeepSpeed's ds_config.json (deepspeed.cpp) and
// Megatron-LM's command line (megatron.cpp). Both become a list of Triad keys, each with where it
// came from, merged into the YAML tree before it is read, so every value is then checked exactly
// like the same key written in YAML (with the source named in the message).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "reader.hpp"

namespace triad::config_detail {

// One row of the table both importers share: a Triad key and the names it has in DeepSpeed's
// JSON (a dotted path, list items by index: "optimizer.params.betas.0") and on Megatron's
// command line; "" where that tool has no such key. A Triad key of type bool is a flag on
// Megatron's command line (present: true).
struct KeyRow {
  std::string_view triad;
  std::string_view deepspeed;
  std::string_view megatron;
};
const std::vector<KeyRow>& key_table();

// One Triad key set from another tool's configuration.
struct ImportedKey {
  std::string key;     // Triad's canonical path: "training.micro_batch_size"
  YAML::Node value;    // a scalar, or a list (data.path's blend)
  std::string source;  // for messages and comments: "ds.json: train_batch_size", "--lr 3e-4"
};

// What an importer made of its input.
struct Imported {
  std::vector<ImportedKey> keys;
  // Accepted, without effect in Triad: "SOURCE: WHY" (logged once by the launcher).
  std::vector<std::string> no_effect;
  // Megatron only: arguments not carried over, "ARG: WHY" (--strict refuses them).
  std::vector<std::string> not_carried;
  // Megatron only: the --deepspeed_config given among the arguments, and whether --deepspeed
  // was (Megatron-DeepSpeed reads the JSON only with it, and then gives DeepSpeed Megatron's
  // own optimizer and lr schedule).
  std::string deepspeed_config;
  bool deepspeed = false;
  // Megatron only: its own defaults for the arguments not given, where Triad's differ; merged
  // last, only where neither the arguments nor the ds_config gave the key (merge_defaults).
  std::vector<ImportedKey> defaults;
};

// Sets each key of `defaults` that `root` does not hold yet; the others stay as they are.
void merge_defaults(YAML::Node& root, const std::vector<ImportedKey>& defaults,
                    std::vector<Origin>& origins, const std::string& file);

// The value a key has before an import ("" when it has none), as written.
using Lookup = std::function<std::optional<std::string>(const std::string& key)>;

// Reads DeepSpeed's JSON at `path` by DeepSpeed's rules ("auto": the value comes from elsewhere
// or is derived). A key Triad cannot honour is a UserError naming it and the fix.
// `megatron_optimizer`: Megatron-DeepSpeed's launch, which hands DeepSpeed Megatron's optimizer
// and lr schedule, so the JSON's optimizer and scheduler sections have no effect (DeepSpeed
// uses the optimizer it is given) and only the JSON's gradient_clipping clips.
Imported import_deepspeed(const std::string& path, const Lookup& current,
                          bool megatron_optimizer = false);

// Megatron-LM / Megatron-DeepSpeed arguments; a bad argument (a flag without its value, a value
// that is not a number) is a UserError naming it.
Imported import_megatron(const std::vector<std::string>& args);

// Adds each imported key to `root` and its source to `origins`. A key `root` already holds is a
// UserError naming both unless the values agree, or the one in `root` came from --set (which
// wins). `file`: the YAML file the keys already in `root` without an origin came from.
void merge_imported(YAML::Node& root, const std::vector<ImportedKey>& keys,
                    std::vector<Origin>& origins, const std::string& file);

// The value at `key` (a canonical path, any spelling of its last part) in `root`, as text.
std::optional<std::string> value_in(const YAML::Node& root, const std::string& key);

// Reads `root`'s top-level deepspeed_config key, if any: removes it and merges the JSON it names
// (import_deepspeed, merge_imported). Returns the keys without effect, for the log.
std::vector<std::string> merge_deepspeed_config(YAML::Node& root, std::vector<Origin>& origins,
                                                const std::string& file);

// Megatron's arguments as a tree of Triad keys (with the --deepspeed_config among them merged
// in), the source of each key, and what was left aside.
struct MegatronTree {
  YAML::Node root{YAML::NodeType::Map};
  std::vector<Origin> origins;
  Imported imported;
};
MegatronTree megatron_tree(const std::vector<std::string>& args);
// What a Megatron launch must give and `root` lacks (Megatron refuses to start without it), as
// the one-line message; "" when nothing is missing.
std::string megatron_missing(const YAML::Node& root);
// How messages name where a key given by Megatron's arguments came from, when no argument did.
inline constexpr const char* kMegatronSource = "--megatron-args";

}  // namespace triad::config_detail
