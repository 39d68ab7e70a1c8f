// Test driver: runs one forward/backward of the model from a config on step 0's first
// micro-batch and writes everything a reference needs to check it. The weights are perturbed
// first (tests/model/perturb.hpp: random biases and layernorm scales and shifts), so every
// term of the forward shows in the loss and the gradients:
//   OUT/weights.safetensors  parameters, Triad names and (out,in) layout
//   OUT/grads.safetensors    d(mean loss)/d(parameter), same names
//   OUT/batch.safetensors    inputs and targets (as float32, exact for ids < 2^24)
//   OUT/result.json          loss and the model shape
//   OUT/hf/                  export_hf of the same weights (learned positions only)
// Usage: test-dump-step CONFIG OUT [--set k=v ...]
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "perturb.hpp"
#include "triad/core/config/config.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/hf.hpp"
#include "triad/core/io/safetensors.hpp"
#include "triad/core/model/model.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

using namespace triad;

static void write_arena(const std::string& path, const GptLayout& layout, const float* base) {
  std::vector<safetensors::TensorRef> refs;
  for (const auto& p : layout.params) refs.push_back({p.name, p.shape, base + p.offset});
  safetensors::write_f32(path, refs);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG OUT [--set k=v ...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<std::string> sets;
    for (int i = 3; i + 1 < argc; i += 2)
      if (std::string(argv[i]) == "--set") sets.push_back(argv[i + 1]);
    const Config cfg = load_config(argv[1], sets, 1);
    const std::filesystem::path out = argv[2];
    std::filesystem::create_directories(out);
    auto dev = make_device(cfg.device);
    PluginLoader loader;
    auto plugin = loader.load("attention", cfg.attention.name);
    CoreServices services(omp_get_max_threads());
    AttentionBackend attn(plugin,
                          resolve_params(plugin->descriptor(), cfg.attention.params, "attention"),
                          services.c_services());
    const auto& t = cfg.training;
    auto data = make_data_loader(cfg.data, cfg.model, t.micro_batch_size, t.global_batch_size,
                                 t.seed, 0, 1);
    GPT model(cfg.model, *dev, attn, t.micro_batch_size);
    if (!cfg.output.init_from_hf.empty()) {
      std::vector<float> full(model.full_layout().total);
      import_hf(cfg.output.init_from_hf, cfg.model, model.full_layout(), full.data());
      model.params_from_full(full.data());
    } else
      model.init_weights(t.seed);
    test::perturb_weights(model, t.seed + 1);
    const int B = t.micro_batch_size, T = cfg.model.seq_length;
    std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
    data->micro_batch(0, 0, in.data(), tg.data());
    model.zero_grad();
    const float loss = model.forward(in.data(), tg.data(), B);
    model.backward(1.0f);
    const std::vector<float> weights = model.params_to_full(), grads = model.grads_to_full();
    write_arena((out / "weights.safetensors").string(), model.full_layout(), weights.data());
    write_arena((out / "grads.safetensors").string(), model.full_layout(), grads.data());
    std::vector<float> fin(in.begin(), in.end()), ftg(tg.begin(), tg.end());
    safetensors::write_f32((out / "batch.safetensors").string(),
                           {{"inputs", {B, T}, fin.data()}, {"targets", {B, T}, ftg.data()}});
    const auto& m = cfg.model;
    nlohmann::json j{{"loss", loss},
                     {"num_layers", m.num_layers},
                     {"hidden_size", m.hidden_size},
                     {"num_attention_heads", m.num_attention_heads},
                     {"seq_length", m.seq_length},
                     {"vocab_size", m.vocab_size},
                     {"position_embedding", m.position_embedding},
                     {"rope_base", m.rope_base},
                     {"layernorm_epsilon", m.layernorm_epsilon}};
    std::ofstream(out / "result.json") << j.dump(2) << "\n";
    if (m.position_embedding == "learned")
      export_hf((out / "hf").string(), m, model.full_layout(), weights.data());
    std::printf("loss %.8f written to %s\n", loss, out.c_str());
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
