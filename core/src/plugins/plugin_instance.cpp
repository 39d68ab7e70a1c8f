#include "triad/core/plugins/plugin_instance.hpp"

#include <cstdio>
#include <stdexcept>
#include <vector>

namespace triad {

namespace {

std::string with_article(const std::string& kind) {
  const bool vowel = !kind.empty() && std::string("aeiou").find(kind[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + kind;
}

}  // namespace

PluginInstance::PluginInstance(std::shared_ptr<const LoadedPlugin> plugin, const std::string& kind,
                               const ResolvedParams& params, const triad_services_v1* services)
    : plugin_(std::move(plugin)), kind_(kind) {
  if (!plugin_) throw std::invalid_argument("PluginInstance: null plugin for kind " + kind);
  const triad_plugin_v1& d = plugin_->descriptor();
  name_ = d.name;
  if (plugin_->kind() != kind_)
    throw UserError("plugin " + plugin_->path() + " is " + with_article(plugin_->kind()) +
                    " plugin; " + with_article(kind_) + " plugin is needed here");
  char err[1024] = {0};
  void* handle = nullptr;
  const int status = call(
      "create", [&] { return d.create(services, params.c_view(), &handle, err, sizeof(err)); });
  if (!escaped_.empty()) std::snprintf(err, sizeof(err), "%s", escaped_.c_str());
  if (status != TRIAD_OK || !handle) {
    if (handle) d.destroy(handle);
    throw UserError(who() + " (" + plugin_->path() + ") failed to start (" +
                    status_name(status == TRIAD_OK ? TRIAD_ERR_INTERNAL : status) +
                    "): " + (err[0] ? err : "no message"));
  }
  handle_ = handle;
}

PluginInstance::~PluginInstance() {
  // The handle's code lives in the library: destroy it before plugin_ may unload it.
  if (handle_) plugin_->descriptor().destroy(handle_);
}

void PluginInstance::note_escape(const char* slot, const char* what) const noexcept {
  try {
    escaped_ = std::string("its ") + slot + " slot threw a C++ exception out of the .so (" + what +
               "), which the C ABI forbids: catch it inside the plugin and return a status";
  } catch (...) {
    escaped_.clear();
  }
}

std::string PluginInstance::last_error() const {
  if (!escaped_.empty()) return escaped_;
  const char* e = plugin_->descriptor().last_error(handle_);
  return e && *e ? e : "no message";
}

std::string PluginInstance::failure(int status, const std::string& what) const {
  return what + " failed (" + status_name(status) + "): " + last_error();
}

std::vector<std::string> other_plugins_that_fit(const std::string& kind, const std::string& self,
                                                const PluginFits& fits) {
  std::vector<std::string> can;
  try {
    PluginLoader loader;
    for (const auto& other : loader.available(kind)) {
      if (other == self) continue;
      try {
        auto plugin = loader.load(kind, other);
        if (fits(plugin, resolve_params(plugin->descriptor(), {}, kind))) can.push_back(other);
      } catch (const std::exception&) {
      }
    }
  } catch (const std::exception&) {
  }
  return can;
}

std::string other_plugins_fix(const std::string& kind, const std::string& self,
                              const PluginFits& fits, const std::string& none,
                              const std::string& key) {
  const std::vector<std::string> can = other_plugins_that_fit(kind, self, fits);
  const std::string set = key.empty() ? "set " + kind + ": " : "set " + key + " to ";
  std::string fix = none;
  for (size_t i = 0; i < can.size(); ++i)
    fix = i == 0 ? set + can[0] : fix + (i == 1 ? " (or " : ", ") + can[i];
  if (can.size() > 1) fix += ")";
  return fix;
}

}  // namespace triad
