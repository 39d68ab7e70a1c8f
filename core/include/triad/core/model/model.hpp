// GPT-2 (pre-LN blocks, GELU MLP, learned or rotary positions, LM head tied to the token
// embedding), forward and explicit backward over flat arenas. Attention goes through the
// attention plugin. Backward accumulates into the gradient arena, so micro-batches
// accumulate for free.
//
// Tensor parallelism (Megatron-LM): the model holds this rank's slice of every tensor as the
// ParamSpec says (heads and the MLP's inner width split, the padded vocabulary split for the
// embedding and the tied LM head) and runs, at each region boundary, the collective the tensor
// plugin's plan names, on the tensor-parallel communicator. Under sequence parallelism the
// layernorm/residual regions hold this rank's contiguous 1/tp of the B·T tokens.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/model/activation_pool.hpp"
#include "triad/core/model/boundary_slots.hpp"
#include "triad/core/model/context_attention.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/model_state.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/sdk/tensor_v1.h"

namespace triad {

class Communicator;

// This rank's place in its tensor-parallel group and the plan it follows. The default is one
// rank: nothing split, every boundary the identity.
struct TensorParallel {
  int rank = 0, size = 1;
  bool sequence_parallel = false;
  // Collectives at each triad_tensor_boundary (forward, backward), from the tensor plugin.
  std::array<triad_tensor_collectives_v1, TRIAD_TENSOR_BOUNDARY_COUNT> boundary{};
  Communicator* comm = nullptr;  // the tensor group; null when size is 1
  std::chrono::milliseconds timeout{300000};
  // parallel.overlap_tensor_comm: in a column-parallel GEMM's backward, the input's gather
  // (sequence parallelism) runs behind the input-gradient GEMM and the input gradient's reduction
  // behind the weight-gradient GEMM; false runs each collective, then waits, then computes.
  bool overlap_backward = true;
  // parallel.tp_comm_overlap, under sequence parallelism: the forward's gathers and
  // reduce-scatters and the backward's gathers of the row-parallel GEMMs' output gradients run
  // around a ring of point-to-point steps, each step's transfer behind the GEMM of another rank's
  // tokens (Megatron's --tp-comm-overlap); false runs each whole collective, then waits, then
  // computes.
  bool overlap_ring = false;
};

// This rank's place in its context-parallel group (issue 32): every micro-batch's sequence is
// split over the group's ranks, each holding T/cp tokens from the embedding to the loss, at the
// positions context_token_positions() gives, and attention runs through ContextAttention. The
// default is one rank: the whole sequence, the attention plugin called directly.
struct ContextParallel {
  int rank = 0, size = 1;
  ContextMethod method = ContextMethod::ring;
  Communicator* comm = nullptr;  // the context-parallel group; null when size is 1
};

// Bytes one rank moved in the tensor group's collectives, counted as a ring moves them: an
// all-reduce of n bytes sends 2(t-1)/t n, an all-gather or reduce-scatter of n bytes (the
// whole, unsplit buffer) (t-1)/t n.
struct TensorCommVolume {
  double activations = 0;  // the layers' and ends' activation boundaries
  double logits = 0;       // the vocab-parallel cross-entropy's row statistics
  double replicated_grads = 0;
};

// The part of a rank's blocks one GPT runs: all of them, or one model chunk of an interleaved
// pipeline (blocks [first_block, first_block + blocks) of its ParamSpec's layers), and whether
// that chunk starts with the embedding / ends with the head (-1: as the placement says).
struct StageChunk {
  int first_block = 0;
  int blocks = -1;
  int embedding = -1;
  int head = -1;
};

class GPT {
 public:
  // state: this rank's tensors (build_param_spec with tp's rank and size) and their arenas.
  // max_batch: the largest micro-batch forward() will be called with. activation_sets: how many
  // micro-batches may be in flight between their forward and backward (the schedule's buffer
  // count; 1 for plain gradient accumulation). recompute: what backward recomputes rather than
  // keeps (training.recompute_granularity).
  // cp: the context-parallel group (inputs and targets stay (B, seq_length): the model keeps
  // its own tokens of them).
  // pool: the stage's activation sets, shared by the GPTs of its model chunks (activation_sets
  // of them; the caller allocates it once every chunk is built); null: a pool of its own.
  GPT(const ModelConfig& cfg, ModelState& state, const TensorParallel& tp,
      AttentionBackend& attention, int max_batch, int activation_sets = 1, StageChunk chunk = {},
      Recompute recompute = Recompute::none, const ContextParallel& cp = {},
      ActivationPool* pool = nullptr);
  // One rank holding the whole model, with a state of its own (no optimizer moments).
  GPT(const ModelConfig& cfg, Device& dev, AttentionBackend& attention, int max_batch,
      DType act = DType::f32);
  ~GPT();

  ModelState& state() const { return state_; }
  const ParamSpec& spec() const { return state_.spec(); }
  // The Hugging Face layout of the whole, unpadded model (gpt_layout()).
  const GptLayout& full_layout() const { return full_; }
  size_t num_params() const { return state_.size(); }  // in this rank's arena
  float* params() const { return state_.params(); }
  float* grads() const { return state_.grads(); }
  float* param(const std::string& name) const { return params() + spec().find(name).offset; }
  float* grad(const std::string& name) const { return grads() + spec().find(name).offset; }
  void* compute_params() const { return state_.compute(); }
  void sync_compute_weights() { state_.sync_compute(); }
  void zero_grad() { state_.zero_grad(); }
  std::vector<float> params_to_host() const { return state_.params_to_host(); }
  void params_from_host(const std::vector<float>& host) { state_.params_from_host(host); }

  // GPT-2 initialisation: N(0, init_std), residual projections scaled by 1/sqrt(2 L),
  // biases 0, layernorm weights 1, vocabulary padding 0. Each tensor draws its whole global
  // tensor from its own stream seeded by (seed, its name) and keeps this rank's slice, so the
  // weights do not depend on the layout.
  void init_weights(uint64_t seed);
  // The whole model in full_layout() order (HF import/export, tests): from_full keeps this
  // rank's slices; to_full needs a rank that holds everything (tp 1).
  void params_from_full(const float* full);
  std::vector<float> params_to_full() const;
  std::vector<float> grads_to_full() const;

  // inputs/targets (B,T) with B <= max_batch, T = seq_length. Returns the mean loss over the
  // B*T tokens (under context parallelism: over this rank's B*T/cp) and keeps the activations
  // in activation set `set` for backward().
  float forward(const int32_t* inputs, const int32_t* targets, int B, int set = 0);
  // Called during backward each time a range [offset, offset+count) of the gradient arena is
  // final: the head, then each block from the last to the first, then the embedding. The
  // ranges cover the arena exactly once (data parallelism starts reducing them at once).
  using GradsReady = std::function<void(size_t offset, size_t count)>;
  // grads += d(loss_scale * mean loss)/d params, for the forward kept in `set`. last_micro:
  // this is the step's last micro-batch, so the gradients of replicated weights that sequence
  // parallelism leaves partial are summed over the tensor group now (once per step).
  void backward(float loss_scale, const GradsReady& grads_ready = nullptr, bool last_micro = true,
                int set = 0);
  // backward() in the two halves of a zero-bubble pipeline (pipeline_v2.h), in this order for a
  // set: backward_input() computes every gradient that flows back (the stage's input gradient)
  // and the layernorms' and the embedding's weight gradients; backward_weight() adds the GEMMs'
  // weight and bias gradients, does what last_micro asks of backward(), and reports every range
  // final through grads_ready, in backward()'s order. In between, the set keeps the GEMMs' output
  // gradients in the places of activations the first half was the last to read, so the two
  // halves hold no more memory than backward() does. Under full recomputation a block's weight
  // gradients come in the first half (its recomputed activations do not outlive it), under
  // selective recomputation the attention projection's, and under sequence parallelism the
  // projections' (their output gradients are gathered over the tensor group once, in the first).
  void backward_input(float loss_scale, int set = 0);
  void backward_weight(const GradsReady& grads_ready = nullptr, bool last_micro = true,
                       int set = 0);

  // A pipeline stage's boundary buffers in activation set `set`, each (Ns,C) in the activation
  // dtype (this tensor-parallel rank's tokens): the input the previous stage's output is
  // received into, the output sent to the next stage, the input's gradient sent back and the
  // output's gradient received. forward() on a stage without the embedding reads `input`;
  // without the head it leaves the output and returns 0. backward() without the head reads
  // `output_grad`; without the embedding it leaves `input_grad`.
  struct StageIO {
    void *input, *output, *input_grad, *output_grad;
  };
  StageIO stage_io(int set);
  // A pipelined chunk's stage-boundary tensors live in the pool's boundary slots: before each
  // instruction the engine points set `set`'s at the slots its pass holds there
  // (BoundarySlots::at; -1: none, a null view). Without a stage boundary: nothing to do.
  void bind_boundaries(int set, const std::array<int, kBoundaries>& slots);
  // Which instructions of this chunk's passes touch its boundary tensors.
  BoundaryUse boundary_use() const;
  // Called after each block's forward, backward and weight half: the engine moves the transfers
  // in flight on (a transport that progresses only inside its calls would otherwise leave them
  // where they are until the next wait).
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }
  size_t stage_bytes(int B) const;  // of each, for a micro-batch of B
  const TensorCommVolume& comm_volume() const { return volume_; }
  // Context parallelism's attention (null with cp 1): its traffic counters.
  const ContextAttention* context_attention() const { return ctx_.get(); }
  // Everything the traffic counters hold (the tensor group's volume, context attention's
  // counts), so that work other than training steps (validation) can be left out of them.
  struct TrafficCounters {
    TensorCommVolume tensor;
    ContextTraffic context_fwd, context_bwd;
  };
  TrafficCounters traffic_counters() const;
  void restore_traffic_counters(const TrafficCounters& c);
  int num_blocks() const { return chunk_.blocks; }  // the blocks this GPT runs

 private:
  // One block's activations, kept from its forward for its backward.
  struct LayerActs {
    ActBuffer res_in;  // (Ns,C) input of the block (residual stream); Ns = N/tp under SP
    ActBuffer ln1;     // (Ns,C)
    Buffer<float> ln1_mean, ln1_rstd;
    ActBuffer qkv;       // (N,3Cl), q and k rotated in place when rope; Cl = C/tp
    ActBuffer attn_out;  // (N,Cl) attention output, heads interleaved
    Buffer<float> lse;   // (B,Hl,T)
    ActBuffer res_mid;   // (Ns,C) after the attention residual
    ActBuffer ln2;
    Buffer<float> ln2_mean, ln2_rstd;
    ActBuffer mlp_pre, mlp_act;  // (N,Fl), Fl = 4C/tp: the first MLP GEMM's output, its GELU
  };
  // Everything one micro-batch keeps between its forward and its backward. The stage's input
  // is layers[0].res_in (the embedding's output), its output res_out (the last block's).
  struct ActSet {
    std::vector<LayerActs> layers;
    ActBuffer res_out, lnf, lnf_full, logits;
    Buffer<float> lnf_mean, lnf_rstd, losses, ce_lse;
    Buffer<float> ce_max, ce_sums;  // vocab-parallel cross-entropy: (N) max, (2N) sums
    Buffer<int32_t> inputs, targets;
    // Pipeline stages: the stage's input when it holds no block; the gradients of its input
    // (sent back) and of its output (received).
    ActBuffer res_in, grad_in, grad_out;
    int B = 0;
  };
  void* stage_in(ActSet& s);
  void setup(const TensorParallel& tp, int max_batch, int activation_sets);
  void setup_context();
  // This rank's tokens of a (B, seq_length) host array of token ids, (B, T_) in `out`.
  const int32_t* own_tokens(const int32_t* whole, int B, std::vector<int32_t>& out) const;
  ActSet make_act_set(ActCarver& mem);
  void reserve_act_sets(int activation_sets);
  ActSet& act_set(int set);  // the set's views, cut from the pool at the first use

  // The stage: embedding | block x n | head, each a forward/backward pair over an ActSet.
  void embedding_forward(ActSet& s);
  // fuse_norms (the forward pass proper, not a recomputation): block i's ln1 was written by
  // block i-1's last residual add, and this block's last residual add writes the layernorm
  // that reads its output on this stage (block i+1's ln1 or the head's ln_f) in the same pass.
  void block_forward(size_t i, ActSet& s, void* out, bool fuse_norms);
  // lnf_ready: the last block's fused residual add wrote ln_f already.
  float head_forward(ActSet& s, bool lnf_ready);
  // Which part of a backward pass a call does: all of it, or backward_input()'s half (the
  // weight gradients a GEMM produces wait in the set for the *_weights() calls).
  enum class Half { whole, input };
  void head_backward(ActSet& s, float loss_scale, bool reduce_replicated_grads, Half half);
  void block_backward(size_t i, ActSet& s, bool reduce_replicated_grads, Half half);
  void backward_pass(float loss_scale, int set, Half half, const GradsReady* grads_ready,
                     bool last_micro);
  void head_weights(ActSet& s, bool reduce_replicated_grads);
  void block_weights(size_t i, ActSet& s, bool reduce_replicated_grads);
  // Where block i of a set keeps the gradient at its output between the halves: the next
  // block's input, or the set's output after the last block (both read last by the first half).
  void* block_out_grad(ActSet& s, size_t i) const {
    return i + 1 < s.layers.size() ? s.layers[i + 1].res_in.data() : s.res_out.data();
  }
  // The partial gradients of replicated tensors sequence parallelism leaves in block i.
  std::vector<float*> block_partial_grads(size_t i) const;
  // Which of a block's GEMMs leave their weight and bias gradients to block_weights(): those
  // whose inputs the set keeps (none under full recomputation; not the attention projection
  // under selective recomputation, its input is work_'s), but not a projection whose output
  // gradient a collective brings (sequence parallelism's all-gather): the second half would
  // have to move it again. block_backward(Half::input) and block_weights() both follow it.
  struct DeferredWeights {
    bool column = false;     // the qkv GEMM and the MLP's first
    bool mlp_proj = false;   // the MLP's projection
    bool attn_proj = false;  // the attention projection
  };
  DeferredWeights deferred_weights() const;
  // Whether sequence parallelism's partial replicated gradients in `r` are summed over the
  // tensor group by this backward: once per step, or after every micro-batch where ZeRO-2/3
  // reduces each one.
  bool reduce_replicated_now(const ArenaRange& r, bool last_micro) const {
    return sp_ && (last_micro || state_.reduced_each_micro_batch(r));
  }
  void embedding_backward(ActSet& s);

  struct AttnViews;
  // The buffers of block a's attention output and lse: its own, or under selective
  // recomputation the pair in work_ that every block shares.
  LayerActs& attention_core(LayerActs& a) { return recompute_ == Recompute::selective ? work_ : a; }
  void attention_forward(LayerActs& a, int B);
  // Rotary positions on q and k of a (N,3Cl) qkv buffer in place (their gradients when
  // backward): (B,T,Hl,D) views with row stride 3Cl, each run of this rank's tokens at its true
  // positions.
  void rotate_qk(const ActBuffer& qkv, int B, bool backward);
  void attention_backward(LayerActs& a, void* dqkv, const void* dattn_out, int B);

  const triad_tensor_collectives_v1& at(triad_tensor_boundary b) const { return tp_.boundary[b]; }
  // Runs collective `c` over the tensor group on a buffer of `N` rows of `width` elements (the
  // whole, unsplit size) from `in`, and returns where the result is: `in` itself for the
  // identity, `out` otherwise (an all-reduce with no `out` works in place and returns `in`).
  const void* exchange(int c, void* in, void* out, int N, int width, DType t, double* counter);
  // A collective exchange_start() posted and nobody has waited for yet; finish() waits (within
  // the group's timeout) and returns where the result is. Nothing to wait for when no
  // collective runs (the identity, a copy done at once).
  struct PendingExchange {
    TransportRequest request;
    const void* result = nullptr;
    std::chrono::milliseconds timeout{0};
    const void* finish() {
      if (request) request.wait(timeout);
      return result;
    }
  };
  // exchange() without the wait: the buffers stay in use until finish().
  PendingExchange exchange_start(int c, void* in, void* out, int N, int width, DType t,
                                 double* counter);
  // Each boundary below serves a part the plan splits (`split`: the plugin's collectives run
  // there) or one every rank holds whole (the core's own: nothing moves without sequence
  // parallelism; with it, a whole part reads every token (gathered in) and each rank keeps its
  // own tokens of what comes out, and of the input's gradient).
  // The input of the first matmul: x itself, or x gathered over the group into full.
  const void* column_input(const ActBuffer& x, const ActBuffer& full, int N, bool split);
  PendingExchange column_input_start(const ActBuffer& x, const ActBuffer& full, int N, bool split);
  // A GEMM over rows [row0, row0 + rows) of a column-parallel matmul's (N,C) input, read from
  // `in` (those rows alone), writing the same rows of its output.
  using RowGemm = std::function<void(const void* in, size_t row0, int rows)>;
  // The column-parallel GEMM over its input gathered as column_input() does. With
  // tp_.overlap_ring and a gather: around ring_gather(), each rank's tokens computed as they
  // arrive, this rank's own first (the gathered input lands in `full`, but for its own block).
  void column_forward(const ActBuffer& x, const ActBuffer& full, int N, bool split,
                      const RowGemm& gemm);
  // The gather row_output_grad() runs, around ring_gather(), each rank's rows of dx (the input
  // gradient, from `dx_rows`) computed as they arrive, this rank's own first from dy itself.
  // Returns every token's gradient, in token order in drow_full_.
  const void* row_output_grad_ring(const void* dy, int N, const RowGemm& dx_rows);
  // tp_.overlap_ring (Megatron's ring exchange): every rank's (Ns,C) block of `own` into
  // `full` (N,C, token order) in t - 1 steps, each passing the block in hand to the next rank
  // and taking the previous rank's, while use(q, its rows) runs on the block in hand (rank q's;
  // this rank's own, from `own`, first). `full` keeps own's slot as it was.
  using BlockUse = std::function<void(int q, const void* rows)>;
  void ring_gather(const void* own, void* full, int N, const BlockUse& use);
  // y (Ns,C) = the sum over the group of x (N,K) @ W^T for this rank's tokens, without the bias,
  // around the ring: step i computes one rank's tokens, adds the sum the previous rank passed on
  // and passes it to the next, while the next step's GEMM runs; the last step is this rank's own.
  void ring_reduce_scatter(void* y, const void* x, const void* W, int N, int K);
  // One ring step: `elems` from the previous rank into `into`, from `from` to the next, started.
  std::array<TransportRequest, 2> ring_step(void* into, const void* from, size_t elems);
  // y (Ns,C) = x (N,K) @ W^T over this rank's slice of the K inputs, reduced as ROW_OUTPUT
  // says, + the bias (fused into the GEMM when nothing is reduced).
  void row_parallel_forward(void* y, const void* x, const void* W, const void* bias, int N, int K,
                            bool split);
  // Its backward: dW += ..., dbias += ..., dx (N,K) overwritten; dy (Ns,C). With gelu_pre
  // (x = gelu(gelu_pre)), dx is the gradient at gelu_pre instead (through dmlp_act_).
  // dW and dbias null: the input gradient alone (row_parallel_weights() adds them later).
  void row_parallel_backward(void* dx, const void* dy, const void* x, const void* W, float* dW,
                             float* dbias, int N, int K, bool split,
                             const void* gelu_pre = nullptr);
  // dW += ..., dbias += ... of a row-parallel matmul from its (Ns,C) output gradient dy, kept
  // since its row_parallel_backward() without them (the same collective brings every token's).
  void row_parallel_weights(const void* dy, const void* x, float* dW, float* dbias, int N, int K,
                            bool split);
  // The gradient at a row-parallel matmul's output as its backward GEMMs read it: every token's
  // (gathered under sequence parallelism), or as ROW_OUTPUT's backward collective brings it.
  const void* row_output_grad(const void* dy, int N, bool split);
  int row_output_grad_op(bool split) const;  // the collective row_output_grad() runs
  // The gradient of the first matmul's input from dcol_ (partial sums when split), reduced as
  // COLUMN_INPUT says; returns the (Ns,C) result.
  const void* column_input_grad(int N, bool split);
  PendingExchange column_input_grad_start(int N, bool split);
  // A column-parallel GEMM's backward (dcol_ overwritten with the input's gradient, dW and dbias
  // added unless null), its input gathered as column_input() does and the input gradient
  // reduced as column_input_grad() does; returns the (Ns,C) input gradient. With
  // tp_.overlap_backward the gather runs behind the input-gradient GEMM and the reduction behind
  // the weight-gradient GEMM (Megatron's asynchronous tensor-parallel backward). `x_kept`: the
  // input when the caller holds it whole already (no gather), else null.
  const void* column_backward(const void* dy, const ActBuffer& x, const ActBuffer& full,
                              const void* x_kept, const void* W, float* dW, float* dbias, int N,
                              int OC, bool split);
  // out (Ns,C) = this rank's tokens of full (N,C), under sequence parallelism.
  void keep_own_tokens(const void* full, void* out, int N);
  // The collective that brings a whole part its input: all-gather under sequence parallelism,
  // else identity (its backward keeps this rank's tokens).
  int whole_part_input() const;
  // The cross-entropy over a vocab-split head, its row statistics reduced over the group.
  bool vocab_parallel_ce() const {
    return shards_.vocab > 1 && at(TRIAD_TENSOR_BOUNDARY_LOGITS).forward != TRIAD_TENSOR_IDENTITY;
  }
  // Sums the partial gradients of replicated (C)-sized tensors over the group (SP).
  void reduce_replicated(const std::vector<float*>& grads);

  ModelConfig cfg_;
  ContextParallel cp_;
  std::unique_ptr<ModelState> own_state_;  // the single-rank constructor's
  ModelState& state_;
  GptLayout full_;
  TensorParallel tp_;
  Device& dev_;
  DType act_;
  AttentionBackend& attn_;
  int maxB_, T_, C_, H_, L_;  // T_: this rank's tokens of a sequence (seq_length / cp)
  int Hl_, Cl_, Fl_;          // heads, attention width and MLP width on this rank
  TensorShards shards_;       // which parts the plan splits (> 1) and which every rank holds whole
  VocabShard vocab_;
  bool rope_, sp_, gather_in_;
  bool has_embedding_ = true, has_head_ = true, pipelined_ = false;
  StageChunk chunk_;
  // Activation recomputation. Full: sets keep each block's input only; the block's other
  // activations live in work_, recomputed before its backward (recompute_out_ takes the
  // recomputed output). Selective: sets keep everything but the attention core's output and
  // lse, which live in work_.attn_out / work_.lse, rewritten by each block's forward and recomputed
  // from the block's kept qkv before its attention backward. (No plugin keeps anything between
  // its forward and backward but these two: its T x T scratch is the workspace of one call.)
  Recompute recompute_ = Recompute::none;
  LayerActs work_;
  ActBuffer recompute_out_;
  // core: also the attention output and lse.
  void alloc_block_acts(LayerActs& a, ActCarver& mem, bool core = true);
  size_t wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  // The activation sets: views of pool_'s regions (own_pool_'s without a stage's pool).
  std::unique_ptr<ActivationPool> own_pool_;
  ActivationPool* pool_ = nullptr;
  std::vector<ActSet> sets_;
  // Scratch of the tensor-parallel boundaries: a row-parallel matmul's (N,C) partial output,
  // and the (N,C) gradient gathered at a row-parallel output or the embedding.
  ActBuffer row_partial_, drow_full_;
  // A column-parallel matmul's (N,C) input gathered over the group (sequence parallelism, or a
  // plan whose column input is all-gathered): ln1 or ln2, gathered for the forward's matmul and
  // again for the backward's weight gradient, as Megatron does, rather than kept gathered per
  // block (2·N·C a block, not divided by tp). Empty without such a gather.
  ActBuffer col_full_;
  // Backward scratch, reused by every block and set. dcol_: the gradient of a column-parallel
  // matmul's input, (N,C) partial sums on a tensor-parallel rank (dln_ itself on one rank).
  ActBuffer dres_, dln_, dln_full_, dqkv_, dattn_out_, dmlp_pre_, dmlp_act_;
  void* dcol_ = nullptr;
  Buffer<float> grad_pack_;  // the replicated gradients packed for one all-reduce
  Buffer<uint8_t> attn_workspace_;
  size_t ws_fwd_ = 0, ws_bwd_ = 0;
  // Context parallelism: the attention over the group, and where this rank's tokens sit in the
  // sequence: runs of local tokens [local, local + len) at positions [pos, pos + len) (one run
  // {0, 0, T} with cp 1). Learned positions: the rows of wpe the runs name, gathered for the
  // embedding, and their gradient before it is added back into wpe's.
  struct TokenRun {
    int local = 0, pos = 0, len = 0;
  };
  std::unique_ptr<ContextAttention> ctx_;
  std::vector<TokenRun> runs_;
  ActBuffer wpe_own_;
  Buffer<float> dwpe_own_;
  std::vector<int32_t> own_inputs_, own_targets_;
  TensorCommVolume volume_;
  std::function<void()> progress_;
  void progress() const {
    if (progress_) progress_();
  }
};

}  // namespace triad
