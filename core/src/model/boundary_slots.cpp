#include "triad/core/model/boundary_slots.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace triad {

// Evidence in the engine: GPT::forward writes the output (the last block's, or a copy of the
// input without blocks); PipelineExecutor::send copies it to a staging buffer at
// SEND_ACTIVATION, so nothing reads it after that. The head reads it as ln_f's input in the
// backward's first half. GPT::backward_pass copies the received gradient of the output into
// dres_ at its start and writes the gradient of the input at its end; SEND_GRAD copies that.
// BACKWARD_WEIGHT reads neither gradient, only what block_out_grad() left in the output.
bool boundary_touches(int op, const BoundaryUse& use, Boundary b) {
  if (!use.pipelined) return false;
  const bool backward = op == TRIAD_PIPE_BACKWARD || op == TRIAD_PIPE_BACKWARD_INPUT;
  switch (b) {
    case Boundary::output:
      return op == TRIAD_PIPE_FORWARD || op == TRIAD_PIPE_SEND_ACTIVATION ||
             (backward && use.head) ||
             (use.split_keeps_output &&
              (op == TRIAD_PIPE_BACKWARD_INPUT || op == TRIAD_PIPE_BACKWARD_WEIGHT));
    case Boundary::input_grad:
      return op == TRIAD_PIPE_SEND_GRAD || (backward && !use.embedding);
    case Boundary::output_grad:
      return op == TRIAD_PIPE_RECV_GRAD || (backward && !use.head);
  }
  return false;
}

BoundarySlots boundary_slots(const std::vector<triad_pipe_instr_v1>& instrs,
                             const std::vector<BoundaryUse>& use) {
  // Each tensor's interval: (chunk, micro-batch, boundary) -> first and last instruction.
  using Key = std::tuple<int, int, int>;
  std::map<Key, std::pair<size_t, size_t>> live;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const triad_pipe_instr_v1& in = instrs[i];
    if (in.chunk < 0 || size_t(in.chunk) >= use.size()) continue;  // step-wide
    for (int b = 0; b < kBoundaries; ++b) {
      if (!boundary_touches(in.op, use[size_t(in.chunk)], Boundary(b))) continue;
      const auto [it, fresh] = live.try_emplace(Key{in.chunk, in.micro_batch, b}, i, i);
      if (!fresh) it->second.second = i;
    }
  }
  // Interval colouring in the order of the starts: the lowest slot whose last tensor ended
  // before this one starts (two tensors of one instruction never share).
  std::vector<std::pair<std::pair<size_t, int>, Key>> order;
  for (const auto& [key, span] : live) order.push_back({{span.first, std::get<2>(key)}, key});
  std::sort(order.begin(), order.end());
  BoundarySlots out;
  out.at.assign(instrs.size(), {-1, -1, -1});
  std::vector<size_t> busy_until;  // per slot: the last instruction of its current tensor
  for (const auto& [start, key] : order) {
    const auto [first, last] = live.at(key);
    size_t slot = 0;
    while (slot < busy_until.size() && busy_until[slot] >= first) ++slot;
    if (slot == busy_until.size()) busy_until.push_back(0);
    busy_until[slot] = last;
    for (size_t i = first; i <= last; ++i)
      if (instrs[i].chunk == std::get<0>(key) && instrs[i].micro_batch == std::get<1>(key))
        out.at[i][size_t(std::get<2>(key))] = int(slot);
  }
  out.slots = int(busy_until.size());
  return out;
}

}  // namespace triad
