// Test driver for the multi-step reference (tests/reference/check_train.py): trains a model
// from a config through the engine's train() and writes what an independent optimizer loop
// needs to replay the run:
//   OUT/init/                export_hf of the starting weights, random including biases and
//                            layernorm weights (perturb.hpp); the run starts from them
//                            (output.init_from_hf)
//   OUT/batches.safetensors  inputs and targets of every micro-batch, (steps, accum, B, T) as
//                            float32 (exact for ids < 2^24)
//   OUT/final/               export_hf of the weights after the last step
//   OUT/result.json          model shape, optimizer and schedule settings, and per step the
//                            loss, learning rate and gradient norm train() reported
// Usage: test-train-dump CONFIG OUT [--set k=v ...]   (learned positions: export_hf needs them)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "perturb.hpp"
#include "triad/core/config/config.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/hf.hpp"
#include "triad/core/io/safetensors.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/train/engine.hpp"

using namespace triad;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG OUT [--set k=v ...]\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out = argv[2];
    std::filesystem::remove_all(out);
    std::filesystem::create_directories(out);
    std::vector<std::string> sets;
    for (int i = 3; i + 1 < argc; i += 2)
      if (std::string(argv[i]) == "--set") sets.push_back(argv[i + 1]);
    sets.push_back("output.init_from_hf=" + (out / "init").string());
    sets.push_back("output.export_hf=" + (out / "final").string());
    // The init folder does not exist yet: load the config without it first.
    Config cfg = load_config(argv[1], std::vector<std::string>(sets.begin(), sets.end() - 2), 1);
    const auto& m = cfg.model;
    const auto& t = cfg.training;

    // Starting weights of the test's own (perturb.hpp): no bias at 0, no layernorm weight at 1.
    const GptLayout layout = gpt_layout(m);
    export_hf((out / "init").string(), m, layout, test::random_weights(layout, t.seed).data());

    // The batches train() will see, from a loader built as the engine builds it.
    const int B = t.micro_batch_size, T = m.seq_length, accum = t.gradient_accumulation_steps;
    auto data = make_data_loader(cfg.data, m, B, t.global_batch_size,
                                 cfg.data.seed ? cfg.data.seed : t.seed, 0, 1, DataPart::train,
                                 megatron_num_samples(t, DataPart::train));
    const size_t per = size_t(B) * T;
    std::vector<float> fin(size_t(t.train_iters) * accum * per), ftg(fin.size());
    std::vector<int32_t> in(per), tg(per);
    for (int s = 0; s < t.train_iters; ++s)
      for (int a = 0; a < accum; ++a) {
        data->micro_batch(s, a, in.data(), tg.data());
        const size_t at = (size_t(s) * accum + a) * per;
        std::copy(in.begin(), in.end(), fin.begin() + at);
        std::copy(tg.begin(), tg.end(), ftg.begin() + at);
      }
    const std::vector<int64_t> shape = {t.train_iters, accum, B, T};
    safetensors::write_f32((out / "batches.safetensors").string(),
                           {{"inputs", shape, fin.data()}, {"targets", shape, ftg.data()}});

    cfg = load_config(argv[1], sets, 1);
    TrainOptions opts;
    opts.quiet = true;
    opts.write_output = false;
    const RunResult r = train(cfg, opts);

    const auto& o = cfg.optimizer;
    const auto& s = cfg.lr_schedule;
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& st : r.steps)
      steps.push_back(
          {{"step", st.step}, {"loss", st.loss}, {"lr", st.lr}, {"grad_norm", st.grad_norm}});
    nlohmann::json j{{"num_layers", m.num_layers},
                     {"hidden_size", m.hidden_size},
                     {"num_attention_heads", m.num_attention_heads},
                     {"seq_length", m.seq_length},
                     {"vocab_size", m.vocab_size},
                     {"position_embedding", m.position_embedding},
                     {"layernorm_epsilon", m.layernorm_epsilon},
                     {"train_iters", t.train_iters},
                     {"lr", o.lr},
                     {"min_lr", o.min_lr},
                     {"adam_beta1", o.adam_beta1},
                     {"adam_beta2", o.adam_beta2},
                     {"adam_eps", o.adam_eps},
                     {"weight_decay", o.weight_decay},
                     {"clip_grad", o.clip_grad},
                     {"lr_warmup_iters", s.lr_warmup_iters},
                     {"lr_decay_style", s.lr_decay_style},
                     {"lr_decay_iters", s.lr_decay_iters},
                     {"steps", steps}};
    std::ofstream(out / "result.json") << j.dump(2) << "\n";
    std::printf("%zu steps, final loss %.8f, written to %s\n", r.steps.size(),
                r.steps.empty() ? 0.0 : r.steps.back().loss, out.c_str());
    return 0;
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
