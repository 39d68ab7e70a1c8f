// Megatron-LM / Megatron-DeepSpeed's command line in Triad's keys (import.hpp): the arguments of
// their GPT pretraining scripts. Each argument is applied (the shared key table, or a rule
// below), accepted without effect (why), or not carried over (why; --strict refuses those).
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "import.hpp"
#include "schema.hpp"
#include "triad/core/error.hpp"

namespace triad::config_detail {
namespace {

// Arguments that change nothing in Triad, and why.
const std::map<std::string_view, std::string_view>& without_effect() {
  static const std::map<std::string_view, std::string_view> m = {
      {"--deepspeed", "Triad is the runtime"},
      {"--deepspeed-activation-checkpointing",
       "Triad recomputes as --checkpoint-activations / --recompute-granularity say"},
      {"--no-pipeline-parallel", "the pipeline is --pipeline-model-parallel-size"},
      {"--distributed-backend", "Triad's transport: section chooses (nccl on GPUs)"},
      {"--data-impl", "Triad reads Megatron's mmap .bin/.idx"},
      {"--num-workers", "Triad reads data in the training process"},
      {"--vocab-file", "the data is already tokenized (.bin/.idx)"},
      {"--merge-file", "the data is already tokenized (.bin/.idx)"},
      {"--data-cache-path", "Triad keeps no index cache"},
      {"--override-opt_param-scheduler", "the schedule is the config's"},
      {"--use-checkpoint-opt_param-scheduler", "a resumed run continues the config's schedule"},
      {"--no-load-rng", "Triad's data order follows the step"},
      {"--no-masked-softmax-fusion", "a kernel choice"},
      {"--no-bias-gelu-fusion", "a kernel choice"},
      {"--no-bias-dropout-fusion", "a kernel choice"},
      {"--no-gradient-accumulation-fusion", "a kernel choice"},
      {"--no-persist-layer-norm", "a kernel choice"},
      {"--apply-query-key-layer-scaling", "no effect on the math in fp32 softmax"},
      {"--no-query-key-layer-scaling", "no effect on the math in fp32 softmax"},
      {"--attention-softmax-in-fp32", "Triad's softmax is fp32"},
      {"--accumulate-allreduce-grads-in-fp32", "Triad accumulates gradients in fp32"},
      {"--use-contiguous-buffers-in-local-ddp", "Triad's gradients live in one flat arena"},
      {"--DDP-impl", "Triad's data parallelism is the zero plugin"},
      {"--cpu-optimizer", "offload is zero_optimization.offload_optimizer (ds_config)"},
      {"--cpu-torch-adam", "offload is zero_optimization.offload_optimizer (ds_config)"},
      {"--partition-activations", "Triad keeps activations whole"},
      {"--contigious-checkpointing", "a memory layout choice"},
      {"--checkpoint-in-cpu", "Triad keeps recompute inputs on the device"},
      {"--synchronize-each-layer", "a debugging switch"},
      {"--profile-backward", "a debugging switch"},
      {"--log-params-norm", "Triad logs the gradient norm"},
      {"--log-num-zeros-in-grad", "Triad logs the gradient norm"},
      {"--timing-log-level", "Triad's step trace is --profile-steps"},
      {"--exit-signal-handler", "Triad always saves on SIGTERM/SIGINT"},
      {"--universal-checkpoint", "Triad's checkpoints load into any layout"},
      {"--world-size", "the launcher sets the world"},
      {"--local_rank", "the launcher sets the rank"},
      {"--use-dataset-only", "a Megatron-DeepSpeed data switch"},
      {"--tensorboard-queue-size", "Triad writes each record as its step ends"},
      {"--log-timers-to-tensorboard", "Triad always writes iteration-time"},
      {"--log-batch-size-to-tensorboard", "Triad always writes batch-size"},
      {"--log-validation-ppl-to-tensorboard", "Triad always writes lm loss validation ppl"},
      {"--log-memory-to-tensorboard", "Triad always writes mem-max-allocated-bytes"},
  };
  return m;
}

// Arguments Triad cannot honour, and why.
const std::map<std::string_view, std::string_view>& not_carried_reasons() {
  static const std::map<std::string_view, std::string_view> m = {
      {"--log-optimizer-states-to-tensorboard",
       "Triad's TensorBoard files hold no optimizer states"},
      {"--wandb-project", "Triad writes OUTPUT/metrics.jsonl"},
      {"--rampup-batch-size", "Triad's global batch is fixed for a run"},
      {"--swiglu", "Triad's MLP is GPT-2's GELU"},
      {"--untie-embeddings-and-output-weights", "Triad ties the LM head to the embedding"},
      {"--disable-bias-linear", "Triad's linear layers have biases"},
      {"--num-key-value-heads", "Triad's attention is multi-head (no grouped queries)"},
      {"--group-query-attention", "Triad's attention is multi-head (no grouped queries)"},
      {"--num-query-groups", "Triad's attention is multi-head (no grouped queries)"},
      {"--no-save-optim", "Triad's checkpoints always hold the optimizer"},
      {"--finetune", "start from a checkpoint with checkpoint.load (step and optimizer kept)"},
      {"--fp16-lm-cross-entropy", "Triad's loss is fp32"},
      {"--no-load-optim", "Triad always loads the optimizer state a checkpoint holds"},
      {"--exit-duration-in-mins", "stop the run with SIGTERM; Triad saves and exits"},
      {"--data-parallel-random-init", "every Triad rank starts from the same weights"},
  };
  return m;
}

// The arguments read by a rule of their own (MegatronReader::special, derived_later).
const std::vector<std::string_view>& special_names() {
  static const std::vector<std::string_view> n = {"--data-path",
                                                  "--train-data-path",
                                                  "--load",
                                                  "--valid-data-path",
                                                  "--test-data-path",
                                                  "--tokenizer-type",
                                                  "--vocab-size",
                                                  "--use-flash-attn",
                                                  "--use-flash-attn-v2",
                                                  "--use-flash-attn-triton",
                                                  "--use-rotary-position-embeddings",
                                                  "--position-embedding-type",
                                                  "--use-distributed-optimizer",
                                                  "--initial-loss-scale",
                                                  "--attention-dropout",
                                                  "--hidden-dropout",
                                                  "--optimizer",
                                                  "--normalization",
                                                  "--dataloader-type",
                                                  "--deepspeed_config",
                                                  "--no-async-tensor-model-parallel-allreduce",
                                                  "--deepspeed-config"};
  return n;
}

// Arguments whose Triad key needs others (the global batch, the sequence length, the layers):
// kept until every argument is read (MegatronReader::derived_later).
const std::set<std::string, std::less<>>& later_names() {
  static const std::set<std::string, std::less<>> n = {
      "--train-samples",         "--train-tokens",
      "--lr-decay-samples",      "--lr-warmup-samples",
      "--lr-decay-tokens",       "--lr-warmup-tokens",
      "--lr-warmup-fraction",    "--ffn-hidden-size",
      "--recompute-method",      "--recompute-num-layers",
      "--checkpoint-num-layers", "--num-layers-per-virtual-pipeline-stage"};
  return n;
}

// The number an argument gives; `src` is the argument with its value, for the message.
double to_number(const std::string& src, const std::string& text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    throw UserError("Megatron argument " + src + ": '" + text +
                    "' is not a number; give a number such as 1000 or 0.5");
  return v;
}

bool is_flag_name(const std::string& a) {
  return a.size() > 2 && a.starts_with("--");
}

class MegatronReader {
 public:
  explicit MegatronReader(const std::vector<std::string>& args) : args_(args) {}

  Imported read() {
    // Megatron trains on GPUs; --set device=cpu plans the same job on the CPU.
    set("device.name", YAML::Node("cuda"), "(no argument: Megatron trains on GPUs)");
    while (i_ < args_.size()) one();
    out_.deepspeed = given_.count("--deepspeed") > 0;
    // Megatron-DeepSpeed's training loop writes its own, grouped TensorBoard tags.
    if (out_.deepspeed)
      set("logging.tensorboard_tags", YAML::Node("megatron-deepspeed"),
          "--deepspeed (Megatron-DeepSpeed's grouped TensorBoard tags)");
    if (keys_.count("data.path")) data_source();
    derive();
    if (out_.deepspeed && !out_.deepspeed_config.empty()) deepspeed_owns();
    for (const auto& [key, k] : keys_) out_.keys.push_back(k);
    return std::move(out_);
  }

 private:
  // The argument at i_, with its value (from --flag=value or the next argument) when it takes
  // one.
  void one() {
    std::string arg = args_[i_++];
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != std::string::npos && is_flag_name(arg)) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (!is_flag_name(arg)) {
      out_.not_carried.push_back(arg + ": not an argument (arguments start with --)");
      return;
    }
    std::vector<std::string> values;
    if (inline_value) values.push_back(*inline_value);
    while (!inline_value && i_ < args_.size() && !is_flag_name(args_[i_]))
      values.push_back(args_[i_++]);
    apply(arg, values);
  }

  std::string source(const std::string& arg, const std::vector<std::string>& values) const {
    std::string s = arg;
    for (const std::string& v : values) s += " " + v;
    return s;
  }

  void set(const std::string& key, const YAML::Node& value, const std::string& src) {
    keys_[key] = ImportedKey{key, value, src};
  }

  std::string value_of(const std::string& arg, const std::vector<std::string>& values) const {
    if (values.size() != 1)
      throw UserError(
          "Megatron argument " + arg + " takes one value, got " + std::to_string(values.size()) +
          (values.empty() ? "" : " (" + source(arg, values) + ")") + "; write " + arg + " VALUE");
    return values[0];
  }

  void not_carried(const std::string& arg, const std::vector<std::string>& values,
                   std::string_view why) {
    out_.not_carried.push_back(source(arg, values) + ": " + std::string(why));
  }

  void apply(const std::string& arg, const std::vector<std::string>& values) {
    given_.insert(arg);
    if (table_row(arg, values) || special(arg, values) || derived_later(arg, values)) return;
    if (auto it = without_effect().find(arg); it != without_effect().end()) {
      out_.no_effect.push_back(source(arg, values) + ": no effect in Triad (" +
                               std::string(it->second) + ")");
    } else if (auto nc = not_carried_reasons().find(arg); nc != not_carried_reasons().end()) {
      not_carried(arg, values, nc->second);
    } else {
      const std::string guess = closest(arg, known_arguments());
      not_carried(arg, values,
                  "not an argument Triad knows" +
                      (guess.empty() ? std::string() : " (did you mean " + guess + "?)"));
    }
  }

  // Every argument name this reader takes, for the closest to a misspelt one.
  static const std::vector<std::string_view>& known_arguments() {
    static const std::vector<std::string_view> names = [] {
      std::vector<std::string_view> n;
      for (const KeyRow& row : key_table())
        if (!row.megatron.empty()) n.push_back(row.megatron);
      for (const auto& [name, why] : without_effect()) n.push_back(name);
      for (const auto& [name, why] : not_carried_reasons()) n.push_back(name);
      for (std::string_view name : special_names()) n.push_back(name);
      for (std::string_view name : later_names()) n.push_back(name);
      return n;
    }();
    return names;
  }

  // A row of the shared key table: a bool key is a flag, any other takes one value (a text key
  // with choices takes one of them, in any case).
  bool table_row(const std::string& arg, const std::vector<std::string>& values) {
    const std::string name = arg == "--encoder-seq-length" ? "--seq-length" : arg;
    for (const KeyRow& row : key_table()) {
      if (row.megatron != name) continue;
      const std::string key(row.triad);
      const size_t dot = key.rfind('.');
      const Field* f = find_field(*find_section(key.substr(0, dot)), key.substr(dot + 1));
      Config scratch;
      if (std::holds_alternative<bool*>(f->slot(scratch))) {
        if (!values.empty()) not_carried(arg, values, "a switch takes no value");
        set(key, YAML::Node("true"), arg);
        return true;
      }
      std::string v = value_of(arg, values);
      if (!f->choices.empty()) {
        bool ok = false;
        for (std::string_view c : f->choices) ok = ok || c == lower(v);
        if (!ok) {
          std::string list;
          for (std::string_view c : f->choices) list += (list.empty() ? "" : ", ") + std::string(c);
          // Another schedule would train another run: refused, never replaced by a default.
          if (key == "lr_schedule.lr_decay_style")
            throw UserError("Megatron argument " + source(arg, values) + ": Triad's " + key +
                            " is one of " + list + "; choose one of them");
          not_carried(arg, values, "Triad's " + key + " is one of " + list);
          return true;
        }
        v = lower(v);
      }
      set(key, YAML::Node(v), source(arg, values));
      return true;
    }
    return false;
  }

  // Under --deepspeed, Megatron-DeepSpeed hands DeepSpeed the bare optimizer: DeepSpeed clips
  // and scales the loss by the JSON alone, so Megatron's arguments for those do nothing.
  void deepspeed_owns() {
    static const char* keys[] = {"optimizer.clip_grad",      "fp16.loss_scale",
                                 "fp16.initial_scale_power", "fp16.loss_scale_window",
                                 "fp16.hysteresis",          "fp16.min_loss_scale"};
    for (const char* key : keys) {
      auto it = keys_.find(key);
      if (it == keys_.end()) continue;
      out_.no_effect.push_back(it->second.source +
                               ": no effect under --deepspeed (DeepSpeed clips and scales the "
                               "loss as " +
                               out_.deepspeed_config + " says)");
      keys_.erase(it);
    }
  }

  // What every imported dataset gets from Megatron's builder (GPTDataset always shuffles), and
  // which builder: Megatron-DeepSpeed's (legacy megatron/data) under --deepspeed, Megatron-LM's
  // (megatron/core/datasets) otherwise.
  void data_source() {
    for (const char* other : {"--train-data-path", "--valid-data-path", "--test-data-path"})
      if (given_.count("--data-path") && given_.count(other))
        throw UserError("Megatron arguments --data-path and " + std::string(other) +
                        " are both given; Megatron takes a single data source: give --data-path "
                        "(its parts by --split) or --train-data-path with --valid-data-path");
    set("data.shuffle", YAML::Node("true"), "(no argument: Megatron's GPTDataset always shuffles)");
    if (out_.deepspeed)
      set("data.builder", YAML::Node("megatron-deepspeed"),
          "--deepspeed (Megatron-DeepSpeed's --split rounding and blend sizes)");
    else
      set("data.builder", YAML::Node("megatron-lm"),
          "(no --deepspeed: Megatron-LM's --split rounding and blend sizes)");
  }

  bool special(const std::string& arg, const std::vector<std::string>& values);
  bool derived_later(const std::string& arg, const std::vector<std::string>& values);
  void derive();
  void defaults();
  double number(const std::string& key) const;

  const std::vector<std::string>& args_;
  size_t i_ = 0;
  std::map<std::string, ImportedKey> keys_;
  std::set<std::string> given_;  // every argument's name, as given
  std::map<std::string, std::pair<std::string, std::string>> later_;  // arg -> (value, source)
  Imported out_;
};

bool MegatronReader::special(const std::string& arg, const std::vector<std::string>& values) {
  const std::string src = source(arg, values);
  if (arg == "--data-path" || arg == "--train-data-path") {
    if (values.empty())
      throw UserError("Megatron argument " + arg + " needs a path; write " + arg + " PREFIX");
    YAML::Node path;
    if (values.size() == 1) {
      path = YAML::Node(values[0]);
    } else {
      for (const std::string& v : values) path.push_back(v);
    }
    set("data.kind", YAML::Node("indexed"), src);
    set("data.path", path, src);
  } else if (arg == "--load") {
    // Megatron starts afresh when --load holds no checkpoint yet and continues from it when it
    // does (the same script, run again after a stop): Triad's checkpoint.resume.
    set("checkpoint.load", YAML::Node(value_of(arg, values)), src);
    set("checkpoint.resume", YAML::Node("true"),
        src + " (continues from it when it holds a checkpoint, starts afresh when not)");
  } else if (arg == "--no-async-tensor-model-parallel-allreduce") {
    if (!values.empty()) not_carried(arg, values, "a switch takes no value");
    set("parallel.overlap_tensor_comm", YAML::Node("false"), src);
  } else if (arg == "--valid-data-path") {
    set("data.valid_path", YAML::Node(value_of(arg, values)), src);
  } else if (arg == "--test-data-path") {
    not_carried(arg, values, "Triad does not evaluate a test split");
  } else if (arg == "--tokenizer-type") {
    if (value_of(arg, values) != "GPT2BPETokenizer")
      not_carried(arg, values, "give model.vocab_size for this tokenizer's vocabulary");
    else
      set("model.vocab_size", YAML::Node("50257"), src);
  } else if (arg == "--vocab-size") {
    set("model.vocab_size", YAML::Node(value_of(arg, values)), src);
  } else if (arg == "--use-flash-attn" || arg == "--use-flash-attn-v2" ||
             arg == "--use-flash-attn-triton") {
    set("attention", YAML::Node("flash2"), src);
  } else if (arg == "--use-rotary-position-embeddings") {
    set("model.position_embedding", YAML::Node("rope"), src);
  } else if (arg == "--position-embedding-type") {
    const std::string v = value_of(arg, values);
    if (v == "rope" || v == "learned_absolute")
      set("model.position_embedding", YAML::Node(v == "rope" ? "rope" : "learned"), src);
    else
      not_carried(arg, values, "Triad's positions are learned or rope");
  } else if (arg == "--use-distributed-optimizer") {
    set("zero_optimization.stage", YAML::Node("1"), src + " (its optimizer shards are ZeRO-1)");
  } else if (arg == "--initial-loss-scale") {
    const double v = to_number(src, value_of(arg, values));
    const double p = std::log2(v);
    if (v > 0 && p == std::floor(p))
      set("fp16.initial_scale_power", YAML::Node(std::to_string(static_cast<int>(p))), src);
    else
      not_carried(arg, values, "Triad's initial scale is a power of 2 (fp16.initial_scale_power)");
  } else if (arg == "--attention-dropout" || arg == "--hidden-dropout") {
    if (to_number(src, value_of(arg, values)) != 0)
      not_carried(arg, values, "Triad trains without dropout (as with 0)");
    else
      out_.no_effect.push_back(src + ": no effect in Triad (Triad trains without dropout)");
  } else if (arg == "--optimizer" || arg == "--normalization" || arg == "--dataloader-type") {
    // Triad's one choice of each is Megatron's default: said as without effect; another is not
    // carried over (--strict refuses it).
    static const std::map<std::string, std::pair<std::string, std::string>> same = {
        {"--optimizer", {"adam", "Triad trains with AdamW, Megatron's adam"}},
        {"--normalization", {"LayerNorm", "Triad's normalization is LayerNorm"}},
        {"--dataloader-type",
         {"single", "Triad reads the samples in order, as Megatron's single"}}};
    const auto& [ours, why] = same.at(arg);
    // Megatron-LM spells LayerNorm so, Megatron-DeepSpeed layernorm.
    if (lower(value_of(arg, values)) == lower(ours))
      out_.no_effect.push_back(src + ": no effect in Triad (" + why + ")");
    else
      not_carried(arg, values, why);
  } else if (arg == "--deepspeed_config" || arg == "--deepspeed-config") {
    out_.deepspeed_config = value_of(arg, values);
  } else {
    return false;
  }
  return true;
}

// Arguments whose Triad key needs others (the global batch, the sequence length, the layers):
// kept until every argument is read.
bool MegatronReader::derived_later(const std::string& arg, const std::vector<std::string>& values) {
  if (!later_names().count(arg)) return false;
  later_[arg] = {value_of(arg, values), source(arg, values)};
  return true;
}

double MegatronReader::number(const std::string& key) const {
  auto it = keys_.find(key);
  if (it == keys_.end()) return 0;
  double v = 0;
  const std::string& text = it->second.value.Scalar();
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() ? v : 0;
}

// Megatron's defaults where Triad's differ (megatron/training/arguments.py), for the arguments a
// launch leaves out.
void MegatronReader::defaults() {
  static const std::vector<std::array<const char*, 3>> rows = {
      {"optimizer.adam_beta2", "0.999", "--adam-beta2"},
      {"optimizer.weight_decay", "0.01", "--weight-decay"},
      {"lr_schedule.lr_decay_style", "linear", "--lr-decay-style"},
      {"lr_schedule.lr_warmup_iters", "0", "--lr-warmup-iters"},
      {"training.log_interval", "100", "--log-interval"}};
  // Megatron's loss scaler, where --fp16 asks for it without a ds_config (whose fp16 section
  // is DeepSpeed's scaler, with DeepSpeed's defaults, which are Triad's).
  static const std::vector<std::array<const char*, 3>> scaler = {
      {"fp16.initial_scale_power", "32", "--initial-loss-scale 4294967296"},
      {"fp16.loss_scale_window", "1000", "--loss-scale-window"},
      {"fp16.hysteresis", "2", "--hysteresis"},
      {"fp16.min_loss_scale", "1", "--min-loss-scale"}};
  // Megatron holds out validation data from --data-path by default ('969, 30, 1') and
  // evaluates it every 1000 steps.
  static const std::vector<std::array<const char*, 3>> validation = {
      {"data.split", "969,30,1", "--split"}, {"training.eval_interval", "1000", "--eval-interval"}};
  auto add = [&](const std::vector<std::array<const char*, 3>>& list) {
    for (const auto& [key, value, arg] : list)
      if (!keys_.count(key) && !(std::string_view(key) == "lr_schedule.lr_warmup_iters" &&
                                 (keys_.count("lr_schedule.lr_warmup_samples") ||
                                  keys_.count("lr_schedule.lr_warmup_fraction"))))
        out_.defaults.push_back(
            {key, YAML::Node(value), std::string("Megatron's default (no ") + arg + ")"});
  };
  add(rows);
  // Megatron's scheduler steps after each update: step k applies the lr it logged at k - 1.
  out_.defaults.push_back({"lr_schedule.lr_lag_steps", YAML::Node("1"),
                           "Megatron steps its scheduler after each update"});
  const bool json_scaler = out_.deepspeed && !out_.deepspeed_config.empty();
  if (keys_.count("fp16.enabled") && !json_scaler) {
    add(scaler);
    // Megatron's scaler stays at its minimum and goes on skipping (DeepSpeed's stops the run).
    out_.defaults.push_back({"fp16.raise_error_at_min_scale", YAML::Node("false"),
                             "Megatron's scaler: it stays at --min-loss-scale"});
  }
  if (keys_.count("data.path") && !keys_.count("data.valid_path")) add(validation);
  // Megatron drops out 10% by default; Triad has no dropout, so that training is not carried
  // over (--strict refuses it until the arguments say 0).
  for (const char* arg : {"--hidden-dropout", "--attention-dropout"})
    if (!given_.count(arg))
      out_.not_carried.push_back(std::string("no ") + arg + " (Megatron's default 0.1)" +
                                 ": Triad trains without dropout, as with " + arg + " 0");
}

void MegatronReader::derive() {
  // Megatron refuses these pairs (validate_args): one way to count the run and its warm-up.
  auto one_of = [&](const char* a, const char* b) {
    if (given_.count(a) && given_.count(b))
      throw UserError("Megatron arguments " + std::string(a) + " and " + b +
                      " are both given; Megatron takes one of them: keep one");
  };
  one_of("--train-iters", "--train-samples");
  one_of("--lr-warmup-iters", "--lr-warmup-fraction");
  one_of("--lr-warmup-iters", "--lr-warmup-samples");
  one_of("--lr-warmup-fraction", "--lr-warmup-samples");
  one_of("--lr-decay-iters", "--lr-decay-samples");
  // Iteration-based training takes iteration counts, sample-based sample counts (validate_args).
  auto not_mixed = [&](const char* run, const char* phase, const char* instead) {
    if (given_.count(run) && given_.count(phase))
      throw UserError("Megatron arguments " + std::string(run) + " and " + phase +
                      " mix iteration- and sample-based counts, which Megatron refuses; give " +
                      instead + " instead");
  };
  not_mixed("--train-iters", "--lr-decay-samples", "--lr-decay-iters");
  not_mixed("--train-iters", "--lr-warmup-samples", "--lr-warmup-iters");
  not_mixed("--train-samples", "--lr-decay-iters", "--lr-decay-samples");
  not_mixed("--train-samples", "--lr-warmup-iters", "--lr-warmup-samples");
  const double gbs = number("training.global_batch_size"), seq = number("model.seq_length");
  // The run's length in steps of the global batch, as Megatron counts it without ramp-up:
  // --train-samples // the global batch; --train-tokens stops at the first step that reaches
  // them, and with both the earlier ends it.
  auto run_steps = [&](const char* arg, double per_step, bool round_down) {
    auto it = later_.find(arg);
    if (it == later_.end()) return;
    const std::string& src = it->second.second;
    const double v = to_number(src, it->second.first);
    if (per_step <= 0)
      throw UserError("Megatron argument " + src + " needs --global-batch-size" +
                      (seq > 0 ? "" : " and --seq-length") +
                      " to become steps (Megatron derives the global batch from the world "
                      "size, which the arguments alone do not fix); add --global-batch-size N");
    const double n = round_down ? std::floor(v / per_step) : std::ceil(v / per_step);
    if (!(n >= 1 && n <= 2147483647.0))
      throw UserError("Megatron argument " + src + " gives " + count_text(n) + " steps of " +
                      count_text(per_step) + "; it must give 1 to 2147483647 steps");
    const std::string key = "training.train_iters";
    if (keys_.count(key) && number(key) <= n) return;
    set(key, YAML::Node(std::to_string(static_cast<long long>(n))),
        src + " / " + count_text(per_step) + " per step");
  };
  run_steps("--train-samples", gbs, true);
  // Megatron builds the training data for --train-samples itself, not for its whole steps.
  if (auto it = later_.find("--train-samples"); it != later_.end())
    set("training.train_samples",
        YAML::Node(
            std::to_string(static_cast<long long>(to_number(it->second.second, it->second.first)))),
        it->second.second + " (the samples Megatron builds the training data for)");
  run_steps("--train-tokens", gbs * seq, false);
  // The schedule's phases stay in samples, as Megatron counts them: a phase may end inside a
  // step (lr_schedule.lr_warmup_samples, lr_decay_samples); tokens are samples of seq_length.
  auto phase = [&](const char* arg, const std::string& key, double per_sample) {
    auto it = later_.find(arg);
    if (it == later_.end()) return false;
    const std::string& src = it->second.second;
    const double v = to_number(src, it->second.first);
    if (per_sample <= 0)
      throw UserError("Megatron argument " + src +
                      " needs --seq-length to become samples; add --seq-length N");
    set(key, YAML::Node(format_double(v / per_sample)),
        per_sample == 1 ? src : src + " / " + count_text(per_sample) + " tokens per sample");
    return true;
  };
  phase("--lr-warmup-samples", "lr_schedule.lr_warmup_samples", 1);
  phase("--lr-warmup-tokens", "lr_schedule.lr_warmup_samples", seq);
  // Both flags are read (each may be given), so no short-circuit.
  const bool decay_samples = phase("--lr-decay-samples", "lr_schedule.lr_decay_samples", 1);
  const bool decay_tokens = phase("--lr-decay-tokens", "lr_schedule.lr_decay_samples", seq);
  const bool decay = decay_samples || decay_tokens;
  // Sample-based training decays over its samples unless told otherwise (not its whole steps).
  if (auto it = later_.find("--train-samples"); it != later_.end() && !decay)
    set("lr_schedule.lr_decay_samples",
        YAML::Node(format_double(to_number(it->second.second, it->second.first))),
        it->second.second + " (Megatron decays over the training samples)");
  if (auto it = later_.find("--lr-warmup-fraction"); it != later_.end())
    set("lr_schedule.lr_warmup_fraction",
        YAML::Node(format_double(to_number(it->second.second, it->second.first))),
        it->second.second);
  if (auto it = later_.find("--ffn-hidden-size"); it != later_.end()) {
    if (to_number(it->second.second, it->second.first) == 4 * number("model.hidden_size"))
      out_.no_effect.push_back(it->second.second + ": no effect in Triad (4 × hidden, as Triad)");
    else
      not_carried(it->second.second, {}, "Triad's MLP is 4 × --hidden-size wide");
  }
  const auto method = later_.find("--recompute-method");
  for (const char* n : {"--recompute-num-layers", "--checkpoint-num-layers"}) {
    auto it = later_.find(n);
    if (it == later_.end()) continue;
    if (it->second.first == "1" && (method == later_.end() || method->second.first == "uniform"))
      out_.no_effect.push_back(it->second.second +
                               ": no effect in Triad (one layer at a time, as Triad)");
    else
      not_carried(it->second.second, {}, "Triad recomputes each layer from its own input");
  }
  if (method != later_.end() && method->second.first == "block")
    not_carried(method->second.second, {}, "Triad recomputes every layer (uniform, 1 layer)");
  else if (method != later_.end())
    out_.no_effect.push_back(method->second.second + ": no effect in Triad (each layer, as Triad)");
  if (auto it = later_.find("--num-layers-per-virtual-pipeline-stage"); it != later_.end()) {
    const double per = to_number(it->second.second, it->second.first),
                 layers = number("model.num_layers"),
                 pp = std::max(1.0, number("parallel.pipeline_model_parallel_size"));
    const double v = layers / (pp * per);
    if (per > 0 && v >= 1 && v == std::floor(v))
      set("parallel.virtual_pipeline_model_parallel_size",
          YAML::Node(std::to_string(static_cast<long long>(v))), it->second.second);
    else
      not_carried(it->second.second, {}, "needs --num-layers a multiple of it × pipeline stages");
  }
  defaults();
}

}  // namespace

Imported import_megatron(const std::vector<std::string>& args) {
  return MegatronReader(args).read();
}

}  // namespace triad::config_detail
