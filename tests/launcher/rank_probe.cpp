// A rank for the launcher tests: reads its place with DistEnv::from_environment (the rank
// side of the contract), prints it, optionally meets every other rank through the launcher's
// rendezvous, then fails, dies or sleeps as asked.
//   launcher-rank-probe [--rendezvous] [--fail-rank R --code C] [--kill-rank R]
//                       [--sleep-forever] [--trap-term]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "triad/core/dist/dist_env.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/error.hpp"

namespace {

volatile sig_atomic_t g_rank = -1;

void on_term(int) {
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "probe rank=%d got SIGTERM\n", int(g_rank));
  ssize_t w = write(1, buf, size_t(n));
  (void)w;
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  bool rendezvous = false, sleep_forever = false, trap_term = false;
  int fail_rank = -1, code = 1, kill_rank = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : -1; };
    if (a == "--rendezvous")
      rendezvous = true;
    else if (a == "--sleep-forever")
      sleep_forever = true;
    else if (a == "--trap-term")
      trap_term = true;
    else if (a == "--fail-rank")
      fail_rank = next();
    else if (a == "--code")
      code = next();
    else if (a == "--kill-rank")
      kill_rank = next();
    else {
      std::fprintf(stderr, "launcher-rank-probe: unknown argument '%s'\n", a.c_str());
      return 64;
    }
  }
  try {
    const triad::DistEnv env = triad::DistEnv::from_environment();
    g_rank = env.rank;
    if (trap_term) signal(SIGTERM, on_term);
    const char* omp = std::getenv("OMP_NUM_THREADS");
    std::printf(
        "probe rank=%d local_rank=%d world=%d local_world=%d master=%s:%d token_len=%zu "
        "omp=%s pid=%d\n",
        env.rank, env.local_rank, env.world_size, env.local_world_size, env.master_addr.c_str(),
        env.master_port, env.token.size(), omp ? omp : "-", int(getpid()));
    std::fflush(stdout);
    if (rendezvous) {
      using namespace std::chrono_literals;
      triad::RendezvousClient c(env.master_addr, uint16_t(env.master_port), env.token, 30s);
      c.set("probe/rank/" + std::to_string(env.rank), "here");
      std::vector<std::string> keys;
      for (int r = 0; r < env.world_size; ++r) keys.push_back("probe/rank/" + std::to_string(r));
      c.wait(keys, 30s);
      std::printf("probe rank=%d met %d ranks\n", env.rank, int(keys.size()));
      std::fflush(stdout);
    }
    if (env.rank == fail_rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::fprintf(stderr, "probe rank=%d failing with code %d\n", env.rank, code);
      return code;
    }
    if (env.rank == kill_rank) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGKILL);
    }
    if (sleep_forever)
      for (;;) pause();
    return 0;
  } catch (const triad::UserError& e) {
    std::fprintf(stderr, "launcher-rank-probe: error: %s\n", e.what());
    return 2;
  }
}
