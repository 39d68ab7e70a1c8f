/* Triad pipeline-schedule plugin ABI, version 1 — FROZEN from this release on.
 *
 * Kind "pipeline": a pure schedule. Given a layout (this stage, the number of stages, the
 * micro-batches of one training step and, for interleaved schedules, the model chunks each
 * stage holds) the plugin returns the instruction stream of one step for that stage, and how
 * many activation buffers the stream uses. It never touches memory or communicates: the core's
 * executor runs the instructions (DeepSpeed's PipeSchedule, as data).
 *
 * Stages are 0 .. stages-1, first to last. With virtual_stages v > 1 (Megatron's interleaved
 * schedule) stage s holds model chunks 0 .. v-1, chunk c being the global virtual stage
 * c * stages + s: activations flow stage 0 chunk 0 -> stage 1 chunk 0 -> ... -> stage p-1
 * chunk 0 -> stage 0 chunk 1 -> ... and the loss is computed after stage p-1 chunk v-1.
 *
 * Buffers are indices 0 .. num_buffers-1 of activation sets: FORWARD(micro-batch m) in buffer b
 * keeps m's activations in b until BACKWARD(m) from b; a buffer is free again after that
 * backward. RECV_ACTIVATION fills buffer b's input, SEND_ACTIVATION sends b's output,
 * RECV_GRAD fills b's output gradient, SEND_GRAD sends b's input gradient.
 *
 * Sends are asynchronous in the executor (they complete when the peer receives, at the latest
 * by the end of the step); receives wait. A stream is valid when, run on every stage together
 * under these rules, every receive is eventually matched and no stage waits forever.
 */
#ifndef TRIAD_SDK_PIPELINE_V1_H
#define TRIAD_SDK_PIPELINE_V1_H

#include "triad/sdk/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRIAD_PIPELINE_ABI_VERSION 1

typedef enum triad_pipe_op {
  /* The micro-batch's tokens (first stage) / targets (last stage) into the buffer. */
  TRIAD_PIPE_LOAD_MICRO_BATCH = 0,
  TRIAD_PIPE_FORWARD = 1,           /* the chunk's layers on the buffer (and the loss, last) */
  TRIAD_PIPE_BACKWARD = 2,          /* gradients accumulate; the buffer is free after */
  TRIAD_PIPE_SEND_ACTIVATION = 3,   /* the buffer's output to the next (virtual) stage */
  TRIAD_PIPE_RECV_ACTIVATION = 4,   /* from the previous (virtual) stage into the buffer */
  TRIAD_PIPE_SEND_GRAD = 5,         /* the buffer's input gradient to the previous stage */
  TRIAD_PIPE_RECV_GRAD = 6,         /* from the next stage into the buffer's output gradient */
  TRIAD_PIPE_REDUCE_TIED_GRADS = 7, /* the word embedding's gradient over first + last stage */
  TRIAD_PIPE_REDUCE_GRADS = 8,      /* data-parallel reduction of this stage's gradients */
  TRIAD_PIPE_OPTIMIZER_STEP = 9,
  TRIAD_PIPE_OP_COUNT = 10
} triad_pipe_op;

typedef struct triad_pipe_instr_v1 {
  int32_t op;          /* triad_pipe_op */
  int32_t micro_batch; /* 0 .. micro_batches-1; -1 for the step-wide ops (7, 8, 9) */
  int32_t buffer;      /* 0 .. num_buffers-1; -1 for the step-wide ops */
  int32_t chunk;       /* model chunk 0 .. virtual_stages-1 (0 without interleaving) */
} triad_pipe_instr_v1;

typedef struct triad_pipe_layout_v1 {
  int32_t stage;          /* this stage, 0 .. stages-1 */
  int32_t stages;         /* >= 1 */
  int32_t micro_batches;  /* >= 1: gradient-accumulation steps */
  int32_t virtual_stages; /* >= 1: model chunks per stage (interleaved schedules) */
} triad_pipe_layout_v1;

typedef struct triad_pipe_caps_v1 {
  int32_t max_virtual_stages; /* 1: not interleaved; 0: any */
} triad_pipe_caps_v1;

typedef struct triad_pipeline_ops_v1 {
  int (*capabilities)(void* handle, triad_pipe_caps_v1* caps);
  /* Activation buffers the stream for `layout` uses. TRIAD_ERR_UNSUPPORTED: no schedule for
   * this layout (e.g. an interleaved rule broken; last_error says which). */
  int (*num_buffers)(void* handle, const triad_pipe_layout_v1* layout, int32_t* buffers);
  /* The stream of one step: writes min(count, capacity) instructions to out (out may be NULL
   * when capacity is 0) and the full length to *count. */
  int (*schedule)(void* handle, const triad_pipe_layout_v1* layout, triad_pipe_instr_v1* out,
                  size_t capacity, size_t* count);
} triad_pipeline_ops_v1;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_PIPELINE_V1_H */
