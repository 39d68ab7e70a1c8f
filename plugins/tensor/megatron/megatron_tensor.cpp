// The `megatron` tensor plugin: Megatron-LM's tensor parallelism (Shoeybi et al., 2019) and its
// sequence parallelism (Korthikanti et al., 2022).
//   splits      qkv and fc: column-parallel (weight and bias); attention and fc projections:
//               row-parallel (weight; the bias stays whole, added after the reduction); the word
//               embedding (the tied LM head): vocab-parallel; everything else replicated.
//   boundaries  without sequence parallelism, Megatron's f / g operators: the input of a column-
//               parallel matmul is copied forward and all-reduced backward (f), the output of a
//               row-parallel matmul and of the vocab-parallel embedding are all-reduced forward
//               (g); with it, the copies become all-gathers and the all-reduces reduce-scatters
//               along the tokens, and the replicated weights used on token-split activations
//               (layernorms, row biases) all-reduce their gradients. The vocab-parallel
//               cross-entropy all-reduces its per-token statistics either way.
// At tp 1 everything is replicated and every collective is identity.
// Parameter `replicate`: a comma-separated list of parts kept whole on every rank instead of
// split: `attention` (qkv and its projection: for a head count tp does not divide), `mlp`,
// `embedding` (the word embedding and tied LM head). The core runs a whole part on every token
// itself; the boundaries above serve the parts that are split.
#include <sstream>
#include <string>

#include "triad/sdk/tensor.hpp"

namespace {

const triad_param_spec_v1 kParams[] = {
    {"replicate", TRIAD_PARAM_STRING, "",
     "parts kept whole on every rank, comma-separated: attention, mlp, embedding"}};

class MegatronTensor final : public triad::sdk::TensorPlugin {
 public:
  MegatronTensor(triad::sdk::Services, triad::sdk::Params p) {
    std::stringstream list(p.get_string("replicate"));
    for (std::string part; std::getline(list, part, ',');) {
      part.erase(0, part.find_first_not_of(" "));
      part.erase(part.find_last_not_of(" ") + 1);
      if (part == "attention")
        attention_ = false;
      else if (part == "mlp")
        mlp_ = false;
      else if (part == "embedding")
        embedding_ = false;
      else if (!part.empty())
        throw triad::sdk::invalid("replicate '" + p.get_string("replicate") + "': '" + part +
                                  "' is not a part; list parts among attention, mlp, embedding "
                                  "(e.g. replicate: attention,embedding)");
    }
  }

  triad_tensor_caps_v1 capabilities() const override {
    triad_tensor_caps_v1 c{};
    c.max_tp_size = 0;  // any
    c.sequence_parallel = 1;
    return c;
  }

  int32_t split(const triad_tensor_layout_v1& l, int32_t role) const override {
    constexpr int32_t kWhole = TRIAD_TENSOR_SPLIT_REPLICATED;
    if (l.tp_size == 1) return kWhole;
    switch (role) {
      case TRIAD_TENSOR_ROLE_QKV_WEIGHT:
      case TRIAD_TENSOR_ROLE_QKV_BIAS:
        return attention_ ? TRIAD_TENSOR_SPLIT_COLUMN : kWhole;
      case TRIAD_TENSOR_ROLE_ATTN_PROJ_WEIGHT:
        return attention_ ? TRIAD_TENSOR_SPLIT_ROW : kWhole;
      case TRIAD_TENSOR_ROLE_FC_WEIGHT:
      case TRIAD_TENSOR_ROLE_FC_BIAS:
        return mlp_ ? TRIAD_TENSOR_SPLIT_COLUMN : kWhole;
      case TRIAD_TENSOR_ROLE_FC_PROJ_WEIGHT:
        return mlp_ ? TRIAD_TENSOR_SPLIT_ROW : kWhole;
      case TRIAD_TENSOR_ROLE_WORD_EMBEDDING:
        return embedding_ ? TRIAD_TENSOR_SPLIT_VOCAB : kWhole;
      default:
        return kWhole;
    }
  }

  triad_tensor_collectives_v1 boundary(const triad_tensor_layout_v1& l, int32_t b) const override {
    constexpr int32_t I = TRIAD_TENSOR_IDENTITY, AR = TRIAD_TENSOR_ALL_REDUCE,
                      AG = TRIAD_TENSOR_ALL_GATHER, RS = TRIAD_TENSOR_REDUCE_SCATTER;
    if (l.tp_size == 1) return {I, I};
    const bool sp = l.sequence_parallel != 0;
    switch (b) {
      case TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT:
        return sp ? triad_tensor_collectives_v1{AG, RS} : triad_tensor_collectives_v1{I, AR};
      case TRIAD_TENSOR_BOUNDARY_ROW_OUTPUT:
      case TRIAD_TENSOR_BOUNDARY_EMBEDDING_OUTPUT:
        return sp ? triad_tensor_collectives_v1{RS, AG} : triad_tensor_collectives_v1{AR, I};
      case TRIAD_TENSOR_BOUNDARY_LOGITS:
        return {AR, I};
      case TRIAD_TENSOR_BOUNDARY_REPLICATED_GRADS:
        return sp ? triad_tensor_collectives_v1{I, AR} : triad_tensor_collectives_v1{I, I};
      default:
        throw triad::sdk::invalid("unknown boundary " + std::to_string(b));
    }
  }

 private:
  bool attention_ = true, mlp_ = true, embedding_ = true;  // split (false: whole on every rank)
};

}  // namespace

TRIAD_TENSOR_PLUGIN(MegatronTensor, "megatron", "1.0",
                    "Megatron-LM tensor parallelism: column/row-parallel matmuls, vocab-parallel "
                    "embedding and cross-entropy, optional sequence parallelism; any of "
                    "attention, mlp and embedding may be kept whole instead",
                    TRIAD_PARAMS(kParams))
