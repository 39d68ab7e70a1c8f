// Header-only C++ layer over the frozen C ABI: a plugin author writes an ordinary class
// and one registration macro; this file generates the exported descriptor and keeps every
// exception inside the .so.
#pragma once

#include <cstdio>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include "triad/sdk/plugin_v1.h"

#define TRIAD_SDK_EXPORT __attribute__((visibility("default")))

namespace triad::sdk {

// Throw this from plugin code to return a specific status with a message.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& msg) : std::runtime_error(msg), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

inline Error invalid(const std::string& msg) {
  return Error(TRIAD_ERR_INVALID, msg);
}
inline Error unsupported(const std::string& msg) {
  return Error(TRIAD_ERR_UNSUPPORTED, msg);
}

// The plugin's resolved parameters (the core has validated and defaulted them): exactly the
// ones its parameter table declares, so reading any other is a bug of the plugin.
class Params {
 public:
  Params() = default;
  explicit Params(const triad_params_v1* p, const char* plugin_name = "plugin")
      : plugin_name_(plugin_name ? plugin_name : "plugin") {
    if (!p) return;
    for (size_t i = 0; i < p->count; ++i) values_[p->items[i].name] = p->items[i].value;
  }
  bool has(const std::string& n) const { return values_.count(n) != 0; }
  const std::string& get_string(const std::string& n) const {
    auto it = values_.find(n);
    if (it == values_.end())
      throw invalid("plugin '" + plugin_name_ + "' reads parameter '" + n +
                    "', which its parameter table does not declare, so the core never passes "
                    "it; declare '" +
                    n + "' in the plugin's parameter table (TRIAD_PARAMS), or stop reading it");
    return it->second;
  }
  long long get_int(const std::string& n) const { return std::stoll(get_string(n)); }
  double get_float(const std::string& n) const { return std::stod(get_string(n)); }
  bool get_bool(const std::string& n) const { return get_string(n) == "true"; }

 private:
  std::string plugin_name_ = "plugin";
  std::map<std::string, std::string> values_;
};

// Core services, wrapped. Always valid: missing services fall back to no-ops / malloc.
class Services {
 public:
  Services(const triad_services_v1* s, const char* plugin_name) : s_(s), name_(plugin_name) {}
  void log(int level, const std::string& msg) const {
    if (s_ && s_->logger && s_->logger->log)
      s_->logger->log(s_->logger->ctx, level, name_, msg.c_str());
  }
  void info(const std::string& m) const { log(TRIAD_LOG_INFO, m); }
  void warn(const std::string& m) const { log(TRIAD_LOG_WARN, m); }
  void debug(const std::string& m) const { log(TRIAD_LOG_DEBUG, m); }
  int num_threads() const { return s_ ? s_->num_threads : 0; }
  void* stream() const { return s_ ? s_->stream : nullptr; }
  const triad_services_v1* raw() const { return s_; }

 private:
  const triad_services_v1* s_;
  const char* name_;
};

// Every instance created by the generated create() is wrapped with its last error.
template <class Impl>
struct Instance {
  Impl* impl = nullptr;
  std::string last_error;
};

// Runs f, turning exceptions into a status and a stored message.
template <class Impl, class F>
int guarded(void* handle, F&& f) {
  auto* inst = static_cast<Instance<Impl>*>(handle);
  if (!inst || !inst->impl) return TRIAD_ERR_INVALID;
  try {
    f(*inst->impl);
    return TRIAD_OK;
  } catch (const Error& e) {
    inst->last_error = e.what();
    return e.status();
  } catch (const std::bad_alloc&) {
    inst->last_error = "out of memory";
    return TRIAD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    inst->last_error = e.what();
    return TRIAD_ERR_INTERNAL;
  } catch (...) {
    inst->last_error = "unknown exception";
    return TRIAD_ERR_INTERNAL;
  }
}

template <class Impl>
struct Lifecycle {
  static const char* name;
  static int create(const triad_services_v1* services, const triad_params_v1* params, void** handle,
                    char* err, size_t err_len) {
    try {
      auto* inst = new Instance<Impl>();
      try {
        inst->impl = new Impl(Services(services, name), Params(params, name));
      } catch (...) {
        delete inst;
        throw;
      }
      *handle = inst;
      return TRIAD_OK;
    } catch (const Error& e) {
      if (err && err_len) std::snprintf(err, err_len, "%s", e.what());
      return e.status();
    } catch (const std::exception& e) {
      if (err && err_len) std::snprintf(err, err_len, "%s", e.what());
      return TRIAD_ERR_INTERNAL;
    } catch (...) {
      if (err && err_len) std::snprintf(err, err_len, "unknown exception");
      return TRIAD_ERR_INTERNAL;
    }
  }
  static void destroy(void* handle) {
    auto* inst = static_cast<Instance<Impl>*>(handle);
    if (!inst) return;
    try {
      delete inst->impl;
    } catch (...) {
    }
    delete inst;
  }
  static const char* last_error(void* handle) {
    auto* inst = static_cast<Instance<Impl>*>(handle);
    return inst ? inst->last_error.c_str() : "null handle";
  }
};
template <class Impl>
const char* Lifecycle<Impl>::name = "plugin";

// What an ops table type stands for: its kind ("attention") and kind ABI version. Each kind's
// header specialises it next to its adapter, so the descriptor's kind_abi_version comes from
// the table a plugin really exports and can never disagree with it.
template <class Ops>
struct KindTraits;

template <class Ops>
constexpr uint32_t kind_abi_version_of(const Ops*) {
  return KindTraits<Ops>::abi_version;
}
template <class Ops>
constexpr std::string_view kind_of(const Ops*) {
  return KindTraits<Ops>::kind;
}

}  // namespace triad::sdk

// Parameter table helpers for the registration macros.
#define TRIAD_PARAMS(array) std::size(array), (array)
#define TRIAD_NO_PARAMS 0, nullptr

// Generates the exported descriptor. KIND_STR must name the kind of the ops table (checked at
// compile time); abi_version and kind_abi_version are filled in from this SDK and from the ops
// table's type. The params are variadic because TRIAD_PARAMS(...) / TRIAD_NO_PARAMS expand to
// two arguments before a kind macro (TRIAD_ATTENTION_PLUGIN) forwards them here.
#define TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, KIND_STR, NAME, VERSION, DESC, OPS_PTR, ...) \
  static_assert(::triad::sdk::kind_of(OPS_PTR) == std::string_view(KIND_STR),             \
                "the kind string does not match the ops table's kind");                   \
  template <>                                                                             \
  const char* ::triad::sdk::Lifecycle<Impl>::name = NAME;                                 \
  extern "C" TRIAD_SDK_EXPORT const triad_plugin_v1 triad_plugin_descriptor_v1 = {        \
      TRIAD_ABI_VERSION_1,                                                                \
      ::triad::sdk::kind_abi_version_of(OPS_PTR),                                         \
      KIND_STR,                                                                           \
      NAME,                                                                               \
      VERSION,                                                                            \
      DESC,                                                                               \
      __VA_ARGS__,                                                                        \
      &::triad::sdk::Lifecycle<Impl>::create,                                             \
      &::triad::sdk::Lifecycle<Impl>::destroy,                                            \
      &::triad::sdk::Lifecycle<Impl>::last_error,                                         \
      OPS_PTR};
