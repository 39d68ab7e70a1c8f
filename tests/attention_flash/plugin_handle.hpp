// Opens an attention plugin .so straight through its C descriptor (dlopen), the way any core
// would, so these tests need nothing of the core.
#pragma once

#include <dlfcn.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "triad/sdk/attention_v1.h"

namespace flash_test {

class PluginHandle {
 public:
  // Creates an instance with every declared parameter at its default unless overridden.
  PluginHandle(const std::string& path, int num_threads,
               const std::map<std::string, std::string>& overrides = {}) {
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw std::runtime_error("dlopen " + path + ": " + dlerror());
    desc_ = static_cast<const triad_plugin_v1*>(dlsym(lib_, TRIAD_PLUGIN_SYMBOL_V1));
    if (!desc_) throw std::runtime_error(path + " has no " TRIAD_PLUGIN_SYMBOL_V1);
    ops_ = static_cast<const triad_attention_ops_v1*>(desc_->ops);
    for (size_t i = 0; i < desc_->num_params; ++i) {
      const auto& spec = desc_->params[i];
      auto it = overrides.find(spec.name);
      names_.push_back(spec.name);
      values_.push_back(it == overrides.end() ? spec.default_value : it->second);
    }
    for (size_t i = 0; i < names_.size(); ++i)
      items_.push_back({names_[i].c_str(), values_[i].c_str()});
    triad_params_v1 params{items_.size(), items_.data()};
    services_.struct_size = sizeof(services_);
    services_.num_threads = num_threads;
    char err[512] = {0};
    create_status_ = desc_->create(&services_, &params, &handle_, err, sizeof err);
    create_error_ = err;
  }
  ~PluginHandle() {
    if (handle_) desc_->destroy(handle_);
    if (lib_) dlclose(lib_);
  }
  PluginHandle(const PluginHandle&) = delete;
  PluginHandle& operator=(const PluginHandle&) = delete;

  const triad_plugin_v1& descriptor() const { return *desc_; }
  const triad_attention_ops_v1& ops() const { return *ops_; }
  void* handle() const { return handle_; }
  int create_status() const { return create_status_; }
  const std::string& create_error() const { return create_error_; }
  std::string last_error() const { return desc_->last_error(handle_); }

 private:
  void* lib_ = nullptr;
  const triad_plugin_v1* desc_ = nullptr;
  const triad_attention_ops_v1* ops_ = nullptr;
  void* handle_ = nullptr;
  int create_status_ = -1;
  std::string create_error_;
  triad_services_v1 services_{};
  std::vector<std::string> names_, values_;
  std::vector<triad_param_value_v1> items_;
};

}  // namespace flash_test
