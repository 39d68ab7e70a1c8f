#include "triad/core/io/hf.hpp"

#include <filesystem>

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

json hf_config_json(const ModelConfig& m) {
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

void check_config(const fs::path& dir, const ModelConfig& m) {
  const json c = read_json(dir / "config.json");
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
               const float* params) {
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
    write_file_atomic(stage / "config.json", hf_config_json(m).dump(2) + "\n");
    if (!fs::exists(target)) {
      fs::rename(stage, target);
    } else {
      for (const char* f : {"model.safetensors", "config.json"}) fs::rename(stage / f, target / f);
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
  check_config(dir, m);
  const fs::path file = fs::path(dir) / "model.safetensors";
  const auto f = safetensors::read(file.string());
  for (const auto& p : layout.params) find_tensor(f, file, p);
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
