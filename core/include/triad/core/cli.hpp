// One way to fail for every C++ entry point: a command-line error, a bad config and any other
// UserError print one line, "TOOL: error: WHAT", and exit 2; a numeric flag's allowed range is
// said in words. Header-only over CLI11 (the entry points' command-line library).
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>
#include <type_traits>

#include "triad/core/error.hpp"

namespace triad::cli {

namespace detail {

// A number of type T (whole or not) of at least `min`, said as "must be KIND of at least MIN, not
// 'TEXT'".
template <class T>
CLI::Validator at_least(T min, const std::string& kind) {
  const std::string min_text = CLI::detail::to_string(min);
  return CLI::Validator(
      [min, kind, min_text](std::string& text) -> std::string {
        size_t used = 0;
        T v{};
        try {
          if constexpr (std::is_integral_v<T>)
            v = std::stoll(text, &used);
          else
            v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !(v >= min))
          return "must be " + kind + " of at least " + min_text + ", not '" + text + "'";
        return "";
      },
      (std::is_integral_v<T> ? "INT >= " : "NUMBER >= ") + min_text);
}

}  // namespace detail

// A whole number of at least `min`: "must be a whole number of at least 1, not '0'".
inline CLI::Validator at_least(long long min) {
  return detail::at_least(min, "a whole number");
}
// A number of at least `min` (seconds, fractions): "must be a number of at least 0, not '-1'".
inline CLI::Validator at_least_number(double min) {
  return detail::at_least(min, "a number");
}

// The one line of a failed entry point; returns its exit code (kExitUserError).
inline int fail(const std::string& tool, const std::string& what) {
  std::cerr << tool << ": error: " << what << std::endl;
  return kExitUserError;
}

// A command-line error: --help and --version exit 0 as CLI11 prints them; anything else is one
// line naming the flag, and exit 2.
inline int parse_error(const std::string& tool, const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::string what = e.what();  // one line, without CLI11's "Run with --help" line
  for (char& c : what)
    if (c == '\n') c = ' ';
  while (!what.empty() && what.back() == ' ') what.pop_back();
  if (!what.empty() && what[0] >= 'A' && what[0] <= 'Z') what[0] = char(what[0] - 'A' + 'a');
  return fail(tool, what + " (see " + tool + " --help)");
}

}  // namespace triad::cli
