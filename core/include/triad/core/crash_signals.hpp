// The signals a crash raises (a fault, an abort, a bad instruction or arithmetic), their names,
// and installing one handler for all of them: shared by the tools that say in one line that a
// run or a plugin crashed. crash_signal_name is async-signal-safe (it returns literals).
#pragma once

#include <csignal>

namespace triad {

inline constexpr int kCrashSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};

inline const char* crash_signal_name(int sig) noexcept {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    default:
      return "a signal";
  }
}

inline void on_crash_signals(void (*handler)(int)) {
  for (int sig : kCrashSignals) std::signal(sig, handler);
}

}  // namespace triad
