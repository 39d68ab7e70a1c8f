// C++ layer for data-parallel plugins: derive from DataPlugin, then
//   TRIAD_DATA_PLUGIN(MyData, "myname", "1.0", "what it is", TRIAD_PARAMS(kParams))
#pragma once

#include <cstdint>

#include "triad/sdk/data_v4.h"
#include "triad/sdk/plugin.hpp"

namespace triad::sdk {

class DataPlugin {
 public:
  virtual ~DataPlugin() = default;
  virtual triad_data_caps_v1 capabilities() const = 0;
  virtual void setup(const triad_data_setup_v2& setup) = 0;
  virtual void grads_ready(void* grads, uint64_t offset, uint64_t count) = 0;
  virtual void finish_grads(void* grads) = 0;
  virtual void owned_range(uint64_t* offset, uint64_t* count) const = 0;
  virtual void after_step(void* params) = 0;
  // ZeRO-2/3 (data_v2.h). A plugin that partitions nothing beyond the optimizer keeps these.
  virtual uint32_t partitioning() const { return 0; }
  virtual void shard(uint64_t*, uint64_t*) const {
    throw unsupported("this data plugin does not partition gradients");
  }
  virtual void reduce_unit(uint32_t, void*, void*) {
    throw unsupported("this data plugin does not partition gradients");
  }
  virtual void gather_unit(uint32_t, const void*, void*, DLDataType) {
    throw unsupported("this data plugin does not partition parameters");
  }
  virtual void wait_unit(uint32_t) {}
};

template <class Impl>
struct DataAdapter {
  static int capabilities(void* h, triad_data_caps_v1* c) {
    return guarded<Impl>(h, [&](Impl& p) { *c = p.capabilities(); });
  }
  static int setup(void* h, const triad_data_setup_v2* s) {
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
  static int partitioning(void* h, uint32_t* flags) {
    return guarded<Impl>(h, [&](Impl& p) { *flags = p.partitioning(); });
  }
  static int shard(void* h, uint64_t* offsets, uint64_t* counts) {
    return guarded<Impl>(h, [&](Impl& p) { p.shard(offsets, counts); });
  }
  static int reduce_unit(void* h, uint32_t unit, void* grads, void* owned) {
    return guarded<Impl>(h, [&](Impl& p) { p.reduce_unit(unit, grads, owned); });
  }
  static int gather_unit(void* h, uint32_t unit, const void* owned, void* params, DLDataType t) {
    return guarded<Impl>(h, [&](Impl& p) { p.gather_unit(unit, owned, params, t); });
  }
  static int wait_unit(void* h, uint32_t unit) {
    return guarded<Impl>(h, [&](Impl& p) { p.wait_unit(unit); });
  }
  static constexpr triad_data_ops_v2 ops = {
      &capabilities, &setup, &grads_ready, &finish_grads, &owned_range, &after_step,
      &partitioning, &shard, &reduce_unit, &gather_unit,  &wait_unit};
};

template <>
struct KindTraits<triad_data_ops_v2> {
  static constexpr std::string_view kind = "data";
  static constexpr uint32_t abi_version = TRIAD_DATA_ABI_VERSION;
};

}  // namespace triad::sdk

#define TRIAD_DATA_PLUGIN(Impl, NAME, VERSION, DESC, PARAMS)        \
  TRIAD_DEFINE_PLUGIN_DESCRIPTOR(Impl, "data", NAME, VERSION, DESC, \
                                 &::triad::sdk::DataAdapter<Impl>::ops, PARAMS)
