// A tensor-parallel plugin written against the Triad SDK only. It splits the MLP of every block
// as Megatron-LM does and keeps the attention block whole on every rank of the tensor group:
//   MLP          fc weight and bias column-parallel, fc_proj weight row-parallel (its bias whole,
//                added once after the reduction)
//   attention    qkv and attention-projection weights and biases replicated
//   embedding    the word embedding (also the LM head) vocab-parallel; the rest replicated
// The collectives at the region boundaries are Megatron's f and g operators: the input of a
// column-parallel matmul is copied forward and all-reduced backward, the output of a row-
// parallel matmul and of the vocab-parallel embedding all-reduced forward, and the vocab-
// parallel cross-entropy all-reduces its per-token statistics. No sequence parallelism.
// A plugin computes and communicates nothing: it states the plan and the core runs it.
#include <string>

#include "triad/sdk/tensor.hpp"

namespace {

class ExampleTensor final : public triad::sdk::TensorPlugin {
 public:
  ExampleTensor(triad::sdk::Services, triad::sdk::Params) {}

  triad_tensor_caps_v1 capabilities() const override {
    triad_tensor_caps_v1 c{};
    c.max_tp_size = 0;        // any tensor-parallel size
    c.sequence_parallel = 0;  // the adapter refuses sequence-parallel layouts for us
    return c;
  }

  int32_t split(const triad_tensor_layout_v1& l, int32_t role) const override {
    if (l.tp_size == 1) return TRIAD_TENSOR_SPLIT_REPLICATED;
    switch (role) {
      case TRIAD_TENSOR_ROLE_FC_WEIGHT:
      case TRIAD_TENSOR_ROLE_FC_BIAS:
        return TRIAD_TENSOR_SPLIT_COLUMN;
      case TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT:
        return TRIAD_TENSOR_SPLIT_ROW;
      case TRIAD_TENSOR_ROLE_WORD_EMBEDDING:
        return TRIAD_TENSOR_SPLIT_VOCAB;
      default:  // qkv, attention projection, layernorms, position embedding, fc_proj bias
        return TRIAD_TENSOR_SPLIT_REPLICATED;
    }
  }

  triad_tensor_collectives_v1 boundary(const triad_tensor_layout_v1& l, int32_t b) const override {
    const triad_tensor_collectives_v1 identity{TRIAD_TENSOR_IDENTITY, TRIAD_TENSOR_IDENTITY};
    if (l.tp_size == 1) return identity;  // one rank: nothing to communicate
    switch (b) {
      case TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT:  // f: copy forward, sum the gradients backward
        return {TRIAD_TENSOR_IDENTITY, TRIAD_TENSOR_ALL_REDUCE};
      case TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT:        // g: sum the partial outputs forward
      case TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT:  //    (each rank looked up its own rows)
      case TRIAD_TENSOR_BOUNDARY_LOGITS:            //    max, sum of exponentials, target logit
        return {TRIAD_TENSOR_ALL_REDUCE, TRIAD_TENSOR_IDENTITY};
      case TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS:  // only under sequence parallelism
        return identity;
      default:
        throw triad::sdk::invalid("unknown boundary " + std::to_string(b));
    }
  }
};

}  // namespace

TRIAD_TENSOR_PLUGIN(ExampleTensor, "example", "0.1",
                    "example out-of-tree plan: attention replicated, MLP split as Megatron-LM "
                    "(fc column, fc_proj row), vocab-parallel embedding; no sequence parallelism",
                    TRIAD_NO_PARAMS)
