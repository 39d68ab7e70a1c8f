// Model and engine tests: determinism, loss falls, gradient accumulation, lr schedule, FLOPs
// formula, Hugging Face round trip.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "triad/core/config/config.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/hf.hpp"
#include "triad/core/io/safetensors.hpp"
#include "triad/core/model/model.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/train/engine.hpp"

using namespace triad;
namespace fs = std::filesystem;

namespace {

std::string tiny() {
  return std::string(TRIAD_SOURCE_DIR) + "/configs/gpt-tiny.yaml";
}

Config small_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.num_layers=2",          "model.hidden_size=32",
                                   "model.num_attention_heads=2", "model.seq_length=16",
                                   "training.micro_batch_size=4", "training.train_iters=4",
                                   "data.kind=synthetic"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config(tiny(), sets, 1);
}

struct Fixture {
  std::unique_ptr<Device> dev = make_device("cpu");
  PluginLoader loader;
  CoreServices services{1};
  std::unique_ptr<AttentionBackend> attn;
  explicit Fixture(const std::string& name = "naive") {
    auto p = loader.load("attention", name);
    attn = std::make_unique<AttentionBackend>(p, resolve_params(p->descriptor(), {}, "attention"),
                                              services.c_services());
  }
};

}  // namespace

TEST(Engine, SameSeedSameLossesBitForBit) {
  TrainOptions o;
  o.quiet = true;
  o.write_output = false;
  const Config c = small_config();
  const auto a = train(c, o), b = train(c, o);
  ASSERT_EQ(a.steps.size(), 4u);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << i + 1;
  }
  const auto c2 = train(small_config({"training.seed=7"}), o);
  EXPECT_NE(a.steps[0].loss, c2.steps[0].loss);
}

TEST(Engine, LossFallsOnText) {
  TrainOptions o;
  o.quiet = true;
  o.write_output = false;
  const Config c = load_config(tiny(), {"training.train_iters=25", "model.num_layers=2"}, 1);
  const auto r = train(c, o);
  // Byte-level English: the initial loss is about ln(256) = 5.55.
  EXPECT_NEAR(r.steps.front().loss, std::log(256.0), 0.3);
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss - 1.5);
}

TEST(Engine, WritesConfigAndJsonl) {
  const fs::path dir = fs::temp_directory_path() / "triad-test-engine-out";
  fs::remove_all(dir);
  TrainOptions o;
  o.quiet = true;
  train(small_config({"output.dir=" + dir.string(), "training.train_iters=3"}), o);
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    for (const char* key :
         {"\"step\"", "\"loss\"", "\"lr\"", "\"grad_norm\"", "\"ms_per_step\"", "\"samples_per_s\"",
          "\"tokens_per_s\"", "\"tflops_per_device\"", "\"peak_memory_bytes\""})
      EXPECT_NE(line.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(fs::exists(dir / "config.yaml"));
  // The written config loads again and describes the same run.
  const Config again = load_config((dir / "config.yaml").string(), {}, 1);
  EXPECT_EQ(again.model.hidden_size, 32);
  fs::remove_all(dir);
}

TEST(Model, GradientAccumulationEqualsOneBigBatch) {
  Fixture f;
  Config c = small_config();
  GPT big(c.model, *f.dev, *f.attn, 4), small(c.model, *f.dev, *f.attn, 2);
  big.init_weights(3);
  small.init_weights(3);
  const int T = c.model.seq_length;
  std::vector<int32_t> in(4 * T), tg(4 * T);
  for (size_t i = 0; i < in.size(); ++i) in[i] = (i * 7 + 3) % 256, tg[i] = (i * 11 + 5) % 256;
  big.zero_grad();
  const float lb = big.forward(in.data(), tg.data(), 4);
  big.backward(1.0f);
  small.zero_grad();
  float ls = small.forward(in.data(), tg.data(), 2);
  small.backward(0.5f);
  ls += small.forward(in.data() + 2 * T, tg.data() + 2 * T, 2);
  small.backward(0.5f);
  EXPECT_NEAR(lb, ls / 2, 1e-5);
  double num = 0, den = 0;
  for (size_t i = 0; i < big.num_params(); ++i) {
    const double d = big.grads()[i] - small.grads()[i];
    num += d * d;
    den += double(big.grads()[i]) * big.grads()[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

// An optimizer config with only the schedule's peak and floor set.
static OptimizerConfig peak_and_floor(double lr, double min_lr) {
  OptimizerConfig o;
  o.lr = lr;
  o.min_lr = min_lr;
  return o;
}

TEST(Engine, LearningRateScheduleIsMegatrons) {
  OptimizerConfig o = peak_and_floor(1.0, 0.1);
  LrScheduleConfig s;
  s.lr_warmup_iters = 10;
  s.lr_decay_style = "cosine";
  // Warm-up: lr * step / warmup.
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 10), 1.0);
  // Cosine over steps 10..110: min + (lr - min) (1 + cos(pi r)) / 2 at r = 1/4, 1/2, 3/4
  // (cos(pi/4) = 0.70710678...). Only the midpoint is where cosine and linear agree.
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 35), 0.86819805153394640, 1e-12);
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 60), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 85), 0.23180194846605365, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 111), 0.1);  // past the end: min_lr
  // lr_decay_iters shorter than train_iters: the decay spans steps 10..60, then min_lr holds.
  s.lr_decay_iters = 60;
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 20), 0.91405764746872634, 1e-12);  // r = 1/5
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 35), 0.55, 1e-12);                 // r = 1/2
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 60), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 80), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 110), 0.1);
  s.lr_decay_iters = 0;
  // min_lr is the floor the decay aims at: with 0, cosine at r = 1/4 is (1 + cos(pi/4)) / 2.
  o.min_lr = 0.0;
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 35), 0.85355339059327373, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 110), 0.0);
  o.min_lr = 0.1;
  s.lr_decay_style = "linear";
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 35), 0.775, 1e-12);
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 60), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 85), 0.325, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 110), 0.1);
  s.lr_decay_style = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 5), 0.5);  // warm-up still applies
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 100), 1.0);
  // Megatron's inverse-square-root (optimizer_param_scheduler.py): lr sqrt(warmup / step) after
  // the warm-up, never below min_lr.
  s.lr_decay_style = "inverse-square-root";
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 40), 0.5);  // sqrt(10 / 40)
  EXPECT_NEAR(learning_rate(o, s, 1000, 1, 90), 1.0 / 3.0, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 2000, 1, 1000), 0.1);  // sqrt(0.01) = 0.1 = min_lr
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 5000, 1, 4000), 0.1);  // 0.05, floored
  // DeepSpeed's log warm-up (WarmupLR's default): log(step + 1) / log(warmup), at most 1.
  s.lr_decay_style = "constant";
  s.lr_warmup_style = "log";
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 1), std::log(2.0) / std::log(10.0), 1e-15);
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 4), std::log(5.0) / std::log(10.0), 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 110, 1, 10), 1.0);
  s.lr_warmup_iters = 1;  // log(1) is 0: DeepSpeed's max(2, warmup)
  EXPECT_NEAR(learning_rate(o, s, 110, 1, 1), 1.0, 1e-15);
}

// Megatron's get_lr (optimizer_param_scheduler.py): past the decay's end every decaying style,
// inverse-square-root included, holds min_lr.
TEST(Engine, InverseSquareRootEndsAtTheDecayEnd) {
  const OptimizerConfig o = peak_and_floor(1.0, 0.1);
  LrScheduleConfig s;
  s.lr_warmup_iters = 4;
  s.lr_decay_style = "inverse-square-root";
  s.lr_decay_iters = 16;
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 100, 1, 16), 0.5);  // sqrt(4 / 16), the last decay step
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 100, 1, 17), 0.1);  // past it: min_lr, not sqrt(4 / 17)
  s.lr_decay_iters = 0;                                    // = train_iters
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 100, 1, 64), 0.25);
}

// Megatron counts its schedule in samples: a warm-up of 10 samples at a global batch of 4 ends
// 2.5 steps in, and a fraction of the decay need not be whole steps either.
TEST(Engine, SampleCountsAndFractionsNeedNotBeWholeSteps) {
  const OptimizerConfig o = peak_and_floor(1.0, 0.0);
  LrScheduleConfig s;
  s.lr_decay_style = "linear";
  s.lr_warmup_samples = 10;
  s.lr_decay_samples = 60;                                           // 15 steps of 4
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 20, 4, 1), 0.4);              // 4 of 10 samples
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 20, 4, 2), 0.8);              // 8 of 10
  EXPECT_NEAR(learning_rate(o, s, 20, 4, 7), 1 - 18.0 / 50, 1e-15);  // (28 - 10) / (60 - 10)
  EXPECT_DOUBLE_EQ(learning_rate(o, s, 20, 4, 15), 0.0);
  EXPECT_EQ(lr_phases(s, 20, 4).warmup, 2.5);
  s.lr_warmup_samples = 0;
  s.lr_decay_samples = 0;
  s.lr_decay_iters = 16;
  s.lr_warmup_fraction = 0.15;  // 2.4 steps of the 16
  EXPECT_NEAR(learning_rate(o, s, 20, 4, 1), 1 / 2.4, 1e-15);
  EXPECT_NEAR(learning_rate(o, s, 20, 4, 2), 2 / 2.4, 1e-15);
  EXPECT_NEAR(learning_rate(o, s, 20, 4, 3), 1 - 0.6 / 13.6, 1e-15);
}

// Megatron's scheduler steps after the update (step k applies what it logged at k - 1);
// DeepSpeed's is set once before step 1 and stepped after each update (step k applies its
// value at k - 2; the first two steps the warm-up's start).
TEST(Engine, LaggedSchedulesApplyEarlierValues) {
  const OptimizerConfig o = peak_and_floor(1.0, 0.0);
  LrScheduleConfig s;
  s.lr_decay_style = "linear";
  s.lr_warmup_iters = 4;
  s.lr_decay_iters = 12;
  for (int lag : {0, 1, 2}) {
    s.lr_lag_steps = lag;
    for (int step = 1; step <= 14; ++step) {
      LrScheduleConfig plain = s;
      plain.lr_lag_steps = 0;
      EXPECT_DOUBLE_EQ(learning_rate(o, s, 14, 1, step),
                       learning_rate(o, plain, 14, 1, std::max(0, step - lag)))
          << "lag " << lag << " step " << step;
    }
  }
  s.lr_lag_steps = 2;
  EXPECT_EQ(learning_rate(o, s, 14, 1, 1), 0.0);
  EXPECT_EQ(learning_rate(o, s, 14, 1, 2), 0.0);
  EXPECT_EQ(learning_rate(o, s, 14, 1, 3), 0.25);
  s.lr_warmup_iters = 0;  // no warm-up: Megatron's step 1 applies lr(0), the peak
  s.lr_lag_steps = 1;
  EXPECT_EQ(learning_rate(o, s, 14, 1, 1), 1.0);
  EXPECT_NEAR(learning_rate(o, s, 14, 1, 4), 0.75, 1e-15);
}

TEST(Engine, FlopsFormula) {
  ModelConfig m;
  m.num_layers = 12, m.hidden_size = 768, m.seq_length = 1024, m.vocab_size = 50257;
  // 72 B s l h^2 (1 + s/6h + V/12lh) for B = 8
  const double expect =
      72.0 * 8 * 1024 * 12 * 768.0 * 768.0 * (1 + 1024.0 / (6 * 768) + 50257.0 / (12.0 * 12 * 768));
  EXPECT_DOUBLE_EQ(model_flops_per_step(m, 8), expect);
}

TEST(HuggingFace, ExportThenImportIsExact) {
  Fixture f;
  Config c = small_config();
  GPT a(c.model, *f.dev, *f.attn, 1), b(c.model, *f.dev, *f.attn, 1);
  a.init_weights(11);
  const fs::path dir = fs::temp_directory_path() / "triad-test-hf";
  fs::remove_all(dir);
  export_hf(dir.string(), c.model, a.full_layout(), a.params_to_full().data());
  EXPECT_TRUE(fs::exists(dir / "config.json"));
  std::vector<float> full(b.full_layout().total);
  import_hf(dir.string(), c.model, b.full_layout(), full.data());
  b.params_from_full(full.data());
  for (size_t i = 0; i < a.num_params(); ++i) ASSERT_EQ(a.params()[i], b.params()[i]) << i;
  // A config that disagrees with the folder is refused, naming the key.
  Config other = small_config({"model.num_layers=3"});
  try {
    check_hf(dir.string(), other.model, gpt_layout(other.model));
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("n_layer"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// What GPT2Config says beyond the shapes is checked against what Triad's GPT computes: a folder
// whose model would compute otherwise is refused naming the key, one that computes the same is
// read.
TEST(HuggingFace, RefusesAConfigTriadWouldComputeOtherwise) {
  Fixture f;
  Config c = small_config();
  GPT a(c.model, *f.dev, *f.attn, 1);
  a.init_weights(11);
  const fs::path dir = fs::temp_directory_path() / "triad-test-hf-config";
  fs::remove_all(dir);
  export_hf(dir.string(), c.model, a.full_layout(), a.params_to_full().data());
  const nlohmann::json exported = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  const auto file = safetensors::read((dir / "model.safetensors").string());
  std::vector<std::vector<float>> data;  // every tensor as F32, kept for the refs
  std::vector<safetensors::TensorRef> refs;
  for (const auto& [name, t] : file.tensors) {
    data.push_back(t.to_f32());
    refs.push_back({name, t.shape, data.back().data()});
  }
  const std::vector<float> wte = file.tensors.at("transformer.wte.weight").to_f32();
  const std::vector<int64_t> wte_shape = file.tensors.at("transformer.wte.weight").shape;
  // lm_head: none, wte's values, or others.
  auto write = [&](const nlohmann::json& edit, const std::vector<float>* head) {
    nlohmann::json cj = exported;
    cj.merge_patch(edit);
    std::ofstream(dir / "config.json") << cj.dump();
    std::vector<safetensors::TensorRef> r = refs;
    if (head) r.push_back({"lm_head.weight", wte_shape, head->data()});
    safetensors::write_f32((dir / "model.safetensors").string(), r);
  };
  auto refused = [&](const nlohmann::json& edit, const std::vector<std::string>& words,
                     const std::vector<float>* head = nullptr) {
    write(edit, head);
    try {
      check_hf(dir.string(), c.model, gpt_layout(c.model));
      ADD_FAILURE() << "accepted " << edit.dump();
    } catch (const UserError& e) {
      for (const std::string& w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in " << e.what();
    }
  };
  auto accepted = [&](const nlohmann::json& edit, const std::vector<float>* head = nullptr) {
    write(edit, head);
    EXPECT_NO_THROW(check_hf(dir.string(), c.model, gpt_layout(c.model))) << edit.dump();
  };
  EXPECT_EQ(exported.at("bos_token_id"), nullptr);  // GPT2Config's 50256 is past 256 tokens
  EXPECT_EQ(exported.at("eos_token_id"), nullptr);
  refused({{"layer_norm_epsilon", 0.05}},
          {"has layer_norm_epsilon 0.05 but the config has model.layernorm_epsilon 1e-05",
           "--set model.layernorm_epsilon=0.05"});
  refused({{"activation_function", "relu"}}, {"activation_function \"relu\"", "gelu_new"});
  refused({{"n_inner", 100}}, {"n_inner 100", "4 x n_embd = 128"});
  refused({{"scale_attn_weights", false}}, {"scale_attn_weights false"});
  refused({{"scale_attn_by_inverse_layer_idx", true}}, {"scale_attn_by_inverse_layer_idx true"});
  refused({{"add_cross_attention", true}}, {"add_cross_attention true"});
  refused({{"model_type", "gpt_neo"}}, {"model_type \"gpt_neo\""});
  std::vector<float> other = wte;
  for (float& x : other) x *= 0.5f;
  refused({{"tie_word_embeddings", false}}, {"tie_word_embeddings false", "differs from wte"},
          &other);
  refused({{"tie_word_embeddings", false}}, {"has no lm_head.weight"});
  // The same model, said otherwise: read.
  accepted({{"activation_function", "gelu_pytorch_tanh"},
            {"n_inner", 128},
            {"reorder_and_upcast_attn", true},
            {"attn_pdrop", 0.1}});
  accepted({{"tie_word_embeddings", false}}, &wte);
  accepted({{"tie_word_embeddings", true}}, &other);  // tied: the head is wte, lm_head unused
  accepted({{"layer_norm_epsilon", nullptr}});        // merge_patch: absent, GPT2Config's 1e-05
  fs::remove_all(dir);
}

// flash1 and flash2 reproduce naive's loss sequence over 20 steps of a gpt-tiny-shaped run,
// with learned and with rotary positions. Tiles of 16 rows and keys against T = 64, so every
// query row after the first tile merges several key tiles (running max and sum rescaled) in the
// forward and walks several tiles in the backward: the defaults (64..128) would cover T in one.
TEST(Engine, FlashBackendsReproduceNaiveLosses) {
  TrainOptions o;
  o.quiet = true;
  o.write_output = false;
  const std::map<std::string, std::vector<std::string>> tiles = {
      {"naive", {}},
      {"flash1", {"attention.block_q=16", "attention.block_k=16"}},
      {"flash2",
       {"attention.block_q=16", "attention.block_k=16", "attention.bwd_block_q=16",
        "attention.bwd_block_k=16"}}};
  for (const char* pos : {"learned", "rope"}) {
    auto run = [&](const std::string& attn) {
      std::vector<std::string> sets = {"training.train_iters=20", "model.num_layers=2",
                                       std::string("model.position_embedding=") + pos,
                                       "attention=" + attn};
      sets.insert(sets.end(), tiles.at(attn).begin(), tiles.at(attn).end());
      const Config c = load_config(tiny(), sets, 1);
      EXPECT_EQ(c.model.seq_length, 64);
      return train(c, o);
    };
    const auto naive = run("naive");
    for (const char* attn : {"flash1", "flash2"}) {
      const auto other = run(attn);
      ASSERT_EQ(other.steps.size(), 20u);
      for (size_t i = 0; i < naive.steps.size(); ++i)
        EXPECT_NEAR(other.steps[i].loss, naive.steps[i].loss, 1e-5 * naive.steps[i].loss)
            << attn << " " << pos << " step " << i + 1;
    }
  }
}

// Activation recomputation reruns the same plugin and kernel calls on the same inputs in backward,
// so the loss sequence is bit-identical to the run without it, for every attention plugin (flash2
// with rotary positions, the others learned ones), with gradient accumulation 2 (two micro-batches
// through the same recomputation buffers). Full keeps each block's input only; selective drops
// each block's attention output (B,T,C) and lse (B,H,T) for one pair all blocks share, exactly.
class RecomputeTest : public testing::TestWithParam<std::string> {};

TEST_P(RecomputeTest, SameLossesWithLessMemory) {
  TrainOptions o;
  o.quiet = true;
  o.write_output = false;
  const std::string attn = GetParam();
  const int B = 4, T = 64, C = 128, H = 4, L = 4;
  {
    const char* pos = attn == "flash2" ? "rope" : "learned";
    auto run = [&](const std::string& granularity) {
      const Config c = load_config(
          tiny(),
          {"training.train_iters=3", "training.gradient_accumulation_steps=2",
           "training.micro_batch_size=" + std::to_string(B),
           "model.num_layers=" + std::to_string(L), std::string("model.position_embedding=") + pos,
           "attention=" + attn, "training.recompute_granularity=" + granularity},
          1);
      EXPECT_EQ(c.model.seq_length, T);
      return train(c, o);
    };
    const auto plain = run("none"), full = run("full"), selective = run("selective");
    for (const auto* r : {&full, &selective}) {
      const char* what = r == &full ? "full" : "selective";
      ASSERT_EQ(plain.steps.size(), r->steps.size());
      for (size_t i = 0; i < plain.steps.size(); ++i) {
        EXPECT_EQ(plain.steps[i].loss, r->steps[i].loss) << pos << " " << what << " step " << i + 1;
        EXPECT_EQ(plain.steps[i].grad_norm, r->steps[i].grad_norm)
            << pos << " " << what << " step " << i + 1;
      }
    }
    // One activation set (accumulation is the one-stage schedule). Per block, fp32: ln1, res_mid,
    // ln2 (N,C) and their statistics (4N), qkv (N,3C), the attention output (N,C) and lse
    // (N,H), mlp_pre and its GELU (N,4C). Full keeps res_in alone of all that, but one block's
    // worth and its output (N,C) as work space; selective keeps one attention output and lse of L.
    const size_t N = size_t(B) * T, block = N * (15 * C + H + 4) * 4, core = N * (C + H) * 4;
    const size_t none_peak = plain.steps.back().peak_bytes;
    EXPECT_EQ(none_peak - full.steps.back().peak_bytes, (L - 1) * block - N * C * 4) << pos;
    EXPECT_EQ(none_peak - selective.steps.back().peak_bytes, (L - 1) * core) << pos;
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, RecomputeTest, testing::Values("naive", "flash1", "flash2"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// recompute_granularity and its shorthands: checkpoint_activations is full and
// recompute_activations selective (Megatron's --recompute-activations), the three keys agree
// once checked, and two that ask for different granularities are one error naming both.
TEST(Recompute, GranularityAndItsShorthands) {
  auto granularity = [](std::vector<std::string> sets) {
    const Config c = load_config(tiny(), sets, 1);
    EXPECT_EQ(c.training.checkpoint_activations, c.training.recompute_granularity == "full");
    EXPECT_EQ(c.training.recompute_activations, c.training.recompute_granularity == "selective");
    return c.training.recompute_granularity;
  };
  EXPECT_EQ(granularity({}), "none");
  EXPECT_EQ(granularity({"training.checkpoint_activations=true"}), "full");
  EXPECT_EQ(granularity({"training.recompute_activations=true"}), "selective");
  EXPECT_EQ(granularity({"training.recompute_granularity=selective"}), "selective");
  EXPECT_EQ(
      granularity({"training.recompute_granularity=full", "training.checkpoint_activations=true"}),
      "full");
  // A switch set to false asks for nothing.
  EXPECT_EQ(
      granularity({"training.recompute_granularity=full", "training.checkpoint_activations=false"}),
      "full");
  EXPECT_EQ(recompute_of(load_config(tiny(), {"training.recompute_activations=true"}, 1).training),
            Recompute::selective);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"training.checkpoint_activations=true",
                                 "training.recompute_granularity=selective"},
        {"training.recompute_activations=true", "training.recompute_granularity=full"},
        {"training.checkpoint_activations=true", "training.recompute_activations=true"},
        {"training.recompute_granularity=none", "training.checkpoint_activations=true"}}) {
    try {
      load_config(tiny(), bad, 1);
      ADD_FAILURE() << "no error for " << bad[0] << " with " << bad[1];
    } catch (const UserError& e) {
      const std::string m = e.what();
      for (const std::string& set : bad) {
        const std::string key = set.substr(0, set.find('='));
        EXPECT_NE(m.find(key), std::string::npos) << m;
      }
      EXPECT_NE(m.find("keep one of them"), std::string::npos) << m;
    }
  }
}

// Each tensor is seeded from (seed, its name): a tensor's initial values do not depend on the
// layout around it. With learned positions an extra tensor (wpe) sits before every block, yet
// the blocks start from the same weights as with rotary positions.
TEST(Model, InitialisationIsIndependentOfTheLayout) {
  Fixture f;
  const Config learned = small_config();
  const Config rope = small_config({"model.position_embedding=rope"});
  GPT a(learned.model, *f.dev, *f.attn, 4), b(rope.model, *f.dev, *f.attn, 4);
  a.init_weights(42);
  b.init_weights(42);
  for (const char* name : {"wte.weight", "h.0.attn.c_attn.weight", "h.1.mlp.c_proj.weight"}) {
    const auto& pa = a.spec().find(name);
    ASSERT_EQ(pa.numel, b.spec().find(name).numel);
    for (size_t i = 0; i < pa.numel; ++i)
      ASSERT_EQ(a.param(name)[i], b.param(name)[i]) << name << " [" << i << "]";
  }
  GPT c(learned.model, *f.dev, *f.attn, 4);
  c.init_weights(43);
  EXPECT_NE(a.param("h.0.attn.c_attn.weight")[0], c.param("h.0.attn.c_attn.weight")[0]);
}
