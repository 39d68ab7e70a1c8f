// Where a pipeline stage keeps its passes' stage-boundary tensors: a few slots shared by all of
// the stage's passes, each tensor holding one only while it is live.
//
// A pass (micro-batch, chunk) of a pipelined chunk has up to three tensors of one boundary
// (GPT::stage_bytes): its output (written by FORWARD, sent by SEND_ACTIVATION), the gradient of
// its output (received by RECV_GRAD) and the gradient of its input (sent by SEND_GRAD). Each is
// live from the first to the last instruction of its pass that touches it (boundary_touches);
// interval colouring over the stage's stream gives each live tensor a slot no other tensor holds
// in that interval. The engine (PipelineExecutor) and the memory plan call the same function.
#pragma once

#include <array>
#include <vector>

#include "triad/sdk/pipeline_v2.h"

namespace triad {

// The stage-boundary tensors of a pass, in the order of GPT::StageIO's last three.
enum class Boundary { output = 0, input_grad = 1, output_grad = 2 };
constexpr int kBoundaries = 3;

// What decides which instructions of a chunk's pass touch its boundary tensors.
struct BoundaryUse {
  bool pipelined = false;  // the chunk has a stage boundary (not embedding and head both)
  bool embedding = false;  // the first chunk: no gradient of its input to send
  bool head = false;       // the last chunk: its backward reads the output, receives no gradient
  // The split backward keeps the last block's output gradient in the output from
  // BACKWARD_INPUT to BACKWARD_WEIGHT (GPT::block_out_grad; not under full recomputation).
  bool split_keeps_output = false;
};

// Whether instruction `op` of a pass of a chunk used as `use` reads or writes tensor `b`.
bool boundary_touches(int op, const BoundaryUse& use, Boundary b);

struct BoundarySlots {
  int slots = 0;  // how many the stream holds at once
  // For each instruction: the slot of each boundary tensor of its pass live there, -1 if none.
  std::vector<std::array<int, kBoundaries>> at;
};

// The slots of a stage's stream; use[c]: chunk c's. Deterministic: the tensors in the order
// their intervals start (ties in Boundary order), each in the lowest slot free since before.
BoundarySlots boundary_slots(const std::vector<triad_pipe_instr_v1>& instrs,
                             const std::vector<BoundaryUse>& use);

}  // namespace triad
