/* Triad plugin ABI, version 1 — FROZEN from this release on: never edit a field of this
 * file; a new descriptor layout gets its own header (plugin_v2.h) and the core keeps an adapter.
 *
 * Every plugin .so exports exactly one symbol, triad_plugin_descriptor_v1 (the string
 * TRIAD_PLUGIN_SYMBOL_V1), of type triad_plugin_v1. Only C types cross the boundary: opaque
 * handles, int status codes, plain structs and DLPack DLTensor views. No exception may leave
 * the .so.
 *
 * Two versions, one per layer. The descriptor carries
 *   abi_version       the layout of the descriptor itself (TRIAD_ABI_VERSION_1), and
 *   kind_abi_version  the version of its kind's ops table, one sequence per kind:
 *                     TRIAD_ATTENTION_ABI_VERSION (attention_v1.h),
 *                     TRIAD_TRANSPORT_ABI_VERSION (transport_v2.h),
 *                     TRIAD_DATA_ABI_VERSION (data_v2.h), TRIAD_TENSOR_ABI_VERSION (tensor_v1.h),
 *                     TRIAD_PIPELINE_ABI_VERSION (pipeline_v2.h).
 * So a new data ABI (data_v2.h, triad_data_ops_v2, TRIAD_DATA_ABI_VERSION 2) leaves attention,
 * transport, tensor and pipeline plugins untouched. Both numbers sit in the first 8 bytes of the
 * descriptor (in what would otherwise be padding), where every later descriptor layout keeps
 * them, so a loader can read them before it interprets anything else; the ops tables stay
 * plain tables of function pointers. The loader accepts a plugin whose kind ABI is the current
 * one, or an older one for which it has an adapter (a translation to the current table); any
 * other is refused with one line naming the file, the kind and both versions. The C++ layer
 * (plugin.hpp and the kind headers' TRIAD_*_PLUGIN macros) fills both in.
 */
#ifndef TRIAD_SDK_PLUGIN_V1_H
#define TRIAD_SDK_PLUGIN_V1_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRIAD_ABI_VERSION_1 1
#define TRIAD_PLUGIN_SYMBOL_V1 "triad_plugin_descriptor_v1"

/* Status codes returned by every operation. */
typedef enum triad_status {
  TRIAD_OK = 0,
  TRIAD_ERR_INVALID = 1,     /* bad argument: shape, dtype, stride, parameter value */
  TRIAD_ERR_UNSUPPORTED = 2, /* the plugin does not implement this operation / case */
  TRIAD_ERR_NO_MEMORY = 3,
  TRIAD_ERR_INTERNAL = 4,
} triad_status;

/* Services the core passes in at create time. Plugins bring no logger of their own. */
typedef enum triad_log_level {
  TRIAD_LOG_DEBUG = 0,
  TRIAD_LOG_INFO = 1,
  TRIAD_LOG_WARN = 2,
  TRIAD_LOG_ERROR = 3,
} triad_log_level;

typedef struct triad_logger_v1 {
  void* ctx;
  void (*log)(void* ctx, int level, const char* plugin_name, const char* message);
} triad_logger_v1;

/* Allocations made through this allocator are counted in the core's memory metrics. */
typedef struct triad_allocator_v1 {
  void* ctx;
  void* (*alloc)(void* ctx, size_t bytes, DLDevice device);
  void (*free)(void* ctx, void* ptr, DLDevice device);
} triad_allocator_v1;

typedef struct triad_services_v1 {
  uint32_t struct_size; /* sizeof(triad_services_v1) as the core knows it */
  const triad_logger_v1* logger;
  const triad_allocator_v1* allocator;
  void* stream;    /* device stream for the plugin's work; NULL on CPU */
  int num_threads; /* CPU threads the plugin may use; 0 = decide itself */
} triad_services_v1;

/* Parameter schema: each plugin declares its YAML parameters. The core validates the
 * plugin's YAML section against it (types, unknown keys) before create() is called. */
typedef enum triad_param_type {
  TRIAD_PARAM_INT = 0,
  TRIAD_PARAM_FLOAT = 1,
  TRIAD_PARAM_BOOL = 2,
  TRIAD_PARAM_STRING = 3,
} triad_param_type;

typedef struct triad_param_spec_v1 {
  const char* name;
  int type;                  /* triad_param_type */
  const char* default_value; /* as text, e.g. "64", "true" */
  const char* help;
} triad_param_spec_v1;

/* Resolved values, every declared parameter present, as text in canonical form. */
typedef struct triad_param_value_v1 {
  const char* name;
  const char* value;
} triad_param_value_v1;

typedef struct triad_params_v1 {
  size_t count;
  const triad_param_value_v1* items;
} triad_params_v1;

/* The one exported descriptor. `ops` points at the per-kind table of version
 * kind_abi_version, e.g. triad_attention_ops_v1 for kind "attention" and kind ABI 1. Every slot
 * of that table is non-NULL. */
typedef struct triad_plugin_v1 {
  uint32_t abi_version;      /* TRIAD_ABI_VERSION_1: the layout of this descriptor */
  uint32_t kind_abi_version; /* the version of the kind's ops table, e.g.
                                TRIAD_ATTENTION_ABI_VERSION for kind "attention" */
  const char* kind;          /* "attention", "transport", "data", "tensor", "pipeline" */
  const char* name;          /* "naive", "flash2", ...: file is libtriad-<kind>-<name>.so */
  const char* version;       /* the plugin's own version, free text */
  const char* description;
  size_t num_params;
  const triad_param_spec_v1* params;
  /* Creates an instance. On failure returns non-zero and writes a message into err. */
  int (*create)(const triad_services_v1* services, const triad_params_v1* params, void** handle,
                char* err, size_t err_len);
  void (*destroy)(void* handle);
  /* Message of the last failed call on this handle (valid until the next call). */
  const char* (*last_error)(void* handle);
  const void* ops;
} triad_plugin_v1;

#ifdef __cplusplus
}
#endif

#endif /* TRIAD_SDK_PLUGIN_V1_H */
