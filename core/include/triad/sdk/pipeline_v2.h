/* Triad pipeline-schedule plugin ABI, version 2 — FROZEN from this release on: never edit a
 * field; a new table gets pipeline_v3.h (see plugin_v1.h on versions).
 *
 * Version 2 keeps version 1's table (pipeline_v1.h), its slots, structs and instructions, with
 * the same meaning, and adds the backward pass in two halves, for zero-bubble schedules (Qi et
 * al., "Zero Bubble Pipeline Parallelism", ICLR 2024):
 *   BACKWARD_INPUT(m, b, c)   "B": the gradients of the chunk's input and activations for
 *                             micro-batch m (what SEND_GRAD sends), and the gradients of the
 *                             weights no GEMM produces (layernorms, embedding lookups); buffer b
 *                             stays held.
 *   BACKWARD_WEIGHT(m, b, c)  "W": the weight-gradient GEMMs of that micro-batch (and their
 *                             biases); buffer b is free after it.
 * For each micro-batch and chunk a stream has either one BACKWARD (both halves at once, as in
 * version 1) or one BACKWARD_INPUT followed later by one BACKWARD_WEIGHT in the same buffer, with
 * RECV_GRAD before the BACKWARD_INPUT and SEND_GRAD after it (before or after the W). Every
 * BACKWARD_WEIGHT comes before REDUCE_TIED_GRADS, REDUCE_GRADS and OPTIMIZER_STEP. A buffer is
 * held from the micro-batch's first instruction to its last (the W, or the SEND_GRAD after it).
 *
 * A version-1 plugin loads unchanged: its streams never split a backward (the core adapts its
 * descriptor; the table is the same).
 */
#ifndef TRIAD_SDK_PIPELINE_V2_H
#define TRIAD_SDK_PIPELINE_V2_H

#include "triad/sdk/pipeline_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#undef TRIAD_PIPELINE_ABI_VERSION
#define TRIAD_PIPELINE_ABI_VERSION 2

/* Instructions beyond version 1's (triad_pipe_op); triad_pipe_instr_v1.op carries them. */
enum {
  TRIAD_PIPE_BACKWARD_INPUT = 10,  /* B: input gradients; the buffer stays held */
  TRIAD_PIPE_BACKWARD_WEIGHT = 11, /* W: weight gradients; the buffer is free after */
  TRIAD_PIPE_OP_COUNT_V2 = 12
};

/* The same slots as version 1: version 2 widens what a stream may hold. */
typedef triad_pipeline_ops_v1 triad_pipeline_ops_v2;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_PIPELINE_V2_H */
