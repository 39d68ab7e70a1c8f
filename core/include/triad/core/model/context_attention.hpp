// Attention over a context-parallel group (issue 32): the sequence of every micro-batch is split
// across the cp ranks of the group, and this component stands where the attention plugin stands
// when context_parallel_size > 1. It calls the plugin on pieces and moves tensors over the
// group's communicator:
//   ulysses (DeepSpeed-Ulysses): all-to-all q, k, v from sequence-split to head-split, the plugin
//           over the whole sequence for H/cp heads, all-to-all the output back. Needs cp | H.
//   ring    (ring attention, Megatron's context parallelism): this rank keeps its queries and the
//           key/value blocks travel the ring (cp - 1 steps); partial outputs merge by their
//           log-sum-exp. Causal masks are balanced: of 2cp equal chunks, rank r holds chunks r
//           and 2cp-1-r. Needs 2cp | T.
//
// Layout contract (what the model hands in, and the positions it must use):
//   q, k, v, out, dout, dq, dk, dv: (B, H, T/cp, D), any strides on B, H, T (as the plugin ABI),
//   holding this rank's T/cp tokens in the order context_token_positions() lists them:
//     ulysses: the contiguous block [r T/cp, (r+1) T/cp);
//     ring:    chunk r, then chunk 2cp-1-r, chunks of C = T/(2cp) tokens:
//              [r C, (r+1) C) followed by [(2cp-1-r) C, (2cp-r) C).
//   Learned and rotary positions must follow these true token offsets.
//   lse: (B, H, T/cp) fp32 contiguous, written by forward and handed back unchanged to backward.
//     Its contents are the component's: under ring it is the lse of this rank's tokens (in the
//     order above); under ulysses it holds the head-split lse, (B, H/cp, T) in the same number
//     of floats, so neither direction moves lse over the network.
//   H is this rank's heads (under tensor parallelism H/tp); causal or not as the args say; the
//   args' workspace fields are ignored (the component owns its workspace and the plugin's).
//   Tensors are the activations' dtype on the component's device (lse fp32 there too): the
//   layout moves and the lse merge are the device's copy_rows and attention_merge, and the
//   transport moves device memory (staged through host buffers where it reads host memory
//   only). Ring backward adds each pair's dq, dk, dv into the gradients in that dtype.
//
// Traffic (counted per call, in bytes this rank hands to the transport; h = H D, s = T, b = the
// call's batch, e = element bytes; formulas in expected_context_traffic()):
//   ulysses forward : 4 all-to-alls (q, k, v, out) of b s h / cp elements each
//   ulysses backward: 8 all-to-alls: q, k, v, out, dout to head-split (nothing head-split is
//                     kept between forward and backward), dq, dk, dv back
//   ring forward    : cp - 1 sends of one k/v block (k and v of T/cp tokens: 2 b s h / cp)
//   ring backward   : cp - 1 k/v blocks again, and cp dk/dv blocks (cp - 1 hops around the ring
//                     with their accumulating gradients, then the last hop home to their owner)
//
// Workspace (allocated once in the constructor for the largest micro-batch; with
// N = max_batch H (T/cp) D elements of the activations' size e):
//   ulysses: 10 N e  (head-split q, k, v, out, dout, dq, dk, dv: 8 N; all-to-all send and
//                     receive staging: 2 N)
//   ring   : L + 9.5 N e  (lse of a pair / of both query chunks: max_batch H T/cp floats,
//                     first, L bytes with the padding to kContextLseAlign that keeps the blocks
//                     after it aligned for the plugins' vector loads; k/v block and the one
//                     arriving: 4 N; dk/dv block and the one arriving: 4 N; a pair's partial
//                     out, or its dq, dk, dv: 1.5 N)
//   plus the plugin's own workspace for context_plugin_shape() (max of forward and backward).
// context_workspace_bytes() gives the first term, workspace_bytes() the total.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "triad/core/device/device.hpp"
#include "triad/sdk/attention_v1.h"

namespace triad {

class AttentionBackend;
class Communicator;
namespace detail {
struct ContextView;  // a (B, H, T, D) strided view (context_attention.cpp)
}  // namespace detail

enum class ContextMethod { ulysses, ring };

const char* context_method_name(ContextMethod m);
// "ulysses" or "ring"; throws UserError naming the value and the methods.
ContextMethod parse_context_method(const std::string& name);

// One layer's attention as this rank sees it under context parallelism.
struct ContextShape {
  int64_t max_batch = 0;  // the largest micro-batch any call will bring
  int64_t heads = 0;      // H: this rank's heads (H/tp under tensor parallelism)
  int64_t seq_len = 0;    // T: the whole sequence, before the context-parallel split
  int64_t head_dim = 0;   // D
};

// Throws UserError naming the numbers when cp cannot split this shape for the method (ulysses:
// cp | H and cp | T; ring: 2cp | T).
void check_context_shape(ContextMethod m, const ContextShape& s, int cp);

// The true positions (0..T-1) of this rank's T/cp tokens, in the order the component expects
// them (see the layout contract above).
std::vector<int64_t> context_token_positions(ContextMethod m, int64_t seq_len, int cp, int rank);

// The shape of every plugin call the component makes (ulysses: H/cp heads over T tokens; ring:
// H heads over one chunk of T/(2cp) tokens), at max_batch: what its workspace is sized for.
triad_attention_shape_v1 context_plugin_shape(ContextMethod m, const ContextShape& s, int cp,
                                              int causal, DLDataType dtype, DLDevice device);

// The ring's lse region: `rows` floats rounded up to kContextLseAlign bytes (L above).
inline constexpr size_t kContextLseAlign = 256;
constexpr size_t context_lse_bytes(size_t rows) {
  return (rows * sizeof(float) + kContextLseAlign - 1) / kContextLseAlign * kContextLseAlign;
}

// The component's own workspace in bytes (without the plugin's), as documented above, for
// activations of elem_bytes each.
size_t context_workspace_bytes(ContextMethod m, const ContextShape& s, int cp, size_t elem_bytes);

// Bytes this rank handed to the transport and how many operations carried them: all-to-alls
// (the bytes of this rank's send buffer, the b s h / cp of the formula) or sends.
struct ContextTraffic {
  uint64_t bytes = 0;
  uint64_t operations = 0;
};

// Issue 32's formulas for one call of `batch` sequences, per layer: what the counters of one
// forward (backward = false) or backward must equal exactly.
ContextTraffic expected_context_traffic(ContextMethod m, bool backward, const ContextShape& s,
                                        int cp, int64_t batch, size_t elem_bytes);

class ContextAttention {
 public:
  // The communicator is the context-parallel group (its size is cp, its rank this rank's place
  // in the sequence); attention, group and device must outlive this object. act: the
  // activations' dtype (of every tensor the calls bring, lse aside). Every wait gives
  // up after `timeout` with a TransportError naming the transport. `causal`: the mask the
  // calls will ask for (the plugin's support and workspace are checked for it; ring's
  // off-diagonal pairs run unmasked). Throws UserError for a shape the method cannot split or
  // the plugin cannot run.
  ContextAttention(ContextMethod method, AttentionBackend& attention, Communicator& group,
                   Device& dev, DType act, const ContextShape& shape, int causal,
                   std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ContextAttention(const ContextAttention&) = delete;
  ContextAttention& operator=(const ContextAttention&) = delete;

  ContextMethod method() const { return method_; }
  // This rank's token positions (context_token_positions for this group).
  std::vector<int64_t> token_positions() const;

  // Views as in the layout contract, batch <= max_batch; causal and scale from args.
  void forward(const triad_attention_fwd_args_v1& args);
  void backward(const triad_attention_bwd_args_v1& args);

  // Summed over every call since construction or reset_traffic().
  const ContextTraffic& forward_traffic() const { return fwd_traffic_; }
  const ContextTraffic& backward_traffic() const { return bwd_traffic_; }
  void reset_traffic() { fwd_traffic_ = bwd_traffic_ = {}; }
  void set_traffic(const ContextTraffic& fwd, const ContextTraffic& bwd) {
    fwd_traffic_ = fwd;
    bwd_traffic_ = bwd;
  }

  // Everything allocated: the component's workspace and the plugin's.
  size_t workspace_bytes() const;

  // Called right after each ring step's send and receive are posted, before the block's
  // attention runs beside them: a transport that holds point-to-point work until asked (nccl)
  // starts it there.
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }

 private:
  using View = detail::ContextView;
  void ulysses_forward(const triad_attention_fwd_args_v1& args, int64_t B);
  void ulysses_backward(const triad_attention_bwd_args_v1& args, int64_t B);
  void ring_forward(const triad_attention_fwd_args_v1& args, int64_t B);
  void ring_backward(const triad_attention_bwd_args_v1& args, int64_t B);
  // Sequence-split x (B, H, T/cp, D) -> head-split (B, H/cp, T, D) in `head`, and back: one
  // all-to-all each, counted in t.
  void to_heads(const View& x, void* head, ContextTraffic& t);
  void to_sequence(void* head, const View& x, ContextTraffic& t);
  void all_to_all(const void* send, void* recv, int64_t block, ContextTraffic& t);
  // The workspace `elems` activation elements in (ulysses' layout).
  void* work(int64_t elems) const;

  ContextMethod method_;
  AttentionBackend& attention_;
  Communicator& group_;
  Device& dev_;
  DType act_;
  ContextShape shape_;
  int cp_, rank_;
  std::chrono::milliseconds timeout_;
  Buffer<uint8_t> work_;
  Buffer<uint8_t> plugin_work_;
  ContextTraffic fwd_traffic_, bwd_traffic_;
  std::function<void()> progress_;
};

}  // namespace triad
