// The key table DeepSpeed's JSON and Megatron's arguments share, and the merge of imported keys
// into the YAML tree (import.hpp).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "import.hpp"
#include "schema.hpp"
#include "triad/core/error.hpp"

namespace triad::config_detail {

const std::vector<KeyRow>& key_table() {
  static const std::vector<KeyRow> rows = {
      // triad key                                   DeepSpeed JSON                    Megatron
      {"model.num_layers", "", "--num-layers"},
      {"model.hidden_size", "", "--hidden-size"},
      {"model.num_attention_heads", "", "--num-attention-heads"},
      {"model.seq_length", "", "--seq-length"},
      {"model.max_position_embeddings", "", "--max-position-embeddings"},
      {"model.init_std", "", "--init-method-std"},
      {"model.layernorm_epsilon", "", "--layernorm-epsilon"},
      {"model.make_vocab_size_divisible_by", "", "--make-vocab-size-divisible-by"},
      {"model.rope_base", "", "--rotary-base"},
      {"data.split", "", "--split"},
      {"training.train_iters", "", "--train-iters"},
      {"training.micro_batch_size", "train_micro_batch_size_per_gpu", "--micro-batch-size"},
      {"training.gradient_accumulation_steps", "gradient_accumulation_steps", ""},
      {"training.global_batch_size", "train_batch_size", "--global-batch-size"},
      {"training.seed", "", "--seed"},
      {"training.log_interval", "", "--log-interval"},
      {"training.eval_interval", "", "--eval-interval"},
      {"training.eval_iters", "", "--eval-iters"},
      {"training.exit_interval", "", "--exit-interval"},
      {"training.recompute_granularity", "", "--recompute-granularity"},
      {"training.checkpoint_activations", "", "--checkpoint-activations"},
      {"training.recompute_activations", "", "--recompute-activations"},
      {"optimizer.lr", "optimizer.params.lr", "--lr"},
      {"optimizer.min_lr", "", "--min-lr"},
      {"optimizer.adam_beta1", "optimizer.params.betas.0", "--adam-beta1"},
      {"optimizer.adam_beta2", "optimizer.params.betas.1", "--adam-beta2"},
      {"optimizer.adam_eps", "optimizer.params.eps", "--adam-eps"},
      {"optimizer.weight_decay", "optimizer.params.weight_decay", "--weight-decay"},
      {"optimizer.clip_grad", "gradient_clipping", "--clip-grad"},
      {"lr_schedule.lr_warmup_iters", "scheduler.params.warmup_num_steps", "--lr-warmup-iters"},
      {"lr_schedule.lr_decay_style", "", "--lr-decay-style"},
      {"lr_schedule.lr_decay_iters", "scheduler.params.total_num_steps", "--lr-decay-iters"},
      {"parallel.tensor_model_parallel_size", "", "--tensor-model-parallel-size"},
      {"parallel.pipeline_model_parallel_size", "", "--pipeline-model-parallel-size"},
      {"parallel.sequence_parallel", "", "--sequence-parallel"},
      {"parallel.tp_comm_overlap", "", "--tp-comm-overlap"},
      {"parallel.context_parallel_size", "", "--context-parallel-size"},
      {"parallel.virtual_pipeline_model_parallel_size", "",
       "--virtual-pipeline-model-parallel-size"},
      {"zero_optimization.stage", "zero_optimization.stage", "--zero-stage"},
      {"zero_optimization.reduce_bucket_size", "zero_optimization.reduce_bucket_size", ""},
      {"zero_optimization.overlap_comm", "zero_optimization.overlap_comm", "--overlap-grad-reduce"},
      {"zero_optimization.reduce_scatter", "zero_optimization.reduce_scatter", ""},
      {"zero_optimization.overlap_param_gather", "zero_optimization.overlap_param_gather",
       "--overlap-param-gather"},
      {"zero_optimization.offload_optimizer.device", "zero_optimization.offload_optimizer.device",
       ""},
      {"zero_optimization.offload_optimizer.pin_memory",
       "zero_optimization.offload_optimizer.pin_memory", ""},
      {"fp16.enabled", "fp16.enabled", "--fp16"},
      {"fp16.loss_scale", "fp16.loss_scale", "--loss-scale"},
      {"fp16.initial_scale_power", "fp16.initial_scale_power", ""},
      {"fp16.loss_scale_window", "fp16.loss_scale_window", "--loss-scale-window"},
      {"fp16.hysteresis", "fp16.hysteresis", "--hysteresis"},
      {"fp16.consecutive_hysteresis", "fp16.consecutive_hysteresis", ""},
      {"fp16.min_loss_scale", "fp16.min_loss_scale", "--min-loss-scale"},
      {"bf16.enabled", "bf16.enabled", "--bf16"},
      {"logging.tensorboard_dir", "", "--tensorboard-dir"},
      {"logging.tensorboard_log_interval", "", "--tensorboard-log-interval"},
      {"checkpoint.save", "", "--save"},
      {"checkpoint.save_interval", "", "--save-interval"},
  };
  return rows;
}

namespace {

YAML::Node child_of(const YAML::Node& m, const std::string& key) {
  if (m.IsMap())
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

// The node at canonical `key` in `root` (its last part in any spelling), and the path as written.
std::pair<YAML::Node, std::string> find_key(const YAML::Node& root, const std::string& key) {
  const std::vector<std::string> parts = split_on(key, '.');
  YAML::Node cur = root;
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    cur.reset(child_of(cur, parts[i]));
    if (!cur.IsMap()) return {YAML::Node(YAML::NodeType::Undefined), key};
    prefix += parts[i] + ".";
  }
  std::vector<std::string> spellings{parts.back()};
  const Section* s = find_section(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1));
  if (const Field* f = s ? find_field(*s, parts.back()) : nullptr)
    for (std::string_view a : f->aliases) spellings.emplace_back(a);
  for (const std::string& name : spellings)
    if (YAML::Node n = child_of(cur, name); n.IsDefined()) return {n, prefix + name};
  return {YAML::Node(YAML::NodeType::Undefined), key};
}

bool as_number(const std::string& text, double& out) {
  std::string_view t = text;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  return !t.empty() && ec == std::errc() && end == t.data() + t.size();
}

std::string text_of(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

// 3e-4 and 0.0003, true and True, "AdamW" and "adamw" are the same value.
bool same_value(const YAML::Node& a, const YAML::Node& b) {
  if (!a.IsScalar() || !b.IsScalar()) return text_of(a) == text_of(b);
  double x = 0, y = 0;
  if (as_number(a.Scalar(), x) && as_number(b.Scalar(), y))
    return x == y || std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y));
  bool p = false, q = false;
  if (YAML::convert<bool>::decode(a, p) && YAML::convert<bool>::decode(b, q)) return p == q;
  return lower(a.Scalar()) == lower(b.Scalar());
}

}  // namespace

std::optional<std::string> value_in(const YAML::Node& root, const std::string& key) {
  const YAML::Node n = find_key(root, key).first;
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  return text_of(n);
}

void merge_imported(YAML::Node& root, const std::vector<ImportedKey>& keys,
                    std::vector<Origin>& origins, const std::string& file) {
  for (const ImportedKey& k : keys) {
    const auto [old, written] = find_key(root, k.key);
    if (old.IsDefined() && !old.IsNull()) {
      const std::string where = Locator(file, origins).where(written, old.Mark());
      if (where.starts_with("--set ") || same_value(old, k.value)) continue;
      throw UserError(k.key + " is " + text_of(old) + " (" + where + ") but " + text_of(k.value) +
                      " (" + k.source + "); keep one of them, or make them equal");
    }
    const std::vector<std::string> parts = split_on(k.key, '.');
    YAML::Node cur = root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node child = child_of(cur, parts[i]);
      if (!child.IsMap()) {
        cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
        child.reset(child_of(cur, parts[i]));
      }
      cur.reset(child);
    }
    cur[parts.back()] = k.value;
    origins.push_back({k.key, k.source});
  }
}

void merge_defaults(YAML::Node& root, const std::vector<ImportedKey>& defaults,
                    std::vector<Origin>& origins, const std::string& file) {
  std::vector<ImportedKey> absent;
  for (const ImportedKey& k : defaults)
    if (const YAML::Node n = find_key(root, k.key).first; !n.IsDefined() || n.IsNull())
      absent.push_back(k);
  merge_imported(root, absent, origins, file);
}

std::vector<std::string> merge_deepspeed_config(YAML::Node& root, std::vector<Origin>& origins,
                                                const std::string& file) {
  const YAML::Node v = child_of(root, "deepspeed_config");
  if (!v.IsDefined()) return {};
  const std::string where = Locator(file, origins).where("deepspeed_config", v.Mark());
  if (!v.IsScalar() || v.Scalar().empty())
    throw UserError("deepspeed_config (" + where +
                    ") must be the path of a DeepSpeed JSON file; write deepspeed_config: "
                    "ds_config.json");
  const std::string path = v.Scalar();
  root.remove("deepspeed_config");
  const Imported d =
      import_deepspeed(path, [&root](const std::string& key) { return value_in(root, key); });
  merge_imported(root, d.keys, origins, file);
  merge_defaults(root, d.defaults, origins, file);
  return d.no_effect;
}

}  // namespace triad::config_detail
