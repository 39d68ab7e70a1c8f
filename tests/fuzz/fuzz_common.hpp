// What every fuzz target shares: a private scratch folder for the files a parser reads, and
// the rule that a parser given any bytes either succeeds or throws triad::UserError. Any other
// exception, a wrong answer or a sanitizer finding aborts, which libFuzzer reports as a crash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

#include "triad/core/error.hpp"

namespace triad::fuzz {

// Stops the run with a message: libFuzzer saves the input that got here.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz: %s\n", what.c_str());
  std::abort();
}

inline void check(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// A folder of this process's own ($TMPDIR or /tmp), made once and removed at a normal exit
// (a crash leaves it, beside the input that caused it).
inline const std::string& scratch_dir() {
  struct Dir {
    std::string path;
    Dir() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::string(tmp && *tmp ? tmp : "/tmp") + "/triad-fuzz-XXXXXX";
      if (!::mkdtemp(path.data())) fail("cannot create a scratch folder under " + path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

inline std::string scratch_path(const std::string& name) {
  return scratch_dir() + "/" + name;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) fail("cannot write " + path);
}

// Runs `f`; a UserError is a correct refusal of bad input, anything else a bug.
template <typename F>
void expect_success_or_user_error(F&& f) {
  try {
    f();
  } catch (const triad::UserError&) {
  } catch (const std::exception& e) {
    fail(std::string("an exception other than triad::UserError escaped: ") + e.what());
  } catch (...) {
    fail("an exception of unknown type escaped");
  }
}

// Splits `data` at the first occurrence of `sep`: the part before it and the rest (empty when
// there is no separator).
inline std::pair<std::string_view, std::string_view> split_once(std::string_view data,
                                                                std::string_view sep) {
  const size_t at = data.find(sep);
  if (at == std::string_view::npos) return {data, {}};
  return {data.substr(0, at), data.substr(at + sep.size())};
}

}  // namespace triad::fuzz
