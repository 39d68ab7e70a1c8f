#include "triad/core/train/stop_signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

namespace triad {

namespace {

std::atomic<bool> g_armed{false};
std::atomic<int> g_signal{0};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// The default action, from this thread: unblocked here, the signal ends the process.
[[noreturn]] void die_of(int sig) {
  const sigset_t set = stop_set();
  ::signal(sig, SIG_DFL);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  for (;;) ::pause();  // not reached: the default action of SIGTERM / SIGINT ends the process
}

}  // namespace

void take_stop_signals(std::chrono::milliseconds grace) {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, grace] {
    std::chrono::steady_clock::time_point first{};
    for (;;) {
      int sig = 0;
      // With a grace and a request taken, wait no longer than its end: a run that has not
      // stopped by then (a step that never ends) ends as the signal's default action would.
      const int taken = g_signal.load();
      if (grace.count() > 0 && taken != 0 && g_armed.load()) {
        const auto left = first + grace - std::chrono::steady_clock::now();
        const long long ns = std::max<long long>(
            0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
        const timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
        sig = sigtimedwait(&set, nullptr, &ts);
        if (sig < 0) {
          if (errno != EAGAIN) continue;
          if (!g_armed.load()) continue;  // the loop ended in time; its save is not cut short
          // A thread, not a signal handler: it may build the line.
          const std::string text =
              std::string(
                  "triad-launch: the step in progress did not end within the stop grace "
                  "(--stop-grace) of ") +
              (taken == SIGINT ? "SIGINT" : "SIGTERM") + "; stopping without a checkpoint\n";
          [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, text.data(), text.size());
          die_of(taken);
        }
      } else if (sigwait(&set, &sig) != 0) {
        continue;
      }
      int none = 0;
      const auto now = std::chrono::steady_clock::now();
      if (g_armed.load() && g_signal.compare_exchange_strong(none, sig)) {
        first = now;
        continue;
      }
      // One request delivered twice (`timeout` signals the process and then its process group)
      // is still one request: the same signal again within kRepeatWindow does not cut the
      // orderly stop short.
      if (g_armed.load() && sig == g_signal.load() && now - first < kRepeatWindow) continue;
      die_of(sig);
    }
  }).detach();
}

StopSignalsArmed::StopSignalsArmed() {
  g_signal = 0;
  g_armed = true;
}

StopSignalsArmed::~StopSignalsArmed() {
  g_armed = false;
}

int stop_signal() {
  return g_signal.load();
}

}  // namespace triad
