#include "triad/core/plugins/plugin_loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/sdk/attention_v1.h"
#include "triad/sdk/data_v2.h"
#include "triad/sdk/pipeline_v1.h"
#include "triad/sdk/tensor_v1.h"
#include "triad/sdk/transport_v1.h"

namespace triad {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFilePrefix = "libtriad-";
constexpr const char* kFileSuffix = ".so";

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::string file_name_for(const std::string& kind, const std::string& name) {
  return kFilePrefix + kind + "-" + name + kFileSuffix;
}

// "libtriad-attention-flash2.so" -> {"attention", "flash2"}; false if not of that form.
bool parse_file_name(const std::string& file, std::string* kind, std::string* name) {
  const std::string prefix = kFilePrefix, suffix = kFileSuffix;
  if (file.size() <= prefix.size() + suffix.size() || file.rfind(prefix, 0) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  std::string stem = file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
  auto dash = stem.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == stem.size()) return false;
  *kind = stem.substr(0, dash);
  *name = stem.substr(dash + 1);
  return true;
}

// The slots of each kind's current ops table, by name.
using Slots = std::vector<std::pair<const char*, bool>>;
#define TRIAD_SLOT(f) \
  { #f, o->f != nullptr }
Slots attention_slots(const void* ops) {
  const auto* o = static_cast<const triad_attention_ops_v1*>(ops);
  return {TRIAD_SLOT(capabilities), TRIAD_SLOT(workspace_size), TRIAD_SLOT(forward),
          TRIAD_SLOT(backward)};
}
Slots transport_slots(const void* ops) {
  const auto* o = static_cast<const triad_transport_ops_v1*>(ops);
  return {TRIAD_SLOT(capabilities),   TRIAD_SLOT(init_world), TRIAD_SLOT(split),
          TRIAD_SLOT(comm_destroy),   TRIAD_SLOT(comm_info),  TRIAD_SLOT(all_reduce),
          TRIAD_SLOT(reduce_scatter), TRIAD_SLOT(all_gather), TRIAD_SLOT(broadcast),
          TRIAD_SLOT(send),           TRIAD_SLOT(recv),       TRIAD_SLOT(barrier),
          TRIAD_SLOT(test),           TRIAD_SLOT(wait),       TRIAD_SLOT(request_free)};
}
Slots data_slots(const void* ops) {
  const auto* o = static_cast<const triad_data_ops_v2*>(ops);
  return {TRIAD_SLOT(capabilities), TRIAD_SLOT(setup),       TRIAD_SLOT(grads_ready),
          TRIAD_SLOT(finish_grads), TRIAD_SLOT(owned_range), TRIAD_SLOT(after_step),
          TRIAD_SLOT(partitioning), TRIAD_SLOT(shard),       TRIAD_SLOT(reduce_unit),
          TRIAD_SLOT(gather_unit),  TRIAD_SLOT(wait_unit)};
}
Slots tensor_slots(const void* ops) {
  const auto* o = static_cast<const triad_tensor_ops_v1*>(ops);
  return {TRIAD_SLOT(capabilities), TRIAD_SLOT(split), TRIAD_SLOT(boundary)};
}
Slots pipeline_slots(const void* ops) {
  const auto* o = static_cast<const triad_pipeline_ops_v1*>(ops);
  return {TRIAD_SLOT(capabilities), TRIAD_SLOT(num_buffers), TRIAD_SLOT(schedule)};
}
#undef TRIAD_SLOT

// A data plugin of version 1 (stages 0 and 1) as version 2: its six slots are version 2's first
// six (setup reads the triad_data_setup_v1 that begins triad_data_setup_v2), and it partitions
// nothing beyond the optimizer state.
int v1_partitions_nothing(void*, uint32_t* flags) {
  *flags = 0;
  return TRIAD_OK;
}
int v1_no_shard(void*, uint64_t*, uint64_t*) {
  return TRIAD_ERR_UNSUPPORTED;
}
int v1_no_reduce(void*, uint32_t, void*, void*) {
  return TRIAD_ERR_UNSUPPORTED;
}
int v1_no_gather(void*, uint32_t, const void*, void*, DLDataType) {
  return TRIAD_ERR_UNSUPPORTED;
}
int v1_no_wait(void*, uint32_t) {
  return TRIAD_OK;
}
AdaptedDescriptor adapt_data_v1(const triad_plugin_v1& older) {
  const auto* o = static_cast<const triad_data_ops_v1*>(older.ops);
  auto ops = std::make_shared<triad_data_ops_v2>();
  ops->capabilities = o->capabilities;
  // Safe: triad_data_setup_v2 starts with the triad_data_setup_v1 the plugin reads.
  ops->setup = reinterpret_cast<int (*)(void*, const triad_data_setup_v2*)>(o->setup);
  ops->grads_ready = o->grads_ready;
  ops->finish_grads = o->finish_grads;
  ops->owned_range = o->owned_range;
  ops->after_step = o->after_step;
  ops->partitioning = &v1_partitions_nothing;
  ops->shard = &v1_no_shard;
  ops->reduce_unit = &v1_no_reduce;
  ops->gather_unit = &v1_no_gather;
  ops->wait_unit = &v1_no_wait;
  AdaptedDescriptor a;
  a.descriptor = older;
  a.descriptor.kind_abi_version = TRIAD_DATA_ABI_VERSION;
  a.descriptor.ops = ops.get();
  a.keep = ops;
  return a;
}

const KindAbi* find_kind(const std::string& kind) {
  for (const auto& k : kind_abis())
    if (kind == k.kind) return &k;
  return nullptr;
}

// The plugin's descriptor as this Triad uses it: its own when its kind ABI is current, an
// adapter's translation when it is an older one this Triad adapts. Kinds this Triad does not
// know pass unchanged (triad-info lists them; no core wrapper takes them).
AdaptedDescriptor check_kind_abi(const triad_plugin_v1& d, const std::string& path) {
  const KindAbi* k = find_kind(d.kind);
  if (!k || d.kind_abi_version == k->current) return {};
  for (const auto& [version, adapt] : k->adapters)
    if (version == d.kind_abi_version) return adapt(d);
  const std::string kind = d.kind, have = std::to_string(d.kind_abi_version),
                    want = std::to_string(k->current);
  if (d.kind_abi_version > k->current)
    throw UserError("plugin " + path + " has " + kind + " ABI version " + have +
                    ", newer than the " + kind + " ABI version " + want +
                    " this Triad expects; rebuild the plugin against this Triad's SDK (or use a "
                    "Triad with " +
                    kind + " ABI " + have + ")");
  throw UserError("plugin " + path + " has " + kind + " ABI version " + have +
                  ", this Triad expects " + kind + " ABI version " + want +
                  " and has no adapter for version " + have +
                  "; rebuild the plugin against this Triad's SDK");
}

// Every slot of the per-kind table must be filled (unsupported operations return
// TRIAD_ERR_UNSUPPORTED). Kinds this core does not know only need ops set.
void verify_ops(const triad_plugin_v1& d, const std::string& path) {
  auto missing = [&](const std::string& slot) {
    return UserError("plugin " + path + ": " + slot +
                     " is NULL; every slot of the descriptor must be filled (return "
                     "TRIAD_ERR_UNSUPPORTED from operations you do not implement)");
  };
  if (!d.create) throw missing("create");
  if (!d.destroy) throw missing("destroy");
  if (!d.last_error) throw missing("last_error");
  if (!d.ops) throw missing("ops");
  if (const KindAbi* k = find_kind(d.kind))
    for (const auto& [name, filled] : k->slots(d.ops))
      if (!filled) throw missing("ops slot '" + std::string(name) + "'");
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Canonical text for one value of the given type, or an error message in *err.
bool canonical(int type, const std::string& raw, std::string* out, std::string* err) {
  std::string v = trim(raw);
  switch (type) {
    case TRIAD_PARAM_INT: {
      size_t used = 0;
      long long x = 0;
      try {
        x = std::stoll(v, &used, 10);
      } catch (const std::exception&) {
        used = std::string::npos;
      }
      if (v.empty() || used != v.size()) {
        *err = "is not an integer";
        return false;
      }
      *out = std::to_string(x);
      return true;
    }
    case TRIAD_PARAM_FLOAT: {
      char* end = nullptr;
      double x = v.empty() ? 0.0 : std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x)) {
        *err = "is not a (finite) number";
        return false;
      }
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof(buf), x);  // shortest text that round-trips
      *out = std::string(buf, res.ptr);
      return true;
    }
    case TRIAD_PARAM_BOOL: {
      // YAML 1.1 spellings, as yaml-cpp reads them.
      static const std::set<std::string> yes = {"true", "yes", "on", "y", "1"};
      static const std::set<std::string> no = {"false", "no", "off", "n", "0"};
      std::string l = lower(v);
      if (yes.count(l)) {
        *out = "true";
      } else if (no.count(l)) {
        *out = "false";
      } else {
        *err = "is not a boolean (true or false)";
        return false;
      }
      return true;
    }
    case TRIAD_PARAM_STRING:
      *out = raw;
      return true;
    default:
      *err = "has a parameter type unknown to this Triad";
      return false;
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

void add_unique(std::vector<std::string>& path, const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::string norm = fs::weakly_canonical(fs::absolute(dir), ec).string();
  if (ec) norm = dir;
  if (std::find(path.begin(), path.end(), norm) == path.end()) path.push_back(norm);
}

}  // namespace

const std::vector<KindAbi>& kind_abis() {
  // Adapters for older versions go into the last column.
  static const std::vector<KindAbi> table = {
      {"attention", TRIAD_ATTENTION_ABI_VERSION, &attention_slots, {}},
      {"transport", TRIAD_TRANSPORT_ABI_VERSION, &transport_slots, {}},
      {"data", TRIAD_DATA_ABI_VERSION, &data_slots, {{1, &adapt_data_v1}}},
      {"tensor", TRIAD_TENSOR_ABI_VERSION, &tensor_slots, {}},
      {"pipeline", TRIAD_PIPELINE_ABI_VERSION, &pipeline_slots, {}},
  };
  return table;
}

uint32_t current_kind_abi(const std::string& kind) {
  const KindAbi* k = find_kind(kind);
  return k ? k->current : 0;
}

const char* param_type_name(int type) {
  switch (type) {
    case TRIAD_PARAM_INT:
      return "int";
    case TRIAD_PARAM_FLOAT:
      return "float";
    case TRIAD_PARAM_BOOL:
      return "bool";
    case TRIAD_PARAM_STRING:
      return "string";
    default:
      return "unknown";
  }
}

std::string status_name(int s) {
  switch (s) {
    case TRIAD_OK:
      return "OK";
    case TRIAD_ERR_INVALID:
      return "INVALID";
    case TRIAD_ERR_UNSUPPORTED:
      return "UNSUPPORTED";
    case TRIAD_ERR_NO_MEMORY:
      return "NO_MEMORY";
    case TRIAD_ERR_INTERNAL:
      return "INTERNAL";
    default:
      return "status " + std::to_string(s);
  }
}

// ---- ResolvedParams -------------------------------------------------------------------

ResolvedParams::ResolvedParams(std::map<std::string, std::string> values)
    : values_(std::move(values)) {
  rebuild();
}

ResolvedParams& ResolvedParams::operator=(const ResolvedParams& o) {
  if (this != &o) {
    values_ = o.values_;
    rebuild();
  }
  return *this;
}

void ResolvedParams::rebuild() {
  items_.clear();
  for (const auto& [k, v] : values_) items_.push_back({k.c_str(), v.c_str()});
  view_ = {items_.size(), items_.empty() ? nullptr : items_.data()};
}

std::string closest_name(const std::string& given, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(given, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: a few edits, and fewer than half the word.
  size_t limit = std::max<size_t>(1, std::min<size_t>(3, given.size() / 2));
  return best_d <= limit ? best : "";
}

ResolvedParams resolve_params(const triad_plugin_v1& desc,
                              const std::map<std::string, std::string>& given,
                              const std::string& yaml_path) {
  const std::string prefix = yaml_path.empty() ? "" : yaml_path + ".";
  const std::string who = std::string(desc.kind) + " plugin '" + desc.name + "'";
  std::vector<std::string> names;
  for (size_t i = 0; i < desc.num_params; ++i) names.push_back(desc.params[i].name);

  for (const auto& [key, value] : given) {
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    std::string msg = prefix + key + ": unknown parameter of " + who;
    if (names.empty()) {
      msg += ", which takes no parameters";
    } else {
      std::string near = closest_name(key, names);
      if (!near.empty()) msg += "; did you mean '" + near + "'?";
      msg += " (valid: " + join(names) + "; see triad-info --kind " + desc.kind + ")";
    }
    throw UserError(msg);
  }

  std::map<std::string, std::string> values;
  for (size_t i = 0; i < desc.num_params; ++i) {
    const triad_param_spec_v1& spec = desc.params[i];
    auto it = given.find(spec.name);
    bool from_yaml = it != given.end();
    std::string raw = from_yaml ? it->second : (spec.default_value ? spec.default_value : "");
    std::string out, err;
    if (!canonical(spec.type, raw, &out, &err)) {
      if (from_yaml)
        throw UserError(prefix + spec.name + ": '" + raw + "' " + err + " (" + who + " expects " +
                        param_type_name(spec.type) + ")");
      throw UserError(who + " declares parameter '" + spec.name + "' of type " +
                      param_type_name(spec.type) + " with default '" + raw + "', which " + err +
                      "; fix the plugin's parameter table");
    }
    values[spec.name] = out;
  }
  return ResolvedParams(std::move(values));
}

// ---- PluginLoader ---------------------------------------------------------------------

PluginLoader::PluginLoader() {
#ifdef TRIAD_BUILD_PLUGIN_DIR
  add_unique(search_path_, TRIAD_BUILD_PLUGIN_DIR);
#endif
  try {
    auto exe = boost::dll::program_location();
    add_unique(search_path_, (exe.parent_path().parent_path() / "lib" / "triad").string());
  } catch (const std::exception&) {
    // No /proc (unusual sandbox): the other entries still apply.
  }
  if (const char* env = std::getenv("TRIAD_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':')) add_unique(search_path_, dir);
  }
}

PluginLoader::PluginLoader(std::vector<std::string> search_path) {
  for (const auto& d : search_path) add_unique(search_path_, d);
}

std::vector<std::string> PluginLoader::discover() const {
  std::vector<std::string> found;
  std::set<std::string> seen;
  for (const auto& dir : search_path_) {
    std::error_code ec;
    std::vector<std::string> here;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string file = e.path().filename().string(), kind, name;
      if (parse_file_name(file, &kind, &name) && e.is_regular_file(ec) && !seen.count(file))
        here.push_back(file);
    }
    std::sort(here.begin(), here.end());
    for (const auto& f : here) {
      seen.insert(f);
      found.push_back((fs::path(dir) / f).string());
    }
  }
  return found;
}

std::vector<std::string> PluginLoader::available(const std::string& kind) const {
  std::vector<std::string> names;
  for (const auto& p : discover()) {
    std::string k, n;
    if (parse_file_name(fs::path(p).filename().string(), &k, &n) && k == kind) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::shared_ptr<const LoadedPlugin> PluginLoader::load(const std::string& kind,
                                                       const std::string& name) const {
  const std::string file = file_name_for(kind, name);
  for (const auto& dir : search_path_) {
    fs::path p = fs::path(dir) / file;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return load_file(p.string(), kind);
  }
  auto names = available(kind);
  std::string msg = "no " + kind + " plugin named '" + name + "' (looked for " + file +
                    " in: " + join(search_path_) + ")";
  std::string near = closest_name(name, names);
  if (!near.empty()) msg += "; did you mean '" + near + "'?";
  msg += names.empty() ? "; no " + kind + " plugins were found there"
                       : "; available " + kind + " plugins: " + join(names);
  msg += "; add a folder to TRIAD_PLUGIN_PATH to search it too";
  throw UserError(msg);
}

std::shared_ptr<const LoadedPlugin> PluginLoader::load_file(
    const std::string& path_in, const std::string& expected_kind) const {
  std::error_code fec;
  fs::path path = fs::absolute(path_in, fec);
  const std::string give = "give the path of a plugin's .so file, e.g. libtriad-attention-naive.so";
  if (fec || !fs::exists(path, fec))
    throw UserError("plugin file " + path_in + " does not exist; " + give);
  // A FIFO or a folder is said by its kind and never opened.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw UserError("plugin file " + path_in + " is " + file_type_name(st.st_mode) +
                    ", not a regular file; " + give);
  const std::string p = path.string();

  auto lib = std::make_shared<boost::dll::shared_library>();
  boost::dll::fs::error_code ec;
  // RTLD_NOW: a plugin with unresolved symbols fails here, not in the middle of a step.
  lib->load(p, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec || !lib->is_loaded()) {
    const char* why = dlerror();
    throw UserError("cannot load plugin " + p + ": " + (why ? why : ec.message()) +
                    "; is it a shared library built for this machine?");
  }
  if (!lib->has(TRIAD_PLUGIN_SYMBOL_V1))
    throw UserError(p + " does not export " TRIAD_PLUGIN_SYMBOL_V1
                        "; is it a Triad plugin built with TRIAD_ATTENTION_PLUGIN (or another "
                        "TRIAD_*_PLUGIN macro)?");
  const auto* desc = &lib->get<const triad_plugin_v1>(TRIAD_PLUGIN_SYMBOL_V1);
  if (desc->abi_version != TRIAD_ABI_VERSION_1)
    throw UserError("plugin " + p + " has ABI version " + std::to_string(desc->abi_version) +
                    ", this Triad expects ABI version " + std::to_string(TRIAD_ABI_VERSION_1) +
                    "; rebuild the plugin against this Triad's SDK");
  if (!desc->kind || !desc->name || !desc->version || !desc->description ||
      (desc->num_params && !desc->params))
    throw UserError("plugin " + p +
                    ": descriptor has a NULL kind, name, version, description or params table");
  for (size_t i = 0; i < desc->num_params; ++i)
    if (!desc->params[i].name || !desc->params[i].default_value || !desc->params[i].help)
      throw UserError("plugin " + p + ": parameter " + std::to_string(i) +
                      " has a NULL name, default or help text");

  std::string file = path.filename().string(), fkind, fname;
  if (!parse_file_name(file, &fkind, &fname))
    throw UserError("plugin " + p + ": file name must be libtriad-<kind>-<name>.so; rename it to " +
                    file_name_for(desc->kind, desc->name));
  if (fkind != desc->kind || fname != desc->name)
    throw UserError("plugin " + p +
                    ": descriptor data does not match filename: it declares kind '" + desc->kind +
                    "' and name '" + desc->name + "', the file name says kind '" + fkind +
                    "' and name '" + fname + "'; rename it to " +
                    file_name_for(desc->kind, desc->name) + " or fix the descriptor");
  if (!expected_kind.empty() && expected_kind != desc->kind)
    throw UserError("plugin " + p + " has kind '" + desc->kind + "', but a plugin of kind '" +
                    expected_kind + "' is needed here");
  AdaptedDescriptor adapted = check_kind_abi(*desc, p);
  verify_ops(adapted.descriptor.ops ? adapted.descriptor : *desc, p);

  return std::make_shared<const LoadedPlugin>(std::move(lib), desc, p, std::move(adapted));
}

}  // namespace triad
