#include "schema.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace triad::config_detail {
namespace {

// Returns each Config member as a Slot; the lambdas are captureless so they decay to the
// plain function pointer Field::slot holds.
#define TRIAD_SLOT(member) [](Config& c) -> Slot { return &c.member; }

// Builds one Field: F("lr", TRIAD_SLOT(optimizer.lr)).gt(0).
class F {
 public:
  F(std::string_view name, Slot (*slot)(Config&)) {
    f_.name = name;
    f_.slot = slot;
  }
  F&& aka(std::initializer_list<std::string_view> names) && {
    f_.aliases = names;
    return std::move(*this);
  }
  F&& min(double v) && {
    f_.at_least = v;
    return std::move(*this);
  }
  F&& gt(double v) && {
    f_.above = v;
    return std::move(*this);
  }
  F&& lt(double v) && {
    f_.below = v;
    return std::move(*this);
  }
  F&& max(double v) && {
    f_.at_most = v;
    return std::move(*this);
  }
  F&& one_of(std::initializer_list<std::string_view> values) && {
    f_.choices = values;
    return std::move(*this);
  }
  F&& or_list(std::vector<std::string>* (*list)(Config&)) && {
    f_.list = list;
    return std::move(*this);
  }
  operator Field() && { return std::move(f_); }

 private:
  Field f_;
};

// What is trained: the model, its data, the training loop, the optimizer and its schedule.
std::vector<Section> training_sections() {
  return {
      {"model",
       {
           // Bounds far above any model trained, so that a typo of many digits is an error
           // before per-layer plans and schedules are built.
           F("num_layers", TRIAD_SLOT(model.num_layers)).aka({"n_layer"}).min(1).max(100000),
           F("hidden_size", TRIAD_SLOT(model.hidden_size)).aka({"n_embd"}).min(1),
           F("num_attention_heads", TRIAD_SLOT(model.num_attention_heads)).aka({"n_head"}).min(1),
           F("seq_length", TRIAD_SLOT(model.seq_length)).aka({"block_size"}).min(1),
           // 0 = seq_length
           F("max_position_embeddings", TRIAD_SLOT(model.max_position_embeddings))
               .aka({"n_positions"})
               .min(0),
           F("vocab_size", TRIAD_SLOT(model.vocab_size)).min(1),
           F("position_embedding", TRIAD_SLOT(model.position_embedding))
               .one_of({"learned", "rope"}),
           F("rope_base", TRIAD_SLOT(model.rope_base)).gt(0),
           F("init_std", TRIAD_SLOT(model.init_std)).gt(0),
           F("layernorm_epsilon", TRIAD_SLOT(model.layernorm_epsilon)).gt(0),
           F("make_vocab_size_divisible_by", TRIAD_SLOT(model.make_vocab_size_divisible_by)).min(1),
       }},
      {"data",
       {
           F("kind", TRIAD_SLOT(data.kind)).one_of({"synthetic", "text", "tokens", "indexed"}),
           // A file, an indexed dataset's prefix, or (indexed) a blend: [w1, P1, w2, P2, ...].
           F("path", TRIAD_SLOT(data.path)).or_list([](Config& c) { return &c.data.path_list; }),
           F("shuffle", TRIAD_SLOT(data.shuffle)),
           F("seed", TRIAD_SLOT(data.seed)),
           F("split", TRIAD_SLOT(data.split)),
           F("valid_path", TRIAD_SLOT(data.valid_path)).aka({"valid_data_path"}),
           F("builder", TRIAD_SLOT(data.builder)).one_of({"megatron-deepspeed", "megatron-lm"}),
           F("tokenizer", TRIAD_SLOT(data.tokenizer)).one_of({"bytes", "gpt2"}),
           F("vocab_file", TRIAD_SLOT(data.vocab_file)),
           F("merge_file", TRIAD_SLOT(data.merge_file)),
       }},
      {"training",
       {
           F("train_iters", TRIAD_SLOT(training.train_iters)).aka({"iters", "max_steps"}).min(1),
           // The samples the training data is built for (Megatron's --train-samples); 0 = the
           // run's.
           F("train_samples", TRIAD_SLOT(training.train_samples)).min(0),
           // Batch sizes: 0 = not given, derived from the other two.
           F("micro_batch_size", TRIAD_SLOT(training.micro_batch_size))
               .aka({"train_micro_batch_size_per_gpu"})
               .min(0),
           F("gradient_accumulation_steps", TRIAD_SLOT(training.gradient_accumulation_steps))
               .min(0)
               .max(kMaxGradientAccumulation),
           F("global_batch_size", TRIAD_SLOT(training.global_batch_size))
               .aka({"train_batch_size"})
               .min(0),
           F("seed", TRIAD_SLOT(training.seed)),
           F("log_interval", TRIAD_SLOT(training.log_interval)).min(1),
           F("collective_timeout", TRIAD_SLOT(training.collective_timeout)).gt(0),
           F("exit_interval", TRIAD_SLOT(training.exit_interval)).min(0),
           F("profile_steps", TRIAD_SLOT(training.profile_steps)).or_list([](Config& c) {
             return &c.training.profile_steps_list;
           }),
           F("profile_dir", TRIAD_SLOT(training.profile_dir)),
           F("eval_interval", TRIAD_SLOT(training.eval_interval)).min(0),
           F("eval_iters", TRIAD_SLOT(training.eval_iters)).min(1),
           // Megatron's --recompute-granularity; the two switches below are its shorthands
           // (checks.cpp resolves them): checkpoint_activations = full, and
           // recompute_activations = selective as Megatron's --recompute-activations means.
           F("recompute_granularity", TRIAD_SLOT(training.recompute_granularity))
               .one_of({"none", "full", "selective"}),
           F("checkpoint_activations", TRIAD_SLOT(training.checkpoint_activations)),
           F("recompute_activations", TRIAD_SLOT(training.recompute_activations)),
       }},
      {"optimizer",
       {
           F("type", TRIAD_SLOT(optimizer.type)).one_of({"adamw"}),
           F("lr", TRIAD_SLOT(optimizer.lr)).gt(0),
           F("min_lr", TRIAD_SLOT(optimizer.min_lr)).min(0),
           F("adam_beta1", TRIAD_SLOT(optimizer.adam_beta1)).aka({"beta1"}).min(0).lt(1),
           F("adam_beta2", TRIAD_SLOT(optimizer.adam_beta2)).aka({"beta2"}).min(0).lt(1),
           F("adam_eps", TRIAD_SLOT(optimizer.adam_eps)).aka({"eps"}).gt(0),
           F("weight_decay", TRIAD_SLOT(optimizer.weight_decay)).min(0),
           F("clip_grad", TRIAD_SLOT(optimizer.clip_grad)).aka({"gradient_clipping"}).min(0),
       }},
      {"lr_schedule",
       {
           F("lr_warmup_iters", TRIAD_SLOT(lr_schedule.lr_warmup_iters))
               .aka({"warmup_iters"})
               .min(0),
           F("lr_decay_style", TRIAD_SLOT(lr_schedule.lr_decay_style))
               .aka({"decay_style"})
               .one_of({"cosine", "linear", "constant", "inverse-square-root"}),
           F("lr_warmup_style", TRIAD_SLOT(lr_schedule.lr_warmup_style)).one_of({"linear", "log"}),
           // 0 = train_iters
           F("lr_decay_iters", TRIAD_SLOT(lr_schedule.lr_decay_iters)).aka({"decay_iters"}).min(0),
           // Megatron's --lr-warmup-samples, --lr-decay-samples, --lr-warmup-fraction; 0 = not
           // given (the iteration counts above count)
           F("lr_warmup_samples", TRIAD_SLOT(lr_schedule.lr_warmup_samples)).min(0),
           F("lr_decay_samples", TRIAD_SLOT(lr_schedule.lr_decay_samples)).min(0),
           F("lr_warmup_fraction", TRIAD_SLOT(lr_schedule.lr_warmup_fraction)).min(0).max(1),
           F("lr_lag_steps", TRIAD_SLOT(lr_schedule.lr_lag_steps)).min(0).max(2),
       }},
  };
}

// How it runs: the layout, ZeRO, precision, checkpoints, output, the device and the top-level
// keys (plugins are build_plugin_choices').
std::vector<Section> runtime_sections() {
  return {
      {"parallel",
       {
           F("tensor_model_parallel_size", TRIAD_SLOT(parallel.tensor_model_parallel_size)).min(1),
           F("pipeline_model_parallel_size", TRIAD_SLOT(parallel.pipeline_model_parallel_size))
               .min(1),
           // 0 = derived from the world size
           F("data_parallel_size", TRIAD_SLOT(parallel.data_parallel_size)).min(0),
           F("context_parallel_size", TRIAD_SLOT(parallel.context_parallel_size)).min(1),
           F("context_parallel_method", TRIAD_SLOT(parallel.context_parallel_method))
               .one_of({"ring", "ulysses"}),
           F("sequence_parallel", TRIAD_SLOT(parallel.sequence_parallel)),
           F("pipeline_partition", TRIAD_SLOT(parallel.pipeline_partition)),
           F("virtual_pipeline_model_parallel_size",
             TRIAD_SLOT(parallel.virtual_pipeline_model_parallel_size))
               .min(1),
           F("overlap_tensor_comm", TRIAD_SLOT(parallel.overlap_tensor_comm)),
           F("tp_comm_overlap", TRIAD_SLOT(parallel.tp_comm_overlap)),
       }},
      {"zero_optimization",
       {
           F("stage", TRIAD_SLOT(zero_optimization.stage)).min(0),
           // Elements per gradient all-reduce bucket (DeepSpeed's name and unit).
           F("reduce_bucket_size", TRIAD_SLOT(zero_optimization.reduce_bucket_size)).min(1),
           F("overlap_comm", TRIAD_SLOT(zero_optimization.overlap_comm)),
           F("reduce_scatter", TRIAD_SLOT(zero_optimization.reduce_scatter)),
           F("overlap_param_gather", TRIAD_SLOT(zero_optimization.overlap_param_gather)),
       }},
      // A section inside zero_optimization (a name with a dot nests it in its parent).
      {"zero_optimization.offload_optimizer",
       {
           F("device", TRIAD_SLOT(zero_optimization.offload_optimizer.device))
               .one_of({"none", "cpu"}),
           F("pin_memory", TRIAD_SLOT(zero_optimization.offload_optimizer.pin_memory)),
       }},
      // DeepSpeed's mixed-precision sections (config.hpp, Fp16Config).
      {"fp16",
       {
           F("enabled", TRIAD_SLOT(fp16.enabled)),
           F("loss_scale", TRIAD_SLOT(fp16.loss_scale)).min(0),
           F("initial_scale_power", TRIAD_SLOT(fp16.initial_scale_power)).min(0).lt(1024),
           F("loss_scale_window", TRIAD_SLOT(fp16.loss_scale_window)).min(1),
           F("hysteresis", TRIAD_SLOT(fp16.hysteresis)).min(1),
           F("consecutive_hysteresis", TRIAD_SLOT(fp16.consecutive_hysteresis)),
           F("raise_error_at_min_scale", TRIAD_SLOT(fp16.raise_error_at_min_scale)),
           F("min_loss_scale", TRIAD_SLOT(fp16.min_loss_scale)).gt(0),
       }},
      {"bf16", {F("enabled", TRIAD_SLOT(bf16_enabled))}},
      {"checkpoint",
       {
           F("save", TRIAD_SLOT(checkpoint.save)),
           F("save_interval", TRIAD_SLOT(checkpoint.save_interval)).min(0),
           F("load", TRIAD_SLOT(checkpoint.load)),
           F("keep_last", TRIAD_SLOT(checkpoint.keep_last)).min(0),
           F("resume", TRIAD_SLOT(checkpoint.resume)),
       }},
      {"output",
       {
           F("dir", TRIAD_SLOT(output.dir)),
           F("overwrite", TRIAD_SLOT(output.overwrite)),
           F("export_hf", TRIAD_SLOT(output.export_hf)),
           F("init_from_hf", TRIAD_SLOT(output.init_from_hf)),
       }},
      {"logging",
       {
           F("tensorboard_dir", TRIAD_SLOT(logging.tensorboard_dir)),
           F("tensorboard_log_interval", TRIAD_SLOT(logging.tensorboard_log_interval)).min(1),
           F("tensorboard_tags", TRIAD_SLOT(logging.tensorboard_tags))
               .one_of({"megatron-lm", "megatron-deepspeed"}),
       }},
      // `device: cpu` is short for `device: {name: cpu}` (shorthand_key).
      {"device",
       {
           F("name", TRIAD_SLOT(device)),
           F("gemm", TRIAD_SLOT(device_gemm)).one_of({"onednn", "openblas"}),
       }},
      {"",
       {
           F("precision", TRIAD_SLOT(precision)),
           // fp32 GEMMs on the GPU may use TF32 tensor cores (PyTorch's allow_tf32).
           F("allow_tf32", TRIAD_SLOT(allow_tf32)),
           // The device's peak FLOP/s for MFU, in TFLOP/s; 0 = from the table of known GPUs.
           F("peak_tflops", TRIAD_SLOT(peak_tflops)).min(0),
       }},
  };
}

// The sections in the order to_yaml writes them.
std::vector<Section> build_schema() {
  std::vector<Section> all = training_sections();
  for (Section& s : runtime_sections()) all.push_back(std::move(s));
  return all;
}

#undef TRIAD_SLOT

std::vector<PluginSection> build_plugin_choices() {
  return {
      {"attention", [](Config& c) { return &c.attention; }, "flash2",
       "{name: flash2, block_q: 64}"},
      {"transport", [](Config& c) { return &c.transport; }, "nccl", "{name: ucx, tls: tcp}"},
      {"tensor", [](Config& c) { return &c.tensor; }, "megatron", "{name: megatron}"},
      {"pipeline", [](Config& c) { return &c.pipeline; }, "gpipe", "{name: 1f1b}"},
      {"data_parallel", [](Config& c) { return &c.data_parallel; }, "zero",
       "{name: zero, overlap_comm: false}"},
  };
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<Section>& schema() {
  static const std::vector<Section> s = build_schema();
  return s;
}

const std::vector<PluginSection>& plugin_choices() {
  static const std::vector<PluginSection> p = build_plugin_choices();
  return p;
}

const PluginSection* find_plugin_choice(std::string_view name) {
  for (const PluginSection& p : plugin_choices())
    if (p.name == name) return &p;
  return nullptr;
}

std::string_view shorthand_key(std::string_view section) {
  return section == "device" ? "name" : "";
}

const Section* find_section(std::string_view name) {
  for (const Section& s : schema())
    if (s.name == name) return &s;
  return nullptr;
}

const Field* find_field(const Section& s, std::string_view key) {
  for (const Field& f : s.fields) {
    if (f.name == key) return &f;
    for (std::string_view a : f.aliases)
      if (a == key) return &f;
  }
  return nullptr;
}

std::vector<std::string_view> names_of(const Section& s) {
  std::vector<std::string_view> out;
  for (const Field& f : s.fields) {
    out.push_back(f.name);
    out.insert(out.end(), f.aliases.begin(), f.aliases.end());
  }
  return out;
}

std::vector<std::string> split_on(const std::string& text, char sep) {
  std::vector<std::string> items;
  for (size_t i = 0;;) {
    const size_t at = text.find(sep, i);
    items.push_back(text.substr(i, at == std::string::npos ? at : at - i));
    if (at == std::string::npos) return items;
    i = at + 1;
  }
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string count_text(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".en") != std::string::npos && s.find('.') == std::string::npos) {
    size_t e = s.find('e');
    if (e != std::string::npos) s.insert(e, ".0");
  } else if (s.find_first_of(".en") == std::string::npos) {
    s += ".0";
  }
  return s;
}

std::string closest(std::string_view word, const std::vector<std::string_view>& candidates) {
  // A typo changes a few characters; beyond a third of the word it is a different name.
  size_t best = std::max<size_t>(2, word.size() / 3) + 1;
  std::string_view pick;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best) {
      best = d;
      pick = c;
    }
  }
  // A truncated name ("micro_batch") is as telling as a typo.
  if (pick.empty() && word.size() >= 4) {
    for (std::string_view c : candidates)
      if (c.find(word) != std::string_view::npos) return std::string(c);
  }
  return std::string(pick);
}

}  // namespace triad::config_detail
