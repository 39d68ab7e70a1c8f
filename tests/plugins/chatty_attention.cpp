// A test-only attention plugin that logs through the core's logger when it is created and when
// asked for its capabilities (triad-info must print those lines after its listing), and with
// `read_undeclared: true` reads a parameter its table does not declare (the SDK's message must
// name the plugin, the parameter and the fix). It computes nothing.
#include "triad/sdk/attention.hpp"

namespace {

const triad_param_spec_v1 kParams[] = {
    {"read_undeclared", TRIAD_PARAM_BOOL, "false",
     "read the undeclared parameter 'volume' when created"},
};

class ChattyAttention : public triad::sdk::AttentionPlugin {
 public:
  ChattyAttention(triad::sdk::Services services, triad::sdk::Params p) : services_(services) {
    services_.info("chatty plugin created");
    if (p.get_bool("read_undeclared")) p.get_int("volume");
  }

  triad_attention_caps_v1 capabilities() const override {
    services_.warn("chatty plugin asked for its capabilities");
    triad_attention_caps_v1 c{};
    c.devices = 1u << kDLCPU;
    c.dtypes = TRIAD_DTYPE_BIT_FP32;
    c.max_head_dim = 64;
    return c;
  }
  void workspace_size(const triad_attention_shape_v1&, size_t* fwd, size_t* bwd) const override {
    *fwd = *bwd = 0;
  }
  void forward(const triad_attention_fwd_args_v1&) override {
    throw triad::sdk::unsupported("chatty computes nothing");
  }
  void backward(const triad_attention_bwd_args_v1&) override {
    throw triad::sdk::unsupported("chatty computes nothing");
  }

 private:
  triad::sdk::Services services_;
};

}  // namespace

TRIAD_ATTENTION_PLUGIN(ChattyAttention, "chatty", "0", "test plugin that logs",
                       TRIAD_PARAMS(kParams))
