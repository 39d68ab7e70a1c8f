// C++ layer for pipeline-schedule plugins: derive from PipelinePlugin, then
//   TRIAD_PIPELINE_PLUGIN(MySchedule, "myname", "1.0", "what it is", TRIAD_NO_PARAMS)
// The adapter checks every call before it reaches the plugin: a malformed layout (stages < 1, a
// stage outside 0..stages-1, micro_batches or virtual_stages < 1) is TRIAD_ERR_INVALID, and more
// virtual stages than capabilities() allow is TRIAD_ERR_UNSUPPORTED with a message saying so.
// num_buffers() and schedule() therefore only see layouts the plugin declared.
//
// PipeStream writes a stage's stream from the order of its forward and backward passes alone:
// the loads, receives and sends around each pass and the buffer of each micro-batch follow.
// Plugins built with this layer are of pipeline ABI version 2 (pipeline_v2.h): their streams may
// split a backward into its input and weight halves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "triad/sdk/pipeline_v2.h"
#include "triad/sdk/plugin.hpp"

namespace triad::sdk {

class PipelinePlugin {
 public:
  virtual ~PipelinePlugin() = default;
  virtual triad_pipe_caps_v1 capabilities() const = 0;
  // The stream of one training step for layout.stage (the TRIAD_PIPE_* instructions in order).
  virtual std::vector<triad_pipe_instr_v1> schedule(const triad_pipe_layout_v1& layout) const = 0;
  // Activation buffers that stream uses; by default one more than the largest buffer index in it.
  virtual int32_t num_buffers(const triad_pipe_layout_v1& layout) const {
    int32_t most = 0;
    for (const triad_pipe_instr_v1& i : schedule(layout)) most = std::max(most, i.buffer + 1);
    return most;
  }
};

inline std::string count_text(int32_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "stage 1 of 4, 8 micro-batches, 1 virtual stage", as the core writes a layout.
inline std::string layout_text(const triad_pipe_layout_v1& l) {
  return "stage " + std::to_string(l.stage) + " of " + std::to_string(l.stages) + ", " +
         count_text(l.micro_batches, "micro-batch", "micro-batches") + ", " +
         count_text(l.virtual_stages, "virtual stage", "virtual stages");
}

// Throws invalid(...) for a malformed layout and unsupported(...) when `caps` exclude it.
inline void require_layout(const triad_pipe_caps_v1& caps, const triad_pipe_layout_v1& l) {
  if (l.stages < 1 || l.stage < 0 || l.stage >= l.stages || l.micro_batches < 1 ||
      l.virtual_stages < 1)
    throw invalid("malformed layout (" + layout_text(l) +
                  "): stages, micro_batches and virtual_stages are at least 1 and stage is in "
                  "0..stages-1");
  if (caps.max_virtual_stages > 0 && l.virtual_stages > caps.max_virtual_stages)
    throw unsupported("no schedule for " + layout_text(l) + ": it schedules up to " +
                      count_text(caps.max_virtual_stages, "virtual stage", "virtual stages"));
}

// Model chunk `chunk` of layout.stage is global virtual stage chunk * stages + stage; the first
// one reads the tokens, the last one computes the loss.
inline bool first_virtual(const triad_pipe_layout_v1& l, int32_t chunk) {
  return l.stage == 0 && chunk == 0;
}
inline bool last_virtual(const triad_pipe_layout_v1& l, int32_t chunk) {
  return l.stage == l.stages - 1 && chunk == l.virtual_stages - 1;
}

// One stage's stream, written pass by pass:
//   forward(mb, c)   [LOAD] [RECV_ACTIVATION] FORWARD [SEND_ACTIVATION] in the lowest free buffer
//   backward(mb, c)  [RECV_GRAD] BACKWARD [SEND_GRAD] from the buffer its forward used, which is
//                    free again after it
//   backward_input(mb, c)   [RECV_GRAD] BACKWARD_INPUT [SEND_GRAD]: the backward's first half
//                    (what the previous stage waits for), in the buffer its forward used, which
//                    stays busy
//   backward_weight(mb, c)  BACKWARD_WEIGHT: the second half, after backward_input(mb, c) and
//                    before finish(); the buffer is free again after it
//   finish()         REDUCE_TIED_GRADS, REDUCE_GRADS, OPTIMIZER_STEP; returns the stream
// Receives and sends are left out where no (virtual) stage is before or after. Every stage loads
// each micro-batch once, before the forward that needs it: the first stage before chunk 0's
// (tokens), the last stage before chunk v-1's (targets), the others before chunk 0's (the
// executor loads what the stage needs); a one-stage pipeline with v > 1 loads twice.
class PipeStream {
 public:
  explicit PipeStream(const triad_pipe_layout_v1& layout) : l_(layout) {}

  void forward(int32_t mb, int32_t chunk = 0) {
    int32_t b = 0;
    while (b < int32_t(busy_.size()) && busy_[size_t(b)]) ++b;
    if (b == int32_t(busy_.size())) busy_.push_back(false);
    busy_[size_t(b)] = true;
    peak_ = std::max(peak_, b + 1);
    if (!buffer_.emplace(std::make_pair(mb, chunk), b).second)
      throw std::logic_error("PipeStream: a second forward of micro-batch " + std::to_string(mb));
    if (loads(chunk)) emit(TRIAD_PIPE_LOAD_MICRO_BATCH, mb, b, chunk);
    if (!first_virtual(l_, chunk)) emit(TRIAD_PIPE_RECV_ACTIVATION, mb, b, chunk);
    emit(TRIAD_PIPE_FORWARD, mb, b, chunk);
    if (!last_virtual(l_, chunk)) emit(TRIAD_PIPE_SEND_ACTIVATION, mb, b, chunk);
  }

  void backward(int32_t mb, int32_t chunk = 0) {
    const int32_t b = held(mb, chunk, "backward", false);
    emit_backward(TRIAD_PIPE_BACKWARD, mb, chunk);
    release(mb, chunk, b);
  }

  void backward_input(int32_t mb, int32_t chunk = 0) {
    held(mb, chunk, "backward_input", false);
    split_.insert({mb, chunk});
    emit_backward(TRIAD_PIPE_BACKWARD_INPUT, mb, chunk);
  }

  void backward_weight(int32_t mb, int32_t chunk = 0) {
    const int32_t b = held(mb, chunk, "backward_weight", true);
    split_.erase({mb, chunk});
    release(mb, chunk, b);
    emit(TRIAD_PIPE_BACKWARD_WEIGHT, mb, b, chunk);
  }

  std::vector<triad_pipe_instr_v1> finish() {
    for (int32_t op :
         {TRIAD_PIPE_REDUCE_TIED_GRADS, TRIAD_PIPE_REDUCE_GRADS, TRIAD_PIPE_OPTIMIZER_STEP})
      emit(op, -1, -1, 0);
    return std::move(out_);
  }

  // The most buffers in use at once so far.
  int32_t peak_buffers() const { return peak_; }

 private:
  // The buffer (mb, chunk) holds; throws unless its forward ran and its backward_input did
  // (`after_input`) or did not.
  int32_t held(int32_t mb, int32_t chunk, const char* what, bool after_input) const {
    const std::string pass =
        " of micro-batch " + std::to_string(mb) + " chunk " + std::to_string(chunk);
    auto it = buffer_.find({mb, chunk});
    if (it == buffer_.end())
      throw std::logic_error(std::string("PipeStream: ") + what + pass + " before its forward");
    if (split_.count({mb, chunk}) != (after_input ? 1u : 0u))
      throw std::logic_error(
          std::string("PipeStream: ") + what + pass +
          (after_input ? " before its backward_input" : " after its backward_input"));
    return it->second;
  }
  void release(int32_t mb, int32_t chunk, int32_t b) {
    buffer_.erase({mb, chunk});
    busy_[size_t(b)] = false;
  }
  // [RECV_GRAD] op [SEND_GRAD] in the buffer of (mb, chunk).
  void emit_backward(int32_t op, int32_t mb, int32_t chunk) {
    const int32_t b = buffer_.at({mb, chunk});
    if (!last_virtual(l_, chunk)) emit(TRIAD_PIPE_RECV_GRAD, mb, b, chunk);
    emit(op, mb, b, chunk);
    if (!first_virtual(l_, chunk)) emit(TRIAD_PIPE_SEND_GRAD, mb, b, chunk);
  }
  bool loads(int32_t chunk) const {
    const bool first = l_.stage == 0, last = l_.stage == l_.stages - 1;
    return (first && chunk == 0) || (last && chunk == l_.virtual_stages - 1) ||
           (!first && !last && chunk == 0);
  }
  void emit(int32_t op, int32_t mb, int32_t b, int32_t chunk) {
    out_.push_back({op, mb, b, chunk});
  }

  triad_pipe_layout_v1 l_;
  std::vector<triad_pipe_instr_v1> out_;
  std::vector<bool> busy_;
  std::map<std::pair<int32_t, int32_t>, int32_t> buffer_;  // (micro-batch, chunk) -> buffer
  std::set<std::pair<int32_t, int32_t>> split_;  // backward_input ran, backward_weight has not
  int32_t peak_ = 0;
};

template <class Impl>
struct PipelineAdapter {
  static const triad_pipe_layout_v1& checked(const Impl& p, const triad_pipe_layout_v1* l) {
    if (!l) throw invalid("layout is null");
    require_layout(p.capabilities(), *l);
    return *l;
  }
  static int capabilities(void* h, triad_pipe_caps_v1* caps) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!caps) throw invalid("caps is null");
      *caps = p.capabilities();
    });
  }
  static int num_buffers(void* h, const triad_pipe_layout_v1* layout, int32_t* buffers) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!buffers) throw invalid("buffers is null");
      *buffers = p.num_buffers(checked(p, layout));
    });
  }
  static int schedule(void* h, const triad_pipe_layout_v1* layout, triad_pipe_instr_v1* out,
                      size_t capacity, size_t* count) {
    return guarded<Impl>(h, [&](Impl& p) {
      if (!count) throw invalid("count is null");
      if (capacity > 0 && !out)
        throw invalid("out is null with capacity " + std::to_string(capacity));
      const std::vector<triad_pipe_instr_v1> s = p.schedule(checked(p, layout));
      std::copy_n(s.begin(), std::min(capacity, s.size()), out);
      *count = s.size();
    });
  }
  static constexpr triad_pipeline_ops_v1 ops = {&capabilities, &num_buffers, &schedule};
};

template <>
struct KindTraits<triad_pipeline_ops_v1> {
  static constexpr std::string_view kind = "pipeline";
  static constexpr uint32_t abi_version = TRIAD_PIPELINE_ABI_VERSION;
};

}  // namespace triad::sdk

// Impl must derive from PipelinePlugin and be constructible from
// (triad::sdk::Services, triad::sdk::Params).
#define TRIAD_PIPELINE_PLUGIN(Impl, NAME, VERSION, DESC, PARAMS)        \
  TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, "pipeline", NAME, VERSION, DESC, \
                                 &::triad::sdk::PipelineAdapter<Impl>::ops, PARAMS)
