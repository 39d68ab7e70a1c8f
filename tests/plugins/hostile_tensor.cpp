// A test-only tensor plugin: Megatron's plan with `bug: none`, and one planted defect per other
// value of `bug`, to prove the tensor conformance suite catches each (and the core refuses the
// ones a rule can see). Built with -fno-gnu-unique like the buggy attention plugin.
#include <string>

#include "triad/sdk/tensor.hpp"

namespace {

const triad_param_spec_v1 kParams[] = {
    {"bug", TRIAD_PARAM_STRING, "none",
     "none | ln_column | bias_replicated | non_adjoint | out_of_range | row_output_identity | "
     "no_grad_reduce | swapped_sp | logits_identity | unsupported_tp4"},
};

constexpr int32_t I = TRIAD_TENSOR_IDENTITY, AR = TRIAD_TENSOR_ALL_REDUCE,
                  AG = TRIAD_TENSOR_ALL_GATHER, RS = TRIAD_TENSOR_REDUCE_SCATTER;

class HostileTensor final : public triad::sdk::TensorPlugin {
 public:
  HostileTensor(triad::sdk::Services, triad::sdk::Params p) : bug_(p.get_string("bug")) {
    static const char* known[] = {"none",           "ln_column",    "bias_replicated",
                                  "non_adjoint",    "out_of_range", "row_output_identity",
                                  "no_grad_reduce", "swapped_sp",   "logits_identity",
                                  "unsupported_tp4"};
    for (const char* k : known)
      if (bug_ == k) return;
    throw triad::sdk::invalid("unknown bug '" + bug_ + "'");
  }

  triad_tensor_caps_v1 capabilities() const override { return {0, 1}; }

  int32_t split(const triad_tensor_layout_v1& l, int32_t role) const override {
    refuse_tp4(l);
    if (l.tp_size == 1) return TRIAD_TENSOR_SPLIT_REPLICATED;
    switch (role) {
      case TRIAD_TENSOR_ROLE_LAYERNORM_WEIGHT:
        return bug_ == "ln_column" ? TRIAD_TENSOR_SPLIT_COLUMN : TRIAD_TENSOR_SPLIT_REPLICATED;
      case TRIAD_TENSOR_ROLE_FC_BIAS:
        return bug_ == "bias_replicated" ? TRIAD_TENSOR_SPLIT_REPLICATED
                                         : TRIAD_TENSOR_SPLIT_COLUMN;
      case TRIAD_TENSOR_ROLE_QKV_WEIGHT:
      case TRIAD_TENSOR_ROLE_QKV_BIAS:
      case TRIAD_TENSOR_ROLE_FC_WEIGHT:
        return TRIAD_TENSOR_SPLIT_COLUMN;
      case TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT:
      case TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT:
        return bug_ == "out_of_range" ? 7 : TRIAD_TENSOR_SPLIT_ROW;
      case TRIAD_TENSOR_ROLE_WORD_EMBEDDING:
        return TRIAD_TENSOR_SPLIT_VOCAB;
      default:
        return TRIAD_TENSOR_SPLIT_REPLICATED;
    }
  }

  triad_tensor_collectives_v1 boundary(const triad_tensor_layout_v1& l, int32_t b) const override {
    refuse_tp4(l);
    if (l.tp_size == 1) return {I, I};
    const bool sp = l.sequence_parallel != 0;
    switch (b) {
      case TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT:
        if (bug_ == "non_adjoint") return {AR, AR};
        if (sp)
          return bug_ == "swapped_sp" ? triad_tensor_collectives_v1{RS, AG}
                                      : triad_tensor_collectives_v1{AG, RS};
        return {I, AR};
      case TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT:
        if (bug_ == "row_output_identity" && !sp) return {I, AR};
        return sp ? triad_tensor_collectives_v1{RS, AG} : triad_tensor_collectives_v1{AR, I};
      case TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT:
        return sp ? triad_tensor_collectives_v1{RS, AG} : triad_tensor_collectives_v1{AR, I};
      case TRIAD_TENSOR_BOUNDARY_LOGITS:
        return bug_ == "logits_identity" ? triad_tensor_collectives_v1{I, I}
                                         : triad_tensor_collectives_v1{AR, I};
      default:  // replicated grads
        return sp && bug_ != "no_grad_reduce" ? triad_tensor_collectives_v1{I, AR}
                                              : triad_tensor_collectives_v1{I, I};
    }
  }

 private:
  // Declares every tp, then has no plan for tp 4.
  void refuse_tp4(const triad_tensor_layout_v1& l) const {
    if (bug_ == "unsupported_tp4" && l.tp_size == 4)
      throw triad::sdk::unsupported("tp 4 is not implemented yet");
  }
  std::string bug_;
};

}  // namespace

TRIAD_TENSOR_PLUGIN(HostileTensor, "hostile", "0", "test tensor plugin with planted defects",
                    TRIAD_PARAMS(kParams))
