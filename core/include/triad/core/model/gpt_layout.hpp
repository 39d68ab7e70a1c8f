// Where each GPT-2 parameter lives in the flat arena. Layer-major: the embeddings, then all
// tensors of layer 0, layer 1, ..., then the final layernorm, so a pipeline stage or a ZeRO
// shard owns a contiguous range. Names follow Hugging Face GPT-2 (without the
// "transformer." prefix); matmul weights are stored (out, in) — the transpose of HF's Conv1D.
//   wte.weight (V,C)   wpe.weight (maxT,C) [learned positions only]
//   h.L.ln_1.weight (C)  h.L.ln_1.bias (C)
//   h.L.attn.c_attn.weight (3C,C)  h.L.attn.c_attn.bias (3C)
//   h.L.attn.c_proj.weight (C,C)   h.L.attn.c_proj.bias (C)
//   h.L.ln_2.weight (C)  h.L.ln_2.bias (C)
//   h.L.mlp.c_fc.weight (4C,C)     h.L.mlp.c_fc.bias (4C)
//   h.L.mlp.c_proj.weight (C,4C)   h.L.mlp.c_proj.bias (C)
//   ln_f.weight (C)  ln_f.bias (C)
// The LM head is tied to wte.weight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"

namespace triad {

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in elements, into the flat arena
  size_t numel = 0;
  bool weight_decay = false;      // matmul weights and embeddings decay; biases, layernorm don't
  bool is_matmul_weight = false;  // (out,in) here, (in,out) in HF's Conv1D layout
};

struct GptLayout {
  std::vector<ParamInfo> params;
  size_t total = 0;
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range
};

GptLayout gpt_layout(const ModelConfig& m);

// Context length: max_position_embeddings, or seq_length when that is 0.
inline int context_length(const ModelConfig& m) {
  return m.max_position_embeddings > 0 ? m.max_position_embeddings : m.seq_length;
}

}  // namespace triad
