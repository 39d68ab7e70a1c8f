/* Triad tensor-parallel plugin ABI, version 1 — FROZEN from this release on: never edit a
 * field; a new table gets tensor_v2.h (see plugin_v1.h on versions).
 *
 * Kind "tensor": the policy of tensor (model) parallelism, as data. For a layout (the tensor-
 * parallel size and whether sequence parallelism is on) the plugin says
 *   - for each weight role, how that weight is split over the tensor-parallel group
 *     (split()), and
 *   - for each region boundary of the model, which collective the core runs there in the
 *     forward pass and which in the backward pass (boundary()).
 * The core owns the tensors, the kernels and the tensor-parallel communicator and executes
 * the plan; a tensor plugin never touches memory and never communicates.
 *
 * Activations are (tokens, features) row-major, tokens = micro-batch × sequence flattened.
 * Under sequence parallelism a "split" activation holds this rank's contiguous 1/tp of the
 * tokens (the core requires the sequence length to be divisible by tp); ALL_GATHER
 * concatenates the ranks' token blocks in rank order and REDUCE_SCATTER sums over the group
 * and leaves rank r block r.
 *
 * Weights are (out, in) row-major (the transpose of Hugging Face's Conv1D):
 *   COLUMN  split along dim 0 (output features); its bias likewise. The fused qkv weight
 *           splits q, k and v separately, so a rank holds whole heads of each.
 *   ROW     split along dim 1 (input features); its bias is replicated and the core adds it
 *           once, after the ROW_OUTPUT collective.
 *   VOCAB   split along dim 0 of the vocabulary padded to a multiple of
 *           make_vocab_size_divisible_by × tp (the word embedding, which is also the LM head).
 *   REPLICATED  whole on every rank of the group.
 *
 * What the core runs (build_param_spec checks it; triad-plugin-test tensor checks the same rules
 * and runs the plan through the core's placement, so a plan the suite passes is one the launcher
 * accepts): at tp 1 every role REPLICATED. At tp > 1, per block (attention: qkv and its
 * projection; MLP: fc and its projection) either Megatron's pair (the first matmul COLUMN with
 * its bias COLUMN, the second ROW with its bias REPLICATED) or the whole block REPLICATED; the
 * word embedding VOCAB or REPLICATED; position embedding and layernorms REPLICATED. So a plugin
 * may, for example, keep attention whole when tp does not divide the heads and split only the
 * MLP. The boundaries' collectives serve the split parts. A part kept whole runs on every rank
 * over every token: without sequence parallelism nothing moves; with it the core all-gathers the
 * part's input (forward) and its output's gradient (backward) and each rank keeps its own tokens
 * of the output and of the input's gradient; its weights' and bias's gradients are whole and
 * never pass REPLICATED_GRADS.
 */
#ifndef TRIAD_SDK_TENSOR_V1_H
#define TRIAD_SDK_TENSOR_V1_H

#include "triad/sdk/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of triad_tensor_ops_v1 in this header: a tensor plugin's descriptor carries it as
 * kind_abi_version. A later, incompatible table goes to tensor_v2.h, which includes this header
 * and redefines TRIAD_TENSOR_ABI_VERSION to 2; the core then keeps an adapter from 1. */
#define TRIAD_TENSOR_ABI_VERSION 1

/* The weight roles of a GPT model. */
typedef enum triad_tensor_role {
  TRIAD_TENSOR_ROLE_WORD_EMBEDDING = 0, /* also the tied LM head */
  TRIAD_TENSOR_ROLE_POSITION_EMBEDDING = 1,
  TRIAD_TENSOR_ROLE_LAYERNORM_WEIGHT = 2,
  TRIAD_TENSOR_ROLE_LAYERNORM_BIAS = 3,
  TRIAD_TENSOR_ROLE_QKV_WEIGHT = 4,
  TRIAD_TENSOR_ROLE_QKV_BIAS = 5,
  TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT = 6,
  TRIAD_TENSOR_ROLE_ATTN_PROJ_BIAS = 7,
  TRIAD_TENSOR_ROLE_FC_WEIGHT = 8,
  TRIAD_TENSOR_ROLE_FC_BIAS = 9,
  TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT = 10,
  TRIAD_TENSOR_ROLE_FC_PROJ_BIAS = 11,
  TRIAD_TENSOR_ROLE_COUNT = 12
} triad_tensor_role;

typedef enum triad_tensor_split_kind {
  TRIAD_TENSOR_SPLIT_REPLICATED = 0,
  TRIAD_TENSOR_SPLIT_COLUMN = 1,
  TRIAD_TENSOR_SPLIT_ROW = 2,
  TRIAD_TENSOR_SPLIT_VOCAB = 3
} triad_tensor_split_kind;

/* Where the core asks for a collective. */
typedef enum triad_tensor_boundary {
  /* The activation entering a column-parallel matmul (qkv, fc, the LM head). */
  TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT = 0,
  /* The activation leaving a row-parallel matmul (attention proj, fc proj), before its bias. */
  TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT = 1,
  /* The activation leaving the vocab-parallel embedding (each rank looked up its own rows). */
  TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT = 2,
  /* Vocab-parallel cross-entropy: the per-token max, sum of exponentials and target logit
   * (forward; ALL_REDUCE: max for the max, sum for the others). */
  TRIAD_TENSOR_BOUNDARY_LOGITS = 3,
  /* Gradients of replicated weights used inside a token-split region (layernorms, ROW
   * biases, under sequence parallelism): backward ALL_REDUCE sums the ranks' partial
   * gradients; forward is always IDENTITY. */
  TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS = 4,
  TRIAD_TENSOR_BOUNDARY_COUNT = 5
} triad_tensor_boundary;

typedef enum triad_tensor_collective {
  TRIAD_TENSOR_IDENTITY = 0,
  TRIAD_TENSOR_ALL_REDUCE = 1,
  TRIAD_TENSOR_ALL_GATHER = 2,
  TRIAD_TENSOR_REDUCE_SCATTER = 3
} triad_tensor_collective;

typedef struct triad_tensor_layout_v1 {
  int32_t tp_size;           /* >= 1 */
  int32_t sequence_parallel; /* non-zero: layernorm/residual regions split along the tokens */
} triad_tensor_layout_v1;

typedef struct triad_tensor_collectives_v1 {
  int32_t forward;  /* triad_tensor_collective */
  int32_t backward; /* triad_tensor_collective */
} triad_tensor_collectives_v1;

typedef struct triad_tensor_caps_v1 {
  int32_t max_tp_size;       /* largest tensor-parallel size it plans for; 0: any */
  int32_t sequence_parallel; /* non-zero: it plans sequence-parallel layouts */
} triad_tensor_caps_v1;

typedef struct triad_tensor_ops_v1 {
  int (*capabilities)(void* handle, triad_tensor_caps_v1* caps);
  /* How `role` (triad_tensor_role) is split under `layout`; TRIAD_ERR_UNSUPPORTED when the
   * plugin has no plan for that layout or role. */
  int (*split)(void* handle, const triad_tensor_layout_v1* layout, int32_t role,
               int32_t* split_kind);
  /* The collectives at `boundary` (triad_tensor_boundary) under `layout`;
   * TRIAD_ERR_UNSUPPORTED when it has none for that layout. */
  int (*boundary)(void* handle, const triad_tensor_layout_v1* layout, int32_t boundary,
                  triad_tensor_collectives_v1* out);
} triad_tensor_ops_v1;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_TENSOR_V1_H */
