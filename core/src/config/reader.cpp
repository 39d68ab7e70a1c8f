#include "reader.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "schema.hpp"
#include "triad/core/error.hpp"

namespace triad::config_detail {
namespace {

std::string join(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

const char* kind_of(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "nothing";
}

// "2", "1e-3", "0.5": the whole text or nothing, independent of the locale.
template <typename T>
bool parse_number(std::string_view text, T& out) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string format_bound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  return std::to_string(v);
}

// "at least 1", "greater than 0", "in [0, 1)"; "" when the field has no range.
std::string range_text(const Field& f) {
  if (f.at_least && f.at_most)
    return "in [" + format_bound(*f.at_least) + ", " + format_bound(*f.at_most) + "]";
  if (f.at_most) return "at most " + format_bound(*f.at_most);
  if (f.at_least && f.below)
    return "in [" + format_bound(*f.at_least) + ", " + format_bound(*f.below) + ")";
  if (f.at_least) return "at least " + format_bound(*f.at_least);
  if (f.above) return "greater than " + format_bound(*f.above);
  if (f.below) return "less than " + format_bound(*f.below);
  return "";
}

bool in_range(const Field& f, double v) {
  return !(f.at_least && v < *f.at_least) && !(f.above && v <= *f.above) &&
         !(f.below && v >= *f.below) && !(f.at_most && v > *f.at_most);
}

class Reader {
 public:
  Reader(const Locator& loc, Config& c) : loc_(loc), c_(c) {}

  Given read(const YAML::Node& root) {
    std::map<std::string, std::string> sections_seen;  // name -> where
    const Section& top = *find_section("");
    for (auto it = root.begin(); it != root.end(); ++it) {
      std::string key = key_text(it->first, "");
      std::string where = loc_.where(key, it->first.Mark());
      const PluginSection* plugin = find_plugin_choice(key);
      // Nested sections (a dotted schema name) are read inside their parent only.
      bool is_section =
          plugin || (!key.empty() && key.find('.') == std::string::npos && find_section(key));
      if (is_section) {
        auto [prev, fresh] = sections_seen.emplace(key, where);
        if (!fresh)
          throw UserError("section '" + key + "' is given twice (" + prev->second + " and " +
                          where + "); merge them into one");
      }
      if (plugin) {
        read_plugin_choice(*plugin, it->first, it->second);
      } else if (const Section* s = is_section ? find_section(key) : nullptr) {
        read_section(*s, it->first, it->second);
      } else if (const Field* f = find_field(top, key)) {
        read_field(top, *f, it->first, it->second);
      } else {
        unknown_key("", key, where);
      }
    }
    return std::move(given_);
  }

 private:
  std::string key_text(const YAML::Node& key, const std::string& section) {
    if (key.IsScalar()) return key.Scalar();
    throw UserError("a key " +
                    std::string(section.empty() ? "at the top level" : "in '" + section + "'") +
                    " is " + kind_of(key) + " (" + loc_.where(section, key.Mark()) +
                    "); keys must be plain names such as num_layers");
  }

  [[noreturn]] void unknown_key(const std::string& section, const std::string& key,
                                const std::string& where) {
    std::string path = section.empty() ? key : section + "." + key;
    std::string msg = "unknown key '" + path + "' in " + where;
    // A key in the wrong section is the likeliest mistake when the name itself is right.
    for (const Section& s : schema()) {
      if (s.name != section && find_field(s, key)) {
        throw UserError(msg + "; '" + key + "' belongs " +
                        (s.name.empty() ? std::string("at the top level")
                                        : "in the '" + std::string(s.name) + "' section"));
      }
    }
    std::vector<std::string_view> names;
    if (section.empty()) {
      for (const Section& s : schema())
        if (!s.name.empty() && s.name.find('.') == std::string_view::npos) names.push_back(s.name);
      for (const PluginSection& p : plugin_choices()) names.push_back(p.name);
      for (std::string_view n : names_of(*find_section(""))) names.push_back(n);
    } else {
      names = names_of(*find_section(section));
      for (const Section& s : schema())  // the sections nested in this one
        if (s.name.starts_with(section + ".")) names.push_back(s.name.substr(section.size() + 1));
    }
    std::string guess = closest(key, names);
    if (!guess.empty()) throw UserError(msg + "; did you mean '" + guess + "'?");
    throw UserError(msg + "; valid keys " +
                    (section.empty() ? std::string("at the top level") : "in '" + section + "'") +
                    ": " + join(names));
  }

  void read_section(const Section& s, const YAML::Node& key, const YAML::Node& body) {
    std::string name(s.name);
    if (body.IsNull()) return;  // "output:" with nothing under it
    if (std::string_view bare = shorthand_key(name); body.IsScalar() && !bare.empty()) {
      read_field(s, *find_field(s, bare), key, body, name);
      return;
    }
    if (!body.IsMap())
      throw UserError("'" + name + "' must be a section of keys, not " +
                      (body.IsScalar() ? "the value '" + body.Scalar() + "'" : kind_of(body)) +
                      " (" + loc_.where(name, key.Mark()) + "); write it as " + name + ": {" +
                      std::string(s.fields.front().name) + ": ...}, or --set " + name + "." +
                      std::string(s.fields.front().name) + "=...");
    for (auto it = body.begin(); it != body.end(); ++it) {
      std::string k = key_text(it->first, name);
      if (const Section* inner = find_section(name + "." + k)) {
        read_section(*inner, it->first, it->second);
        continue;
      }
      const Field* f = find_field(s, k);
      if (!f) unknown_key(name, k, loc_.where(name + "." + k, it->first.Mark()));
      read_field(s, *f, it->first, it->second);
    }
  }

  // `written`: the key path as the user wrote it, when not section.key (a shorthand value).
  void read_field(const Section& s, const Field& f, const YAML::Node& key, const YAML::Node& value,
                  std::string written = "") {
    std::string prefix = s.name.empty() ? "" : std::string(s.name) + ".";
    if (written.empty()) written = prefix + key.Scalar();
    std::string canonical = prefix + std::string(f.name);
    // A null value's mark points past the line; the key's is where the user looks.
    const YAML::Mark& mark = value.IsScalar() ? value.Mark() : key.Mark();
    std::string where = loc_.where(written, mark);

    if (auto prev = given_.find(canonical); prev != given_.end()) {
      std::string how = prev->second.key_path == written
                            ? ""
                            : ": as '" + prev->second.key_path + "' and as '" + written + "'";
      throw UserError(canonical + " is given twice" + how + " (" + prev->second.where + " and " +
                      where + "); keep one");
    }

    if (f.list) f.list(c_)->clear();
    if (f.list && value.IsSequence()) {
      read_list(f, written, canonical, value, where);
      return;
    }
    if (!value.IsScalar() && !value.IsNull())
      throw UserError(written + ": expected " + type_name(f) +
                      (f.list ? " or a list of them" : "") + ", got " + kind_of(value) + " (" +
                      where + ")");
    std::string text = value.IsScalar() ? value.Scalar() : "";
    given_[canonical] = GivenKey{written, where, text};

    Slot slot = f.slot(c_);
    if (std::holds_alternative<std::string*>(slot)) {
      *std::get<std::string*>(slot) = choose(f, written, text, where);
      return;
    }
    if (text.empty())
      throw UserError(written + " has no value (" + where + "); give " + type_name(f) +
                      ", or remove the key to keep the default");
    std::visit([&](auto* out) { parse_into(f, written, text, where, *out); }, slot);
  }

  // A key that takes a list of text values too (Field::list): each item must be one value.
  void read_list(const Field& f, const std::string& written, const std::string& canonical,
                 const YAML::Node& value, const std::string& where) {
    std::vector<std::string>& out = *f.list(c_);
    std::string text;
    for (size_t k = 0; k < value.size(); ++k) {
      const YAML::Node item = value[k];
      if (!item.IsScalar())
        throw UserError(written + ": item " + std::to_string(k + 1) + " of the list is " +
                        (item.IsNull() ? std::string("empty") : kind_of(item)) + " (" + where +
                        "); each item is one value, e.g. [0.3, data/a, 0.7, data/b]");
      out.push_back(item.Scalar());
      text += (k ? ", " : "") + item.Scalar();
    }
    if (std::holds_alternative<std::string*>(f.slot(c_)))
      std::get<std::string*>(f.slot(c_))->clear();
    given_[canonical] = GivenKey{written, where, "[" + text + "]"};
  }

  static std::string type_name(const Field& f) {
    struct {
      const char* operator()(int*) const { return "an integer"; }
      const char* operator()(int64_t*) const { return "an integer"; }
      const char* operator()(double*) const { return "a number"; }
      const char* operator()(uint64_t*) const { return "a non-negative integer"; }
      const char* operator()(bool*) const { return "true or false"; }
      const char* operator()(std::string*) const { return "a text value"; }
    } names;
    Config scratch;
    return std::visit(names, f.slot(scratch));
  }

  std::string example(const Field& f) const {
    Config defaults;
    return std::visit(
        [](auto* v) -> std::string {
          using T = std::remove_pointer_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>)
            return *v;
          else if constexpr (std::is_same_v<T, bool>)
            return *v ? "true" : "false";
          else if constexpr (std::is_same_v<T, double>)
            return format_double(*v);
          else
            return std::to_string(*v);
        },
        f.slot(defaults));
  }

  [[noreturn]] void bad_type(const Field& f, const std::string& path, const std::string& text,
                             const std::string& where, const char* what) {
    bool is_bool = std::holds_alternative<bool*>(f.slot(c_));
    throw UserError(path + ": '" + text + "' is not " + what + " (" + where + "); write " +
                    type_name(f) + (is_bool ? "" : ", e.g. " + example(f)));
  }

  void check_range(const Field& f, const std::string& path, const std::string& text,
                   const std::string& where, double v) {
    if (!in_range(f, v))
      throw UserError(path + ": " + text + " is out of range (" + where + "); it must be " +
                      range_text(f));
  }

  void parse_into(const Field& f, const std::string& path, const std::string& text,
                  const std::string& where, int& out) {
    long long v = 0;
    if (!parse_number(text, v)) bad_type(f, path, text, where, "an integer");
    if (v > std::numeric_limits<int>::max() || v < std::numeric_limits<int>::min())
      throw UserError(path + ": " + text + " is too large (" + where + "); it must fit in 32 bits");
    check_range(f, path, text, where, static_cast<double>(v));
    out = static_cast<int>(v);
  }

  // 64-bit counts such as bucket sizes are often written as DeepSpeed configs write them,
  // "5e8": a whole number in exponent form is taken; "2.5" is not.
  void parse_into(const Field& f, const std::string& path, const std::string& text,
                  const std::string& where, int64_t& out) {
    long long v = 0;
    if (!parse_number(text, v)) {
      double d = 0;
      if (!parse_number(text, d) || !std::isfinite(d) || d != std::floor(d))
        bad_type(f, path, text, where, "an integer");
      // 2^63 is exact in a double; anything at or beyond it does not fit.
      if (std::fabs(d) >= 9223372036854775808.0)
        throw UserError(path + ": " + text + " is too large (" + where +
                        "); it must fit in 64 bits");
      v = static_cast<long long>(d);
    }
    check_range(f, path, text, where, static_cast<double>(v));
    out = v;
  }

  void parse_into(const Field& f, const std::string& path, const std::string& text,
                  const std::string& where, double& out) {
    double v = 0;
    if (!parse_number(text, v) || !std::isfinite(v)) bad_type(f, path, text, where, "a number");
    check_range(f, path, text, where, v);
    out = v;
  }

  void parse_into(const Field& f, const std::string& path, const std::string& text,
                  const std::string& where, uint64_t& out) {
    if (!parse_number(text, out)) bad_type(f, path, text, where, "a non-negative integer");
  }

  void parse_into(const Field& f, const std::string& path, const std::string& text,
                  const std::string& where, bool& out) {
    if (!YAML::convert<bool>::decode(YAML::Node(text), out))
      bad_type(f, path, text, where, "true or false");
  }

  void parse_into(const Field&, const std::string&, const std::string&, const std::string&,
                  std::string&) {}

  // Text keys with a fixed set of values take them in any case ("AdamW", "Cosine").
  std::string choose(const Field& f, const std::string& path, const std::string& text,
                     const std::string& where) {
    if (f.choices.empty()) return text;
    std::string want = lower(text);
    for (std::string_view c : f.choices)
      if (c == want) return want;
    std::string msg =
        path + ": '" + text + "' is not one of " + join(f.choices) + " (" + where + ")";
    std::string guess = closest(want, f.choices);
    throw UserError(msg + (guess.empty() ? "" : "; did you mean '" + guess + "'?"));
  }

  void read_plugin_choice(const PluginSection& section, const YAML::Node& key,
                          const YAML::Node& body) {
    const std::string name(section.name);
    Config defaults;
    // A section whose default is chosen later (tensor: by the layout) falls back on its example.
    std::string fallback = section.slot(defaults)->name;
    if (fallback.empty()) fallback = section.other;
    PluginChoice& a = *section.slot(c_);
    a.yaml_path = name;
    a.params.clear();
    std::string where = loc_.where(name, body.IsScalar() ? body.Mark() : key.Mark());
    if (body.IsScalar()) {
      a.name = body.Scalar();
    } else if (body.IsMap()) {
      std::set<std::string> seen;
      bool named = false;
      for (auto it = body.begin(); it != body.end(); ++it) {
        std::string k = key_text(it->first, name);
        std::string path = name + "." + k;
        std::string kw = loc_.where(path, it->first.Mark());
        if (!seen.insert(k).second)
          throw UserError(path + " is given twice (second at " + kw + "); keep one");
        YAML::Node v = it->second;  // it-> is a proxy: a reference would dangle
        if (!v.IsScalar() && !v.IsNull())
          throw UserError(path + ": expected a single value, got " + kind_of(v) + " (" + kw +
                          "); plugin parameters are plain values such as 64 or true");
        std::string text = v.IsScalar() ? v.Scalar() : "";
        if (k == "name") {
          a.name = text;
          named = true;
          where = loc_.where(path, v.IsScalar() ? v.Mark() : it->first.Mark());
        } else {
          a.params[k] = text;
        }
      }
      // `--set transport.tls=tcp` on a config that never chose a transport tunes the
      // default plugin, as a user would expect.
      if (!named && where.starts_with("--set")) {
        a.name = fallback;
        named = true;
      }
      if (!named)
        throw UserError(name + " has no 'name' (" + where + "); write " + name +
                        ": {name: " + std::string(section.other) + ", <parameters>} or " + name +
                        ": " + fallback);
    } else {
      throw UserError(name + ": expected a plugin name or a map with 'name:', got " +
                      std::string(kind_of(body)) + " (" + where + "); write " + name + ": " +
                      fallback + " or " + name + ": " + std::string(section.example_map));
    }
    // The name becomes part of a file name (libtriad-<kind>-<name>.so).
    bool ok = !a.name.empty();
    for (char ch : a.name)
      ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-');
    if (!ok)
      throw UserError(name + ": '" + a.name + "' is not a plugin name (" + where +
                      "); use letters, digits, '_' or '-', e.g. " + fallback + " or " +
                      std::string(section.other));
    given_[name + ".name"] = GivenKey{name, where, a.name};
  }

  const Locator& loc_;
  Config& c_;
  Given given_;
};

}  // namespace

std::string Locator::where(const std::string& key_path, const YAML::Mark& mark) const {
  for (auto o = overrides_.rbegin(); o != overrides_.rend(); ++o) {
    const std::string& p = o->key_path;
    if (key_path == p || key_path.starts_with(p + ".")) return o->where;
  }
  if (mark.is_null()) {
    // A section an override created to hold its key.
    for (auto o = overrides_.rbegin(); o != overrides_.rend(); ++o)
      if (o->key_path.starts_with(key_path + ".")) return o->where;
    return file_;
  }
  return file_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

Given read_config(const YAML::Node& root, const Locator& loc, Config& c) {
  return Reader(loc, c).read(root);
}

}  // namespace triad::config_detail
