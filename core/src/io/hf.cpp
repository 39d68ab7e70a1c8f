#include "triad/core/io/hf.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>

#include <unistd.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/io/safetensors.hpp"

namespace triad {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kPrefix = "transformer.";

// GPT2Config's own defaults (50256, for GPT-2's 50257 tokens) would name a token past a byte
// vocabulary: `eot` is the id, or null.
json hf_config_json(const ModelConfig& m, const json& eot) {
  return json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", m.vocab_size},
              {"n_positions", context_length(m)},
              {"n_ctx", context_length(m)},
              {"n_embd", m.hidden_size},
              {"n_layer", m.num_layers},
              {"n_head", m.num_attention_heads},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", m.layernorm_epsilon},
              {"initializer_range", m.init_std},
              {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0},
              {"attn_pdrop", 0.0},
              {"tie_word_embeddings", true},
              {"bos_token_id", eot},
              {"eos_token_id", eot},
              {"torch_dtype", "float32"}};
}

json read_json(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec))
    throw UserError("init_from_hf: '" + p.string() +
                    "' not found; the folder needs config.json and model.safetensors (as written "
                    "by export_hf or save_pretrained)");
  const std::string text =
      read_regular_file(p.string(), "init_from_hf file",
                        "point output.init_from_hf at a folder written by export_hf");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw UserError("init_from_hf: '" + p.string() + "' is not valid JSON: " + e.what());
  }
}

// "<|endoftext|>"'s id in a GPT-2 vocabulary (encoder.json) within the model's, or else, with no
// vocabulary, 50256 for GPT-2's size: what config.json's bos/eos_token_id say.
json end_of_text(const ModelConfig& m, const HfTokenizerFiles& tok) {
  if (tok.encoder_json.empty()) return m.vocab_size == 50257 ? json(50256) : json();
  const json vocab = json::parse(read_regular_file(tok.encoder_json, "GPT-2 vocabulary",
                                                   "point data.vocab_file at GPT-2's encoder.json"),
                                 nullptr, /*allow_exceptions=*/false);
  const auto it = vocab.is_object() ? vocab.find("<|endoftext|>") : vocab.end();
  if (it == vocab.end() || !it->is_number_integer() || it->get<int64_t>() >= m.vocab_size)
    return json();
  return *it;
}

// The GPT2Config keys beyond the shapes that change what the model computes, each as
// transformers reads it (absent: its default): a model Triad's GPT would compute otherwise is
// refused, never trained as another. Dropout (attn_pdrop, ...) only regularises training, which
// Triad does without; reorder_and_upcast_attn only changes the precision of attention scores.
void check_semantics(const json& c, const fs::path& file, const ModelConfig& m) {
  const auto refuse = [&](const char* key, const std::string& why) {
    throw UserError("init_from_hf: " + file.string() + " has " + key + " " + c.at(key).dump() +
                    "; " + why);
  };
  const auto is = [&](const char* key, const json& fallback, std::initializer_list<json> ok) {
    const json v = c.contains(key) ? c.at(key) : fallback;
    return std::find(ok.begin(), ok.end(), v) != ok.end();
  };
  if (!is("model_type", "gpt2", {"gpt2"}))
    refuse("model_type", "Triad reads GPT-2 models (model_type gpt2) only");
  if (!is("activation_function", "gelu_new", {"gelu_new", "gelu_pytorch_tanh"}))
    refuse("activation_function",
           "Triad's GPT uses GPT-2's tanh GELU (gelu_new or gelu_pytorch_tanh) and cannot train "
           "this model");
  if (!is("n_inner", nullptr, {nullptr, 4 * int64_t(m.hidden_size)}))
    refuse("n_inner", "Triad's MLP is 4 x n_embd = " + std::to_string(4 * int64_t(m.hidden_size)) +
                          " wide (n_inner null) and cannot train this model");
  if (!is("scale_attn_weights", true, {true}))
    refuse("scale_attn_weights",
           "Triad scales attention scores by 1/sqrt(head size) as GPT-2 does (true) and cannot "
           "train this model");
  if (!is("scale_attn_by_inverse_layer_idx", false, {false}))
    refuse("scale_attn_by_inverse_layer_idx",
           "Triad does not scale attention by 1/(layer + 1) (false) and cannot train this model");
  if (!is("add_cross_attention", false, {false}))
    refuse("add_cross_attention",
           "Triad's GPT has no cross-attention layers (false) and cannot train this model");
  // GPT2Config's default where absent.
  const json eps = c.contains("layer_norm_epsilon") ? c.at("layer_norm_epsilon") : json(1e-5);
  if (!eps.is_number() || !(eps.get<double>() > 0))
    refuse("layer_norm_epsilon", "it must be a number above 0");
  const double e = eps.get<double>(), here = m.layernorm_epsilon;
  if (std::abs(e - here) > 1e-6 * std::max(e, here))
    throw UserError("init_from_hf: " + file.string() + " has layer_norm_epsilon " + eps.dump() +
                    (c.contains("layer_norm_epsilon") ? "" : " (absent: GPT2Config's default)") +
                    " but the config has model.layernorm_epsilon " + json(here).dump() +
                    "; train the model with its own: --set model.layernorm_epsilon=" + eps.dump());
}

json check_config(const fs::path& dir, const ModelConfig& m) {
  const json c = read_json(dir / "config.json");
  if (!c.is_object())
    throw UserError("init_from_hf: " + (dir / "config.json").string() +
                    " is not a JSON object of GPT2Config keys");
  auto expect = [&](const char* key, long long want, const char* ours) {
    if (!c.contains(key) || !c[key].is_number_integer())
      throw UserError("init_from_hf: " + (dir / "config.json").string() + " has no integer '" +
                      key + "'");
    const long long got = c[key].get<long long>();
    if (got != want)
      throw UserError("init_from_hf: " + (dir / "config.json").string() + " has " + key + " = " +
                      std::to_string(got) + " but the config has model." + ours + " = " +
                      std::to_string(want) + "; make them agree");
  };
  expect("n_layer", m.num_layers, "num_layers");
  expect("n_embd", m.hidden_size, "hidden_size");
  expect("n_head", m.num_attention_heads, "num_attention_heads");
  expect("vocab_size", m.vocab_size, "vocab_size");
  expect("n_positions", context_length(m), "max_position_embeddings");
  check_semantics(c, dir / "config.json", m);
  return c;
}

// Triad ties the output layer to the word embedding, as GPT-2 does; a model whose config unties
// them is read only when its lm_head.weight is wte's (a save_pretrained of a tied model).
void check_tied_head(const json& c, const safetensors::File& f, const fs::path& file,
                     const fs::path& config) {
  if (!c.contains("tie_word_embeddings") || c.at("tie_word_embeddings") == true) return;
  const std::string untied = "init_from_hf: " + config.string() + " has tie_word_embeddings " +
                             c.at("tie_word_embeddings").dump();
  const std::string fix =
      "; Triad ties the output layer to the word embedding and cannot train an untied head: "
      "start from a model with tied embeddings";
  const auto head = f.tensors.find("lm_head.weight");
  if (head == f.tensors.end())
    throw UserError(untied + " but " + file.string() + " has no lm_head.weight" + fix);
  auto wte = f.tensors.find(std::string(kPrefix) + "wte.weight");
  if (wte == f.tensors.end()) wte = f.tensors.find("wte.weight");
  if (wte == f.tensors.end() || head->second.shape != wte->second.shape ||
      head->second.to_f32() != wte->second.to_f32())
    throw UserError(untied + " and " + file.string() + "'s lm_head.weight differs from wte.weight" +
                    fix);
}

std::vector<int64_t> hf_shape(const ParamInfo& p) {
  if (p.is_matmul_weight) return {p.shape[1], p.shape[0]};
  return p.shape;
}

std::string join_shape(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(shape[i]));
  }
  return s;
}

const safetensors::TensorData& find_tensor(const safetensors::File& f, const fs::path& file,
                                           const ParamInfo& p) {
  auto it = f.tensors.find(kPrefix + p.name);
  if (it == f.tensors.end()) it = f.tensors.find(p.name);
  if (it == f.tensors.end())
    throw UserError("init_from_hf: " + file.string() + " has no tensor '" + kPrefix + p.name + "'");
  if (it->second.shape != hf_shape(p)) {
    throw UserError("init_from_hf: tensor '" + it->first + "' in " + file.string() +
                    " has shape (" + join_shape(it->second.shape) + ") but the model needs (" +
                    join_shape(hf_shape(p)) + ")");
  }
  return it->second;
}

void require_learned(const ModelConfig& m, const char* what) {
  if (m.position_embedding != "learned")
    throw UserError(
        std::string(what) +
        " uses the GPT-2 layout, which has learned positions; model.position_embedding is '" +
        m.position_embedding + "'");
}

}  // namespace

void export_hf(const std::string& dir, const ModelConfig& m, const GptLayout& layout,
               const float* params, const HfTokenizerFiles& tokenizer) {
  require_learned(m, "export_hf");
  // Written beside the folder first, each file complete and fsynced, then moved in: a new folder
  // by one rename, an existing one file by file (other files there are left alone). A failure
  // (a full disk) leaves what was there before.
  const fs::path target = fs::path(dir).lexically_normal();
  const fs::path stage = target.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::create_directories(stage, ec);
  if (ec) throw UserError("export_hf: cannot create '" + stage.string() + "': " + ec.message());
  try {
    std::vector<std::vector<float>> transposed;
    transposed.reserve(layout.params.size());
    std::vector<safetensors::TensorRef> refs;
    for (const auto& p : layout.params) {
      const float* src = params + p.offset;
      if (p.is_matmul_weight) {
        const int64_t out = p.shape[0], in = p.shape[1];
        std::vector<float> t(p.numel);
        for (int64_t o = 0; o < out; ++o)
          for (int64_t i = 0; i < in; ++i) t[i * out + o] = src[o * in + i];
        transposed.push_back(std::move(t));
        src = transposed.back().data();
      }
      refs.push_back({kPrefix + p.name, hf_shape(p), src});
    }
    safetensors::write_f32((stage / "model.safetensors").string(), refs, {{"format", "pt"}});
    write_file_atomic(stage / "config.json",
                      hf_config_json(m, end_of_text(m, tokenizer)).dump(2) + "\n");
    std::vector<std::string> files = {"model.safetensors", "config.json"};
    if (!tokenizer.encoder_json.empty()) {
      const std::string fix = "point data.vocab_file and data.merge_file at GPT-2's files";
      write_file_atomic(stage / "vocab.json",
                        read_regular_file(tokenizer.encoder_json, "GPT-2 vocabulary", fix));
      write_file_atomic(stage / "merges.txt",
                        read_regular_file(tokenizer.vocab_bpe, "GPT-2 merges", fix));
      files.insert(files.end(), {"vocab.json", "merges.txt"});
    }
    if (!fs::exists(target)) {
      fs::rename(stage, target);
    } else {
      for (const std::string& f : files) fs::rename(stage / f, target / f);
      fs::remove(stage);
    }
    fsync_dir(target.parent_path().empty() ? fs::path(".") : target.parent_path());
  } catch (const UserError& e) {
    fs::remove_all(stage, ec);
    throw UserError("export_hf '" + dir + "': " + e.what());
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(stage, ec);
    throw UserError("export_hf '" + dir + "': " + e.what());
  }
}

void check_hf(const std::string& dir, const ModelConfig& m, const GptLayout& layout) {
  require_learned(m, "init_from_hf");
  if (!fs::is_directory(dir))
    throw UserError(
        "output.init_from_hf: folder '" + dir +
        "' not found; point it at a folder written by output.export_hf (or triad-checkpoint "
        "convert --to-hf)");
  const json c = check_config(dir, m);
  const fs::path file = fs::path(dir) / "model.safetensors";
  const auto f = safetensors::read(file.string());
  for (const auto& p : layout.params) find_tensor(f, file, p);
  check_tied_head(c, f, file, fs::path(dir) / "config.json");
}

void import_hf(const std::string& dir, const ModelConfig& m, const GptLayout& layout,
               float* params) {
  check_hf(dir, m, layout);
  const fs::path file = fs::path(dir) / "model.safetensors";
  const auto f = safetensors::read(file.string());
  for (const auto& p : layout.params) {
    const std::vector<float> v = find_tensor(f, file, p).to_f32();
    float* dst = params + p.offset;
    if (p.is_matmul_weight) {
      const int64_t out = p.shape[0], in = p.shape[1];
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) dst[o * in + i] = v[i * out + o];
    } else {
      std::copy(v.begin(), v.end(), dst);
    }
  }
}

}  // namespace triad
