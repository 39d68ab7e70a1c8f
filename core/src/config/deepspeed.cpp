// DeepSpeed's ds_config.json in Triad's keys (import.hpp). Every key is applied (the shared key
// table, or the optimizer and scheduler sections below), accepted as having no effect in Triad
// (with why, for the log), or refused with the fix. "auto" leaves the value to the YAML, the
// Megatron arguments or Triad's derivation (the batch sizes), as DeepSpeed's integrations do.
#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include "import.hpp"
#include "schema.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"

namespace triad::config_detail {
namespace {

using json = nlohmann::json;

// Keys Triad accepts without effect (why), or refuses once they ask for something (fix): a
// section with "enabled": true, a true flag, or a device other than "none".
struct Rule {
  std::string_view path;
  bool refuse_when_on;
  std::string_view text;
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule> r = {
      {"steps_per_print", false, "Triad logs every training.log_interval steps (--log-interval)"},
      {"wall_clock_breakdown", false,
       "Triad's step trace (--profile-steps) times every part of a step"},
      {"memory_breakdown", false, "Triad logs each step's peak memory"},
      {"dump_state", false, "triad-launch --dry-run prints the resolved config"},
      {"flops_profiler", false, "Triad logs TFLOP/s and MFU every step"},
      {"prescale_gradients", false, "gradients are averaged over data parallelism in fp32 anyway"},
      {"gradient_predivide_factor", false,
       "gradients are averaged over data parallelism in fp32 anyway"},
      {"communication_data_type", false, "Triad reduces gradients in fp32"},
      {"data_types", false, "Triad accumulates gradients in fp32"},
      {"zero_allow_untested_optimizer", false, "Triad's ZeRO steps its own AdamW"},
      {"zero_force_ds_cpu_optimizer", false, "an offloaded optimizer is Triad's host AdamW"},
      {"activation_checkpointing", false,
       "it tunes how DeepSpeed recomputes; whether Triad recomputes is "
       "training.recompute_granularity (Megatron's --checkpoint-activations)"},
      {"tensorboard", false,
       "Triad's TensorBoard files (Megatron's tags) are logging.tensorboard_dir "
       "(--tensorboard-dir)"},
      {"wandb", false, "Triad logs every step to OUTPUT/metrics.jsonl"},
      {"csv_monitor", false, "Triad logs every step to OUTPUT/metrics.jsonl"},
      {"comet", false, "Triad logs every step to OUTPUT/metrics.jsonl"},
      {"comms_logger", false, "Triad's step trace (--profile-steps) shows each collective"},
      {"checkpoint", false, "Triad's checkpoints are the checkpoint section (--save, --load)"},
      {"pipeline", false,
       "Triad's pipeline is parallel.pipeline_model_parallel_size and the pipeline: schedule"},
      {"aio", false, "Triad has no NVMe offload"},
      {"autotuning", true, "remove it and use tools/triad-autotune"},
      {"elasticity", true, "Triad's batch sizes are fixed for a run; remove elasticity"},
      {"curriculum_learning", true, "Triad has no curriculum; remove it"},
      {"data_efficiency", true, "Triad has no curriculum or data sampling; remove it"},
      {"compression_training", true, "Triad does not compress models; remove it"},
      {"amp", true, "use the fp16 or bf16 section"},
      {"sparse_attention", true, "choose attention: flash2 or naive in the YAML; remove it"},
      {"fp16.auto_cast", true, "Triad's fp16 runs the model in fp16; remove auto_cast"},
      {"fp16.fp16_master_weights_and_grads", true, "Triad keeps fp32 master weights; remove it"},
      {"bf16.immediate_grad_update", false, "Triad accumulates gradients in fp32"},
      {"zero_optimization.contiguous_gradients", false,
       "Triad's gradients always live in one flat arena"},
      {"zero_optimization.allgather_partitions", false, "Triad gathers parameters its own way"},
      {"zero_optimization.allgather_bucket_size", false, "Triad gathers whole layers"},
      {"zero_optimization.round_robin_gradients", false, "Triad partitions by offsets"},
      {"zero_optimization.sub_group_size", false, "Triad steps each shard whole"},
      {"zero_optimization.elastic_checkpoint", false, "Triad's checkpoints load into any layout"},
      {"zero_optimization.load_from_fp32_weights", false, "Triad's checkpoints hold fp32 weights"},
      {"zero_optimization.ignore_unused_parameters", false, "every GPT parameter is used"},
      {"zero_optimization.legacy_stage1", false, "Triad has one stage 1"},
      {"zero_optimization.stage3_prefetch_bucket_size", false, "Triad gathers one layer ahead"},
      {"zero_optimization.stage3_param_persistence_threshold", false,
       "Triad gathers every layer's parameters"},
      {"zero_optimization.stage3_model_persistence_threshold", false,
       "Triad gathers every layer's parameters"},
      {"zero_optimization.stage3_max_live_parameters", false, "Triad gathers one layer at a time"},
      {"zero_optimization.stage3_max_reuse_distance", false, "Triad gathers one layer at a time"},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", false,
       "Triad's checkpoints hold the whole fp32 model"},
      {"zero_optimization.gather_16bit_weights_on_model_save", false,
       "Triad's checkpoints hold the whole fp32 model"},
      {"zero_optimization.offload_optimizer.buffer_count", false, "it tunes NVMe offload"},
      {"zero_optimization.offload_optimizer.fast_init", false, "it tunes NVMe offload"},
      {"zero_optimization.offload_optimizer.pipeline_read", false, "it tunes NVMe offload"},
      {"zero_optimization.offload_optimizer.pipeline_write", false, "it tunes NVMe offload"},
      {"zero_optimization.offload_optimizer.ratio", false, "Triad offloads the whole shard"},
      {"zero_optimization.offload_optimizer.nvme_path", false, "Triad has no NVMe offload"},
      {"zero_optimization.offload_param", true,
       "Triad keeps ZeRO-3 parameters on the training device; remove offload_param or set its "
       "device to none"},
      {"zero_optimization.cpu_offload_params", true,
       "Triad keeps ZeRO-3 parameters on the training device; remove it"},
      {"zero_optimization.zero_quantized_weights", true, "Triad does not quantize; remove it"},
      {"zero_optimization.zero_quantized_gradients", true, "Triad does not quantize; remove it"},
      {"zero_optimization.zero_hpz_partition_size", false,
       "Triad shards over all of data parallelism"},
      {"zero_optimization.mics_shard_size", false, "Triad shards over all of data parallelism"},
      {"optimizer.params.torch_adam", false, "Triad steps its own AdamW"},
      {"optimizer.params.fused", false, "Triad steps its own AdamW"},
      {"optimizer.params.bias_correction", false, "Triad's AdamW corrects the bias"},
      {"scheduler.params.last_batch_iteration", false,
       "a resumed run takes its step from the checkpoint"},
  };
  return r;
}

const Rule* rule_for(const std::string& path) {
  for (const Rule& r : rules())
    if (r.path == path) return &r;
  return nullptr;
}

// Whether a value asks for the feature: true, a non-zero number, a device but "none", a section
// with "enabled": true (or no "enabled" at all, as DeepSpeed sections are on when present).
bool is_on(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return v.get<std::string>() != "none" && !v.get<std::string>().empty();
  if (v.is_object()) {
    if (v.contains("device")) return is_on(v["device"]);
    return !v.contains("enabled") || is_on(v["enabled"]);
  }
  return !v.is_null();
}

// A whole number written as 5e8 reads 500000000.0 in JSON; Triad's counts take it as 500000000.
std::string scalar_text(const json& v) {
  if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
      std::fabs(v.get<double>()) < 1e15)
    return std::to_string(static_cast<long long>(v.get<double>()));
  return v.is_string() ? v.get<std::string>() : v.dump();
}

class DeepSpeedReader {
 public:
  DeepSpeedReader(std::string file, const Lookup& current, bool megatron_optimizer)
      : file_(std::move(file)), current_(current), megatron_optimizer_(megatron_optimizer) {}

  Imported read(const json& root) {
    if (!root.is_object())
      throw UserError("DeepSpeed config '" + file_ + "' must hold a JSON object {...}, not " +
                      std::string(root.type_name()) + "; give a ds_config.json");
    for (auto it = root.begin(); it != root.end(); ++it) {
      if ((it.key() == "optimizer" || it.key() == "scheduler") && megatron_optimizer_) {
        note(it.key(),
             "Megatron-DeepSpeed hands DeepSpeed Megatron's optimizer and lr schedule, which "
             "DeepSpeed uses instead of this section: Megatron's arguments set them");
      } else if (it.key() == "optimizer") {
        optimizer(it.value());
      } else if (it.key() == "scheduler") {
        scheduler(it.value());
      } else if (it.key() == "bfloat16") {  // DeepSpeed's older name of the bf16 section
        walk("bf16", it.value(), "bfloat16");
      } else {
        walk(it.key(), it.value(), it.key());
      }
    }
    // DeepSpeed clips nothing unless gradient_clipping says so.
    if (!root.contains("gradient_clipping"))
      out_.defaults.push_back(
          {"optimizer.clip_grad", YAML::Node("0"),
           file_ + ": DeepSpeed's default (no gradient_clipping: no clipping)"});
    if (root.contains("optimizer") && !megatron_optimizer_)
      deepspeed_defaults(root["optimizer"], root.contains("scheduler"));
    return std::move(out_);
  }

 private:
  // DeepSpeed's own defaults where its optimizer section leaves a value out (its Adam: betas
  // 0.9, 0.999, eps 1e-8, no weight decay) and where it has no scheduler (a constant lr): for
  // the keys neither the JSON nor the YAML gives (merge_defaults). A parameter the JSON gives as
  // "auto" comes from the YAML or Triad's defaults, as the JSON asks.
  void deepspeed_defaults(const json& optimizer, bool has_scheduler) {
    const std::vector<std::array<const char*, 3>> rows = {
        {"optimizer.adam_beta1", "0.9", "betas"},
        {"optimizer.adam_beta2", "0.999", "betas"},
        {"optimizer.adam_eps", "1e-8", "eps"},
        {"optimizer.weight_decay", "0", "weight_decay"}};
    const bool has_params =
        optimizer.is_object() && optimizer.contains("params") && optimizer["params"].is_object();
    for (const auto& [key, value, param] : rows)
      if (!has_params || !optimizer["params"].contains(param))
        out_.defaults.push_back(
            {key, YAML::Node(value),
             file_ + ": DeepSpeed's default (no optimizer.params." + std::string(param) + ")"});
    if (has_scheduler) return;
    const std::array<std::array<const char*, 2>, 2> constant_lr = {
        {{"lr_schedule.lr_decay_style", "constant"}, {"lr_schedule.lr_warmup_iters", "0"}}};
    for (const auto& [key, value] : constant_lr)
      out_.defaults.push_back(
          {key, YAML::Node(value), file_ + ": DeepSpeed's default (no scheduler: a constant lr)"});
  }

  std::string src(const std::string& path) const { return file_ + ": " + path; }

  [[noreturn]] void refuse(const std::string& path, const json& v, const std::string& fix) const {
    throw UserError(src(path) + " is " + v.dump() + ", which Triad cannot honour; " + fix);
  }

  void note(const std::string& path, std::string_view why) {
    out_.no_effect.push_back(src(path) + ": no effect in Triad (" + std::string(why) + ")");
  }

  void set(const std::string& key, const std::string& value, const std::string& path) {
    out_.keys.push_back({key, YAML::Node(value), src(path)});
  }

  // `path`: DeepSpeed's key path; `written`: as the file spells it (bfloat16 for bf16).
  void walk(const std::string& path, const json& v, const std::string& written) {
    if (const Rule* r = rule_for(path)) {
      if (r->refuse_when_on && is_on(v)) refuse(written, v, std::string(r->text));
      note(written, r->refuse_when_on ? "it is off" : r->text);
      return;
    }
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it)
        walk(path + "." + it.key(), it.value(), written + "." + it.key());
      return;
    }
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i)
        walk(path + "." + std::to_string(i), v[i], written + "." + std::to_string(i));
      return;
    }
    leaf(path, v, written);
  }

  void leaf(const std::string& path, const json& v, const std::string& written) {
    if (path == "zero_optimization.cpu_offload") {  // DeepSpeed's older switch
      if (is_on(v)) set("zero_optimization.offload_optimizer.device", "cpu", written);
      return;
    }
    if (path == "zero_optimization.offload_optimizer.device" && v == "nvme")
      refuse(written, v, "Triad offloads to the host only; use \"device\": \"cpu\"");
    for (const KeyRow& row : key_table()) {
      // "auto" (or null) for a key or a list of keys ("betas": "auto"): the value comes from the
      // YAML or Megatron's arguments, or is derived (the batch sizes).
      const bool under = row.deepspeed.starts_with(path + ".");
      if (row.deepspeed != path && !under) continue;
      if (v.is_null() || v == "auto") return;
      if (under) break;
      set(std::string(row.triad), scalar_text(v), written);
      return;
    }
    unknown(path, written);
  }

  [[noreturn]] void unknown(const std::string& path, const std::string& written) const {
    std::vector<std::string> names;
    for (const KeyRow& row : key_table())
      if (!row.deepspeed.empty()) names.emplace_back(row.deepspeed);
    for (const Rule& r : rules()) names.emplace_back(r.path);
    std::vector<std::string_view> views(names.begin(), names.end());
    const std::string guess = closest(path, views);
    throw UserError(src(written) + " is not a DeepSpeed key Triad knows; " +
                    (guess.empty() ? "remove it" : "did you mean '" + guess + "'?") +
                    " (docs/configuration.md lists the DeepSpeed keys Triad reads)");
  }

  void optimizer(const json& o) {
    if (!o.is_object()) refuse("optimizer", o, "write \"optimizer\": {\"type\": \"AdamW\", ...}");
    for (auto it = o.begin(); it != o.end(); ++it) {
      const std::string path = "optimizer." + it.key();
      if (it.key() == "type") {
        const std::string t = lower(it.value().is_string() ? it.value().get<std::string>() : "");
        if (t != "adam" && t != "adamw")
          refuse(path, it.value(), "Triad trains with AdamW; use \"type\": \"AdamW\"");
      } else if (it.key() == "params" && it.value().is_object()) {
        const json& p = it.value();
        // Adam with adam_w_mode false is L2 regularisation, not AdamW's decoupled decay.
        if (p.contains("adam_w_mode") && !is_on(p["adam_w_mode"]) &&
            p.value("weight_decay", json(0.0)).is_number() &&
            p.value("weight_decay", json(0.0)).get<double>() != 0)
          refuse("optimizer.params.adam_w_mode", p["adam_w_mode"],
                 "Triad's AdamW decays weights decoupled; set adam_w_mode true");
        // betas is Adam's pair (beta1, beta2): one number alone would leave beta2 unsaid.
        if (p.contains("betas") && !p["betas"].is_null() && p["betas"] != "auto" &&
            (!p["betas"].is_array() || p["betas"].size() != 2))
          refuse("optimizer.params.betas", p["betas"],
                 "Adam's betas are two numbers; write \"betas\": [0.9, 0.999]");
        // Adam without bias correction takes other steps; DeepSpeed's default corrects it.
        if (p.contains("bias_correction") && p["bias_correction"].is_boolean() &&
            !p["bias_correction"].get<bool>())
          refuse("optimizer.params.bias_correction", p["bias_correction"],
                 "Triad's AdamW always corrects Adam's bias (DeepSpeed's default); remove it or "
                 "set it true");
        for (auto q = p.begin(); q != p.end(); ++q) {
          if (q.key() == "adam_w_mode") {
            note("optimizer.params.adam_w_mode", "Triad's AdamW decays weights decoupled");
            continue;
          }
          walk(path + "." + q.key(), q.value(), path + "." + q.key());
        }
      } else {
        unknown(path, path);
      }
    }
  }

  void scheduler(const json& s);
  void scheduler_params(const std::string& type, const json& p);

  std::string file_;
  const Lookup& current_;
  bool megatron_optimizer_ = false;
  Imported out_;
};

// WarmupLR: warm up to warmup_max_lr, then constant; WarmupDecayLR: then linear down to
// warmup_min_lr at total_num_steps; WarmupCosineLR: warm up to the optimizer's lr, then cosine
// down to cos_min_ratio × lr. Absent parameters take DeepSpeed's defaults.
void DeepSpeedReader::scheduler(const json& s) {
  if (!s.is_object() || !s.contains("type") || !s["type"].is_string())
    refuse("scheduler", s, "write \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {...}}");
  const std::string type = s["type"].get<std::string>();
  const std::map<std::string, std::string> styles = {
      {"WarmupLR", "constant"}, {"WarmupDecayLR", "linear"}, {"WarmupCosineLR", "cosine"}};
  if (!styles.count(type))
    refuse("scheduler.type", s["type"],
           "Triad's schedules are WarmupLR, WarmupDecayLR and WarmupCosineLR (lr_schedule)");
  set("lr_schedule.lr_decay_style", styles.at(type), "scheduler.type");
  // DeepSpeed sets the scheduler's first value before step 1 and steps it after each update:
  // step k applies its value at k - 2.
  set("lr_schedule.lr_lag_steps", "2", "scheduler (DeepSpeed steps it after each update)");
  for (auto it = s.begin(); it != s.end(); ++it)
    if (it.key() != "type" && it.key() != "params")
      unknown("scheduler." + it.key(), "scheduler." + it.key());
  scheduler_params(type, s.value("params", json::object()));
}

void DeepSpeedReader::scheduler_params(const std::string& type, const json& p) {
  if (!p.is_object()) refuse("scheduler.params", p, "write \"params\": {...}");
  const std::set<std::string> known = {"warmup_min_lr", "warmup_max_lr",       "warmup_num_steps",
                                       "warmup_type",   "total_num_steps",     "warmup_min_ratio",
                                       "cos_min_ratio", "last_batch_iteration"};
  for (auto it = p.begin(); it != p.end(); ++it)
    if (!known.count(it.key()))
      unknown("scheduler.params." + it.key(), "scheduler.params." + it.key());
  const bool cosine = type == "WarmupCosineLR";
  auto given = [&](const char* k) { return p.contains(k) && p[k] != "auto" && !p[k].is_null(); };
  auto number = [&](const char* k, double fallback) {
    if (!given(k)) return fallback;
    if (!p[k].is_number()) refuse(std::string("scheduler.params.") + k, p[k], "give a number");
    return p[k].get<double>();
  };
  const std::string pre = "scheduler.params.";
  // DeepSpeed's defaults: 1000 warm-up steps, warm-up from 0 to 0.001, log-shaped.
  auto is_auto = [&](const char* k) { return p.contains(k) && p[k] == "auto"; };
  const double steps = number("warmup_num_steps", 1000);
  // DeepSpeed warms up over at least 2 steps (max(2, warmup_num_steps)).
  if (!is_auto("warmup_num_steps"))
    set("lr_schedule.lr_warmup_iters",
        given("warmup_num_steps")
            ? (steps < 2 ? std::string("2") : scalar_text(p["warmup_num_steps"]))
            : "1000",
        pre + "warmup_num_steps" +
            (!given("warmup_num_steps") ? " (DeepSpeed's default)"
             : steps < 2                ? " (DeepSpeed's at least 2)"
                                        : ""));
  // DeepSpeed warms up log-shaped unless told "linear" (lr_schedule.lr_warmup_style).
  if (given("warmup_type") && p["warmup_type"] != "linear" && p["warmup_type"] != "log")
    refuse(pre + "warmup_type", p["warmup_type"],
           "DeepSpeed's warm-ups are \"log\" and \"linear\"; use one of them");
  if (given("warmup_type"))
    set("lr_schedule.lr_warmup_style", p["warmup_type"].get<std::string>(), pre + "warmup_type");
  else if (!p.contains("warmup_type"))
    set("lr_schedule.lr_warmup_style", "log", pre + "warmup_type (DeepSpeed's default)");
  const double start = cosine ? number("warmup_min_ratio", 0) : number("warmup_min_lr", 0);
  if (start != 0 && steps > 0)
    refuse(pre + (cosine ? "warmup_min_ratio" : "warmup_min_lr"),
           p[cosine ? "warmup_min_ratio" : "warmup_min_lr"],
           "Triad's warm-up starts from 0; set it to 0");
  if (type != "WarmupLR" && !p.contains("total_num_steps"))
    refuse(pre + "total_num_steps", json(nullptr),
           type + " needs the step the decay ends at; give \"total_num_steps\" (or \"auto\")");
  if (given("total_num_steps"))
    set("lr_schedule.lr_decay_iters", scalar_text(p["total_num_steps"]), pre + "total_num_steps");
  if (!cosine) {
    if (!is_auto("warmup_max_lr"))
      set("optimizer.lr", given("warmup_max_lr") ? scalar_text(p["warmup_max_lr"]) : "0.001",
          pre + "warmup_max_lr" + (given("warmup_max_lr") ? "" : " (DeepSpeed's default)"));
    if (type == "WarmupDecayLR" && given("warmup_min_lr"))
      set("optimizer.min_lr", scalar_text(p["warmup_min_lr"]), pre + "warmup_min_lr");
    return;
  }
  // The cosine ends at a ratio of the optimizer's lr: this file's, else the YAML's, else Triad's.
  if (is_auto("cos_min_ratio")) return;
  const double ratio = number("cos_min_ratio", 0.0001);
  // A text that is no number is refused where it was written; here it leaves Triad's default.
  auto read_lr = [](const std::string& text, double& lr) {
    std::from_chars(text.data(), text.data() + text.size(), lr);
  };
  double lr = Config{}.optimizer.lr;
  if (std::optional<std::string> y = current_("optimizer.lr")) read_lr(*y, lr);
  for (const ImportedKey& k : out_.keys)
    if (k.key == "optimizer.lr") read_lr(k.value.Scalar(), lr);
  set("optimizer.min_lr", format_double(ratio * lr),
      pre + "cos_min_ratio" + (given("cos_min_ratio") ? "" : " (DeepSpeed's default 0.0001)") +
          " × lr " + format_double(lr));
}

// DeepSpeed refuses a key given twice in one object; so does this reader.
json parse(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> seen;
  auto check = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) seen.emplace_back();
    if (event == json::parse_event_t::object_end && !seen.empty()) seen.pop_back();
    if (event == json::parse_event_t::key && !seen.empty() &&
        !seen.back().insert(parsed.get<std::string>()).second)
      throw UserError("DeepSpeed config '" + path + "' gives the key '" +
                      parsed.get<std::string>() + "' twice in one object; keep one");
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::parse_error& e) {
    throw UserError("DeepSpeed config '" + path + "' is not valid JSON (byte " +
                    std::to_string(e.byte) + "); fix the file there");
  } catch (const json::exception& e) {  // a number beyond a double's range (1e400)
    throw UserError("DeepSpeed config '" + path + "' cannot be read (" + e.what() +
                    "); fix the value there");
  }
}

}  // namespace

Imported import_deepspeed(const std::string& path, const Lookup& current, bool megatron_optimizer) {
  const std::string text = read_regular_file(
      path, "DeepSpeed config", "give a ds_config.json, e.g. --deepspeed_config ds_config.json");
  return DeepSpeedReader(path, current, megatron_optimizer).read(parse(path, text));
}

}  // namespace triad::config_detail
