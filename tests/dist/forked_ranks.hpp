// Test mains that run a job of real processes without the launcher: fork one process per rank
// around a rendezvous server in the parent (parallel_groups_main.cpp, context_attention_main.cpp).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "triad/core/dist/rendezvous.hpp"

namespace triad::test {

// Runs body(rank, port, token) in `world` forked processes, each joining the parent's rendezvous
// server at 127.0.0.1:port with the job token; a rank's return value is its exit code (an
// exception is printed and fails it). Returns how many ranks failed.
inline int run_forked_ranks(
    int world, const std::function<int(int rank, uint16_t port, const std::string& token)>& body) {
  const std::string token = make_job_token();
  RendezvousServer server("127.0.0.1", 0, token);
  std::vector<pid_t> kids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = body(r, server.port(), token);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(code);
    }
    kids.push_back(pid);
  }
  server.start();
  int failed = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
  }
  return failed;
}

}  // namespace triad::test
