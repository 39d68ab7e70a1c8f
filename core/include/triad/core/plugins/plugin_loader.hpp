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
// (TRIAD_<KIND>_ABI_VERSION) and the adapters it keeps for older versions (none yet: every kind
// is at version 1). A plugin of a kind not listed here loads without a kind-ABI check (for
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

class PluginLoader {
 public:
  // Search path: the build tree's plugin folder (compiled in), the install tree's (relative
  // to the running executable: <exe>/../lib/triad), then each entry of TRIAD_PLUGIN_PATH.
  // Duplicates are dropped; folders that do not exist are kept (they appear in messages).
  PluginLoader();
  explicit PluginLoader(std::vector<std::string> search_path);
  const std::vector<std::string>& search_path() const { return search_path_; }

  // Loads libtriad-<kind>-<name>.so from the search path and verifies it. Throws UserError
  // naming the file and what was wrong (missing file: lists the names that do exist for that
  // kind; missing descriptor symbol; other descriptor ABI version; a kind ABI version this
  // Triad neither speaks nor adapts; kind/name mismatch; a NULL ops slot).
  std::shared_ptr<const LoadedPlugin> load(const std::string& kind, const std::string& name) const;
  // Loads a given file (triad-plugin-test, triad-info). Verifies the descriptor; if
  // expected_kind is non-empty the kind must match.
  std::shared_ptr<const LoadedPlugin> load_file(const std::string& path,
                                                const std::string& expected_kind = "") const;
  // Every libtriad-*.so on the search path (first one wins for a given file name).
  std::vector<std::string> discover() const;
  // Names available for a kind (for messages: "available: naive, flash1").
  std::vector<std::string> available(const std::string& kind) const;

 private:
  std::vector<std::string> search_path_;
};

// Names of ABI values, for messages: "UNSUPPORTED", "int".
std::string status_name(int status);
const char* param_type_name(int type);

// Closest candidate by edit distance (for "did you mean"); empty if nothing is close.
std::string closest_name(const std::string& given, const std::vector<std::string>& candidates);

}  // namespace triad
