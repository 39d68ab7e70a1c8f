// The step trace (training.profile_steps, --profile-steps): for the chosen steps each rank records
// spans (every layer's forward and backward per micro-batch, every collective and point-to-point
// wait the core's Communicator reaches, the optimizer step, data loading) and writes them as
// Chrome trace-event JSON; rank 0 merges every rank's file into PROFILE_DIR/trace.json, which
// Perfetto, chrome://tracing and tools/triad-trace read.
//
// A span asks active_trace() once: outside a chosen step that is a null pointer and the span
// does nothing else, so an untraced run pays one branch per layer and per wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace triad {

class Communicator;

// What a span's time was spent on; its track (Chrome's tid) follows from it.
enum class TraceKind { compute, communication, optimizer, data, other };

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;
  // steps: the step numbers to record (empty: none).
  StepTrace(int rank, std::vector<int> steps);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  bool enabled() const { return !steps_.empty(); }
  // Makes this the active trace while `step` runs, when it is one of the chosen steps.
  void begin_step(int step);
  // Records the step's own span and deactivates the trace.
  void end_step();
  // The micro-batch the following spans belong to (-1: none).
  void set_micro_batch(int mb) { mb_ = mb; }
  void add(TraceKind kind, std::string name, Clock::time_point t0, Clock::time_point t1,
           nlohmann::json args);

  // This rank's events (trace-event "X" and "M" events, ts and dur in microseconds).
  nlohmann::json events() const;
  // Each rank writes PROFILE_DIR/trace.rank-N.json (atomically); after a barrier over `world`
  // (null: one process) rank 0 merges every rank's file into PROFILE_DIR/trace.json and removes
  // them. Returns the merged file's path on rank 0, "" elsewhere. No-op when nothing was chosen.
  std::string write(const std::filesystem::path& dir, Communicator* world, int world_size,
                    std::chrono::milliseconds timeout) const;

 private:
  int rank_;
  std::vector<int> steps_;
  int step_ = 0, mb_ = -1;
  Clock::time_point step_start_{};
  nlohmann::json events_ = nlohmann::json::array();
};

namespace detail {
extern StepTrace* active_trace;  // set by StepTrace::begin_step, cleared by end_step
}
// The trace recording the current step; null outside a chosen step.
inline StepTrace* active_trace() {
  return detail::active_trace;
}

// One span, recorded at its end when a trace is active; otherwise nothing but the null check.
// name: a literal; index >= 0 is appended ("forward block" 3 -> "forward block 3").
class TraceSpan {
 public:
  TraceSpan(TraceKind kind, const char* name, int index = -1) : trace_(active_trace()) {
    if (trace_) start(kind, name, index);
  }
  ~TraceSpan() {
    if (trace_) finish();
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  explicit operator bool() const { return trace_ != nullptr; }
  // Only call while recording (check the span first).
  template <class T>
  TraceSpan& arg(const char* key, const T& value) {
    args_[key] = value;
    return *this;
  }

 private:
  void start(TraceKind kind, const char* name, int index);
  void finish();
  StepTrace* trace_;
  TraceKind kind_ = TraceKind::other;
  std::string name_;
  nlohmann::json args_;
  StepTrace::Clock::time_point t0_{};
};

}  // namespace triad
