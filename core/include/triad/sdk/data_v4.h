/* Triad data-parallel plugin ABI, version 4 — FROZEN from this release on: never edit a
 * field; a new table gets data_v5.h (see plugin_v1.h on versions).
 *
 * Version 4 keeps version 3's table (data_v3.h, and through it data_v2.h), its slots and
 * structs, with the same meaning, and adds one partitioning() bit, for the parameter all-gather
 * after the step to run behind the next forward pass (Megatron-Core's overlapped parameter
 * gather):
 *
 *   TRIAD_DATA_GATHER_DEFERRED  with TRIAD_DATA_PARTITION_GRADS alone (ZeRO-2) or with
 *       TRIAD_DATA_PARTITION_BY_UNIT (ZeRO-1 by unit), whose after_step(params) gathers every
 *       unit's owned slices into the whole arena: after_step only starts those gathers, unit by
 *       unit, and returns. The core then calls wait_unit(u) once for each unit u before it
 *       reads any of that unit's parameters outside this rank's owned slices (the next forward
 *       pass waits for each unit just before its first layer reads it), and for every unit
 *       before the next after_step, grads_ready or reduce_unit and before it writes any owned
 *       slice again (the next optimizer step). Until its wait_unit the unit's parameters outside
 *       the owned slices are unspecified; the owned slices are only read. Never set with
 *       TRIAD_DATA_PARTITION_PARAMS (ZeRO-3 gathers per unit already) or on its own.
 *
 *       With this bit the core may, in place of after_step, start the gathers itself in
 *       another dtype (the copy of the weights the layers read, in mixed precision):
 *       gather_unit(u, owned, params, dtype) for every unit, params pointing at the unit's
 *       start in an arena of that dtype and owned at this rank's slice inside it (in place, as
 *       an all-gather's own block), then wait_unit(u) as above. It may gather the fp32 arena
 *       the same way (every rank of the group at the same point). So gather_unit works at
 *       stage 1 by unit too, not only at stages 2 and 3.
 *
 * A version-2 or version-3 plugin loads unchanged (the core adapts its descriptor; the table is
 * the same): it never sets the new bit. A core that knows only version 3 refuses a version-4
 * plugin by its version, so it never meets a bit it does not know.
 */
#ifndef TRIAD_SDK_DATA_V4_H
#define TRIAD_SDK_DATA_V4_H

#include "triad/sdk/data_v3.h"

#ifdef __cplusplus
extern "C" {
#endif

#undef TRIAD_DATA_ABI_VERSION
#define TRIAD_DATA_ABI_VERSION 4

/* partitioning() bits beyond version 3's. */
enum {
  TRIAD_DATA_GATHER_DEFERRED = 1u << 3, /* after_step starts the gathers; wait_unit ends each */
};

/* The same slots as version 3: version 4 widens what partitioning() may answer. */
typedef triad_data_setup_v3 triad_data_setup_v4;
typedef triad_data_ops_v3 triad_data_ops_v4;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_DATA_V4_H */
