// Shared bits of the plugin tests.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "triad/core/error.hpp"

namespace triad::test {

// The message of the UserError f throws; fails the test if it throws nothing or another type.
inline std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected UserError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected UserError, nothing was thrown";
  return "";
}

// Whether the dynamic linker has this file mapped (RTLD_NOLOAD never loads it).
inline bool is_loaded(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != nullptr;
}

// Runs a shell command with stderr joined to stdout; returns its exit code (-1 when it did not
// exit) and appends what it printed to *out.
inline int run_command(const std::string& cmd, std::string* out) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Runs `triad-plugin-test KIND ARGS` like run_command, with UCX kept on this machine (shared
// memory and loopback) for the suites that fork ranks.
inline int run_plugin_test(const std::string& kind, const std::string& args, std::string* out) {
  return run_command("UCX_TLS=sm,self UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n " +
                         std::string(TRIAD_PLUGIN_TEST_EXE) + " " + kind + " " + args,
                     out);
}

inline std::string bad_plugin(const std::string& name) {
  return std::string(TRIAD_BAD_PLUGIN_DIR) + "/libtriad-attention-" + name + ".so";
}

}  // namespace triad::test

// A scratch folder of this test process: concurrent runs (ctest -j) never share files.
inline std::filesystem::path test_tmp_dir() {
  auto d =
      std::filesystem::temp_directory_path() / ("triad-plugin-tests-" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d;
}
