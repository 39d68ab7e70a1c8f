// Errors the user can fix (bad config, missing file, bad plugin) are UserError: the entry
// points print the message alone and exit with status 2. Anything else is a bug.
#pragma once

#include <stdexcept>
#include <string>

namespace triad {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

constexpr int kExitUserError = 2;

}  // namespace triad
