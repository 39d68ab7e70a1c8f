#include "overrides.hpp"

#include "schema.hpp"
#include "triad/core/error.hpp"

namespace triad::config_detail {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::vector<std::string> split_path(const std::string& arg, const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part =
        key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      throw UserError("override '" + arg + "': key '" + key +
                      "' has an empty part; write --set section.key=value, e.g. "
                      "--set training.train_iters=5");
    parts.push_back(part);
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// The value as a YAML scalar after "key: ", so 5, 1e-3, true, "quoted" and ~ mean what they
// mean in the file. A flow collection ({name: flash2, block_q: 32}, [..]) is read as one;
// anything else that YAML would read as structure ("a b: c") is the text itself.
YAML::Node parse_value(const std::string& arg, const std::string& text) {
  if (text.empty()) return YAML::Node(std::string());
  bool flow = text.front() == '{' || text.front() == '[';
  bool quoted = text.front() == '"' || text.front() == '\'';
  try {
    YAML::Node v = YAML::Load(text);
    if (flow || v.IsScalar() || v.IsNull()) return v;
  } catch (const YAML::ParserException& e) {
    if (flow || quoted)
      throw UserError("override '" + arg + "': value '" + text + "' is not valid YAML (" + e.msg +
                      "); close the brackets or quotes");
  }
  return YAML::Node(text);
}

// The value under `key` in map `m`, bound to the tree (edits go through), or an undefined node.
YAML::Node child_of(const YAML::Node& m, const std::string& key) {
  for (auto it = m.begin(); it != m.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

// Every spelling of the key at `parts` (section.key or a top-level key): an override written
// as an alias replaces the canonical key in the file and the other way round.
std::vector<std::string> spellings(const std::vector<std::string>& parts) {
  const std::string& key = parts.back();
  const Section* s = parts.size() == 1   ? find_section("")
                     : parts.size() == 2 ? find_section(parts[0])
                                         : nullptr;
  const Field* f = s ? find_field(*s, key) : nullptr;
  if (!f) return {key};
  std::vector<std::string> out{std::string(f->name)};
  for (std::string_view a : f->aliases) out.emplace_back(a);
  return out;
}

void apply_one(YAML::Node& root, const std::string& arg, std::vector<Origin>& origins) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos)
    throw UserError("override '" + arg +
                    "' has no '='; write --set key.path=value, e.g. --set training.train_iters=5");
  std::string key = trim(arg.substr(0, eq));
  std::vector<std::string> parts = split_path(arg, key);
  YAML::Node value = parse_value(arg, trim(arg.substr(eq + 1)));

  YAML::Node cur = root;
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (i ? "." : "") + parts[i];
    YAML::Node child = child_of(cur, parts[i]);
    if (!child.IsDefined()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child.reset(child_of(cur, parts[i]));
    } else if (child.IsNull()) {
      child = YAML::Node(YAML::NodeType::Map);  // assigning to a bound node edits the tree
    } else if (child.IsScalar() && i == 0 &&
               (find_plugin_choice(path) || !shorthand_key(path).empty())) {
      // attention: naive + --set attention.block_q=32 -> {name: naive, block_q: 32}
      YAML::Node m(YAML::NodeType::Map);
      m[find_plugin_choice(path) ? "name" : std::string(shorthand_key(path))] = child.Scalar();
      child = m;
    } else if (!child.IsMap()) {
      throw UserError("override '" + arg + "': '" + path +
                      "' is a value, not a section, so it has no key '" + parts[i + 1] + "'");
    }
    cur.reset(child);
  }

  const std::string& last = parts.back();
  // The key a bare top-level value sets: a plugin's name, or a shorthand section's key.
  const std::string bare = !path.empty()              ? ""
                           : find_plugin_choice(last) ? "name"
                                                      : std::string(shorthand_key(last));
  // Parameters an earlier --set gave this plugin section, which a new name keeps.
  std::vector<std::pair<std::string, YAML::Node>> kept;
  if (!bare.empty() && value.IsScalar()) {
    // A new plugin (or device) name drops the old one's parameters from the file; the same name
    // keeps them all. Parameters given with --set stay either way, so a plugin's parameters
    // reach it whether they come before or after its name on the command line (one the chosen
    // plugin does not declare is refused when it is loaded, naming both).
    YAML::Node old = child_of(cur, last);
    if (old.IsMap() && child_of(old, bare).IsScalar() &&
        child_of(old, bare).Scalar() == value.Scalar()) {
      origins.push_back({key, "--set '" + arg + "'"});
      return;
    }
    if (old.IsMap() && find_plugin_choice(last))
      for (auto it = old.begin(); it != old.end(); ++it) {
        const std::string k = it->first.Scalar();
        for (const Origin& o : origins)
          if (k != bare && o.key_path == last + "." + k) {
            kept.emplace_back(k, YAML::Clone(it->second));
            break;
          }
      }
  }
  for (const std::string& s : spellings(parts))
    while (cur.remove(s)) {
    }
  if (kept.empty()) {
    cur[last] = value;
  } else {
    YAML::Node m(YAML::NodeType::Map);
    m[bare] = value;
    for (const auto& [k, v] : kept) m[k] = v;
    cur[last] = m;
  }
  origins.push_back({key, "--set '" + arg + "'"});
}

}  // namespace

std::vector<Origin> apply_overrides(YAML::Node& root, const std::vector<std::string>& args) {
  std::vector<Origin> origins;
  for (const std::string& arg : args) apply_one(root, arg, origins);
  return origins;
}

}  // namespace triad::config_detail
