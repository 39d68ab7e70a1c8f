/* Triad attention plugin ABI, version 1 — FROZEN from this release on: never edit a
 * field; a new table gets attention_v2.h (see plugin_v1.h on versions).
 *
 * Tensors are DLPack views with explicit strides (strides in elements; the stride of the
 * last dimension, D, is always 1). Layouts:
 *   q, k, v, out, dout, dq, dk, dv : (B, H, T, D)  any strides on B, H, T
 *   lse                            : (B, H, T)     fp32, contiguous
 * lse[b,h,i] = log(sum_j exp(scale * q_i . k_j)) over the unmasked j (natural log).
 * forward writes out and lse. backward writes (overwrites, never accumulates) dq, dk, dv,
 * given q, k, v, out, dout and the lse saved by forward.
 * The workspace is scratch memory of at least the size workspace_size() returned, owned by
 * the core (so it is counted in peak memory), valid for the duration of one call only.
 */
#ifndef TRIAD_SDK_ATTENTION_V1_H
#define TRIAD_SDK_ATTENTION_V1_H

#include "triad/sdk/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of triad_attention_ops_v1 in this header: an attention plugin's descriptor carries
 * it as kind_abi_version. A later, incompatible table goes to attention_v2.h, which includes this
 * header and redefines TRIAD_ATTENTION_ABI_VERSION to 2; the core then keeps an adapter from 1. */
#define TRIAD_ATTENTION_ABI_VERSION 1

/* Bits of triad_attention_caps_v1.dtypes */
#define TRIAD_DTYPE_BIT_FP32 (1u << 0)
#define TRIAD_DTYPE_BIT_BF16 (1u << 1)
#define TRIAD_DTYPE_BIT_FP16 (1u << 2)

#define TRIAD_ATTENTION_MAX_HEAD_DIMS 16

typedef struct triad_attention_caps_v1 {
  uint32_t devices; /* bit (1u << DLDeviceType) per device type supported, e.g. 1u << kDLCPU */
  uint32_t dtypes;  /* TRIAD_DTYPE_BIT_* */
  /* Supported head dims: if num_head_dims == 0, any D in [1, max_head_dim]. */
  int32_t num_head_dims;
  int32_t head_dims[TRIAD_ATTENTION_MAX_HEAD_DIMS];
  int32_t max_head_dim;
  int32_t causal;     /* non-zero: supports causal masking */
  int32_t non_causal; /* non-zero: supports full (unmasked) attention */
} triad_attention_caps_v1;

typedef struct triad_attention_shape_v1 {
  int64_t batch, heads, seq_len, head_dim;
  int32_t causal;
  DLDataType dtype;
  DLDevice device;
} triad_attention_shape_v1;

typedef struct triad_attention_fwd_args_v1 {
  const DLTensor* q;
  const DLTensor* k;
  const DLTensor* v;
  DLTensor* out;
  DLTensor* lse;
  int32_t causal;
  float scale; /* usually 1/sqrt(D) */
  void* workspace;
  size_t workspace_bytes;
} triad_attention_fwd_args_v1;

typedef struct triad_attention_bwd_args_v1 {
  const DLTensor* q;
  const DLTensor* k;
  const DLTensor* v;
  const DLTensor* out;
  const DLTensor* lse;
  const DLTensor* dout;
  DLTensor* dq;
  DLTensor* dk;
  DLTensor* dv;
  int32_t causal;
  float scale;
  void* workspace;
  size_t workspace_bytes;
} triad_attention_bwd_args_v1;

typedef struct triad_attention_ops_v1 {
  int (*capabilities)(void* handle, triad_attention_caps_v1* caps);
  /* Scratch bytes forward / backward need for this shape. */
  int (*workspace_size)(void* handle, const triad_attention_shape_v1* shape, size_t* fwd_bytes,
                        size_t* bwd_bytes);
  int (*forward)(void* handle, const triad_attention_fwd_args_v1* args);
  int (*backward)(void* handle, const triad_attention_bwd_args_v1* args);
} triad_attention_ops_v1;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_ATTENTION_V1_H */
