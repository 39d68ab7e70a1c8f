// A deliberately broken plugin, compiled once per defect (see CMakeLists.txt):
//   BAD_NO_DESCRIPTOR  exports no descriptor at all
//   BAD_ABI=n          declares another descriptor ABI version
//   BAD_KIND_ABI=n     declares another attention (kind) ABI version
//   BAD_KIND, BAD_NAME what the descriptor claims (the file name says something else)
//   BAD_NULL_SLOT      leaves the backward slot NULL
//   BAD_NULL_PARAM=f   declares two parameters, the second with field f NULL (name, default, help)
#include <iterator>

#include "triad/sdk/attention_v1.h"

#ifndef BAD_ABI
#define BAD_ABI TRIAD_ABI_VERSION_1
#endif
#ifndef BAD_KIND_ABI
#define BAD_KIND_ABI TRIAD_ATTENTION_ABI_VERSION
#endif

namespace {

[[maybe_unused]] int create(const triad_services_v1*, const triad_params_v1*, void** handle, char*,
                            size_t) {
  *handle = nullptr;
  return TRIAD_ERR_UNSUPPORTED;
}
[[maybe_unused]] void destroy(void*) {}
[[maybe_unused]] const char* last_error(void*) {
  return "broken test plugin";
}
int capabilities(void*, triad_attention_caps_v1*) {
  return TRIAD_ERR_UNSUPPORTED;
}
int workspace_size(void*, const triad_attention_shape_v1*, size_t*, size_t*) {
  return TRIAD_ERR_UNSUPPORTED;
}
int forward(void*, const triad_attention_fwd_args_v1*) {
  return TRIAD_ERR_UNSUPPORTED;
}
[[maybe_unused]] int backward(void*, const triad_attention_bwd_args_v1*) {
  return TRIAD_ERR_UNSUPPORTED;
}

#ifdef BAD_NULL_SLOT
[[maybe_unused]] const triad_attention_ops_v1 kOps = {&capabilities, &workspace_size, &forward,
                                                      nullptr};
#else
[[maybe_unused]] const triad_attention_ops_v1 kOps = {&capabilities, &workspace_size, &forward,
                                                      &backward};
#endif

#define BAD_FIELD_name 1
#define BAD_FIELD_default 2
#define BAD_FIELD_help 3
#define BAD_FIELD_OF(f) BAD_FIELD_##f
#define BAD_FIELD(f) BAD_FIELD_OF(f)  // expands f first: BAD_NULL_PARAM -> help
#ifdef BAD_NULL_PARAM
#define BAD_NULL(f) (BAD_FIELD(BAD_NULL_PARAM) == BAD_FIELD_##f)
const triad_param_spec_v1 kParams[] = {
    {"fine", TRIAD_PARAM_INT, "1", "a well-formed parameter"},
    {BAD_NULL(name) ? nullptr : "block", TRIAD_PARAM_INT, BAD_NULL(default) ? nullptr : "64",
     BAD_NULL(help) ? nullptr : "a parameter with one field NULL"},
};
#define BAD_PARAMS std::size(kParams), kParams
#else
#define BAD_PARAMS 0, nullptr
#endif

}  // namespace

#ifndef BAD_NO_DESCRIPTOR
extern "C" __attribute__((visibility("default")))
const triad_plugin_v1 triad_plugin_descriptor_v1 = {
    BAD_ABI,     BAD_KIND_ABI, BAD_KIND,
    BAD_NAME,    "0",          "a deliberately broken plugin for the loader tests",
    BAD_PARAMS,  &create,      &destroy,
    &last_error, &kOps};
#else
extern "C" __attribute__((visibility("default"))) const int not_a_triad_plugin = 1;
#endif
