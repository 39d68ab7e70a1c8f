// A pipeline plugin written against the version-1 pipeline ABI (pipeline_v1.h) by hand, as a
// plugin built before pipeline_v2.h would be: GPipe (every forward, then every backward in
// reverse, m buffers), one virtual stage. It proves the loader's adapter: the core speaks
// version 2 to it, and the pipeline suite passes.
#include <cstdio>
#include <vector>

#include "raw_plugin.hpp"
#include "triad/sdk/pipeline_v1.h"

namespace {

struct Plugin {
  char err[256] = "";
};

int capabilities(void*, triad_pipe_caps_v1* c) {
  c->max_virtual_stages = 1;
  return TRIAD_OK;
}

// TRIAD_OK for a layout it schedules, else the status with last_error filled.
int check(Plugin& p, const triad_pipe_layout_v1* l) {
  if (!l || l->stages < 1 || l->stage < 0 || l->stage >= l->stages || l->micro_batches < 1 ||
      l->virtual_stages < 1) {
    std::snprintf(p.err, sizeof p.err, "malformed layout");
    return TRIAD_ERR_INVALID;
  }
  if (l->virtual_stages > 1) {
    std::snprintf(p.err, sizeof p.err, "it schedules up to 1 virtual stage");
    return TRIAD_ERR_UNSUPPORTED;
  }
  return TRIAD_OK;
}

int num_buffers(void* h, const triad_pipe_layout_v1* l, int32_t* buffers) {
  if (int rc = check(*static_cast<Plugin*>(h), l); rc != TRIAD_OK) return rc;
  *buffers = l->micro_batches;
  return TRIAD_OK;
}

int schedule(void* h, const triad_pipe_layout_v1* l, triad_pipe_instr_v1* out, size_t capacity,
             size_t* count) {
  if (int rc = check(*static_cast<Plugin*>(h), l); rc != TRIAD_OK) return rc;
  const bool first = l->stage == 0, last = l->stage == l->stages - 1;
  std::vector<triad_pipe_instr_v1> s;
  for (int32_t mb = 0; mb < l->micro_batches; ++mb) {
    s.push_back({TRIAD_PIPE_LOAD_MICRO_BATCH, mb, mb, 0});
    if (!first) s.push_back({TRIAD_PIPE_RECV_ACTIVATION, mb, mb, 0});
    s.push_back({TRIAD_PIPE_FORWARD, mb, mb, 0});
    if (!last) s.push_back({TRIAD_PIPE_SEND_ACTIVATION, mb, mb, 0});
  }
  for (int32_t mb = l->micro_batches - 1; mb >= 0; --mb) {
    if (!last) s.push_back({TRIAD_PIPE_RECV_GRAD, mb, mb, 0});
    s.push_back({TRIAD_PIPE_BACKWARD, mb, mb, 0});
    if (!first) s.push_back({TRIAD_PIPE_SEND_GRAD, mb, mb, 0});
  }
  for (int32_t op :
       {TRIAD_PIPE_REDUCE_TIED_GRADS, TRIAD_PIPE_REDUCE_GRADS, TRIAD_PIPE_OPTIMIZER_STEP})
    s.push_back({op, -1, -1, 0});
  for (size_t i = 0; i < s.size() && i < capacity; ++i) out[i] = s[i];
  *count = s.size();
  return TRIAD_OK;
}

const triad_pipeline_ops_v1 kOps = {&capabilities, &num_buffers, &schedule};

}  // namespace

extern "C" __attribute__((visibility("default")))
const triad_plugin_v1 triad_plugin_descriptor_v1 = {
    TRIAD_ABI_VERSION_1,
    1,
    "pipeline",
    "v1old",
    "1.0",
    "a version-1 pipeline plugin (GPipe), for the loader's adapter",
    0,
    nullptr,
    &triad::test::raw_create<Plugin>,
    &triad::test::raw_destroy<Plugin>,
    &triad::test::raw_last_error<Plugin>,
    &kOps};
