// The `none` tensor plugin: no tensor parallelism. It plans tp 1 without sequence parallelism
// only (the SDK's adapter refuses every other layout with TRIAD_ERR_UNSUPPORTED, from the
// capabilities below): every weight replicated, every collective identity.
#include "triad/sdk/tensor.hpp"

namespace {

class NoneTensor final : public triad::sdk::TensorPlugin {
 public:
  NoneTensor(triad::sdk::Services, triad::sdk::Params) {}

  triad_tensor_caps_v1 capabilities() const override {
    triad_tensor_caps_v1 c{};
    c.max_tp_size = 1;
    c.sequence_parallel = 0;
    return c;
  }
  int32_t split(const triad_tensor_layout_v1&, int32_t) const override {
    return TRIAD_TENSOR_SPLIT_REPLICATED;
  }
  triad_tensor_collectives_v1 boundary(const triad_tensor_layout_v1&, int32_t) const override {
    return {TRIAD_TENSOR_IDENTITY, TRIAD_TENSOR_IDENTITY};
  }
};

}  // namespace

TRIAD_TENSOR_PLUGIN(NoneTensor, "none", "1.0",
                    "no tensor parallelism: tp 1, every weight whole, no collectives",
                    TRIAD_NO_PARAMS)
