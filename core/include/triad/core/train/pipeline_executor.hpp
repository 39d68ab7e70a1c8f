// Runs a pipeline plugin's instruction stream for this stage (DeepSpeed's _INSTRUCTION_MAP): one
// dispatch per instruction, the buffered send pool, receive waits naming the peer stage and the
// tag arithmetic of interleaved chunks. Training runs the schedule's stream; evaluation runs the
// forward-only stream of forward_only_stream() through the same dispatch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "triad/core/data/data.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/model/model.hpp"
#include "triad/sdk/pipeline_v1.h"

namespace triad {

// What the executor asks of the run at the instructions that are the data plugin's and the
// optimizer's.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // The callback a BACKWARD hands finished gradient ranges to (may be empty: none as they go);
  // last: the chunk's last BACKWARD (or BACKWARD_WEIGHT) of the step.
  virtual GPT::GradsReady grads_ready(bool last) = 0;
  virtual void reduce_tied_grads() = 0;
  // After every send of the step has completed.
  virtual void reduce_grads() = 0;
  virtual void optimizer_step() = 0;
};

// What running a stream measured.
struct StreamWork {
  double loss = 0;     // the sum of the FORWARDs' losses (the last stage's; 0 elsewhere)
  double busy_ms = 0;  // this stage's forward and backward compute
  // When this stage's last forward or backward ended: what follows (the reductions, the
  // optimizer, the loss's agreement) is not the schedule's, which m/(m+p-1) models.
  std::chrono::steady_clock::time_point last_pass_end{};
};

class PipelineExecutor {
 public:
  struct Place {
    int stage = 0, stages = 1, chunks = 1;  // chunks: model chunks per stage (interleaving)
    int buffers = 1;                        // activation buffers per chunk
    int micro_batch = 1, seq_length = 1;    // B, T of each micro-batch
    int send_copies = 0;                    // staging copies for sends (pipeline_send_copies)
    // The transport matches messages by tag; false: every message tag 0, matched in the order
    // posted (the streams checked by pipeline_order_mismatch).
    bool tagged = true;
  };
  // chunks: this stage's model chunks; pipe: the pipeline-parallel communicator (null with one
  // stage); grad_scale: what each BACKWARD scales the loss gradient by.
  PipelineExecutor(std::vector<GPT*> chunks, const Place& place, Device& device, DType act,
                   Communicator* pipe, std::chrono::milliseconds timeout, float grad_scale,
                   std::string schedule_name);

  using Work = StreamWork;
  // Runs `instrs`; LOAD reads micro-batches of global batch `batch` from `data`. tag_base keeps
  // one stream's messages apart from another's (evaluation's from training's). hooks may be
  // null for a stream without the step-wide instructions. The sums go on from `so_far` (several
  // streams add up as one).
  Work run(const std::vector<triad_pipe_instr_v1>& instrs, DataLoader& data, int64_t batch,
           StepHooks* hooks, uint32_t tag_base = 0, Work so_far = {});
  // The loss scale of the next BACKWARDs: grad_scale times `s` (fp16's loss scaling; 1 otherwise).
  void set_loss_scale(double s) { grad_scale_ = float(double(base_grad_scale_) * s); }
  // Waits for every send in flight (REDUCE_GRADS does this within a step).
  void drain_sends();

 private:
  void send(const void* src, size_t elems, int to, uint32_t tag);
  void peer_wait(TransportRequest r, const char* what, int peer);
  std::pair<int, int> next_stage(int c) const;  // (stage, chunk) a chunk's activations go to
  std::pair<int, int> prev_stage(int c) const;  // and its gradients come from
  uint32_t tag_of(int mb, int chunk, int kind) const;

  struct PendingSend {
    TransportRequest req;
    Buffer<uint8_t> data;
  };
  std::vector<GPT*> chunks_;
  Place place_;
  Device& device_;
  DType act_;
  Communicator* pipe_;
  std::chrono::milliseconds timeout_;
  float base_grad_scale_, grad_scale_;
  std::string schedule_name_;
  std::vector<BoundaryUse> boundary_use_;  // per chunk (boundary_slots)
  // Tokens of each activation buffer's micro-batch (host), indexed by chunk * buffers + buffer.
  std::vector<std::vector<int32_t>> inputs_, targets_;
  // Takes the copies of finished sends back into spare_.
  void recycle_sends();
  // Sends in flight: each carries a copy of what it sends, so the activation buffer can be
  // reused at once (the schedules are deadlock-free only with buffered sends). The copies are
  // Place::send_copies buffers made at the first stream (so memory does not depend on when sends
  // finish); a send that finds none free waits for one, which pipeline_send_copies makes safe.
  std::vector<PendingSend> inflight_;
  std::vector<Buffer<uint8_t>> spare_;
  bool copies_made_ = false;
};

// Evaluation's stream for one global batch: every micro-batch through every chunk of this stage,
// forward only, in buffer 0 (loaded on the first and last virtual stage, received elsewhere).
std::vector<triad_pipe_instr_v1> forward_only_stream(int stage, int stages, int chunks,
                                                     int micro_batches);

}  // namespace triad
