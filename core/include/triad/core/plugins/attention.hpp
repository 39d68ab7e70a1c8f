// Core-side handle to one attention plugin instance (a PluginInstance: keeps its library
// loaded), turning non-zero status codes into exceptions carrying the plugin's last_error.
#pragma once

#include <memory>
#include <string>

#include "triad/core/plugins/plugin_instance.hpp"
#include "triad/sdk/attention_v1.h"

namespace triad {

class AttentionBackend {
 public:
  // Creates the instance; `params` resolved against the plugin's schema. Throws UserError if
  // the plugin refuses to be created or is not of kind "attention".
  AttentionBackend(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params,
                   const triad_services_v1* services);
  AttentionBackend(const AttentionBackend&) = delete;
  AttentionBackend& operator=(const AttentionBackend&) = delete;

  const std::string& name() const { return instance_.name(); }
  const triad_attention_caps_v1& capabilities() const { return caps_; }
  // Throws UserError naming the backend, the unsupported value, and (if given) the
  // alternatives, when this shape cannot run here.
  void check_supported(const triad_attention_shape_v1& shape) const;
  void workspace_size(const triad_attention_shape_v1& shape, size_t* fwd, size_t* bwd) const;
  void forward(const triad_attention_fwd_args_v1& args);
  void backward(const triad_attention_bwd_args_v1& args);
  // The raw status, for the conformance suite, which must see exactly which code came back.
  int try_forward(const triad_attention_fwd_args_v1& args) noexcept;
  int try_backward(const triad_attention_bwd_args_v1& args) noexcept;
  std::string last_error() const;

 private:
  void check(int status, const char* what) const;
  PluginInstance instance_;
  const triad_attention_ops_v1& ops_;
  triad_attention_caps_v1 caps_{};
};

// "devices cpu; dtypes float32; head dims 1..256; causal, non-causal" (triad-info, messages)
std::string describe_capabilities(const triad_attention_caps_v1& caps);

}  // namespace triad
