/* Triad transport plugin ABI, version 1 — FROZEN from this release on: never edit a
 * field; a new table gets transport_v2.h (see plugin_v1.h on versions).
 *
 * Kind "transport": communicators over a set of ranks and the collectives Triad needs on
 * them. The descriptor's `ops` points at a triad_transport_ops_v1; every slot is non-NULL
 * and an operation a plugin lacks returns TRIAD_ERR_UNSUPPORTED (and says so in caps).
 *
 * Objects. The instance handle (from create) owns the plugin's context, e.g. a UCX
 * worker. init_world() makes the world communicator of this process; split() makes
 * sub-communicators (tensor / pipeline / data parallel groups). Both are collective: every
 * member calls them, in the same order. A communicator and everything derived from it must
 * be destroyed before the instance; destroying a communicator is local (call barrier first
 * when peers may still be talking to it).
 *
 * Buffers are flat: (pointer, element count, DLDataType, DLDevice). Memory lives where the
 * DLDevice says (kDLCPU: host, kDLCUDA/kDLCUDAHost: CUDA); caps.memory says which a plugin
 * can touch. Reductions (all_reduce, reduce_scatter) accept the dtypes in caps.dtypes:
 * float32, bfloat16, float16 (reduced in float32 and rounded to nearest-even once per
 * partial sum). Data movement (all_gather, broadcast, send, recv) accepts any dtype of
 * whole bytes. A count of 0 is legal everywhere and still completes as a collective.
 *
 * Block split. reduce_scatter and all_gather use one rule to cut `count` elements over a
 * communicator of n ranks: rank r owns the contiguous block
 *   size(r)   = count / n + (r < count % n ? 1 : 0)
 *   offset(r) = r * (count / n) + min(r, count % n)
 * i.e. the first count % n ranks get one element more. triad_transport_block() computes it.
 *   all_reduce     send: count, recv: count (recv == send: in place)
 *   reduce_scatter send: count, recv: size(rank) — the reduced block `rank` of send
 *                  (recv == send + offset(rank): in place; the rest of send is then scratch)
 *   all_gather     send: size(rank), recv: count — block r of recv comes from rank r
 *                  (send == recv + offset(rank): in place)
 *   broadcast      buf: count on every rank; the root's data ends up everywhere
 *   send / recv    count elements to / from `peer` (a rank of the communicator), matched
 *                  by (communicator, peer, tag), in order for equal (peer, tag); a plugin
 *                  without TRIAD_TRANSPORT_OP_TAGS takes tag 0 only
 *
 * Requests. Every operation is asynchronous: it returns a request at once and the buffers
 * belong to the transport until the request is done. test() polls; wait() blocks at most
 * timeout_ms (negative: no limit) and returns TRIAD_TRANSPORT_ERR_TIMEOUT — never hangs —
 * with last_error naming the operation and, when known, the peer it is waiting for. After
 * a timeout the request is still pending: wait again, or free it. request_free() on a
 * finished request releases it; on a pending one it abandons the operation, after which
 * the communicator may only be destroyed. Progress is made inside the calls of this table
 * (a plugin may also progress in the background); waiting on one request progresses all
 * of the instance's communicators, so collectives on different communicators may be
 * issued and waited in any order. Requests on one communicator must be issued in the same
 * order on every member. One instance is used by one thread at a time.
 *
 * Rendezvous. The core passes C callbacks into its job-wide key-value store, already
 * scoped to this transport instance (the plugin chooses key names below that scope; using
 * ".../rank/<N>" suffixes lets the core name missing ranks on a timeout). The struct and
 * its ctx stay valid until the world communicator is destroyed, so split() may use them
 * too.
 */
#ifndef TRIAD_SDK_TRANSPORT_V1_H
#define TRIAD_SDK_TRANSPORT_V1_H

#include "triad/sdk/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of triad_transport_ops_v1 in this header: a transport plugin's descriptor carries it
 * as kind_abi_version. A later, incompatible table goes to transport_v2.h, which includes this
 * header and redefines TRIAD_TRANSPORT_ABI_VERSION to 2; the core then keeps an adapter from 1. */
#define TRIAD_TRANSPORT_ABI_VERSION 1

/* A transport-specific status beside plugin_v1.h's triad_status codes: wait() or a
 * rendezvous get ran past its timeout. */
#define TRIAD_TRANSPORT_ERR_TIMEOUT 64

/* Bits of triad_transport_caps_v1.memory */
#define TRIAD_MEM_BIT_HOST (1u << 0)
#define TRIAD_MEM_BIT_CUDA (1u << 1)

/* Bits of triad_transport_caps_v1.dtypes: the same values as attention_v1.h's. */
#ifndef TRIAD_DTYPE_BIT_FP32
#define TRIAD_DTYPE_BIT_FP32 (1u << 0)
#define TRIAD_DTYPE_BIT_BF16 (1u << 1)
#define TRIAD_DTYPE_BIT_FP16 (1u << 2)
#endif

typedef enum triad_reduce_op {
  TRIAD_REDUCE_SUM = 0,
  TRIAD_REDUCE_MAX = 1,
} triad_reduce_op;

/* Bits of triad_transport_caps_v1.ops */
typedef enum triad_transport_op {
  TRIAD_TRANSPORT_OP_ALL_REDUCE = 1u << 0,
  TRIAD_TRANSPORT_OP_REDUCE_SCATTER = 1u << 1,
  TRIAD_TRANSPORT_OP_ALL_GATHER = 1u << 2,
  TRIAD_TRANSPORT_OP_BROADCAST = 1u << 3,
  TRIAD_TRANSPORT_OP_SEND_RECV = 1u << 4,
  TRIAD_TRANSPORT_OP_BARRIER = 1u << 5,
  TRIAD_TRANSPORT_OP_SPLIT = 1u << 6,
  /* recv matches by tag; without this bit only tag 0 is accepted and messages between
   * two ranks match in the order they were sent (NCCL's rule). */
  TRIAD_TRANSPORT_OP_TAGS = 1u << 7,
} triad_transport_op;

/* split() color of a rank that joins no new communicator (like MPI_UNDEFINED). */
#define TRIAD_COMM_SPLIT_NONE (-1)

typedef struct triad_transport_caps_v1 {
  uint32_t memory;        /* TRIAD_MEM_BIT_* */
  uint32_t dtypes;        /* TRIAD_DTYPE_BIT_* accepted by reductions */
  uint32_t reduce_ops;    /* bit (1u << triad_reduce_op) per supported op */
  uint32_t ops;           /* triad_transport_op bits */
  int32_t max_world_size; /* 0: no limit */
} triad_transport_caps_v1;

/* The core's key-value store, scoped to this transport instance. Values are bytes. */
typedef struct triad_rendezvous_v1 {
  void* ctx;
  int (*set)(void* ctx, const char* key, const void* value, size_t len);
  /* Waits up to timeout_ms (negative: the core's default) for key. Copies min(len, cap)
   * bytes into value and writes the full length to *len (call again with a larger buffer
   * when *len > cap). Returns TRIAD_OK, TRIAD_TRANSPORT_ERR_TIMEOUT or another status. */
  int (*get)(void* ctx, const char* key, void* value, size_t cap, size_t* len, int64_t timeout_ms);
  /* Message of the last failed set/get (e.g. which keys/ranks are missing). */
  const char* (*last_error)(void* ctx);
} triad_rendezvous_v1;

typedef struct triad_transport_ops_v1 {
  int (*capabilities)(void* handle, triad_transport_caps_v1* caps);

  /* Collective over all world_size processes of the job. */
  int (*init_world)(void* handle, int32_t rank, int32_t world_size,
                    const triad_rendezvous_v1* rendezvous, void** comm);
  /* Collective over comm: members with the same color form a new communicator, ranked by
   * (key, rank in comm). color TRIAD_COMM_SPLIT_NONE yields *newcomm = NULL. */
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

  /* *done = 1 once finished; returns the operation's error if it failed. */
  int (*test)(void* handle, void* request, int32_t* done);
  int (*wait)(void* handle, void* request, int64_t timeout_ms);
  int (*request_free)(void* handle, void* request);
} triad_transport_ops_v1;

/* The block split above, for plugins and the core alike. */
static inline void triad_transport_block(uint64_t count, int32_t n, int32_t r, uint64_t* offset,
                                         uint64_t* size) {
  uint64_t base = count / (uint64_t)n, rem = count % (uint64_t)n, ur = (uint64_t)r;
  *size = base + (ur < rem ? 1u : 0u);
  *offset = ur * base + (ur < rem ? ur : rem);
}

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_TRANSPORT_V1_H */
