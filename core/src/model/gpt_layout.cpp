#include "triad/core/model/gpt_layout.hpp"

#include <stdexcept>

namespace triad {

const ParamInfo& GptLayout::find(const std::string& name) const {
  for (const auto& p : params)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

GptLayout gpt_layout(const ModelConfig& m) {
  GptLayout lay;
  const int64_t C = m.hidden_size, V = m.vocab_size, maxT = context_length(m);
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, bool matmul) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (auto d : p.shape) p.numel *= static_cast<size_t>(d);
    p.offset = lay.total;
    p.weight_decay = decay;
    p.is_matmul_weight = matmul;
    lay.total += p.numel;
    lay.params.push_back(std::move(p));
  };
  add("wte.weight", {V, C}, true, false);
  if (m.position_embedding == "learned") add("wpe.weight", {maxT, C}, true, false);
  for (int l = 0; l < m.num_layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, false, false);
    add(h + "ln_1.bias", {C}, false, false);
    add(h + "attn.c_attn.weight", {3 * C, C}, true, true);
    add(h + "attn.c_attn.bias", {3 * C}, false, false);
    add(h + "attn.c_proj.weight", {C, C}, true, true);
    add(h + "attn.c_proj.bias", {C}, false, false);
    add(h + "ln_2.weight", {C}, false, false);
    add(h + "ln_2.bias", {C}, false, false);
    add(h + "mlp.c_fc.weight", {4 * C, C}, true, true);
    add(h + "mlp.c_fc.bias", {4 * C}, false, false);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, true, true);
    add(h + "mlp.c_proj.bias", {C}, false, false);
  }
  add("ln_f.weight", {C}, false, false);
  add("ln_f.bias", {C}, false, false);
  return lay;
}

}  // namespace triad
