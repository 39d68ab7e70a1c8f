/* Triad transport plugin ABI, version 2 — FROZEN from this release on: never edit a field; a
 * new table gets transport_v3.h (see plugin_v1.h on versions).
 *
 * Version 2 keeps every slot of version 1 (transport_v1.h), in the same order and with the same
 * meaning, and appends two:
 *
 *   progress(handle)   Advances every pending operation of the instance, on every communicator,
 *                      without blocking, and returns at once; callable at any time between
 *                      other calls of this table (with nothing pending, or before init_world,
 *                      it does nothing and returns TRIAD_OK). The core calls it while it
 *                      computes (at layer boundaries), so that posted collectives and send/recv
 *                      move on although nobody waits on them yet: a transport that progresses
 *                      only inside its calls (UCX) does one non-blocking pass of its progress
 *                      loop here. A transport that progresses on its own (NCCL: kernels on its
 *                      stream) returns TRIAD_OK and does nothing. It completes nothing that
 *                      test() or wait() would not: requests are still finished and freed
 *                      through them. A failure of an operation is reported by that operation's
 *                      test()/wait(), not by progress(); progress() returns an error only when
 *                      the instance itself is broken.
 *
 *   all_to_all(handle, comm, sendbuf, recvbuf, count, dtype, device, &request)
 *                      MPI_Alltoall over comm's n ranks. `count` is the number of elements per
 *                      peer block: sendbuf holds n blocks of `count` elements, block r going to
 *                      rank r; recvbuf holds n blocks of `count`, block r having come from rank
 *                      r (this rank's own block is copied from its block of sendbuf). Both
 *                      buffers are n * count elements. Not in place: sendbuf and recvbuf must not
 *                      overlap (a plugin refuses sendbuf == recvbuf with TRIAD_ERR_INVALID). Any
 *                      dtype of whole bytes (no reduction); count 0 is legal and still completes
 *                      as a collective. Memory as caps.memory says, like every operation.
 *                      Asynchronous like every version-1 operation: a request at once, done
 *                      through test()/wait() (a wait that runs out names the operation and,
 *                      when known, the peer it waits for), issued in the same order as the
 *                      communicator's other requests on every member. A plugin that offers it
 *                      sets TRIAD_TRANSPORT_OP_ALL_TO_ALL in caps.ops; one that does not returns
 *                      TRIAD_ERR_UNSUPPORTED.
 *
 * A version-1 plugin still loads: the core's adapter gives it a progress() that returns TRIAD_OK
 * doing nothing (a version-1 plugin progresses inside its own calls, as it always did) and an
 * all_to_all() that returns TRIAD_ERR_UNSUPPORTED; its caps never carry
 * TRIAD_TRANSPORT_OP_ALL_TO_ALL.
 *
 * Borrowers (comm_ref_v1.h) still see a triad_transport_ops_v1: a version-2 table begins with
 * it, so the core lends the same table.
 */
#ifndef TRIAD_SDK_TRANSPORT_V2_H
#define TRIAD_SDK_TRANSPORT_V2_H

#include "triad/sdk/transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#undef TRIAD_TRANSPORT_ABI_VERSION
#define TRIAD_TRANSPORT_ABI_VERSION 2

/* A bit of triad_transport_caps_v1.ops beside triad_transport_op's: all_to_all is offered. */
#define TRIAD_TRANSPORT_OP_ALL_TO_ALL (1u << 8)

typedef struct triad_transport_ops_v2 {
  /* Version 1's slots. */
  int (*capabilities)(void* handle, triad_transport_caps_v1* caps);
  int (*init_world)(void* handle, int32_t rank, int32_t world_size,
                    const triad_rendezvous_v1* rendezvous, void** comm);
  int (*split)(void* handle, void* comm, int32_t color, int32_t key, void** newcomm);
  int (*comm_destroy)(void* handle, void* comm);
  int (*comm_info)(void* handle, void* comm, int32_t* rank, int32_t* size);
  int (*all_reduce)(void* handle, void* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                    DLDataType dtype, DLDevice device, int32_t op, void** request);
  int (*reduce_scatter)(void* handle, void* comm, const void* sendbuf, void* recvbuf,
                        uint64_t count, DLDataType dtype, DLDevice device, int32_t op,
                        void** request);
  int (*all_gather)(void* handle, void* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                    DLDataType dtype, DLDevice device, void** request);
  int (*broadcast)(void* handle, void* comm, void* buf, uint64_t count, DLDataType dtype,
                   DLDevice device, int32_t root, void** request);
  int (*send)(void* handle, void* comm, const void* buf, uint64_t count, DLDataType dtype,
              DLDevice device, int32_t peer, uint32_t tag, void** request);
  int (*recv)(void* handle, void* comm, void* buf, uint64_t count, DLDataType dtype,
              DLDevice device, int32_t peer, uint32_t tag, void** request);
  int (*barrier)(void* handle, void* comm, void** request);
  int (*test)(void* handle, void* request, int32_t* done);
  int (*wait)(void* handle, void* request, int64_t timeout_ms);
  int (*request_free)(void* handle, void* request);

  /* Version 2's (above): non-blocking progress of everything pending; never blocks. */
  int (*progress)(void* handle);
  /* count elements per peer block; sendbuf and recvbuf n * count each, not overlapping. */
  int (*all_to_all)(void* handle, void* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                    DLDataType dtype, DLDevice device, void** request);
} triad_transport_ops_v2;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_TRANSPORT_V2_H */
