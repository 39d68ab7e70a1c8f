// SIGTERM and SIGINT during training (a SLURM preemption, Ctrl-C) ask the run to stop after the
// step in progress, save a checkpoint and end (train(), engine.cpp). They are never delivered to a
// handler on an interrupted thread's stack (JIT-generated GEMM code may use stack below its
// stack pointer, which a handler's frame would overwrite): take_stop_signals() blocks them in
// every thread and one thread of its own takes them with sigwait.
#pragma once

#include <chrono>

namespace triad {

// Call first in a process that trains, before any other thread exists (threads inherit the
// blocked mask). Until a training loop arms it, and after, a signal ends the process as its
// default action would; a second signal does, unless it is the same signal within
// kRepeatWindow of the first (one request delivered twice, as `timeout` delivers it). With a
// grace above zero, a run still armed that long after the first signal (a step that does not
// end) ends as the signal's default action would, with one line on stderr.
void take_stop_signals(std::chrono::milliseconds grace = std::chrono::milliseconds{0});

inline constexpr std::chrono::milliseconds kRepeatWindow{1000};

// The training loop's window: while a StopSignalsArmed lives, a first signal only sets
// stop_signal().
class StopSignalsArmed {
 public:
  StopSignalsArmed();
  ~StopSignalsArmed();
  StopSignalsArmed(const StopSignalsArmed&) = delete;
  StopSignalsArmed& operator=(const StopSignalsArmed&) = delete;
};

// The signal received while armed; 0 if none (or take_stop_signals() was never called).
int stop_signal();

}  // namespace triad
