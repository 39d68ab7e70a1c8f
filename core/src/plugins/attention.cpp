#include "triad/core/plugins/attention.hpp"

#include <stdexcept>

#include "triad/core/error.hpp"

namespace triad {
namespace {

std::string device_name(int type) {
  switch (type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLCUDAHost:
      return "cuda_host";
    case kDLROCM:
      return "rocm";
    default:
      return "device type " + std::to_string(type);
  }
}

// Bit of triad_attention_caps_v1.dtypes for a DLPack dtype; 0 if there is none.
uint32_t dtype_bit(DLDataType t) {
  if (t.lanes != 1) return 0;
  if (t.code == kDLFloat && t.bits == 32) return TRIAD_DTYPE_BIT_FP32;
  if (t.code == kDLFloat && t.bits == 16) return TRIAD_DTYPE_BIT_FP16;
  if (t.code == kDLBfloat && t.bits == 16) return TRIAD_DTYPE_BIT_BF16;
  return 0;
}

std::string dtype_name(DLDataType t) {
  std::string base = t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kDLInt    ? "int"
                                           : "type" + std::to_string(t.code) + "_";
  return base + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

std::string list_devices(uint32_t bits) {
  std::string out;
  for (int d = 0; d < 32; ++d)
    if (bits & (1u << d)) out += (out.empty() ? "" : ", ") + device_name(d);
  return out.empty() ? "none" : out;
}

std::string list_dtypes(uint32_t bits) {
  std::string out;
  auto add = [&](uint32_t bit, const char* n) {
    if (bits & bit) out += (out.empty() ? "" : ", ") + std::string(n);
  };
  add(TRIAD_DTYPE_BIT_FP32, "float32");
  add(TRIAD_DTYPE_BIT_BF16, "bfloat16");
  add(TRIAD_DTYPE_BIT_FP16, "float16");
  return out.empty() ? "none" : out;
}

std::string list_head_dims(const triad_attention_caps_v1& c) {
  if (c.num_head_dims <= 0) return "1.." + std::to_string(c.max_head_dim);
  std::string out;
  for (int i = 0; i < c.num_head_dims && i < TRIAD_ATTENTION_MAX_HEAD_DIMS; ++i)
    out += (i ? ", " : "") + std::to_string(c.head_dims[i]);
  return out;
}

}  // namespace

std::string describe_capabilities(const triad_attention_caps_v1& c) {
  std::string masks = c.causal && c.non_causal ? "causal, non-causal"
                      : c.causal               ? "causal only"
                      : c.non_causal           ? "non-causal only"
                                               : "no masking mode";
  return "devices " + list_devices(c.devices) + "; dtypes " + list_dtypes(c.dtypes) +
         "; head dims " + list_head_dims(c) + "; " + masks;
}

AttentionBackend::AttentionBackend(std::shared_ptr<const LoadedPlugin> plugin,
                                   const ResolvedParams& params, const triad_services_v1* services)
    : instance_(std::move(plugin), "attention", params, services),
      ops_(instance_.ops<triad_attention_ops_v1>()),
      caps_(instance_.capabilities(ops_.capabilities)) {}

void AttentionBackend::check_supported(const triad_attention_shape_v1& shape) const {
  const std::string who = "attention backend '" + name() + "'";
  const int dev = shape.device.device_type;
  if (dev < 0 || dev >= 32 || !(caps_.devices & (1u << dev)))
    throw UserError(who + " does not run on device " + device_name(dev) + " (it supports " +
                    list_devices(caps_.devices) + "); choose another attention plugin");
  const uint32_t bit = dtype_bit(shape.dtype);
  if (!bit || !(caps_.dtypes & bit))
    throw UserError(who + " does not support dtype " + dtype_name(shape.dtype) + " (it supports " +
                    list_dtypes(caps_.dtypes) + ")");
  const int64_t D = shape.head_dim;
  bool dim_ok = false;
  if (caps_.num_head_dims <= 0) {
    dim_ok = D >= 1 && D <= caps_.max_head_dim;
  } else {
    for (int i = 0; i < caps_.num_head_dims && i < TRIAD_ATTENTION_MAX_HEAD_DIMS; ++i)
      dim_ok = dim_ok || caps_.head_dims[i] == D;
  }
  if (!dim_ok)
    throw UserError(who + " does not support head dim " + std::to_string(D) + " (it supports " +
                    list_head_dims(caps_) +
                    "); change hidden_size / num_attention_heads or the attention plugin");
  if (shape.causal && !caps_.causal)
    throw UserError(who + " does not support causal attention (it supports only non-causal)");
  if (!shape.causal && !caps_.non_causal)
    throw UserError(who + " does not support non-causal attention (it supports only causal)");
  // Capabilities are per plugin, not per device: a plugin refuses a combination it cannot run
  // (say float32 on a GPU) by failing workspace_size for it.
  size_t f = 0, b = 0;
  const int s = instance_.call(
      "workspace_size", [&] { return ops_.workspace_size(instance_.handle(), &shape, &f, &b); });
  if (s == TRIAD_ERR_UNSUPPORTED || s == TRIAD_ERR_INVALID)
    throw UserError(who + " cannot run " + dtype_name(shape.dtype) + " on " + device_name(dev) +
                    " with head dim " + std::to_string(D) + ": " + last_error());
}

// A call that fails during the run is the plugin's to answer for (the core checked the shape
// against its capabilities before the run): one line naming the plugin's file and the harness
// that checks it, exit 2, not an internal error of Triad's.
void AttentionBackend::check(int status, const char* what) const {
  if (status == TRIAD_OK) return;
  const std::string& path = instance_.plugin().path();
  throw UserError("attention backend '" + name() + "' " + instance_.failure(status, what) + " (" +
                  path + "; check the plugin with triad-plugin-test attention " + path + ")");
}

void AttentionBackend::workspace_size(const triad_attention_shape_v1& shape, size_t* fwd,
                                      size_t* bwd) const {
  size_t f = 0, b = 0;
  const int status = instance_.call(
      "workspace_size", [&] { return ops_.workspace_size(instance_.handle(), &shape, &f, &b); });
  // A shape or dtype the plugin refuses is the config's fault, not the core's (the memory
  // estimate asks for float32's workspace on a GPU before the run checks the shape): one line
  // naming the plugin's fix. Any other failure goes through check(): the plugin's, with its file.
  if (status == TRIAD_ERR_UNSUPPORTED)
    throw UserError("attention backend '" + name() + "' " +
                    instance_.failure(status, "workspace_size"));
  check(status, "workspace_size");
  if (fwd) *fwd = f;
  if (bwd) *bwd = b;
}

void AttentionBackend::forward(const triad_attention_fwd_args_v1& args) {
  check(try_forward(args), "forward");
}

void AttentionBackend::backward(const triad_attention_bwd_args_v1& args) {
  check(try_backward(args), "backward");
}

int AttentionBackend::try_forward(const triad_attention_fwd_args_v1& args) noexcept {
  return instance_.call("forward", [&] { return ops_.forward(instance_.handle(), &args); });
}

int AttentionBackend::try_backward(const triad_attention_bwd_args_v1& args) noexcept {
  return instance_.call("backward", [&] { return ops_.backward(instance_.handle(), &args); });
}

std::string AttentionBackend::last_error() const {
  return instance_.last_error();
}

}  // namespace triad
