// A transport plugin written against the version-1 transport ABI (transport_v1.h) by hand, as a
// plugin built before transport_v2.h would be: world 1 only, every operation done when posted
// (a collective of one rank copies send into recv). It proves the loader's adapter: the core
// speaks version 2 to it, its progress is a no-op and it offers no all-to-all.
#include <cstring>

#include "raw_plugin.hpp"
#include "triad/sdk/transport_v1.h"

namespace {

struct Plugin {
  int world = 0;  // the world communicator's handle points here
  char err[256] = "";
};
int g_request;  // every request: already done, nothing to free

int fail(void* h, const char* why) {
  std::strncpy(static_cast<Plugin*>(h)->err, why, sizeof Plugin::err - 1);
  return TRIAD_ERR_UNSUPPORTED;
}
size_t bytes(uint64_t count, DLDataType t) {
  return size_t(count) * ((size_t(t.bits) * t.lanes + 7) / 8);
}
int done(void** request) {
  *request = &g_request;
  return TRIAD_OK;
}
int copy(const void* send, void* recv, uint64_t count, DLDataType t, void** request) {
  if (count && send != recv) std::memmove(recv, send, bytes(count, t));
  return done(request);
}

int capabilities(void*, triad_transport_caps_v1* c) {
  c->memory = TRIAD_MEM_BIT_HOST;
  c->dtypes = TRIAD_DTYPE_BIT_FP32;
  c->reduce_ops = 1u << TRIAD_REDUCE_SUM;
  c->ops = TRIAD_TRANSPORT_OP_ALL_REDUCE | TRIAD_TRANSPORT_OP_ALL_GATHER |
           TRIAD_TRANSPORT_OP_BROADCAST | TRIAD_TRANSPORT_OP_BARRIER;
  c->max_world_size = 1;
  return TRIAD_OK;
}
int init_world(void* h, int32_t rank, int32_t size, const triad_rendezvous_v1*, void** comm) {
  if (rank != 0 || size != 1) return fail(h, "world 1 only");
  *comm = &static_cast<Plugin*>(h)->world;
  return TRIAD_OK;
}
int split(void* h, void*, int32_t, int32_t, void**) {
  return fail(h, "split is not supported");
}
int comm_destroy(void*, void*) {
  return TRIAD_OK;
}
int comm_info(void*, void*, int32_t* rank, int32_t* size) {
  *rank = 0;
  *size = 1;
  return TRIAD_OK;
}
int all_reduce(void*, void*, const void* s, void* r, uint64_t n, DLDataType t, DLDevice, int32_t,
               void** q) {
  return copy(s, r, n, t, q);
}
int reduce_scatter(void* h, void*, const void*, void*, uint64_t, DLDataType, DLDevice, int32_t,
                   void**) {
  return fail(h, "reduce_scatter is not supported");
}
int all_gather(void*, void*, const void* s, void* r, uint64_t n, DLDataType t, DLDevice, void** q) {
  return copy(s, r, n, t, q);
}
int broadcast(void*, void*, void*, uint64_t, DLDataType, DLDevice, int32_t, void** q) {
  return done(q);
}
int send(void* h, void*, const void*, uint64_t, DLDataType, DLDevice, int32_t, uint32_t, void**) {
  return fail(h, "send is not supported");
}
int recv(void* h, void*, void*, uint64_t, DLDataType, DLDevice, int32_t, uint32_t, void**) {
  return fail(h, "recv is not supported");
}
int barrier(void*, void*, void** q) {
  return done(q);
}
int test(void*, void*, int32_t* finished) {
  *finished = 1;
  return TRIAD_OK;
}
int wait(void*, void*, int64_t) {
  return TRIAD_OK;
}
int request_free(void*, void*) {
  return TRIAD_OK;
}

const triad_transport_ops_v1 kOps = {&capabilities, &init_world, &split,          &comm_destroy,
                                     &comm_info,    &all_reduce, &reduce_scatter, &all_gather,
                                     &broadcast,    &send,       &recv,           &barrier,
                                     &test,         &wait,       &request_free};

}  // namespace

extern "C" __attribute__((visibility("default")))
const triad_plugin_v1 triad_plugin_descriptor_v1 = {
    TRIAD_ABI_VERSION_1,
    1,
    "transport",
    "v1old",
    "1.0",
    "a version-1 transport plugin (world 1), for the loader's adapter",
    0,
    nullptr,
    &triad::test::raw_create<Plugin>,
    &triad::test::raw_destroy<Plugin>,
    &triad::test::raw_last_error<Plugin>,
    &kOps};
