#include "triad/core/plugins/plugin_loader.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/sdk/attention_v1.h"
#include "triad/sdk/data_v4.h"
#include "triad/sdk/pipeline_v2.h"
#include "triad/sdk/tensor_v1.h"
#include "triad/sdk/transport_v2.h"

namespace triad {
namespace fs = std::filesystem;

namespace {

#ifndef TRIAD_PLUGIN_INSTALL_SUBDIR
#define TRIAD_PLUGIN_INSTALL_SUBDIR "lib/triad"
#endif
#ifndef TRIAD_BUILD_DIR  // built outside CMake: no build tree to search
#define TRIAD_BUILD_DIR ""
#define TRIAD_BUILD_PLUGIN_DIR ""
#endif

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
  const auto* o = static_cast<const triad_transport_ops_v2*>(ops);
  return {TRIAD_SLOT(capabilities),   TRIAD_SLOT(init_world), TRIAD_SLOT(split),
          TRIAD_SLOT(comm_destroy),   TRIAD_SLOT(comm_info),  TRIAD_SLOT(all_reduce),
          TRIAD_SLOT(reduce_scatter), TRIAD_SLOT(all_gather), TRIAD_SLOT(broadcast),
          TRIAD_SLOT(send),           TRIAD_SLOT(recv),       TRIAD_SLOT(barrier),
          TRIAD_SLOT(test),           TRIAD_SLOT(wait),       TRIAD_SLOT(request_free),
          TRIAD_SLOT(progress),       TRIAD_SLOT(all_to_all)};
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

// `older`'s descriptor speaking kind ABI `version` through the adapter's table `ops`.
AdaptedDescriptor adapted(const triad_plugin_v1& older, uint32_t version,
                          std::shared_ptr<const void> ops) {
  AdaptedDescriptor a;
  a.descriptor = older;
  a.descriptor.kind_abi_version = version;
  a.descriptor.ops = ops.get();
  a.keep = std::move(ops);
  return a;
}

// A data plugin of version 1 (stages 0 and 1) as version 4: its six slots are version 2's first
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
  return adapted(older, TRIAD_DATA_ABI_VERSION, ops);
}

// A transport plugin of version 1 as version 2: its fifteen slots are version 2's first fifteen;
// it progresses inside its own calls, as it always did, so progress has nothing to add; it has no
// all_to_all (and its capabilities, its own, never carry TRIAD_TRANSPORT_OP_ALL_TO_ALL).
int v1_progresses_in_its_calls(void*) {
  return TRIAD_OK;
}
int v1_no_all_to_all(void*, void*, const void*, void*, uint64_t, DLDataType, DLDevice, void**) {
  return TRIAD_ERR_UNSUPPORTED;
}
AdaptedDescriptor adapt_transport_v1(const triad_plugin_v1& older) {
  const auto* o = static_cast<const triad_transport_ops_v1*>(older.ops);
  auto ops = std::make_shared<triad_transport_ops_v2>();
  static_assert(offsetof(triad_transport_ops_v2, progress) == sizeof(triad_transport_ops_v1),
                "version 2 begins with version 1's slots");
  std::memcpy(ops.get(), o, sizeof *o);
  ops->progress = &v1_progresses_in_its_calls;
  ops->all_to_all = &v1_no_all_to_all;
  return adapted(older, TRIAD_TRANSPORT_ABI_VERSION, ops);
}

// An older version whose table the newer one keeps unchanged, only widening what it may answer:
// the descriptor as it is, speaking `version`.
AdaptedDescriptor same_table(const triad_plugin_v1& older, uint32_t version) {
  AdaptedDescriptor a;
  a.descriptor = older;
  a.descriptor.kind_abi_version = version;
  return a;
}
// A data plugin of version 2 or 3 as version 4: its partitioning() never answers
// TRIAD_DATA_GATHER_DEFERRED (nor, from version 2, TRIAD_DATA_PARTITION_BY_UNIT).
AdaptedDescriptor adapt_data_v2_v3(const triad_plugin_v1& older) {
  return same_table(older, TRIAD_DATA_ABI_VERSION);
}
// A pipeline plugin of version 1 as version 2: its streams never split a backward.
AdaptedDescriptor adapt_pipeline_v1(const triad_plugin_v1& older) {
  return same_table(older, TRIAD_PIPELINE_ABI_VERSION);
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

std::string normalised(const std::string& dir) {
  std::error_code ec;
  std::string norm = fs::weakly_canonical(fs::absolute(dir), ec).string();
  return ec ? dir : norm;
}

void add_unique(std::vector<SearchDir>& path, const std::string& dir, PluginSource source) {
  if (dir.empty()) return;
  const std::string norm = normalised(dir);
  for (const auto& d : path)
    if (d.dir == norm) return;
  path.push_back({norm, source});
}

// Whether `inner` is `outer` or lies below it (both normalised), by whole components, so that
// /x/build2 is not inside /x/build.
bool is_inside(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

// The kind and name a plugin file's descriptor declares, read without any other check; empty
// when the file has no readable version-1 descriptor.
std::optional<std::pair<std::string, std::string>> declared_identity(const std::string& path) {
  boost::dll::shared_library lib;
  boost::dll::fs::error_code ec;
  lib.load(path, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec || !lib.is_loaded() || !lib.has(TRIAD_PLUGIN_SYMBOL_V1)) return std::nullopt;
  const auto& d = lib.get<const triad_plugin_v1>(TRIAD_PLUGIN_SYMBOL_V1);
  if (d.abi_version != TRIAD_ABI_VERSION_1 || !d.kind || !d.name) return std::nullopt;
  return std::make_pair(std::string(d.kind), std::string(d.name));
}

// The first notice for each plugin a process loads past a shadowed copy; later loads of the
// same plugin stay quiet.
void notice_once(const std::string& key, const std::string& text) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(key).second) std::cerr << "triad: notice: " << text << std::endl;
}

// Refuses a NULL field of the plugin's parameter table (the core would read it as a string).
void verify_param_specs(const triad_plugin_v1& d, const std::string& path) {
  for (size_t i = 0; i < d.num_params; ++i) {
    const triad_param_spec_v1& spec = d.params[i];
    const std::string which =
        "parameter " + std::to_string(i) + (spec.name ? " ('" + std::string(spec.name) + "')" : "");
    const char* null_field = !spec.name            ? "name"
                             : !spec.default_value ? "default_value"
                             : !spec.help          ? "help"
                                                   : nullptr;
    if (null_field)
      throw UserError("plugin " + path + ": " + which + " of its parameter table has a NULL " +
                      null_field + "; give every parameter a name, a default (\"\" for none) " +
                      "and a help text");
  }
}

}  // namespace

const std::vector<KindAbi>& kind_abis() {
  // Adapters for older versions go into the last column.
  static const std::vector<KindAbi> table = {
      {"attention", TRIAD_ATTENTION_ABI_VERSION, &attention_slots, {}},
      {"transport", TRIAD_TRANSPORT_ABI_VERSION, &transport_slots, {{1, &adapt_transport_v1}}},
      {"data",
       TRIAD_DATA_ABI_VERSION,
       &data_slots,
       {{1, &adapt_data_v1}, {2, &adapt_data_v2_v3}, {3, &adapt_data_v2_v3}}},
      {"tensor", TRIAD_TENSOR_ABI_VERSION, &tensor_slots, {}},
      {"pipeline", TRIAD_PIPELINE_ABI_VERSION, &pipeline_slots, {{1, &adapt_pipeline_v1}}},
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
    msg += "; drop the setting, or declare '" + key + "' in the plugin's parameter schema";
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

const char* source_name(PluginSource source) {
  switch (source) {
    case PluginSource::env:
      return "TRIAD_PLUGIN_PATH";
    case PluginSource::install:
      return "install";
    case PluginSource::build_tree:
      return "build tree";
    case PluginSource::given:
      break;
  }
  return "given";
}

std::vector<SearchDir> plugin_search_path(const std::string& env, const std::string& exe,
                                          const std::string& install_subdir,
                                          const std::string& build_dir,
                                          const std::string& build_plugin_dir) {
  std::vector<SearchDir> path;
  std::stringstream ss(env);
  std::string dir;
  while (std::getline(ss, dir, ':')) add_unique(path, dir, PluginSource::env);
  if (exe.empty()) return path;
  std::error_code ec;
  fs::path exe_path = fs::weakly_canonical(fs::absolute(exe), ec);
  if (ec) exe_path = fs::absolute(exe);
  const std::string install =
      normalised((exe_path.parent_path().parent_path() / install_subdir).string());
  const std::string build_plugins = build_plugin_dir.empty() ? "" : normalised(build_plugin_dir);
  // In the build tree bin/../lib/triad is the build's plugin folder: say so rather than
  // "install". A folder of its own there is an installation made inside the build folder
  // (cmake --install build --prefix build/stage), which must not see the build's plugins.
  const bool build_tree = !build_plugins.empty() && !build_dir.empty() &&
                          is_inside(exe_path.parent_path(), normalised(build_dir)) &&
                          (install == build_plugins || !fs::exists(install, ec));
  add_unique(
      path, install,
      install == build_plugins && build_tree ? PluginSource::build_tree : PluginSource::install);
  if (build_tree) add_unique(path, build_plugins, PluginSource::build_tree);
  return path;
}

PluginLoader::PluginLoader() {
  std::string exe;
  try {
    exe = boost::dll::program_location().string();
  } catch (const std::exception&) {
    // No /proc (unusual sandbox): TRIAD_PLUGIN_PATH still applies.
  }
  const char* env = std::getenv("TRIAD_PLUGIN_PATH");
  search_path_ = plugin_search_path(env ? env : "", exe, TRIAD_PLUGIN_INSTALL_SUBDIR,
                                    TRIAD_BUILD_DIR, TRIAD_BUILD_PLUGIN_DIR);
}

PluginLoader::PluginLoader(std::vector<std::string> search_path) {
  for (const auto& d : search_path) add_unique(search_path_, d, PluginSource::given);
}

std::vector<FoundPlugin> PluginLoader::discover() const {
  std::vector<FoundPlugin> found;
  for (const auto& dir : search_path_) {
    std::error_code ec;
    std::vector<FoundPlugin> here;
    for (const auto& e : fs::directory_iterator(dir.dir, ec)) {
      FoundPlugin f{e.path().string(), "", "", dir.source};
      if (parse_file_name(e.path().filename().string(), &f.kind, &f.name) && e.is_regular_file(ec))
        here.push_back(f);
    }
    std::sort(here.begin(), here.end(),
              [](const FoundPlugin& a, const FoundPlugin& b) { return a.path < b.path; });
    found.insert(found.end(), here.begin(), here.end());
  }
  return found;
}

namespace {

// The files of `kind` among `found`, each with the name its descriptor declares; files without a
// readable descriptor of that kind are left out. Each file is opened once.
std::vector<std::pair<FoundPlugin, std::string>> declared_names(
    const std::vector<FoundPlugin>& found, const std::string& kind) {
  std::vector<std::pair<FoundPlugin, std::string>> out;
  for (const auto& f : found) {
    if (f.kind != kind) continue;
    auto id = declared_identity(f.path);
    if (id && id->first == kind) out.emplace_back(f, id->second);
  }
  return out;
}

// The names load() finds among them: those whose descriptor agrees with the file name, sorted.
std::vector<std::string> loadable_names(
    const std::vector<std::pair<FoundPlugin, std::string>>& declared) {
  std::set<std::string> names;
  for (const auto& [f, name] : declared)
    if (name == f.name) names.insert(name);
  return {names.begin(), names.end()};
}

}  // namespace

std::vector<std::string> PluginLoader::available(const std::string& kind) const {
  return loadable_names(declared_names(discover(), kind));
}

bool plugin_override() {
  const char* v = std::getenv("TRIAD_PLUGIN_OVERRIDE");
  return v && std::string(v) == "1";
}

std::string shadowing(const std::vector<FoundPlugin>& found, bool override_set) {
  auto where = [](const FoundPlugin& f) { return f.path + " (" + source_name(f.source) + ")"; };
  std::vector<std::string> others;
  for (size_t i = 1; i < found.size(); ++i) others.push_back(where(found[i]));
  const std::string who = found.front().kind + " plugin '" + found.front().name + "'";
  if (override_set)
    return who + ": using " + where(found.front()) + ", which shadows " + join(others, " and ") +
           " (TRIAD_PLUGIN_OVERRIDE=1)";
  return who + " is found " +
         (found.size() == 2 ? "twice" : std::to_string(found.size()) + " times") +
         " on the plugin search path: " + where(found.front()) + " and " + join(others, " and ") +
         "; remove " + (found.size() == 2 ? "one of them" : "all but one") +
         ", or set TRIAD_PLUGIN_OVERRIDE=1 to use the first";
}

std::vector<FoundPlugin> PluginLoader::copies(const std::string& kind,
                                              const std::string& name) const {
  // The core resolves (kind, name) by file name, and load_file() refuses a file whose
  // descriptor says another kind or name: two files of one plugin have the same file name.
  const std::string file = file_name_for(kind, name);
  std::vector<FoundPlugin> found;
  for (const auto& dir : search_path_) {
    fs::path p = fs::path(dir.dir) / file;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) continue;
    bool same = false;  // one file reached through a link in two folders is one plugin
    for (const auto& f : found) same = same || fs::equivalent(f.path, p, ec);
    if (!same) found.push_back({p.string(), kind, name, dir.source});
  }
  return found;
}

std::shared_ptr<const LoadedPlugin> PluginLoader::load(const std::string& kind,
                                                       const std::string& name) const {
  const std::string file = file_name_for(kind, name);
  const std::vector<FoundPlugin> found = copies(kind, name);
  if (found.size() > 1) {
    if (!plugin_override()) throw UserError(shadowing(found, false));
    notice_once(file, shadowing(found, true));
  }
  if (!found.empty()) return load_file(found.front().path, kind);

  std::vector<std::string> dirs;
  for (const auto& d : search_path_) dirs.push_back(d.dir);
  const auto declared = declared_names(discover(), kind);
  const std::vector<std::string> names = loadable_names(declared);
  std::string msg = "no " + kind + " plugin named '" + name + "' (looked for " + file +
                    " in: " + join(dirs) + ")";
  // A plugin whose file was named for something else: the one place to look for the fix.
  for (const auto& [f, declares] : declared)
    if (f.name != name && declares == name)
      msg += "; " + f.path + " declares " + kind + " plugin '" + name +
             "' but its file name says '" + f.name + "': rename the file to " + file;
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
    throw UserError(
        "plugin " + p + (expected_kind.empty() ? "" : " (wanted as " + expected_kind + " plugin)") +
        " has descriptor ABI version " + std::to_string(desc->abi_version) +
        ", this Triad expects descriptor ABI version " + std::to_string(TRIAD_ABI_VERSION_1) +
        "; rebuild the plugin against this Triad's SDK");
  if (!desc->kind || !desc->name || !desc->version || !desc->description ||
      (desc->num_params && !desc->params))
    throw UserError("plugin " + p +
                    ": descriptor has a NULL kind, name, version, description or params table");
  verify_param_specs(*desc, p);

  std::string file = path.filename().string(), fkind, fname;
  if (!parse_file_name(file, &fkind, &fname))
    throw UserError("plugin " + p + ": file name must be libtriad-<kind>-<name>.so; rename it to " +
                    file_name_for(desc->kind, desc->name));
  if (fkind != desc->kind || fname != desc->name)
    throw UserError(
        "plugin " + p + ": descriptor data does not match filename: it declares kind '" +
        desc->kind + "' and name '" + desc->name + "', the file name says kind '" + fkind +
        "' and name '" + fname + "'; rename the file to " + file_name_for(desc->kind, desc->name) +
        ", or change the descriptor (the plugin's registration macro) to kind '" + fkind +
        "' and name '" + fname + "'");
  if (!expected_kind.empty() && expected_kind != desc->kind)
    throw UserError("plugin " + p + " has kind '" + desc->kind + "', but a plugin of kind '" +
                    expected_kind + "' is needed here");
  AdaptedDescriptor adapted = check_kind_abi(*desc, p);
  verify_ops(adapted.descriptor.ops ? adapted.descriptor : *desc, p);

  return std::make_shared<const LoadedPlugin>(std::move(lib), desc, p, std::move(adapted));
}

}  // namespace triad
