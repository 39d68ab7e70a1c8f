// triad-config from-megatron's YAML and triad-launch --megatron-args' config: Megatron's
// arguments (megatron.cpp) and the ds_config.json among them (deepspeed.cpp) merged into one tree.
#include <algorithm>

#include "checks.hpp"
#include "import.hpp"
#include "schema.hpp"
#include "triad/core/config/megatron.hpp"
#include "triad/core/error.hpp"

namespace triad {
namespace config_detail {

MegatronTree megatron_tree(const std::vector<std::string>& args) {
  MegatronTree t;
  t.imported = import_megatron(args);
  merge_imported(t.root, t.imported.keys, t.origins, kMegatronSource);
  const std::string& json = t.imported.deepspeed_config;
  if (!json.empty() && !t.imported.deepspeed) {
    // Megatron-DeepSpeed without --deepspeed trains as Megatron-LM: the JSON is never read.
    t.imported.no_effect.push_back("--deepspeed_config " + json +
                                   ": no effect without --deepspeed (Megatron-DeepSpeed reads "
                                   "the JSON only under --deepspeed)");
  } else if (!json.empty()) {
    const Imported d = import_deepspeed(
        json, [&t](const std::string& key) { return value_in(t.root, key); }, true);
    merge_imported(t.root, d.keys, t.origins, kMegatronSource);
    merge_defaults(t.root, d.defaults, t.origins, kMegatronSource);
    t.imported.no_effect.insert(t.imported.no_effect.end(), d.no_effect.begin(), d.no_effect.end());
  }
  // Megatron's own defaults where neither the arguments nor the JSON gave the key: the job
  // trains as Megatron would train it, not with Triad's defaults.
  merge_defaults(t.root, t.imported.defaults, t.origins, kMegatronSource);
  return t;
}

std::string megatron_missing(const YAML::Node& root) {
  if (!value_in(root, "training.train_iters"))
    return "the Megatron arguments give neither --train-iters nor --train-samples (Megatron "
           "needs one); add --train-iters N";
  if (!value_in(root, "optimizer.lr"))
    return "the Megatron arguments give no --lr (Megatron needs it); add --lr VALUE";
  return "";
}

namespace {

std::string scalar_text(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

std::string source_of(const std::vector<Origin>& origins, const std::string& key) {
  for (auto o = origins.rbegin(); o != origins.rend(); ++o)
    if (o->key_path == key) return o->where;
  return "";
}

void emit_line(std::string& out, int indent, const std::string& name, const YAML::Node& v,
               const std::string& source) {
  std::string line(indent, ' ');
  line += name + ": " + scalar_text(v);
  // Comments line up after the longest value a config usually has.
  line.resize(std::max<size_t>(line.size() + 2, 40), ' ');
  out += line + "# " + source + "\n";
}

// The keys of `section` present in `body`, in the schema's order, nested sections after.
void emit_section(std::string& out, const MegatronTree& t, const std::string& section,
                  const YAML::Node& body, int indent) {
  const Section* s = find_section(section);
  for (const Field& f : s->fields) {
    const std::string name(f.name);
    if (YAML::Node v = body[name]; v.IsDefined())
      emit_line(out, indent, name, v,
                source_of(t.origins, section.empty() ? name : section + "." + name));
  }
  for (const Section& inner : schema()) {
    if (!std::string_view(inner.name).starts_with(section + ".")) continue;
    const std::string leaf(inner.name.substr(section.size() + 1));
    if (YAML::Node v = body[leaf]; v.IsDefined() && v.IsMap()) {
      out += std::string(indent, ' ') + leaf + ":\n";
      emit_section(out, t, std::string(inner.name), v, indent + 2);
    }
  }
}

std::string emit(const MegatronTree& t) {
  std::string out =
      "# Triad config from Megatron-DeepSpeed arguments (triad-config from-megatron);\n"
      "# each line names the argument it came from.\n";
  for (const Section& s : schema()) {
    const std::string name(s.name);
    if (name == "output")
      for (const PluginSection& p : plugin_choices())
        if (YAML::Node v = t.root[std::string(p.name)]; v.IsDefined())
          emit_line(out, 0, std::string(p.name), v, source_of(t.origins, std::string(p.name)));
    if (name.empty()) {
      emit_section(out, t, name, t.root, 0);
    } else if (name.find('.') == std::string::npos && t.root[name].IsDefined()) {
      out += name + ":\n";
      emit_section(out, t, name, t.root[name], 2);
    }
  }
  if (!t.imported.no_effect.empty()) out += "# Accepted, without effect in Triad:\n";
  for (const std::string& n : t.imported.no_effect) out += "#   " + n + "\n";
  if (!t.imported.not_carried.empty())
    out += "# Not carried over (triad-config from-megatron --strict refuses them):\n";
  for (const std::string& n : t.imported.not_carried) out += "#   " + n + "\n";
  return out;
}

}  // namespace
}  // namespace config_detail

MegatronYaml megatron_to_yaml(const std::vector<std::string>& args) {
  config_detail::MegatronTree t = config_detail::megatron_tree(args);
  // Every value read as the YAML will be (types, ranges, choices), so what is printed loads; the
  // layout is checked when it runs, against its world size.
  Config scratch;
  const config_detail::Locator loc(config_detail::kMegatronSource, t.origins);
  const config_detail::Given given = config_detail::read_config(t.root, loc, scratch);
  // And what needs no world (--split, --fp16 with --bf16, ...): what would not launch is not
  // printed as if it would.
  config_detail::check_config_without_world(scratch, given, loc);
  return {config_detail::emit(t), t.imported.not_carried, config_detail::megatron_missing(t.root)};
}

std::vector<std::string> split_arguments(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quote) {
      if (ch == quote) {
        quote = 0;
      } else if (ch == '\\' && quote == '"' && i + 1 < text.size()) {
        word += text[++i];
      } else {
        word += ch;
      }
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
      in_word = true;
    } else if (ch == '\\' && i + 1 < text.size()) {
      if (text[++i] != '\n') {
        word += text[i];
        in_word = true;
      }
    } else if (ch == ' ' || ch == '\t' || ch == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += ch;
      in_word = true;
    }
  }
  if (quote)
    throw UserError(std::string("the arguments have an unclosed ") + quote +
                    " quote; close it (--megatron-args \"--num-layers 24 ...\")");
  if (in_word) words.push_back(word);
  return words;
}

}  // namespace triad
