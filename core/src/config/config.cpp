// Reading, validating and writing the run configuration.
//
// Names follow Megatron-LM and DeepSpeed; these aliases are accepted as well (giving an alias
// and its canonical name together is an error). to_yaml writes canonical names only.
//
//   section         alias                             canonical
//   model           n_layer                           num_layers
//   model           n_embd                            hidden_size
//   model           n_head                            num_attention_heads
//   model           n_positions                       max_position_embeddings
//   model           block_size                        seq_length
//   training        train_micro_batch_size_per_gpu    micro_batch_size
//   training        train_batch_size                  global_batch_size
//   training        iters, max_steps                  train_iters
//   optimizer       beta1, beta2, eps                 adam_beta1, adam_beta2, adam_eps
//   optimizer       gradient_clipping                 clip_grad
//   lr_schedule     warmup_iters                      lr_warmup_iters
//   lr_schedule     decay_iters                       lr_decay_iters
//   lr_schedule     decay_style                       lr_decay_style
//
// Sections: model, data, training, optimizer, lr_schedule, parallel, zero_optimization
// (DeepSpeed's {stage, reduce_bucket_size, overlap_comm}), the plugin choices attention and
// transport (each a plugin name, or {name: ..., <plugin parameters>}), output, device ({name,
// gemm}; `device: cpu` is short for {name: cpu}); top-level keys: precision, allow_tf32,
// peak_tflops, and deepspeed_config (a ds_config.json merged in first: deepspeed.cpp). The schema
// itself is config/schema.cpp.

#include "triad/core/config/config.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>

#include "checks.hpp"
#include "import.hpp"
#include "overrides.hpp"
#include "paths.hpp"
#include "reader.hpp"
#include "schema.hpp"
#include "triad/core/config/megatron.hpp"
#include "triad/core/error.hpp"

namespace triad {
namespace {

using namespace config_detail;

YAML::Node load_yaml(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::string from = std::filesystem::path(path).is_absolute()
                           ? ""
                           : " (relative to " + std::filesystem::current_path(ec).string() + ")";
    throw UserError("config file '" + path + "' not found" + from +
                    "; check the path, e.g. configs/gpt-tiny.yaml");
  }
  if (std::filesystem::is_directory(path, ec))
    throw UserError("config file '" + path + "' is a directory; give a .yaml file inside it");
  // A FIFO or a device would block the reader (or never end): refuse anything but a file.
  if (std::string type = non_regular_file_type(path); !type.empty())
    throw UserError("config file '" + path + "' is " + type +
                    ", not a regular file; give a .yaml file, e.g. configs/gpt-tiny.yaml");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::ParserException& e) {
    throw UserError(path + ":" + std::to_string(e.mark.line + 1) + ":" +
                    std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg +
                    "; fix the file at that line");
  } catch (const YAML::BadFile&) {
    throw UserError("config file '" + path + "' cannot be read; check its permissions");
  } catch (const std::ios_base::failure& e) {  // opened, but reading fails (/proc/self/mem)
    const std::string why = e.code() ? e.code().message() : "a read failed";
    throw UserError("config file '" + path + "' cannot be read: " + why +
                    "; give a regular YAML file");
  }
  // An empty file is likelier a wrong or truncated file than a wish for every default.
  if (root.IsNull())
    throw UserError("config file '" + path +
                    "' is empty (no keys, only blank lines or comments); put the run's sections "
                    "in it (model:, data:, training:, ...), e.g. start from configs/gpt-tiny.yaml");
  if (!root.IsMap())
    throw UserError("config file '" + path +
                    "' must hold sections (model:, training:, ...) at the top level, not " +
                    (root.IsScalar() ? "the text '" + root.Scalar() + "'" : std::string("a list")));
  return root;
}

std::string layout_text(const ParallelConfig& p, int world_size) {
  const int cp = p.context_parallel_size;
  return "(tp " + std::to_string(p.tensor_model_parallel_size) +
         (cp > 1 ? ", cp " + std::to_string(cp) : "") + ", pp " +
         std::to_string(p.pipeline_model_parallel_size) + ", world " + std::to_string(world_size) +
         ")";
}

// `layout` and `source` only decorate the messages.
void resolve(TrainingConfig& t, int dp, const std::string& layout, const std::string& source) {
  std::string in = source.empty() ? "" : " in " + source;
  std::string lay = layout.empty() ? "" : " " + layout;
  long long m = t.micro_batch_size, a = t.gradient_accumulation_steps, g = t.global_batch_size;
  if (m < 0 || a < 0 || g < 0 || dp < 1)
    throw UserError("batch sizes" + in + " must not be negative: micro_batch_size " +
                    std::to_string(m) + ", gradient_accumulation_steps " + std::to_string(a) +
                    ", global_batch_size " + std::to_string(g) + ", data-parallel size " +
                    std::to_string(dp) + "; use 0 to have one derived");
  std::string dps = "data-parallel size " + std::to_string(dp);
  auto not_multiple = [&](const std::string& of, long long unit) {
    std::string product = of == dps ? of : of + " = " + std::to_string(unit);
    return UserError("global_batch_size " + std::to_string(g) + " is not divisible by " + product +
                     lay + in + "; make global_batch_size a multiple of " + std::to_string(unit) +
                     " (e.g. " + std::to_string(std::max(1LL, (g + unit / 2) / unit) * unit) + ")");
  };
  if (m && a && g) {
    if (g != m * a * dp)
      throw UserError("batch sizes disagree" + in + ": global_batch_size " + std::to_string(g) +
                      " != micro_batch_size " + std::to_string(m) +
                      " × gradient_accumulation_steps " + std::to_string(a) + " × " + dps + lay +
                      "; drop one of them (or set it to 0) to have it derived");
  } else if (m && g) {
    if (g % (m * dp))
      throw not_multiple("micro_batch_size " + std::to_string(m) + " × " + dps, m * dp);
    a = g / (m * dp);
  } else if (a && g) {
    if (g % (a * dp))
      throw not_multiple("gradient_accumulation_steps " + std::to_string(a) + " × " + dps, a * dp);
    m = g / (a * dp);
  } else if (g) {
    // DeepSpeed's rule for train_batch_size alone: no accumulation, the batch split over dp.
    if (g % dp) throw not_multiple(dps, dp);
    a = 1;
    m = g / dp;
  } else {
    if (!m) m = 1;
    if (!a) a = 1;
    g = m * a * dp;
  }
  if (g > INT_MAX)
    throw UserError("global batch size micro_batch_size " + std::to_string(m) +
                    " × gradient_accumulation_steps " + std::to_string(a) + " × " + dps + " = " +
                    std::to_string(g) + in + " is too large; use smaller batch sizes");
  t.micro_batch_size = static_cast<int>(m);
  t.gradient_accumulation_steps = static_cast<int>(a);
  t.global_batch_size = static_cast<int>(g);
}

// A string that reads back as itself: the emitter picks plain or quoted style, but it writes a
// control character (a CR, say) raw in a plain scalar, where the reader takes it for a line
// break; such a string goes double-quoted, with escapes.
void emit_text(YAML::Emitter& e, const std::string& s) {
  const bool control = std::any_of(s.begin(), s.end(), [](char ch) {
    const auto u = static_cast<unsigned char>(ch);
    return u < 0x20 || u == 0x7f;
  });
  if (control) e << YAML::DoubleQuoted;
  e << s;
}

// Text that reads back as the same value.
void emit_field(YAML::Emitter& e, const Field& f, Config& c) {
  e << YAML::Key << std::string(f.name) << YAML::Value;
  if (f.list && !f.list(c)->empty()) {
    e << YAML::Flow << YAML::BeginSeq;
    for (const std::string& item : *f.list(c)) emit_text(e, item);
    e << YAML::EndSeq;
    return;
  }
  std::visit(
      [&](auto* v) {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>)
          e << format_double(*v);
        else if constexpr (std::is_same_v<T, bool>)
          e << (*v ? "true" : "false");
        else if constexpr (std::is_same_v<T, std::string>)
          emit_text(e, *v);
        else
          e << std::to_string(*v);
      },
      f.slot(c));
}

void emit_plugin_choice(YAML::Emitter& e, std::string_view key, const PluginChoice& a) {
  e << YAML::Key << std::string(key) << YAML::Value;
  if (a.params.empty()) {
    emit_text(e, a.name);
    return;
  }
  e << YAML::BeginMap << YAML::Key << "name" << YAML::Value;
  emit_text(e, a.name);
  for (const auto& [k, v] : a.params) {
    e << YAML::Key;
    emit_text(e, k);
    e << YAML::Value;
    emit_text(e, v);
  }
  e << YAML::EndMap;
}

// The overrides, then a deepspeed_config the tree names, then the keys read and checked.
// `origins`: where keys already in `root` came from when not from `file`.
Config read_checked(YAML::Node& root, std::vector<Origin> origins,
                    const std::vector<std::string>& overrides, const std::string& file,
                    int world_size) {
  for (Origin& o : apply_overrides(root, overrides)) origins.push_back(std::move(o));
  std::vector<std::string> notes = merge_deepspeed_config(root, origins, file);
  Locator loc(file, std::move(origins));
  Config c;
  Given given = read_config(root, loc, c);
  check_config(c, given, loc, world_size);
  c.source_path = file;
  c.import_notes = std::move(notes);
  for (const auto& [path, key] : given) c.given[path] = key.where;
  return c;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size) {
  YAML::Node root = load_yaml(path);
  return read_checked(root, {}, overrides, path, world_size);
}

std::string not_carried_refusal(const std::vector<std::string>& not_carried) {
  if (not_carried.empty()) return "";
  std::string list;
  for (const std::string& n : not_carried) list += (list.empty() ? "" : "; ") + n;
  return std::to_string(not_carried.size()) + " argument(s) not carried over (--strict): " + list +
         "; drop them, or run without --strict to see what Triad makes of them";
}

Config load_megatron_config(const std::vector<std::string>& args,
                            const std::vector<std::string>& overrides, int world_size,
                            bool strict) {
  MegatronTree t = megatron_tree(args);
  if (strict)
    if (const std::string refusal = not_carried_refusal(t.imported.not_carried); !refusal.empty())
      throw UserError(refusal);
  Config c = read_checked(t.root, std::move(t.origins), overrides, kMegatronSource, world_size);
  if (const std::string missing = megatron_missing(t.root); !missing.empty())
    throw UserError(missing);
  std::vector<std::string> notes = std::move(t.imported.no_effect);
  for (const std::string& n : t.imported.not_carried) notes.push_back("not carried over: " + n);
  notes.insert(notes.end(), c.import_notes.begin(), c.import_notes.end());
  c.import_notes = std::move(notes);
  return c;
}

void resolve_batch_sizes(TrainingConfig& t, int data_parallel_size) {
  resolve(t, data_parallel_size, "", "");
}

void resolve_batch_sizes(TrainingConfig& t, const ParallelConfig& p, int world_size,
                         const std::string& source) {
  resolve(t, p.data_parallel_size, layout_text(p, world_size), source);
}

std::string to_yaml(const Config& config) {
  Config c = config;  // slots hand out non-const pointers
  YAML::Emitter e;
  if (!c.source_path.empty()) e << YAML::Comment("resolved from " + c.source_path);
  e << YAML::BeginMap;
  for (const Section& s : schema()) {
    if (s.name == "output")
      for (const PluginSection& p : plugin_choices()) emit_plugin_choice(e, p.name, *p.slot(c));
    if (s.name.empty()) {
      for (const Field& f : s.fields) emit_field(e, f, c);
      continue;
    }
    if (s.name.find('.') != std::string_view::npos) continue;  // inside its parent, below
    e << YAML::Key << std::string(s.name) << YAML::Value << YAML::BeginMap;
    for (const Field& f : s.fields) emit_field(e, f, c);
    const std::string prefix = std::string(s.name) + ".";
    for (const Section& inner : schema()) {
      if (!std::string_view(inner.name).starts_with(prefix)) continue;
      e << YAML::Key << std::string(inner.name.substr(prefix.size())) << YAML::Value
        << YAML::BeginMap;
      for (const Field& f : inner.fields) emit_field(e, f, c);
      e << YAML::EndMap;
    }
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

LrPhases lr_phases(const LrScheduleConfig& s, int train_iters, int global_batch) {
  const double batch = std::max(1, global_batch);
  LrPhases p;
  p.decay = s.lr_decay_samples > 0 ? s.lr_decay_samples / batch
            : s.lr_decay_iters > 0 ? s.lr_decay_iters
                                   : train_iters;
  // Megatron's fraction is of the decay's length, warm-up included.
  p.warmup = s.lr_warmup_samples > 0    ? s.lr_warmup_samples / batch
             : s.lr_warmup_fraction > 0 ? s.lr_warmup_fraction * p.decay
                                        : s.lr_warmup_iters;
  return p;
}

int zero_shards(const ParallelConfig& p) {
  return std::max(1, p.data_parallel_size) * std::max(1, p.context_parallel_size);
}

}  // namespace triad
