/* Triad data-parallel plugin ABI, version 1 — FROZEN from this release on: never edit a
 * field; a new table gets data_v2.h (see plugin_v1.h on versions).
 *
 * Kind "data": who owns which range of the flat parameter / gradient / optimizer arenas
 * across the data-parallel group, and what happens to gradients and parameters around the
 * optimizer step (ZeRO stages 0-3 are one plugin, "zero", with a `stage` parameter).
 *
 * The core calls, per training step:
 *   grads_ready(offset, count)   during the LAST micro-batch's backward, each time a range of
 *                                the gradient arena is final (layers finish back to front);
 *                                ranges never overlap and together cover the arena once
 *   finish_grads()               before the optimizer: every reduction is complete, and the
 *                                gradients of the owned range hold the SUM over the group
 *                                (the core has already scaled each rank's gradients by
 *                                1/dp_size, so that sum is the mean; a plugin never divides,
 *                                and never touches tensor memory, which may be on a GPU)
 *   owned_range()                the range this rank steps the optimizer on
 *   after_step(params)           after the optimizer: parameters made whole again (stage 1+:
 *                                all-gather of the owned shards; stage 0: nothing)
 * Communication goes through the data-parallel communicator the core lends in setup: the
 * transport plugin's own ops table and handles (the plugin never loads a transport itself).
 */
#ifndef TRIAD_SDK_DATA_V1_H
#define TRIAD_SDK_DATA_V1_H

#include "triad/sdk/comm_ref_v1.h"
#include "triad/sdk/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of triad_data_ops_v1 in this header: a data plugin's descriptor carries it as
 * kind_abi_version. A later, incompatible table goes to data_v2.h, which includes this header
 * and redefines TRIAD_DATA_ABI_VERSION to 2; the core then keeps an adapter from 1. */
#define TRIAD_DATA_ABI_VERSION 1

typedef struct triad_data_caps_v1 {
  uint32_t stages;        /* bit (1u << s) for each ZeRO stage s the plugin implements */
  uint32_t transport_ops; /* TRIAD_TRANSPORT_OP_* bits the configured stage needs */
} triad_data_caps_v1;

typedef struct triad_data_setup_v1 {
  uint64_t num_elements; /* length of the flat arenas */
  /* The tensors of the arena in arena order (buckets never split a tensor needlessly). */
  size_t num_tensors;
  const uint64_t* tensor_offsets;
  const uint64_t* tensor_sizes;
  DLDataType grad_dtype;
  DLDevice device;
  int32_t dp_rank, dp_size;
  triad_comm_ref_v1 dp_comm; /* comm_ref_v1.h; valid until this instance is destroyed */
  int64_t timeout_ms;        /* bound on every wait */
} triad_data_setup_v1;

typedef struct triad_data_ops_v1 {
  int (*capabilities)(void* handle, triad_data_caps_v1* caps);
  int (*setup)(void* handle, const triad_data_setup_v1* setup);
  int (*grads_ready)(void* handle, void* grads, uint64_t offset, uint64_t count);
  int (*finish_grads)(void* handle, void* grads);
  int (*owned_range)(void* handle, uint64_t* offset, uint64_t* count);
  int (*after_step)(void* handle, void* params);
} triad_data_ops_v1;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_DATA_V1_H */
