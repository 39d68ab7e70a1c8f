/* Triad borrowed communicator, version 1 — FROZEN from this release on: never edit a field.
 *
 * A communicator the core lends to a plugin that communicates itself (the data plugin's
 * data-parallel group; later kinds likewise): the transport plugin's own ops table, its
 * instance handle and one communicator of that instance. The borrower calls the table with
 * exactly those handles, never creates or destroys communicators through it, and stops using
 * it when the core says (for a data plugin: when its instance is destroyed).
 *
 * `ops` is always a triad_transport_ops_v1 (TRIAD_TRANSPORT_ABI_VERSION 1), whatever kind ABI
 * the transport plugin itself was built with: the core lends the table after its own adapter.
 * A later transport table comes with its own comm_ref_v2.h.
 */
#ifndef TRIAD_SDK_COMM_REF_V1_H
#define TRIAD_SDK_COMM_REF_V1_H

#include "triad/sdk/transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct triad_comm_ref_v1 {
  const triad_transport_ops_v1* ops;
  void* transport; /* the transport instance handle */
  void* comm;      /* a communicator of that instance */
} triad_comm_ref_v1;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_COMM_REF_V1_H */
