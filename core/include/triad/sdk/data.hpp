// C++ layer for data-parallel plugins: derive from DataPlugin, then
//   TRIAD_DATA_PLUGIN(MyData, "myname", "1.0", "what it is", TRIAD_PARAMS(kParams))
#pragma once

#include <cstdint>

#include "triad/sdk/data_v1.h"
#include "triad/sdk/plugin.hpp"

namespace triad::sdk {

class DataPlugin {
 public:
  virtual ~DataPlugin() = default;
  virtual triad_data_caps_v1 capabilities() const = 0;
  virtual void setup(const triad_data_setup_v1& setup) = 0;
  virtual void grads_ready(void* grads, uint64_t offset, uint64_t count) = 0;
  virtual void finish_grads(void* grads) = 0;
  virtual void owned_range(uint64_t* offset, uint64_t* count) const = 0;
  virtual void after_step(void* params) = 0;
};

template <class Impl>
struct DataAdapter {
  static int capabilities(void* h, triad_data_caps_v1* c) {
    return guarded<Impl>(h, [&](Impl& p) { *c = p.capabilities(); });
  }
  static int setup(void* h, const triad_data_setup_v1* s) {
    return guarded<Impl>(h, [&](Impl& p) { p.setup(*s); });
  }
  static int grads_ready(void* h, void* g, uint64_t off, uint64_t n) {
    return guarded<Impl>(h, [&](Impl& p) { p.grads_ready(g, off, n); });
  }
  static int finish_grads(void* h, void* g) {
    return guarded<Impl>(h, [&](Impl& p) { p.finish_grads(g); });
  }
  static int owned_range(void* h, uint64_t* off, uint64_t* n) {
    return guarded<Impl>(h, [&](Impl& p) { p.owned_range(off, n); });
  }
  static int after_step(void* h, void* params) {
    return guarded<Impl>(h, [&](Impl& p) { p.after_step(params); });
  }
  static constexpr triad_data_ops_v1 ops = {&capabilities, &setup,       &grads_ready,
                                            &finish_grads, &owned_range, &after_step};
};

template <>
struct KindTraits<triad_data_ops_v1> {
  static constexpr std::string_view kind = "data";
  static constexpr uint32_t abi_version = TRIAD_DATA_ABI_VERSION;
};

}  // namespace triad::sdk

#define TRIAD_DATA_PLUGIN(Impl, NAME, VERSION, DESC, PARAMS)        \
  TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, "data", NAME, VERSION, DESC, \
                                 &::triad::sdk::DataAdapter<Impl>::ops, PARAMS)
