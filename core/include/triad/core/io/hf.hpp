// Hugging Face interchange: model.safetensors + config.json in the GPT-2 layout that
// transformers.GPT2LMHeadModel loads (keys "transformer.<name>", Conv1D weights stored
// (in, out) — the transpose of Triad's (out, in)).
#pragma once

#include <filesystem>
#include <string>

#include "triad/core/config/config.hpp"
#include "triad/core/model/gpt_layout.hpp"

namespace triad {

// GPT-2 BPE files to write beside the model as vocab.json and merges.txt (the names
// transformers' GPT2Tokenizer reads); empty: none.
struct HfTokenizerFiles {
  std::string encoder_json, vocab_bpe;
};

// Writes DIR/model.safetensors and DIR/config.json (creating DIR), and the tokenizer's files
// when given. Needs learned positions. config.json's bos_token_id and eos_token_id are
// "<|endoftext|>"'s id in the tokenizer's vocabulary, or without one 50256 for GPT-2's vocabulary
// size (50257), else null.
void export_hf(const std::string& dir, const ModelConfig& m, const GptLayout& layout,
               const float* params, const HfTokenizerFiles& tokenizer = {});

// The file of a model that `dir` already holds (model.safetensors or config.json, which
// export_hf would replace), or "" when it holds none. Inline: the config checks use it without
// linking this module.
inline std::string hf_model_file_in(const std::string& dir) {
  std::error_code ec;
  for (const char* f : {"model.safetensors", "config.json"})
    if (std::filesystem::exists(std::filesystem::path(dir) / f, ec)) return f;
  return "";
}

// Checks DIR's config.json against the model config and loads every tensor into params.
// Throws UserError naming the folder, the tensor or key, and what does not match: also a
// GPT2Config that would compute something else than Triad's GPT (another layer_norm_epsilon,
// activation, MLP width, attention scaling, cross-attention, or an output layer not tied to
// wte).
void import_hf(const std::string& dir, const ModelConfig& m, const GptLayout& layout,
               float* params);

// Validates the folder (files present, config matches, tensors present with the right shapes)
// without loading: used before a run starts so nothing is half-done.
void check_hf(const std::string& dir, const ModelConfig& m, const GptLayout& layout);

}  // namespace triad
