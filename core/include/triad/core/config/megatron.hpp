// Megatron-LM / Megatron-DeepSpeed's command line as a Triad config: triad-config from-megatron
// prints it, triad-launch --megatron-args runs it. A --deepspeed_config among the arguments is
// read as deepspeed_config: in YAML is (a key both give with different values is an error).
#pragma once

#include <string>
#include <vector>

#include "triad/core/config/config.hpp"

namespace triad {

struct MegatronYaml {
  // Triad's YAML, a comment on every line naming the argument (or ds_config key) it came from;
  // the arguments without effect and those not carried over are listed at the end as comments.
  std::string yaml;
  // "ARG VALUE: WHY" for each argument Triad cannot honour.
  std::vector<std::string> not_carried;
  // What Megatron would refuse to start without (no --train-iters, no --lr), as one line; "".
  std::string missing;
};

// Throws UserError for an argument without its value, or a conflict with the ds_config.json.
MegatronYaml megatron_to_yaml(const std::vector<std::string>& args);

// The same arguments as a checked config (load_config's rules; overrides apply last). The
// arguments without effect and those not carried over are in import_notes.
// `strict`: an argument not carried over is a UserError (not_carried_refusal), as
// triad-config from-megatron --strict.
Config load_megatron_config(const std::vector<std::string>& args,
                            const std::vector<std::string>& overrides, int world_size = 1,
                            bool strict = false);

// The one-line refusal of arguments not carried over under --strict; "" when there are none.
std::string not_carried_refusal(const std::vector<std::string>& not_carried);

// Splits a command line as a POSIX shell would for words: blanks separate, '...' and "..."
// quote, a backslash escapes the next character, a backslash-newline joins lines. Throws
// UserError for an unclosed quote.
std::vector<std::string> split_arguments(const std::string& text);

}  // namespace triad
