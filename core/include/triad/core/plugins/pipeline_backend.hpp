// Core-side handle to one pipeline-schedule plugin instance (a PluginInstance), and the checks
// that make its streams safe to execute: each stage's stream on its own (PipelineBackend::
// schedule), and every stage's streams run together (simulate_pipeline: receives block, sends are
// buffered until the peer receives them, as in the executor). pipeline_timeline() times the
// streams with unit-cost passes, for triad-schedule and the tests.
//
// The rules a stream follows (pipeline_v1.h and pipeline_v2.h say what each instruction does).
// With p stages and v virtual stages, chunk c of stage s is virtual stage g = c·p + s; g = 0 is
// the first, g = v·p - 1 the last. For every micro-batch and every chunk, in one of these orders
// on the stage:
//   [LOAD] [RECV_ACTIVATION] FORWARD [SEND_ACTIVATION] [RECV_GRAD] BACKWARD [SEND_GRAD]
//   [LOAD] [RECV_ACTIVATION] FORWARD [SEND_ACTIVATION] [RECV_GRAD] BACKWARD_INPUT [SEND_GRAD]
//          BACKWARD_WEIGHT             (or with the SEND_GRAD after the BACKWARD_WEIGHT)
// exactly once each, other instructions between them, all in one buffer: RECV_ACTIVATION /
// SEND_GRAD everywhere but the first virtual stage, SEND_ACTIVATION / RECV_GRAD everywhere but
// the last. A pass runs its backward whole or in two halves, never both. LOAD comes before the
// forward of the chunk that needs it, in its buffer: chunk 0 on stage 0 (tokens), chunk v-1 on
// stage p-1 (targets), exactly once per micro-batch each; on the stages between, at most once per
// micro-batch (the executor loads what the stage needs). A buffer holds one (micro-batch, chunk)
// from its first instruction to its last (the SEND_GRAD, the BACKWARD on the first virtual stage,
// or the BACKWARD_WEIGHT where no SEND_GRAD follows it), and the micro-batch is in flight until
// every chunk's last; indices are below the declared count. The stream ends with
// REDUCE_TIED_GRADS, REDUCE_GRADS and OPTIMIZER_STEP, once each, in that order (so every
// BACKWARD_WEIGHT comes before them). Across stages, messages of one kind
// between two stages are received in the order they were sent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/sdk/pipeline_v2.h"

namespace triad {

// One stage's stream of one step and the activation buffers it declares.
struct PipeSchedule {
  int buffers = 0;
  std::vector<triad_pipe_instr_v1> instrs;
};

class PipelineBackend {
 public:
  // Creates the instance; `params` resolved against the plugin's schema. Throws UserError if the
  // plugin is not of kind "pipeline" or refuses to be created.
  PipelineBackend(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                  const triad_services_v1* services);
  PipelineBackend(const PipelineBackend&) = delete;
  PipelineBackend& operator=(const PipelineBackend&) = delete;

  const std::string& name() const;
  const triad_pipe_caps_v1& capabilities() const;
  // What a refusal's fix calls the micro-batches, the virtual stages and the schedule: the
  // config's keys by default (training.gradient_accumulation_steps,
  // parallel.virtual_pipeline_model_parallel_size, pipeline); a tool with flags of its own names
  // those.
  void name_layout_keys(std::string micro_batches, std::string virtual_stages,
                        std::string schedule = "") {
    micro_batches_key_ = std::move(micro_batches);
    virtual_stages_key_ = std::move(virtual_stages);
    schedule_key_ = std::move(schedule);
  }

  // One stage's stream for one step, checked against the rules above. Throws UserError (one line
  // naming the plugin, the layout "stage s of p, m micro-batches, v virtual stages", what is wrong
  // and the fix: the other installed plugins that schedule the layout, "set pipeline: 1f1b") when
  // the layout is malformed, the capabilities or the plugin refuse it, or the stream breaks a rule.
  // A layout the plugin does not schedule is refused with its own reason and the nearest layout
  // it schedules, by key ("set training.gradient_accumulation_steps to 8 or
  // parallel.virtual_pipeline_model_parallel_size to 1"), never an internal call's name.
  PipeSchedule schedule(int stage, int stages, int micro_batches, int virtual_stages = 1) const;
  // Every stage's stream, each checked as schedule() does and all of them run together with
  // simulate_pipeline(), so that a step cannot deadlock; throws UserError likewise.
  std::vector<PipeSchedule> schedules(int stages, int micro_batches, int virtual_stages = 1) const;

  // The plugin's answers as they come, for the conformance suite: "" and *out filled when
  // num_buffers() and schedule() both returned OK (and schedule() the same length twice), else
  // why not, with the failing call's status in *status (TRIAD_OK when the answers themselves were
  // inconsistent). No rule is checked.
  std::string try_schedule(const triad_pipe_layout_v1& layout, PipeSchedule* out,
                           int* status) const;
  // The raw status of one call.
  int try_num_buffers(const triad_pipe_layout_v1& layout, int32_t* buffers) const noexcept;
  int try_schedule_call(const triad_pipe_layout_v1& layout, triad_pipe_instr_v1* out,
                        size_t capacity, size_t* count) const noexcept;
  std::string last_error() const;
  const std::string& path() const;

 private:
  std::string refusal(const triad_pipe_layout_v1& layout, PipeSchedule* out) const;
  std::string pipeline_refusal(const triad_pipe_layout_v1& layout, std::vector<PipeSchedule>* out,
                               int* stage) const;
  [[noreturn]] void refuse(const triad_pipe_layout_v1& layout, int stage,
                           const std::string& why) const;
  std::string nearest_fix(const triad_pipe_layout_v1& layout) const;
  PluginInstance instance_;
  const triad_services_v1* services_;
  std::string micro_batches_key_ = "training.gradient_accumulation_steps";
  std::string virtual_stages_key_ = "parallel.virtual_pipeline_model_parallel_size";
  std::string schedule_key_;  // "": the config's `pipeline:`
  const triad_pipeline_ops_v1& ops_;
  triad_pipe_caps_v1 caps_{};
};

// The first rule one stage's stream breaks, or "" ("instruction 7 (forward of micro-batch 2 in
// buffer 0): ..."). Fills *peak_buffers (the most buffers in use at once) and *in_flight (the most
// micro-batches with activations held at once) when given and the stream is valid.
std::string pipe_stream_error(const triad_pipe_layout_v1& layout, const PipeSchedule& stream,
                              int* peak_buffers = nullptr, int* in_flight = nullptr);

// Runs every stage's stream together (stages[s] is stage s's; receives block, sends are
// buffered) and returns "" or the first problem: a stream breaking a rule ("stage 1: ..."), a
// deadlock (naming each stage's blocked instruction), a send never received or a receive with no
// send, a message received out of the order it was sent in.
std::string simulate_pipeline(const std::vector<PipeSchedule>& stages, int micro_batches,
                              int virtual_stages);

// One pass on the timeline: stage, start and length in time units, the pass ('F' forward, 'B' a
// whole backward, 'b' a backward's input half BACKWARD_INPUT, 'W' its weight half
// BACKWARD_WEIGHT), the micro-batch and the chunk.
struct PipeBox {
  int stage = 0, start = 0, length = 0;
  char pass = 'F';
  int micro_batch = 0, chunk = 0;
};

// The step timed with every FORWARD taking one time unit, every BACKWARD two and each of its
// halves one, everything else (communication included) free: rows[s] is stage s's grid, one cell
// per time unit ("F3" / "B3" / "W3" for micro-batch 3's forward / backward (two cells when whole,
// one for the input half) / weight half, "F3b" for its chunk 1 when v > 1, "." idle, cells padded
// to one width and separated by a space); split whether any backward is split; bubble the idle
// fraction of stages × makespan;
// max_in_flight the most micro-batches with activations held on any stage (in_flight per stage);
// peak_buffers the most buffers in use per stage. Throws UserError when simulate_pipeline()
// finds a problem.
struct PipeTimeline {
  std::vector<std::string> rows;
  bool split = false;
  double bubble = 0;
  int makespan = 0;
  int max_in_flight = 0;
  std::vector<int> peak_buffers;
  std::vector<int> in_flight;
  std::vector<PipeBox> boxes;
};
PipeTimeline pipeline_timeline(const std::vector<PipeSchedule>& stages, int micro_batches,
                               int virtual_stages);
// What each pass and message costs when the streams are timed: pass(stage, chunk, backward) the
// time of one FORWARD or BACKWARD of that chunk on that stage, half(stage, chunk, weight) that of
// its BACKWARD_INPUT (weight false) or BACKWARD_WEIGHT (empty: half of its BACKWARD's each),
// transfer(stage, chunk, grad) the time a SEND of that chunk's activation (grad false) or gradient
// takes to arrive. By default triad-schedule's units: forward 1, backward 2 (each half 1),
// messages free.
struct PipeCosts {
  std::function<double(int stage, int chunk, bool backward)> pass = [](int, int, bool b) {
    return b ? 2.0 : 1.0;
  };
  std::function<double(int stage, int chunk, bool weight)> half;
  std::function<double(int stage, int chunk, bool grad)> transfer = [](int, int, bool) {
    return 0.0;
  };
};
// The step's streams timed with `costs` (receives wait for their message; everything but the
// passes and the transfers free): each stage's end and its time in passes; makespan the latest
// end. Throws UserError as pipeline_timeline() does.
struct PipeTiming {
  double makespan = 0;
  std::vector<double> end, busy;
};
PipeTiming pipeline_timing(const std::vector<PipeSchedule>& stages, int micro_batches,
                           int virtual_stages, const PipeCosts& costs);
// "0.273 of the step (formula (p-1)/(m+p-1) = 3/11 = 0.273)" ("(p-1)/(v*m+p-1)" when v > 1); with
// split backwards "0.111 of the step (formula (p-1)/(3m+p-1) = 3/27 = 0.111 with a split
// backward; 1F1B's (p-1)/(m+p-1) = 3/11 = 0.273)".
std::string pipe_bubble_text(const PipeTimeline& t, int micro_batches, int virtual_stages);
// "4 3 2 1"
std::string pipe_counts_text(const std::vector<int>& counts);

// Names for messages; "unknown" outside the enum.
const char* pipe_op_name(int32_t op);  // "load", "forward", "backward-input", ...
// "stage 1 of 4, 8 micro-batches, 1 virtual stage"
std::string pipe_layout_text(const triad_pipe_layout_v1& layout);
// "not interleaved (1 virtual stage)" / "any number of virtual stages (interleaved)" (triad-info)
std::string describe_capabilities(const triad_pipe_caps_v1& caps);

}  // namespace triad
