// The ParamSpec table: every tensor one rank holds, for any 3D layout (DESIGN.md, "The 3D
// engine"). Built from the model and a Placement (this rank's tensor-parallel slice, the
// pipeline stage's layers, and whether it holds the embedding and/or the head). For each tensor:
// its role, global and local shape, how it is split over the tensor group (Megatron's rules),
// its tie group, and its range in this rank's flat arena. The arena is layer-major like
// gpt_layout(): [wte, wpe] (embedding), the held blocks in order, [ln_f] (head). With tp 1, all
// layers, both ends and an unpadded vocabulary, it is exactly gpt_layout()'s arena.
//
// Splits (Megatron-LM):
//   column-parallel  qkv (c_attn) and fc (c_fc): weight and bias split along the output dim 0;
//                    the fused qkv splits q, k and v separately (strided_parts 3), so rank r
//                    holds rows [q_r; k_r; v_r] — its own heads.
//   row-parallel     attn proj and fc proj (c_proj): weight split along the input dim 1; the
//                    bias is replicated and added once, after the reduction.
//   vocab-parallel   wte: dim 0 of the PADDED vocabulary (vocab_size rounded up to a multiple
//                    of make_vocab_size_divisible_by × tp); the global shape is the padded one.
//   replicated       wpe, layernorms, row-parallel biases.
// Tied weights: the LM head is wte (tie group "wte"). A rank holding the head but not the
// embedding (a last pipeline stage) holds its own copy of wte.weight, placed after ln_f; the
// copies' gradients are reduced over the tie group.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/sdk/tensor_v1.h"

namespace triad {

// In the order of triad_tensor_role (tensor_v1.h).
enum class TensorRole {
  word_embedding,
  position_embedding,
  layernorm_weight,
  layernorm_bias,
  qkv_weight,
  qkv_bias,
  attn_proj_weight,
  attn_proj_bias,
  fc_weight,
  fc_bias,
  fc_proj_weight,
  fc_proj_bias,
};

const char* role_name(TensorRole r);

// How a tensor is split over the tensor group. dim < 0: not split (chunks 1, strided_parts 1).
// Otherwise dimension `dim` of the global shape is viewed as strided_parts equal parts, each
// cut into `chunks` equal pieces; rank r holds piece r of every part, concatenated in part order.
struct TensorSplit {
  int dim = -1;
  int chunks = 1;
  int strided_parts = 1;
  bool is_split() const { return dim >= 0; }
};

struct TensorSpec {
  std::string name;  // Hugging Face GPT-2 name, as in gpt_layout.hpp
  TensorRole role = TensorRole::layernorm_weight;
  int layer = -1;                     // the block this tensor belongs to; -1 for the ends
  std::vector<int64_t> global_shape;  // wte: the padded vocabulary
  std::vector<int64_t> local_shape;   // this rank's slice
  TensorSplit split;                  // none for replicated tensors
  bool replicated_in_tp = false;      // whole on every rank of the tensor group
  std::string tie_group;              // "wte" for the word embedding / LM head; else empty
  bool weight_decay = false;          // matmul weights and embeddings decay
  bool is_matmul_weight = false;      // (out,in) here, (in,out) in HF's Conv1D layout
  std::string dtype = "float32";      // of the master copy in the arena
  size_t offset = 0;                  // in elements, into this rank's flat arena
  size_t numel = 0;                   // of the local shape
  size_t global_numel() const;
};

// Megatron-LM's split of each role (triad_tensor_split_kind, indexed by triad_tensor_role).
std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> megatron_splits();

// What one rank holds.
struct Placement {
  int tp_rank = 0;
  int tp_size = 1;
  int first_layer = 0;
  int num_layers = -1;  // blocks this rank holds, from first_layer; -1: all from first_layer
  // Interleaved pipelines: a rank holds several model chunks, each a run of consecutive blocks
  // (first, count), in this order in the arena. Empty: the one run (first_layer, num_layers).
  std::vector<std::pair<int, int>> chunks;
  bool has_embedding = true;  // wte (+ wpe for learned positions)
  bool has_head = true;       // final layernorm + the tied LM head
  int make_vocab_size_divisible_by = 128;
  // How each role is split over the tensor group (the tensor plugin's plan). The GPT model
  // runs every plan that keeps tensor_split_error()'s rules: per block, Megatron's column/row
  // pair or the whole block replicated; the word embedding vocab-split or replicated.
  std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> split = megatron_splits();
};

// How many ways each part of the model is split over the tensor group: the tensor-parallel
// size where the placement splits it, 1 where every rank holds it whole.
struct TensorShards {
  int attention = 1;  // qkv and the attention projection: heads and width per rank
  int mlp = 1;        // fc and the fc projection: MLP width per rank
  int vocab = 1;      // the word embedding and tied LM head: vocabulary rows per rank
};
TensorShards tensor_shards(const Placement& p);

struct ArenaRange {
  size_t begin = 0, end = 0;  // [begin, end) in elements
  size_t size() const { return end - begin; }
};

struct LayerRange {
  int layer = 0;
  ArenaRange range;
};

struct ParamSpec {
  Placement placement;              // as given, num_layers resolved
  int64_t vocab_size = 0;           // the model's
  int64_t padded_vocab_size = 0;    // rows of wte's global shape
  std::vector<TensorSpec> tensors;  // arena order
  std::vector<LayerRange> layers;   // held blocks, in order
  ArenaRange embedding;             // empty unless has_embedding
  ArenaRange head;                  // ln_f (+ the wte copy on a head-only rank); empty unless
                                    // has_head
  size_t total = 0;                 // arena size in elements

  const TensorSpec& find(const std::string& name) const;  // throws std::out_of_range
  const LayerRange& layer(int global_layer) const;        // throws std::out_of_range
};

// The arena's units (ZeRO-2/3 partition and gather per unit): the embedding, each block, the
// head (those held, non-empty), in arena order; they tile the arena.
std::vector<ArenaRange> arena_units(const ParamSpec& spec);

// vocab_size rounded up to a multiple of divisible_by × tp_size (Megatron's rule).
int64_t padded_vocab_size(int64_t vocab_size, int divisible_by, int tp_size);

// Throws UserError (one line: key, value, fix) when the model cannot be placed: tp_size < 1,
// tp_rank outside [0, tp_size), heads or 4·hidden (or hidden) not divisible by tp_size, layers
// out of range, make_vocab_size_divisible_by < 1, a split the GPT model cannot run.
ParamSpec build_param_spec(const ModelConfig& m, const Placement& p);

// The arena as a GptLayout: tensors in arena order with their local shapes (the data plugin's
// and the optimizer's view).
GptLayout arena_layout(const ParamSpec& spec);

// Host copies between a full global tensor (global_numel floats, global_shape) and rank
// tp_rank's local slice (numel floats, local_shape). place_in_global writes only the
// slice's elements, so placing every rank's slice reassembles the global tensor.
void slice_of_global(const TensorSpec& t, int tp_rank, const float* global, float* local);
void place_in_global(const TensorSpec& t, int tp_rank, const float* local, float* global);

// Between the whole model in the Hugging Face layout (gpt_layout(): unpadded vocabulary, every
// layer) and one rank's arena. local_from_full writes every tensor of the arena (the
// vocabulary padding as zeros); full_from_local writes the parts of `full` this rank holds
// (padding dropped), so calling it with every tensor-parallel rank's arena fills it.
void local_from_full(const ParamSpec& spec, const GptLayout& full_layout, const float* full,
                     float* local);
void full_from_local(const ParamSpec& spec, int tp_rank, const GptLayout& full_layout,
                     const float* local, float* full);

}  // namespace triad
