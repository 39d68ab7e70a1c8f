// A data plugin written against the version-1 data ABI (data_v1.h) by hand, as a plugin built
// before data_v2.h would be: stage 0, one all-reduce of the whole arena in finish_grads. It
// proves the loader's adapters: the core speaks its current version to it, and the data suite
// passes. Built with TRIAD_TEST_DATA_V2 it is the same plugin written against data_v2.h, as one
// built before data_v3.h would be (partitioning nothing, its unit slots unsupported); with
// TRIAD_TEST_DATA_V3, against data_v3.h, as one built before data_v4.h would be (the same table).
#include <cstring>

#include "raw_plugin.hpp"
#ifdef TRIAD_TEST_DATA_V3
#define TRIAD_TEST_DATA_V2
#include "triad/sdk/data_v3.h"
#elif defined(TRIAD_TEST_DATA_V2)
#include "triad/sdk/data_v2.h"
#else
#include "triad/sdk/data_v1.h"
#endif

namespace {

struct Plugin {
  triad_data_setup_v1 s{};
  char err[256] = "";
};

int capabilities(void*, triad_data_caps_v1* c) {
  c->stages = 1u << 0;
  c->transport_ops = TRIAD_TRANSPORT_OP_ALL_REDUCE;
  return TRIAD_OK;
}
#ifdef TRIAD_TEST_DATA_V2
int setup(void* h, const triad_data_setup_v2* s) {
  static_cast<Plugin*>(h)->s = s->v1;
  return TRIAD_OK;
}
#else
int setup(void* h, const triad_data_setup_v1* s) {
  static_cast<Plugin*>(h)->s = *s;
  return TRIAD_OK;
}
#endif
int grads_ready(void*, void*, uint64_t, uint64_t) {
  return TRIAD_OK;
}
int finish_grads(void* h, void* grads) {
  Plugin& p = *static_cast<Plugin*>(h);
  const triad_comm_ref_v1& c = p.s.dp_comm;
  void* req = nullptr;
  int rc = c.ops->all_reduce(c.transport, c.comm, grads, grads, p.s.num_elements, p.s.grad_dtype,
                             p.s.device, TRIAD_REDUCE_SUM, &req);
  if (rc == TRIAD_OK) rc = c.ops->wait(c.transport, req, p.s.timeout_ms);
  if (req) c.ops->request_free(c.transport, req);
  if (rc != TRIAD_OK) std::strncpy(p.err, "the gradient all-reduce failed", sizeof p.err - 1);
  return rc;
}
int owned_range(void* h, uint64_t* off, uint64_t* n) {
  *off = 0;
  *n = static_cast<Plugin*>(h)->s.num_elements;
  return TRIAD_OK;
}
int after_step(void*, void*) {
  return TRIAD_OK;
}

#ifdef TRIAD_TEST_DATA_V2
int partitioning(void*, uint32_t* flags) {
  *flags = 0;
  return TRIAD_OK;
}
int shard(void*, uint64_t*, uint64_t*) {
  return TRIAD_ERR_UNSUPPORTED;
}
int reduce_unit(void*, uint32_t, void*, void*) {
  return TRIAD_ERR_UNSUPPORTED;
}
int gather_unit(void*, uint32_t, const void*, void*, DLDataType) {
  return TRIAD_ERR_UNSUPPORTED;
}
int wait_unit(void*, uint32_t) {
  return TRIAD_OK;
}
const triad_data_ops_v2 kOps = {&capabilities, &setup,       &grads_ready,  &finish_grads,
                                &owned_range,  &after_step,  &partitioning, &shard,
                                &reduce_unit,  &gather_unit, &wait_unit};
#ifdef TRIAD_TEST_DATA_V3
constexpr uint32_t kVersion = 3;
constexpr const char* kName = "v3old";
#else
constexpr uint32_t kVersion = 2;
constexpr const char* kName = "v2old";
#endif
#else
const triad_data_ops_v1 kOps = {&capabilities, &setup,       &grads_ready,
                                &finish_grads, &owned_range, &after_step};
constexpr uint32_t kVersion = 1;
constexpr const char* kName = "v1old";
#endif

}  // namespace

extern "C" __attribute__((visibility("default")))
const triad_plugin_v1 triad_plugin_descriptor_v1 = {
    TRIAD_ABI_VERSION_1,
    kVersion,
    "data",
    kName,
    "1.0",
    "an old-version data plugin (stage 0), for the loader's adapter",
    0,
    nullptr,
    &triad::test::raw_create<Plugin>,
    &triad::test::raw_destroy<Plugin>,
    &triad::test::raw_last_error<Plugin>,
    &kOps};
