/* Triad data-parallel plugin ABI, version 2 — FROZEN from this release on: never edit a
 * field; a new table gets data_v3.h (see plugin_v1.h on versions).
 *
 * Version 2 keeps every slot of version 1 (data_v1.h), in the same order and with the same
 * meaning, and adds what ZeRO stages 2 and 3 need: the arena cut into UNITS (the layers: the
 * embedding, each block, the head; they tile the arena in order), and per unit a gradient
 * reduction into this rank's shard and a parameter gather out of it.
 *
 * Who does what. The plugin decides what is partitioned (partitioning()), which slice of each
 * unit this rank owns (shard()) and how a unit is reduced and gathered (the collectives, their
 * order, their overlap). The core owns all memory: it hands the plugin a unit's gradient (or
 * parameter) window and the owned slice's storage, and frees a window only after wait_unit().
 *
 * Stages 0 and 1 (partitioning() without TRIAD_DATA_PARTITION_GRADS) run exactly as version 1:
 * the core keeps the whole gradient arena and calls grads_ready / finish_grads / owned_range /
 * after_step. With TRIAD_DATA_PARTITION_GRADS the core calls, per micro-batch and unit:
 *   reduce_unit(u, grads, owned)  once the unit's gradient of this micro-batch's backward pass is
 *                                 final in `grads` (the whole unit, float32). The core has
 *                                 already added what `owned` held (the sum so far) into the
 *                                 owned slice of `grads`, so the reduction's result is the new
 *                                 running sum: this rank's slice of the unit, summed over the
 *                                 group, lands in `owned`. Non-blocking.
 *   gather_unit(u, owned, params, dtype)  every rank's owned slice of unit u into `params` (the
 *                                 whole unit, `dtype`). With TRIAD_DATA_PARTITION_PARAMS before
 *                                 the layers use a unit; non-blocking, so the core starts the
 *                                 next unit's gather before it computes with this one
 *                                 (prefetch). Under GRADS alone too, to assemble the whole
 *                                 gradient (a gradient dump) from the owned slices.
 *                                 `owned` may be null where this rank's slice of u is empty.
 *   wait_unit(u)                  completes unit u's pending reduction and gather; only then
 *                                 may the core read `owned` / `params` or reuse `grads`.
 * and after the optimizer after_step(params) as in version 1 (stage 2: each unit's owned slices
 * all-gathered into the whole parameters, in place; stage 3: nothing, parameters stay sharded).
 * grads_ready and finish_grads are not called under TRIAD_DATA_PARTITION_GRADS.
 *
 * Requests on the data-parallel communicator are issued in the same order on every member: the
 * core calls reduce_unit / gather_unit in the same unit order on every rank of the group.
 */
#ifndef TRIAD_SDK_DATA_V2_H
#define TRIAD_SDK_DATA_V2_H

#include "triad/sdk/data_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#undef TRIAD_DATA_ABI_VERSION
#define TRIAD_DATA_ABI_VERSION 2

/* What the configured stage partitions beyond the optimizer state (partitioning()). */
enum {
  TRIAD_DATA_PARTITION_GRADS = 1u << 0,  /* ZeRO-2: gradients kept for the owned slices only */
  TRIAD_DATA_PARTITION_PARAMS = 1u << 1, /* ZeRO-3: parameters too (implies GRADS) */
};

typedef struct triad_data_setup_v2 {
  triad_data_setup_v1 v1; /* first, so that a version-1 plugin reads its own struct */
  /* The units, in arena order; they tile [0, v1.num_elements). */
  size_t num_units;
  const uint64_t* unit_offsets;
  const uint64_t* unit_sizes;
} triad_data_setup_v2;

typedef struct triad_data_ops_v2 {
  /* Version 1's slots (setup receives a triad_data_setup_v2). */
  int (*capabilities)(void* handle, triad_data_caps_v1* caps);
  int (*setup)(void* handle, const triad_data_setup_v2* setup);
  int (*grads_ready)(void* handle, void* grads, uint64_t offset, uint64_t count);
  int (*finish_grads)(void* handle, void* grads);
  int (*owned_range)(void* handle, uint64_t* offset, uint64_t* count);
  int (*after_step)(void* handle, void* params);
  /* TRIAD_DATA_PARTITION_* bits of the configured stage (0 for stages 0 and 1). */
  int (*partitioning)(void* handle, uint32_t* flags);
  /* With GRADS: the slice of each unit this rank owns, one per unit in unit order (count may be
   * 0), as arena offsets; offsets/counts hold num_units entries. */
  int (*shard)(void* handle, uint64_t* offsets, uint64_t* counts);
  int (*reduce_unit)(void* handle, uint32_t unit, void* grads, void* owned);
  int (*gather_unit)(void* handle, uint32_t unit, const void* owned, void* params,
                     DLDataType dtype);
  int (*wait_unit)(void* handle, uint32_t unit);
} triad_data_ops_v2;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_DATA_V2_H */
