#include "triad/core/train/pipeline_executor.hpp"

#include <stdexcept>
#include <thread>
#include <utility>

#include "triad/core/error.hpp"
#include "triad/core/train/trace.hpp"
#include "triad/sdk/pipeline_v2.h"

namespace triad {

PipelineExecutor::PipelineExecutor(std::vector<GPT*> chunks, const Place& place, Device& device,
                                   DType act, Communicator* pipe, std::chrono::milliseconds timeout,
                                   float grad_scale, std::string schedule_name)
    : chunks_(std::move(chunks)),
      place_(place),
      device_(device),
      act_(act),
      pipe_(pipe),
      timeout_(timeout),
      base_grad_scale_(grad_scale),
      grad_scale_(grad_scale),
      schedule_name_(std::move(schedule_name)) {
  const size_t slots = size_t(place.chunks) * size_t(place.buffers);
  inputs_.assign(slots, std::vector<int32_t>(size_t(place.micro_batch) * place.seq_length));
  targets_ = inputs_;
  for (const GPT* c : chunks_) boundary_use_.push_back(c->boundary_use());
}

// Where a chunk's activations go and its gradients come from: the next / previous virtual stage
// (c * pp + stage ± 1); tags name the receiver's micro-batch and chunk.
std::pair<int, int> PipelineExecutor::next_stage(int c) const {
  const int pp = place_.stages, me = place_.stage;
  return {(me + 1) % pp, c + (me == pp - 1)};
}
std::pair<int, int> PipelineExecutor::prev_stage(int c) const {
  const int pp = place_.stages, me = place_.stage;
  return {(me + pp - 1) % pp, c - (me == 0)};
}
uint32_t PipelineExecutor::tag_of(int mb, int chunk, int kind) const {
  return place_.tagged ? uint32_t((mb * place_.chunks + chunk) * 2 + kind) : 0;
}

void PipelineExecutor::peer_wait(TransportRequest r, const char* what, int peer) {
  try {
    r.wait(timeout_);
  } catch (const TransportError& e) {
    throw UserError(std::string("pipeline stage ") + std::to_string(place_.stage) + ": " + what +
                    " pipeline stage " + std::to_string(peer) + " failed: " + e.what());
  }
}

void PipelineExecutor::recycle_sends() {
  for (size_t k = 0; k < inflight_.size();) {
    if (inflight_[k].req.test()) {
      spare_.push_back(std::move(inflight_[k].data));
      inflight_.erase(inflight_.begin() + long(k));
    } else {
      ++k;
    }
  }
}

void PipelineExecutor::send(const void* src, size_t elems, int to, uint32_t tag) {
  const size_t bytes = elems * dtype_bytes(act_);
  recycle_sends();
  if (spare_.empty() && inflight_.empty())
    throw std::logic_error(
        "PipelineExecutor::send: no staging copies (Place::send_copies 0 for a "
        "stage that sends)");
  // Every copy in flight: at least one of them is a send whose receive the peer has posted, which
  // finishes with the transport's progress alone.
  if (spare_.empty()) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    do {
      std::this_thread::yield();
      recycle_sends();
      if (spare_.empty() && std::chrono::steady_clock::now() > deadline)
        throw UserError("pipeline stage " + std::to_string(place_.stage) + ": none of its " +
                        std::to_string(inflight_.size()) + " sends in flight finished within " +
                        std::to_string(timeout_.count()) + " ms; is a peer stage stuck?");
    } while (spare_.empty());
  }
  Buffer<uint8_t> copy = std::move(spare_.back());
  spare_.pop_back();
  device_.copy(copy.data(), src, bytes);
  device_.synchronize();  // the copy is complete before the transport reads it
  inflight_.push_back(
      {pipe_->send(copy.data(), elems, dl_dtype(act_), to, tag, device_.dl_device()),
       std::move(copy)});
}

void PipelineExecutor::drain_sends() {
  for (auto& f : inflight_) peer_wait(std::move(f.req), "a send to", place_.stage);
  for (auto& f : inflight_) spare_.push_back(std::move(f.data));
  inflight_.clear();
}

PipelineExecutor::Work PipelineExecutor::run(const std::vector<triad_pipe_instr_v1>& instrs,
                                             DataLoader& data, int64_t batch, StepHooks* hooks,
                                             uint32_t tag_base, Work so_far) {
  // Each chunk's last BACKWARD or BACKWARD_WEIGHT of the step, the last to write its gradients
  // (the model sums sequence parallelism's partial gradients there; the hooks may hand the data
  // plugin finished ranges then).
  const bool validation = tag_base != 0;
  if (!place_.tagged) tag_base = 0;  // every message tag 0, in the order posted
  std::vector<size_t> last_backward(size_t(place_.chunks), 0);
  for (size_t i = 0; i < instrs.size(); ++i)
    if (instrs[i].op == TRIAD_PIPE_BACKWARD || instrs[i].op == TRIAD_PIPE_BACKWARD_WEIGHT)
      last_backward[size_t(instrs[i].chunk)] = i;
  // A forward or backward's compute time; with pipeline stages its device work is complete
  // before the stage sends its output on.
  Work work = so_far;
  const auto compute_ms = [&](const auto& compute) {
    const auto t0 = std::chrono::steady_clock::now();
    compute();
    if (place_.stages > 1) device_.synchronize();
    work.last_pass_end = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(work.last_pass_end - t0).count();
  };
  const int B = place_.micro_batch;
  const size_t io = chunks_[0]->stage_bytes(B) / dtype_bytes(act_);  // elements of a boundary
  if (!copies_made_) {
    for (int k = 0; k < place_.send_copies; ++k)
      spare_.emplace_back(device_, chunks_[0]->stage_bytes(B), "pipeline send buffers");
    copies_made_ = true;
  }
  const auto step_wide = [&](const triad_pipe_instr_v1& in) -> StepHooks& {
    if (!hooks)
      throw std::logic_error("instruction " + std::to_string(in.op) +
                             " in a stream run without step hooks");
    return *hooks;
  };
  // Where each pass's stage-boundary tensors live while they do (the memory plan's colouring).
  const BoundarySlots boundaries = boundary_slots(instrs, boundary_use_);
  for (size_t i = 0; i < instrs.size(); ++i) {
    const triad_pipe_instr_v1& in = instrs[i];
    const int mb = in.micro_batch, buf = in.buffer, c = in.chunk;
    const size_t slot = size_t(c) * size_t(place_.buffers) + size_t(buf);
    // Step-wide instructions name no chunk.
    const bool of_chunk = c >= 0 && size_t(c) < chunks_.size();
    GPT& chunk = *chunks_[of_chunk ? size_t(c) : 0];
    if (of_chunk && buf >= 0 && buf < place_.buffers) chunk.bind_boundaries(buf, boundaries.at[i]);
    if (StepTrace* trace = active_trace()) trace->set_micro_batch(mb);
    switch (in.op) {
      case TRIAD_PIPE_LOAD_MICRO_BATCH: {
        const TraceSpan span(TraceKind::data, "load micro-batch");
        data.micro_batch(batch, mb, inputs_[slot].data(), targets_[slot].data());
        break;
      }
      case TRIAD_PIPE_FORWARD:
        work.busy_ms += compute_ms([&] {
          work.loss += chunk.forward(inputs_[slot].data(), targets_[slot].data(), B, buf);
        });
        break;
      case TRIAD_PIPE_SEND_ACTIVATION: {
        const auto [to, to_chunk] = next_stage(c);
        send(chunk.stage_io(buf).output, io, to, tag_base + tag_of(mb, to_chunk, 0));
        break;
      }
      case TRIAD_PIPE_RECV_ACTIVATION:
        peer_wait(
            pipe_->recv(chunk.stage_io(buf).input, io, dl_dtype(act_), prev_stage(c).first,
                        tag_base + tag_of(mb, c, 0), device_.dl_device()),
            validation ? "receiving a validation activation from" : "receiving an activation from",
            prev_stage(c).first);
        break;
      case TRIAD_PIPE_RECV_GRAD:
        peer_wait(
            pipe_->recv(chunk.stage_io(buf).output_grad, io, dl_dtype(act_), next_stage(c).first,
                        tag_base + tag_of(mb, c, 1), device_.dl_device()),
            "receiving a gradient from", next_stage(c).first);
        break;
      case TRIAD_PIPE_BACKWARD: {
        const bool last = i == last_backward[size_t(c)];
        const GPT::GradsReady ready = step_wide(in).grads_ready(last);
        work.busy_ms += compute_ms([&] { chunk.backward(grad_scale_, ready, last, buf); });
        break;
      }
      case TRIAD_PIPE_BACKWARD_INPUT:
        work.busy_ms += compute_ms([&] { chunk.backward_input(grad_scale_, buf); });
        break;
      case TRIAD_PIPE_BACKWARD_WEIGHT: {
        const bool last = i == last_backward[size_t(c)];
        const GPT::GradsReady ready = step_wide(in).grads_ready(last);
        work.busy_ms += compute_ms([&] { chunk.backward_weight(ready, last, buf); });
        break;
      }
      case TRIAD_PIPE_SEND_GRAD: {
        const auto [to, to_chunk] = prev_stage(c);
        send(chunk.stage_io(buf).input_grad, io, to, tag_base + tag_of(mb, to_chunk, 1));
        break;
      }
      case TRIAD_PIPE_REDUCE_TIED_GRADS:
        step_wide(in).reduce_tied_grads();
        break;
      case TRIAD_PIPE_REDUCE_GRADS:
        drain_sends();
        step_wide(in).reduce_grads();
        break;
      case TRIAD_PIPE_OPTIMIZER_STEP: {
        const TraceSpan span(TraceKind::optimizer, "optimizer step");
        step_wide(in).optimizer_step();
        break;
      }
      default:
        throw UserError("pipeline plugin '" + schedule_name_ + "' sent instruction " +
                        std::to_string(in.op) + ", which this executor does not know");
    }
  }
  return work;
}

std::vector<triad_pipe_instr_v1> forward_only_stream(int stage, int stages, int chunks,
                                                     int micro_batches) {
  std::vector<triad_pipe_instr_v1> out;
  for (int mb = 0; mb < micro_batches; ++mb)
    for (int c = 0; c < chunks; ++c) {
      const bool first = stage == 0 && c == 0, last = stage == stages - 1 && c == chunks - 1;
      if (first || last) out.push_back({TRIAD_PIPE_LOAD_MICRO_BATCH, mb, 0, c});
      if (!first) out.push_back({TRIAD_PIPE_RECV_ACTIVATION, mb, 0, c});
      out.push_back({TRIAD_PIPE_FORWARD, mb, 0, c});
      if (!last) out.push_back({TRIAD_PIPE_SEND_ACTIVATION, mb, 0, c});
    }
  return out;
}

}  // namespace triad
