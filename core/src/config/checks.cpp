#include "checks.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "../data/blend.hpp"
#include "schema.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"

namespace triad::config_detail {
namespace {

class Checker {
 public:
  Checker(const Given& given, const Locator& loc) : given_(given), loc_(loc) {}

  // Where `canonical` was given, or the file when it kept its default.
  std::string at(const std::string& canonical) const {
    auto it = given_.find(canonical);
    return it != given_.end() ? it->second.where : loc_.file() + ", default";
  }
  bool given(const std::string& canonical) const { return given_.count(canonical) != 0; }
  // The value as the user wrote it ("3e-4"), else `resolved` formatted.
  std::string text(const std::string& canonical, double resolved) const {
    auto it = given_.find(canonical);
    return it != given_.end() ? it->second.text : format_double(resolved);
  }

 private:
  const Given& given_;
  const Locator& loc_;
};

[[noreturn]] void fail(const std::string& msg) {
  throw UserError(msg);
}

std::string str(int v) {
  return std::to_string(v);
}

void check_model(Config& c, const Checker& k) {
  ModelConfig& m = c.model;
  if (m.hidden_size % m.num_attention_heads != 0) {
    int near = std::max(1, (m.hidden_size + m.num_attention_heads / 2) / m.num_attention_heads) *
               m.num_attention_heads;
    fail("model.hidden_size " + str(m.hidden_size) + " is not divisible by " +
         "model.num_attention_heads " + str(m.num_attention_heads) + " (" +
         k.at("model.hidden_size") +
         "); each head gets hidden_size / heads channels, so use a multiple of " +
         str(m.num_attention_heads) + " such as " + str(near));
  }
  int head_dim = m.hidden_size / m.num_attention_heads;
  if (m.position_embedding == "rope" && head_dim % 2 != 0)
    fail("model.position_embedding 'rope' needs an even head dimension, but hidden_size " +
         str(m.hidden_size) + " / num_attention_heads " + str(m.num_attention_heads) + " = " +
         str(head_dim) + " (" + k.at("model.position_embedding") +
         "); rotary embeddings turn pairs of channels, so choose sizes with an even quotient");
  if (m.max_position_embeddings == 0) {
    m.max_position_embeddings = m.seq_length;
  } else if (m.seq_length > m.max_position_embeddings) {
    fail("model.seq_length " + str(m.seq_length) + " is longer than the model's context, " +
         "max_position_embeddings " + str(m.max_position_embeddings) + " (" +
         k.at("model.seq_length") +
         "); lower seq_length or raise max_position_embeddings (a model cannot attend past its "
         "context)");
  }
}

// Megatron counts the decay from step 0, warm-up included: the decay runs from the end of the
// warm-up to its own end, so it cannot end before the warm-up does. Sample counts need the
// global batch: until it is known (derived from the layout) they are not compared.
void check_lr_phases(const Config& c, const Checker& k) {
  const LrScheduleConfig& s = c.lr_schedule;
  const bool by_samples = s.lr_decay_samples > 0, warmup_samples = s.lr_warmup_samples > 0;
  if ((by_samples || warmup_samples) && c.training.global_batch_size <= 0) return;
  if (s.lr_decay_iters <= 0 && !by_samples) return;
  const LrPhases p = lr_phases(s, c.training.train_iters, c.training.global_batch_size);
  if (p.decay >= p.warmup) return;
  const std::string key =
      by_samples ? "lr_schedule.lr_decay_samples" : "lr_schedule.lr_decay_iters";
  fail(key + " " + (by_samples ? count_text(s.lr_decay_samples) : str(s.lr_decay_iters)) +
       " ends the decay at step " + count_text(p.decay) + ", before the warm-up ends at step " +
       count_text(p.warmup) + " (" + k.at(key) +
       "); the decay runs from the end of the warm-up to its own end (counted from step 0), "
       "so lengthen the decay to at least step " +
       count_text(p.warmup) + ", set it to 0 (= train_iters) or shorten the warm-up");
}

void check_training(const Config& c, const Checker& k) {
  const OptimizerConfig& o = c.optimizer;
  if (o.min_lr > o.lr)
    fail("optimizer.min_lr " + k.text("optimizer.min_lr", o.min_lr) +
         " is larger than optimizer.lr " + k.text("optimizer.lr", o.lr) + " (" +
         k.at("optimizer.min_lr") +
         "); the schedule decays from lr down to min_lr, so min_lr must not exceed lr");
  // One count of each phase, as Megatron takes one of its arguments.
  const LrScheduleConfig& s = c.lr_schedule;
  auto one_of = [&](std::initializer_list<std::pair<const char*, double>> keys) {
    std::vector<std::string> given;
    for (const auto& [key, v] : keys)
      if (v > 0) given.push_back(std::string("lr_schedule.") + key);
    if (given.size() > 1)
      fail(given[0] + " and " + given[1] + " are both given (" + k.at(given[1]) +
           "); each counts the same phase of the schedule: keep one");
  };
  one_of({{"lr_warmup_iters", s.lr_warmup_iters},
          {"lr_warmup_samples", s.lr_warmup_samples},
          {"lr_warmup_fraction", s.lr_warmup_fraction}});
  one_of({{"lr_decay_iters", s.lr_decay_iters}, {"lr_decay_samples", s.lr_decay_samples}});
  check_lr_phases(c, k);
  const DataConfig& d = c.data;
  if (!d.path_list.empty() && d.kind != "indexed")
    fail("data.path is a list (" + k.at("data.path") + "), which only data.kind indexed takes " +
         "(a blend of Megatron datasets); give data.kind " + d.kind + " one file");
  if (d.kind == "indexed" && d.path.empty() && d.path_list.empty())
    fail("data.path is required for data.kind 'indexed' (" + k.at("data.kind") +
         "); give the prefix of the .bin/.idx pair, e.g. data: {kind: indexed, path: "
         "data/corpus_text_document}, or a blend [0.3, data/a, 0.7, data/b]");
  if (!d.path_list.empty()) {
    std::vector<data::BlendEntry> blend;
    if (const data::BlendProblem bad = data::parse_blend(d.path_list, blend); !bad.ok())
      fail(bad.message(k.at("data.path")));
  }
  if ((d.kind == "text" || d.kind == "tokens") && d.path.empty())
    fail("data.path is required for data.kind '" + d.kind + "' (" + k.at("data.kind") +
         "); give the file to read, e.g. data: {kind: " + d.kind + ", path: " +
         (d.kind == "text" ? "corpus.txt" : "train.bin") + "}, or use kind: synthetic");
  // Megatron shuffles its indices with numpy.random.RandomState(seed), which refuses seeds of
  // 2^32 and more; reducing them would train another order than the job's.
  const uint64_t shuffle_seed = d.seed != 0 ? d.seed : c.training.seed;
  const char* seed_key = d.seed != 0 ? "data.seed" : "training.seed";
  if (d.kind == "indexed" && d.shuffle && shuffle_seed > 0xffffffffULL)
    fail(std::string(seed_key) + " " + std::to_string(shuffle_seed) + " (" + k.at(seed_key) +
         ") shuffles Megatron's indices with numpy's RandomState, which takes seeds below 2^32 "
         "(4294967296) only; choose a seed below 4294967296");
  if (d.tokenizer == "gpt2" && d.kind != "text")
    fail("data.tokenizer gpt2 (" + k.at("data.tokenizer") + ") tokenizes data.kind text, but " +
         "data.kind is " + d.kind + " (already tokens); drop data.tokenizer or use kind text");
  if (d.tokenizer == "gpt2" && c.model.vocab_size < 50257)
    fail("data.tokenizer gpt2 (" + k.at("data.tokenizer") + ") gives token ids up to 50256, but " +
         "model.vocab_size is " + str(c.model.vocab_size) + "; set model.vocab_size: 50257");
  // Validation data: a part of data.split (it must parse) or data.valid_path.
  if (!d.split.empty()) split_range(d.split, 1000, DataPart::train);
  const TrainingConfig& t = c.training;
  const auto valid = split_range(d.split, 1000000, DataPart::valid);
  if (t.eval_interval > 0 && d.valid_path.empty() && valid.second == valid.first)
    fail("training.eval_interval " + str(t.eval_interval) + " (" + k.at("training.eval_interval") +
         ") needs validation data, but " +
         (d.split.empty() ? std::string("data.split is not set")
                          : "data.split '" + d.split + "' gives validation weight 0") +
         "; set data.split to Megatron's train,validation,test weights (e.g. \"969,30,1\") or "
         "data.valid_path to a validation file");
  if (!d.valid_path.empty() && d.kind == "synthetic")
    fail("data.valid_path '" + d.valid_path + "' (" + k.at("data.valid_path") +
         ") has no meaning for data.kind synthetic, whose validation part is drawn from its own "
         "seed; drop it");
  if (!c.output.export_hf.empty() && c.model.position_embedding == "rope")
    fail("output.export_hf '" + c.output.export_hf + "' needs model.position_embedding " +
         "'learned' (" + k.at("output.export_hf") +
         "); the GPT-2 (Hugging Face) layout has no rotary embeddings, so drop export_hf or use "
         "learned positions");
}

// training.profile_steps, a list [3, 4] or a text "3-4,7", into its step numbers (sorted, each
// once), every one from 1 to train_iters.
void resolve_profile_steps(TrainingConfig& t, const Checker& k) {
  std::vector<std::string> items = t.profile_steps_list;
  if (!t.profile_steps.empty())
    for (std::string& item : split_on(t.profile_steps, ',')) items.push_back(std::move(item));
  std::string written = t.profile_steps;  // as given, for the message
  for (const std::string& item : t.profile_steps_list)
    written += (written.empty() ? "[" : ", ") + item;
  if (!t.profile_steps_list.empty()) written += "]";
  const auto bad = [&](const std::string& why) {
    fail("training.profile_steps '" + written + "' (" + k.at("training.profile_steps") + ") " +
         why + "; give step numbers from 1 to training.train_iters " + str(t.train_iters) +
         " as a list [3, 4] or a range '3-4' (--profile-steps 3-4), or leave it empty for no "
         "trace");
  };
  const auto number = [&](std::string text) {
    while (!text.empty() && text.front() == ' ') text.erase(0, 1);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size())
      bad("has '" + text + "', which is not a step number");
    if (v < 1 || v > t.train_iters)
      bad("has step " + text + ", outside the run's steps 1.." + str(t.train_iters));
    return v;
  };
  std::vector<int>& out = t.profile_step_numbers;
  out.clear();
  for (const std::string& item : items) {
    const size_t dash = item.find('-', item.find_first_not_of(' ') + 1);
    const int first = number(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (last < first) bad("has the range '" + item + "', which ends before it starts");
    for (int s = first; s <= last; ++s) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

// training.recompute_granularity and its two shorthands: one granularity, however it was asked
// for, or one error naming both settings. Leaves the three keys agreeing (to_yaml writes all).
void resolve_recompute(TrainingConfig& t, const Checker& k) {
  struct Ask {
    std::string key, says, granularity;
  };
  std::vector<Ask> asks;
  if (k.given("training.recompute_granularity"))
    asks.push_back({"training.recompute_granularity", "is", t.recompute_granularity});
  if (t.checkpoint_activations)
    asks.push_back({"training.checkpoint_activations", "true means", "full"});
  if (t.recompute_activations)
    asks.push_back({"training.recompute_activations", "true means", "selective"});
  for (size_t i = 1; i < asks.size(); ++i) {
    const Ask &a = asks[0], &b = asks[i];
    if (a.granularity == b.granularity) continue;
    fail(a.key + " " + a.says + " '" + a.granularity + "' (" + k.at(a.key) + ") but " + b.key +
         " " + b.says + " '" + b.granularity + "' (" + k.at(b.key) +
         "); keep one of them: recompute_granularity none, full or selective "
         "(checkpoint_activations: true is full, recompute_activations: true is selective as "
         "Megatron's --recompute-activations)");
  }
  t.recompute_granularity = asks.empty() ? "none" : asks[0].granularity;
  t.checkpoint_activations = t.recompute_granularity == "full";
  t.recompute_activations = t.recompute_granularity == "selective";
}

// precision and DeepSpeed's fp16 / bf16 sections, agreeing: precision names the math; fp16.enabled
// alone means precision fp16, bf16.enabled alone bf16; precision fp16 turns the loss scaler on;
// precision fp32 with fp16.enabled runs the loss scaler over fp32 math (the scaler at work
// without fp16 kernels: how the tests force an overflow on the CPU).
void resolve_precision(Config& c, const Checker& k) {
  Fp16Config& f = c.fp16;
  if (f.enabled && c.bf16_enabled)
    fail("fp16.enabled (" + k.at("fp16.enabled") + ") and bf16.enabled (" + k.at("bf16.enabled") +
         ") are both true; keep one: bf16 needs no loss scaling, fp16 scales the loss");
  if (!k.given("precision")) c.precision = f.enabled ? "fp16" : c.bf16_enabled ? "bf16" : "fp32";
  const std::string& pr = c.precision;
  if (pr != "fp32" && pr != "bf16" && pr != "fp16")
    fail("precision '" + pr + "' is not one of fp32, bf16, fp16 (" + k.at("precision") +
         "); use fp32, or bf16 / fp16 on device: cuda");
  auto clash = [&](const std::string& key, bool on) {
    fail("precision " + pr + " (" + k.at("precision") + ") contradicts " + key + " " +
         (on ? "true" : "false") + " (" + k.at(key) + "); drop one of them");
  };
  if (pr == "bf16" && f.enabled) clash("fp16.enabled", true);
  if (pr == "fp32" && c.bf16_enabled) clash("bf16.enabled", true);
  if (pr == "fp16" && k.given("fp16.enabled") && !f.enabled) clash("fp16.enabled", false);
  if (pr == "bf16" && k.given("bf16.enabled") && !c.bf16_enabled) clash("bf16.enabled", false);
  if (pr == "fp16") f.enabled = true;
  c.bf16_enabled = pr == "bf16";
  // Where the precision came from: its key, or the section that implied it.
  const std::string from = k.given("precision") ? k.at("precision")
                           : f.enabled          ? "fp16.enabled, " + k.at("fp16.enabled")
                                                : "bf16.enabled, " + k.at("bf16.enabled");
  if (pr != "fp32" && c.device != "cuda")
    fail("precision '" + pr + "' (" + from + ") needs device: cuda; the " + c.device +
         " device computes in fp32 only, so use precision: fp32 there" +
         (pr == "fp16" ? " (with fp16.enabled: true the loss scaler runs over fp32 math)" : ""));
  if (f.enabled && f.loss_scale == 0 && f.min_loss_scale > std::ldexp(1.0, f.initial_scale_power))
    fail("fp16.min_loss_scale " + k.text("fp16.min_loss_scale", f.min_loss_scale) + " (" +
         k.at("fp16.min_loss_scale") + ") is above the initial scale 2^" +
         str(f.initial_scale_power) +
         " (fp16.initial_scale_power); lower min_loss_scale or raise "
         "initial_scale_power");
}

// What a config may say on any device; what a run needs of its device is check_runnable's
// (runnable.cpp), so that any layout can be planned.
void check_available(Config& c, const Checker& k) {
  if (c.device != "cpu" && c.device != "cuda")
    fail("device '" + c.device + "' is unknown (" + k.at("device.name") + "); use cpu or cuda");
  resolve_precision(c, k);
  const ZeroConfig& z = c.zero_optimization;
  if (z.offload_optimizer.device != "none" && z.stage < 1)
    fail("zero_optimization.offload_optimizer.device " + z.offload_optimizer.device + " (" +
         k.at("zero_optimization.offload_optimizer.device") +
         ") offloads this rank's shard of the optimizer state, which needs "
         "zero_optimization.stage 1 or higher (stage " +
         str(z.stage) +
         " has no shard); set stage: 1, 2 or 3, or offload_optimizer: {device: "
         "none}");
}

// Sequence parallelism's divisibility rule, and the tensor plugin's default.
void check_tensor_parallel(Config& c, const Checker& k) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int tp = p.tensor_model_parallel_size;
  // The heads, hidden size and MLP width divide by tp where the tensor plugin's plan splits
  // them: build_param_spec checks that, once the plan is known.
  if (p.sequence_parallel && tp > 1 && m.seq_length % tp != 0)
    fail("model.seq_length " + str(m.seq_length) + " is not divisible by " +
         "parallel.tensor_model_parallel_size " + str(tp) + " with parallel.sequence_parallel (" +
         k.at("parallel.sequence_parallel") +
         "); each rank holds seq_length / tp tokens of a sequence, so choose a seq_length that "
         "is a multiple of " +
         str(tp) + " or turn sequence_parallel off");
  // The plan: Megatron's when the model is split, none otherwise.
  if (c.tensor.name.empty()) c.tensor.name = tp > 1 ? "megatron" : "none";
}

// "2,1,1": the layers split as evenly as they go, for the fix in a message.
std::string even_partition(int layers, int stages) {
  std::string e;
  for (int s = 0; s < stages; ++s) {
    if (s) e.push_back(',');
    e.append(std::to_string(layers / stages + (s < layers % stages ? 1 : 0)));
  }
  return e;
}

// The layers of each pipeline stage: uniform, or the partition given.
void check_pipeline(Config& c, const Checker& k) {
  ParallelConfig& p = c.parallel;
  const int pp = p.pipeline_model_parallel_size, L = c.model.num_layers;
  p.stage_layers.assign(size_t(pp), L / pp);  // uniform unless a partition is given
  const std::string where = k.at("parallel.pipeline_model_parallel_size");
  const int v = p.virtual_pipeline_model_parallel_size;
  if (c.pipeline.name.empty()) c.pipeline.name = v > 1 ? "interleaved" : "1f1b";
  if (v > 1) {
    const std::string vw = k.at("parallel.virtual_pipeline_model_parallel_size");
    if (pp < 2)
      fail("parallel.virtual_pipeline_model_parallel_size " + str(v) + " (" + vw +
           ") needs pipeline_model_parallel_size of at least 2 (it is " + str(pp) +
           "); interleaving splits each stage's layers into chunks that take turns with the "
           "other stages'");
    if (!p.pipeline_partition.empty())
      fail("parallel.pipeline_partition '" + p.pipeline_partition + "' (" +
           k.at("parallel.pipeline_partition") +
           ") cannot be combined with virtual_pipeline_model_parallel_size " + str(v) +
           "; interleaved stages split the layers evenly, so drop one of them");
    if (L % (pp * v) != 0)
      fail("model.num_layers " + str(L) + " is not divisible by pipeline_model_parallel_size " +
           str(pp) + " x virtual_pipeline_model_parallel_size " + str(v) + " (" + vw +
           "); each of the " + str(pp * v) + " model chunks needs the same number of layers");
    return;
  }
  if (L < pp)
    fail("parallel.pipeline_model_parallel_size " + str(pp) + " (" + where + ") is more stages " +
         "than model.num_layers " + str(L) + "; every stage needs a layer: use at most " + str(L) +
         " stages, or more layers");
  if (p.pipeline_partition.empty()) {
    if (L % pp != 0)
      fail("model.num_layers " + str(L) + " is not divisible by " +
           "parallel.pipeline_model_parallel_size " + str(pp) + " (" + where +
           "); choose a stage count that divides the layers, or give each stage's layers as "
           "parallel.pipeline_partition, e.g. '" +
           even_partition(L, pp) + "'");
    return;
  }
  const std::string pw = k.at("parallel.pipeline_partition");
  std::vector<int> counts;
  int sum = 0;
  for (const std::string& item : split_on(p.pipeline_partition, ',')) {
    int count = 0;
    try {
      size_t used = 0;
      count = std::stoi(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      count = -1;
    }
    if (count < 1)
      fail("parallel.pipeline_partition '" + p.pipeline_partition + "' (" + pw + ") has '" + item +
           "', not a layer count of at least 1; give one count per stage, e.g. '" +
           even_partition(L, pp) + "'");
    counts.push_back(count);
    sum += count;
  }
  if (int(counts.size()) != pp || sum != L)
    fail("parallel.pipeline_partition '" + p.pipeline_partition + "' (" + pw + ") gives " +
         str(int(counts.size())) + " stages and " + str(sum) + " layers, but the layout has " +
         str(pp) + " stages and model.num_layers is " + str(L) +
         "; give one count per stage, summing to the layers");
  p.stage_layers = counts;
}

void check_layout(Config& c, const Checker& k, int world_size) {
  ParallelConfig& p = c.parallel;
  int tp = p.tensor_model_parallel_size, pp = p.pipeline_model_parallel_size;
  const int cp = p.context_parallel_size;
  int model_ranks = tp * pp;
  if (world_size % model_ranks != 0)
    fail("world size " + str(world_size) + " is not divisible by tensor_model_parallel_size " +
         str(tp) + " × pipeline_model_parallel_size " + str(pp) + " (" +
         k.at(pp > 1 && !k.given("parallel.tensor_model_parallel_size")
                  ? "parallel.pipeline_model_parallel_size"
                  : "parallel.tensor_model_parallel_size") +
         "); launch a multiple of " + str(model_ranks) + " ranks");
  if ((world_size / model_ranks) % cp != 0)
    fail("parallel.context_parallel_size " + str(cp) + " (" +
         k.at("parallel.context_parallel_size") + ") does not divide world size " +
         str(world_size) + " / (tp " + str(tp) + " × pp " + str(pp) +
         ") = " + str(world_size / model_ranks) +
         "; launch a multiple of tp × cp × pp = " + str(model_ranks * cp) +
         " ranks, or choose a context_parallel_size that divides " + str(world_size / model_ranks));
  // The context-parallel ranks of a data-parallel rank share its samples (they split each
  // sequence), so the data-parallel size, and with it the batch sizes, leave them out.
  const std::string cps = cp > 1 ? " × cp " + str(cp) : "";
  model_ranks *= cp;
  int dp = world_size / model_ranks;
  if (p.data_parallel_size != 0 && p.data_parallel_size != dp)
    fail("parallel.data_parallel_size " + str(p.data_parallel_size) +
         " does not match the layout (" + k.at("parallel.data_parallel_size") + "): world size " +
         str(world_size) + " / (tp " + str(tp) + cps + " × pp " + str(pp) + ") = " + str(dp) +
         "; drop data_parallel_size to have it derived, or launch " +
         str(p.data_parallel_size * model_ranks) + " ranks");
  p.data_parallel_size = dp;
}

// Context parallelism's divisibility rules (the layout's is check_layout's): each rank holds
// seq_length / cp tokens of every sequence; ring attention splits the sequence into 2·cp chunks
// and gives rank i chunks i and 2cp−1−i (Megatron's load balance for causal masks); Ulysses
// re-splits q, k, v by heads over the group, so each rank of it needs whole heads of its tensor
// slice. A method given with cp 1 has no effect.
void check_context_parallel(const Config& c, const Checker& k) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int cp = p.context_parallel_size, tp = p.tensor_model_parallel_size;
  if (cp == 1) return;
  const std::string& method = p.context_parallel_method;
  const bool ring = method == "ring";
  const int unit = ring ? 2 * cp : cp;
  const std::string how =
      " (context_parallel_method " + method + ", " + k.at("parallel.context_parallel_size") + ")";
  const std::string where = "parallel.context_parallel_size " + str(cp) + how;
  if (m.seq_length % unit != 0)
    fail(
        "model.seq_length " + str(m.seq_length) + " is not divisible by " +
        (ring ? "2 × parallel.context_parallel_size " + str(cp) + " = " + str(unit) + how : where) +
        "; " +
        (ring ? "ring attention gives each rank chunks i and 2·cp−1−i of 2·cp equal chunks"
              : "each rank holds seq_length / cp tokens") +
        ", so choose a seq_length that is a multiple of " + str(unit) + ", e.g. " +
        str(std::max(1, (m.seq_length + unit / 2) / unit) * unit));
  if (!ring && m.num_attention_heads % (cp * tp) != 0)
    fail("model.num_attention_heads " + str(m.num_attention_heads) + " is not divisible by " +
         "context_parallel_size " + str(cp) + " × tensor_model_parallel_size " + str(tp) + " = " +
         str(cp * tp) + " for " + where +
         "; Ulysses gives each rank heads / (cp × tp) whole heads, so choose heads that are a "
         "multiple of " +
         str(cp * tp) + ", a smaller context_parallel_size, or context_parallel_method: ring");
  // Sequence parallelism splits each rank's seq_length / cp tokens over the tensor group.
  if (p.sequence_parallel && tp > 1 && m.seq_length % (cp * tp) != 0)
    fail("model.seq_length " + str(m.seq_length) + " is not divisible by " +
         "context_parallel_size " + str(cp) + " × tensor_model_parallel_size " + str(tp) + " = " +
         str(cp * tp) + " with parallel.sequence_parallel (" + k.at("parallel.sequence_parallel") +
         "); each rank holds seq_length / (cp × tp) tokens of the layernorm regions, so choose a "
         "seq_length that is a multiple of " +
         str(cp * tp) + " or turn sequence_parallel off");
}

// Where the batch sizes were given, for their messages: the file, or each place when one came
// from elsewhere (a ds_config.json, Megatron's arguments, --set).
std::string batch_source(const Checker& k, const Locator& loc) {
  std::string places;
  bool elsewhere = false;
  for (const char* key : {"training.global_batch_size", "training.micro_batch_size",
                          "training.gradient_accumulation_steps"}) {
    if (!k.given(key)) continue;
    const std::string at = k.at(key);
    elsewhere = elsewhere || !at.starts_with(loc.file() + ":");
    places += (places.empty() ? "" : ", ") + at;
  }
  return elsewhere ? places : loc.file();
}

// What holds whatever the world: the model, training, recomputation, profiling, plugins.
void check_without_world(Config& c, const Checker& k) {
  check_model(c, k);
  check_training(c, k);
  resolve_recompute(c.training, k);
  resolve_profile_steps(c.training, k);
  check_available(c, k);
}

}  // namespace

void check_config_without_world(Config& c, const Given& given, const Locator& loc) {
  check_without_world(c, Checker(given, loc));
}

void check_config(Config& c, const Given& given, const Locator& loc, int world_size) {
  if (world_size < 1)
    throw UserError("world size " + std::to_string(world_size) +
                    " is not valid; it must be at least 1");
  const Checker k(given, loc);
  check_without_world(c, k);
  // data_parallel_size 1 is the header default, not a user's choice: derive unless given.
  if (!k.given("parallel.data_parallel_size")) c.parallel.data_parallel_size = 0;
  check_tensor_parallel(c, k);
  check_pipeline(c, k);
  check_layout(c, k, world_size);
  check_context_parallel(c, k);
  resolve_batch_sizes(c.training, c.parallel, world_size, batch_source(k, loc));
  check_lr_phases(c, k);
  const TrainingConfig& t = c.training;
  const int64_t draws = int64_t{t.train_iters} * t.global_batch_size;
  if (t.train_samples > 0 && t.train_samples < draws)
    fail("training.train_samples " + std::to_string(t.train_samples) + " (" +
         k.at("training.train_samples") + ") is fewer than the run draws (train_iters " +
         std::to_string(t.train_iters) + " x global batch " + std::to_string(t.global_batch_size) +
         " = " + std::to_string(draws) + "); raise it to at least " + std::to_string(draws) +
         " or drop it (0: the run's own count)");
}

}  // namespace triad::config_detail
