// One instance of a plugin of any kind, and its whole lifecycle: check the kind, create the
// instance, read its capabilities, turn status codes into messages carrying the plugin's
// last_error, and destroy the instance before the library may unload. The kind wrappers
// (AttentionBackend, Transport, DataParallelBackend, TensorBackend) each hold one and add their
// kind's operations.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "triad/core/error.hpp"
#include "triad/core/plugins/plugin_loader.hpp"

namespace triad {

class PluginInstance {
 public:
  // Throws UserError when the plugin is not of `kind` ("plugin P is a transport plugin; an
  // attention plugin is needed here") or refuses to be created ("attention plugin 'buggy' (P)
  // failed to start (INVALID): unknown bug 'bogus'").
  PluginInstance(std::shared_ptr<const LoadedPlugin> plugin, const std::string& kind,
                 const ResolvedParams& params, const triad_services_v1* services);
  ~PluginInstance();
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }
  const LoadedPlugin& plugin() const { return *plugin_; }
  void* handle() const { return handle_; }
  // "attention plugin 'naive'", how messages name this instance.
  std::string who() const { return kind_ + " plugin '" + name_ + "'"; }

  // The kind's ops table, of the kind's current version (the loader checked the version, or
  // adapted an older one, and that no slot is NULL).
  template <class Ops>
  const Ops& ops() const {
    return *static_cast<const Ops*>(plugin_->descriptor().ops);
  }

  // Calls a slot of this instance. The C ABI lets no exception out of a plugin; one that escapes
  // a raw slot anyway (a plugin not written on the SDK's C++ layer) is caught here, becomes
  // TRIAD_ERR_INTERNAL, and last_error() names it, so that it is reported like any failed call
  // rather than ending the process.
  template <class F>
  int call(const char* slot, F&& f) const noexcept {
    escaped_.clear();
    try {
      return f();
    } catch (const std::exception& e) {
      note_escape(slot, e.what());
    } catch (...) {
      note_escape(slot, "an exception that is not a std::exception");
    }
    return TRIAD_ERR_INTERNAL;
  }

  // The plugin's message for the last failed call on this instance, or "no message".
  std::string last_error() const;
  // "<what> failed (<STATUS>): <last_error>", for the kind wrappers' errors.
  std::string failure(int status, const std::string& what) const;

  // Calls the kind's capabilities slot; throws UserError ("<who> failed to report its
  // capabilities (STATUS): why") when it fails.
  template <class Caps>
  Caps capabilities(int (*slot)(void*, Caps*)) const {
    Caps caps{};
    const int status = call("capabilities", [&] { return slot(handle_, &caps); });
    if (status != TRIAD_OK)
      throw UserError(who() + " failed to report its capabilities (" + status_name(status) +
                      "): " + last_error());
    return caps;
  }

 private:
  void note_escape(const char* slot, const char* what) const noexcept;

  std::shared_ptr<const LoadedPlugin> plugin_;
  std::string kind_, name_;
  void* handle_ = nullptr;
  mutable std::string escaped_;  // why the last call() failed when the plugin threw
};

// The other installed plugins of `kind` (not `self`) that `fits`, each loaded with its default
// parameters; one that fails to load, or throws, does not fit.
using PluginFits =
    std::function<bool(std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params)>;
std::vector<std::string> other_plugins_that_fit(const std::string& kind, const std::string& self,
                                                const PluginFits& fits);
// How a refusal names the way out: "set <kind>: a", or "set <kind>: a (or b, c)", listing
// other_plugins_that_fit; `none` when no plugin fits. A tool whose flag chooses the plugin names
// it as `key` ("set --schedule to a").
std::string other_plugins_fix(const std::string& kind, const std::string& self,
                              const PluginFits& fits, const std::string& none,
                              const std::string& key = "");

}  // namespace triad
