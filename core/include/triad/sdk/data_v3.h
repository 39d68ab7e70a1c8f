/* Triad data-parallel plugin ABI, version 3 — FROZEN from this release on: never edit a
 * field; a new table gets data_v4.h (see plugin_v1.h on versions).
 *
 * Version 3 keeps version 2's table (data_v2.h), its slots and structs, with the same meaning,
 * and adds one partitioning() bit, for ZeRO-1 whose gradient reduction overlaps the backward
 * pass (as Megatron-Core's distributed optimizer cuts its buffers into buckets and each bucket
 * over the ranks):
 *
 *   TRIAD_DATA_PARTITION_BY_UNIT  the optimizer state is partitioned unit by unit: this rank
 *       steps the slice of each unit that shard() names (its moments, and its master weights
 *       under offload, are kept for those slices only), not one owned_range(). Gradients and
 *       parameters stay whole, so the calls are stage 0/1's: grads_ready as gradient ranges
 *       become final in the last micro-batch's backward pass (the plugin may start a unit's
 *       reduction as soon as the whole unit is reported), finish_grads, after which each
 *       unit's owned slice of the gradient arena holds the sum over the group (the rest of the
 *       arena is unspecified), and after_step(params), which leaves every rank holding every
 *       unit's owned slices as their owners stepped them. owned_range is not called.
 *       Not together with TRIAD_DATA_PARTITION_GRADS.
 *
 * A version-2 plugin loads unchanged (the core adapts its descriptor; the table is the same): it
 * never sets the new bit. A core that knows only version 2 refuses a version-3 plugin by its
 * version, so it never meets a bit it does not know.
 */
#ifndef TRIAD_SDK_DATA_V3_H
#define TRIAD_SDK_DATA_V3_H

#include "triad/sdk/data_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

#undef TRIAD_DATA_ABI_VERSION
#define TRIAD_DATA_ABI_VERSION 3

/* partitioning() bits beyond version 2's. */
enum {
  TRIAD_DATA_PARTITION_BY_UNIT = 1u << 2, /* ZeRO-1: optimizer state owned per unit (shard()) */
};

/* The same slots as version 2: version 3 widens what partitioning() may answer. */
typedef triad_data_setup_v2 triad_data_setup_v3;
typedef triad_data_ops_v2 triad_data_ops_v3;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_DATA_V3_H */
