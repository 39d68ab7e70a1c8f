// Finds, loads and verifies plugin .so files (Boost.DLL), and validates a plugin's YAML
// parameters against the schema it declares. The core never names a concrete plugin: it
// asks for (kind, name).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "triad/sdk/plugin_v1.h"

namespace triad {

// An adapter turns the descriptor of a plugin built against an older kind ABI into one that
// follows the kind's current ABI: it replaces `ops` with a table of the current version (and,
// where the translation needs state per instance, create/destroy/last_error, to wrap the
// handle). `keep` owns whatever the new descriptor points into; the LoadedPlugin holds it, and
// the library, for as long as any object made from the plugin lives.
struct AdaptedDescriptor {
  triad_plugin_v1 descriptor{};
  std::shared_ptr<const void> keep;
};
using KindAdapter = AdaptedDescriptor (*)(const triad_plugin_v1& older);

// The kind ABIs this Triad speaks: per kind the current version of its ops table
// (TRIAD_<KIND>_ABI_VERSION) and the adapters it keeps for older versions (data and pipeline
// adapt their version 1). A plugin of a kind not listed here loads without a kind-ABI check (for
// triad-info), but no core wrapper accepts it.
struct KindAbi {
  const char* kind;
  uint32_t current;
  // Each slot of a current-version ops table by name, and whether it is filled.
  std::vector<std::pair<const char*, bool>> (*slots)(const void* ops);
  std::vector<std::pair<uint32_t, KindAdapter>> adapters;  // older version -> adapter
};
const std::vector<KindAbi>& kind_abis();
// The current ABI version of `kind`'s ops table; 0 for a kind this Triad does not know.
uint32_t current_kind_abi(const std::string& kind);

// A loaded, verified plugin library. Holds the library open: every object created from it
// keeps a shared_ptr to this, so the .so is unloaded only after its last object is gone.
// descriptor() follows the current ABI of its kind: the plugin's own, or the one an adapter made.
class LoadedPlugin {
 public:
  LoadedPlugin(std::shared_ptr<void> library, const triad_plugin_v1* descriptor, std::string path,
               AdaptedDescriptor adapted = {})
      : library_(std::move(library)),
        original_(descriptor),
        adapted_(std::move(adapted)),
        desc_(adapted_.descriptor.ops ? &adapted_.descriptor : descriptor),
        path_(std::move(path)) {}
  LoadedPlugin(const LoadedPlugin&) = delete;
  LoadedPlugin& operator=(const LoadedPlugin&) = delete;
  const triad_plugin_v1& descriptor() const { return *desc_; }
  const std::string& path() const { return path_; }
  std::string kind() const { return desc_->kind; }
  std::string name() const { return desc_->name; }
  // The kind ABI version the plugin was built with (the current one unless adapted()).
  uint32_t kind_abi_version() const { return original_->kind_abi_version; }
  bool adapted() const { return desc_ != original_; }

 private:
  std::shared_ptr<void> library_;  // boost::dll::shared_library, type-erased
  const triad_plugin_v1* original_;
  AdaptedDescriptor adapted_;
  const triad_plugin_v1* desc_;
  std::string path_;
};

// Parameter values resolved against a plugin's schema: every declared parameter present
// (given or default), in canonical text form. Owns the strings the C view points at.
class ResolvedParams {
 public:
  ResolvedParams() = default;
  explicit ResolvedParams(std::map<std::string, std::string> values);
  ResolvedParams(const ResolvedParams& o) : ResolvedParams(o.values_) {}
  ResolvedParams& operator=(const ResolvedParams& o);
  const triad_params_v1* c_view() const { return &view_; }
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  void rebuild();
  std::map<std::string, std::string> values_;
  std::vector<triad_param_value_v1> items_;
  triad_params_v1 view_{0, nullptr};
};

// Checks `given` (key -> YAML text) against the plugin's declared schema: unknown keys
// (with the closest valid name), wrong types. `yaml_path` prefixes messages
// (e.g. "attention"). Throws UserError.
ResolvedParams resolve_params(const triad_plugin_v1& desc,
                              const std::map<std::string, std::string>& given,
                              const std::string& yaml_path);

// Where a folder of the plugin search path comes from; triad-info shows it next to each plugin.
enum class PluginSource { env, install, build_tree, given };
// "TRIAD_PLUGIN_PATH", "install", "build tree", "given".
const char* source_name(PluginSource source);

struct SearchDir {
  std::string dir;  // absolute, normalised
  PluginSource source;
};

// One libtriad-<kind>-<name>.so on the search path; kind and name as its file name says them.
struct FoundPlugin {
  std::string path;
  std::string kind, name;
  PluginSource source;
};

// The default search path of a process whose executable is `exe`: each entry of `env`
// (TRIAD_PLUGIN_PATH, colon-separated, empty entries skipped), then the installation's folder
// (<exe>/../<install_subdir>), then `build_plugin_dir` only when the executable runs from the
// build tree `build_dir`: its canonical path lies inside the build folder's and it is not part
// of an installation there (its installation folder is the build's plugin folder, or absent).
// A folder reached twice keeps its first place. exe empty: no installation folder.
std::vector<SearchDir> plugin_search_path(const std::string& env, const std::string& exe,
                                          const std::string& install_subdir,
                                          const std::string& build_dir,
                                          const std::string& build_plugin_dir);

class PluginLoader {
 public:
  // The search path of plugin_search_path() for this process (TRIAD_PLUGIN_PATH, the
  // installation, the build tree). Folders that do not exist are kept (they appear in messages).
  PluginLoader();
  // Exactly these folders, in this order (source `given`).
  explicit PluginLoader(std::vector<std::string> search_path);
  const std::vector<SearchDir>& search_path() const { return search_path_; }

  // Loads libtriad-<kind>-<name>.so from the search path and verifies it. Throws UserError
  // naming the file and what was wrong (missing file: lists the plugins of that kind by their
  // descriptors' names; the same file name in two folders, unless TRIAD_PLUGIN_OVERRIDE=1 lets
  // the first win with a notice on stderr; missing descriptor symbol; other descriptor ABI
  // version; a kind ABI version this Triad neither speaks nor adapts; kind/name mismatch; a
  // NULL ops slot or parameter field).
  std::shared_ptr<const LoadedPlugin> load(const std::string& kind, const std::string& name) const;
  // Loads a given file (triad-plugin-test, triad-info). Verifies the descriptor; if
  // expected_kind is non-empty the kind must match.
  std::shared_ptr<const LoadedPlugin> load_file(const std::string& path,
                                                const std::string& expected_kind = "") const;
  // Every libtriad-*.so on the search path in search order, each folder's sorted by name; the
  // same file name in two folders is listed twice (copies() groups them).
  std::vector<FoundPlugin> discover() const;
  // Every file of one plugin on the search path, in search order (the first is the one load()
  // uses; more than one is shadowing). One file linked into two folders counts once.
  std::vector<FoundPlugin> copies(const std::string& kind, const std::string& name) const;
  // Names of the plugins of a kind that load(kind, name) finds, as their descriptors say them
  // (for messages: "available: naive, flash1"). Files without a readable descriptor of that kind,
  // or whose descriptor disagrees with the file name, are left out.
  std::vector<std::string> available(const std::string& kind) const;

 private:
  std::vector<SearchDir> search_path_;
};

// Whether TRIAD_PLUGIN_OVERRIDE=1 lets the first of two files of the same plugin win.
bool plugin_override();
// `found` holds two or more files of one plugin (kind and name) in search order. Without
// override: the one-line error naming every file and the fix. With it: the notice naming the
// file used and the ones it shadows.
std::string shadowing(const std::vector<FoundPlugin>& found, bool override_set);

// Names of ABI values, for messages: "UNSUPPORTED", "int".
std::string status_name(int status);
const char* param_type_name(int type);

// Closest candidate by edit distance (for "did you mean"); empty if nothing is close.
std::string closest_name(const std::string& given, const std::vector<std::string>& candidates);

}  // namespace triad
