// One way to fail for every C++ entry point: a command-line error, a bad config and any other
// UserError print one line, "TOOL: error: WHAT", and exit 2 (run_main wraps a main); a numeric
// flag's allowed range is said in words. Header-only over CLI11 (the entry points' command-line
// library).
#pragma once

#include <CLI/CLI.hpp>

#include <cctype>
#include <exception>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "triad/core/error.hpp"

namespace triad::cli {

namespace detail {

// A number of type T (whole or not) from `min` to `max`, said as "must be KIND of at least MIN, not
// 'TEXT'" (or "from MIN to MAX" where the caller named a maximum).
template <class T>
CLI::Validator bounded(T min, T max, bool max_named, const std::string& kind) {
  const std::string min_text = CLI::detail::to_string(min);
  const std::string max_text = CLI::detail::to_string(max);
  const std::string range =
      max_named ? "from " + min_text + " to " + max_text : "of at least " + min_text;
  return CLI::Validator(
      [min, max, max_named, kind, range, max_text](std::string& text) -> std::string {
        size_t used = 0;
        T v{};
        bool too_big = false;
        try {
          if constexpr (std::is_integral_v<T>)
            v = std::stoll(text, &used);
          else
            v = std::stod(text, &used);
        } catch (const std::out_of_range&) {
          too_big = std::is_integral_v<T> && text.find('-') == std::string::npos;
          used = 0;
        } catch (const std::exception&) {
          used = 0;
        }
        too_big = too_big || (used == text.size() && v > max);
        if (too_big && !max_named)  // past what the option's type holds
          return "must be " + kind + " of at most " + max_text + ", not '" + text + "'";
        if (used == 0 || used != text.size() || !(v >= min) || too_big)
          return "must be " + kind + " " + range + ", not '" + text + "'";
        return "";
      },
      (std::is_integral_v<T> ? "INT " : "NUMBER ") +
          (max_named ? min_text + ".." + max_text : ">= " + min_text));
}

}  // namespace detail

// A whole number of at least `min` that fits an int: "must be a whole number of at least 1, not
// '0'" ("of at most 2147483647" past an int).
inline CLI::Validator at_least(long long min) {
  return detail::bounded<long long>(min, std::numeric_limits<int>::max(), false, "a whole number");
}
// A whole number from `min` to `max`: "must be a whole number from 1 to 1024, not '0'".
inline CLI::Validator in_range(long long min, long long max) {
  return detail::bounded(min, max, true, "a whole number");
}
// A number of at least `min` (seconds, fractions): "must be a number of at least 0, not '-1'".
inline CLI::Validator at_least_number(double min) {
  return detail::bounded(min, std::numeric_limits<double>::infinity(), false, "a number");
}

// CLI11's message in the words of the other errors: its "--world: At Most 1 required but
// received 2" is a flag given twice.
inline std::string reworded(std::string what) {
  const std::string at_most = ": At Most 1 required but received ";
  const size_t at = what.find(at_most);
  if (at == std::string::npos) return what;
  std::string times = what.substr(at + at_most.size());
  while (!times.empty() && !std::isdigit(static_cast<unsigned char>(times.back())))
    times.pop_back();
  return what.substr(0, at) + " is given " + (times == "2" ? "twice" : times + " times") +
         "; give it once";
}

// Refuses a value given empty (--output ""), which would otherwise silently mean the default;
// flags that take no value aside. UserError naming the first such option.
inline void refuse_empty_values(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_items_expected_max() == 0) continue;  // a flag
    for (const std::string& r : o->results())
      if (r.empty())
        throw UserError(
            o->get_name() + " is given an empty value ''; give one" +
            (o->get_positional() ? "" : ", or leave " + o->get_name() + " out for its default"));
  }
  for (const CLI::App* sub : app.get_subcommands()) refuse_empty_values(*sub);
}

// app.parse, then refuse_empty_values: what every entry point parses its command line with.
inline void parse(CLI::App& app, int argc, const char* const* argv) {
  app.parse(argc, argv);
  refuse_empty_values(app);
}

// A whole line to stderr in one write: a launcher reading several ranks' stderr (and stopping the
// others when one fails) never sees it cut between the tool's name and the message.
inline void write_line(const std::string& line) {
  std::cerr << (line + "\n") << std::flush;
}

// The one line of a failed entry point; returns its exit code (kExitUserError).
inline int fail(const std::string& tool, const std::string& what) {
  write_line(tool + ": error: " + what);
  return kExitUserError;
}

// A command-line error: --help and --version exit 0 as CLI11 prints them; anything else is one
// line naming the flag, and exit 2.
inline int parse_error(const std::string& tool, const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::string what = reworded(e.what());  // one line, without CLI11's "Run with --help" line
  for (char& c : what)
    if (c == '\n') c = ' ';
  while (!what.empty() && what.back() == ' ') what.pop_back();
  // "Value is required" -> "value is required", but "DIR is required" keeps its name.
  const bool acronym = what.size() > 1 && what[1] >= 'A' && what[1] <= 'Z';
  if (!what.empty() && what[0] >= 'A' && what[0] <= 'Z' && !acronym)
    what[0] = char(what[0] - 'A' + 'a');
  return fail(tool, what + " (see " + tool + " --help)");
}

// An entry point's whole work: a UserError is one line and exit 2; any other exception is a fault
// of Triad's, "TOOL: internal error: WHAT" and exit 1, never an abort (an exception out of main
// is std::terminate, exit 134).
template <class Body>
int run_main(const std::string& tool, Body&& body) {
  try {
    return body();
  } catch (const UserError& e) {
    return fail(tool, e.what());
  } catch (const std::exception& e) {
    write_line(tool + ": internal error: " + e.what());
    return 1;
  }
}

// The same with `app`'s command line parsed in `body`: its errors are parse_error's one line.
template <class Body>
int run_main(const std::string& tool, const CLI::App& app, Body&& body) {
  return run_main(tool, [&]() -> int {
    try {
      return body();
    } catch (const CLI::ParseError& e) {
      return parse_error(tool, app, e);
    }
  });
}

}  // namespace triad::cli
