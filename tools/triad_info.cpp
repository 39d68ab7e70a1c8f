// triad-info: every plugin on the search path with its kind, name, version, ABIs (descriptor
// and kind), file and the search-path entry it came from, description, capabilities and
// parameters (like ompi_info). `--kind attention` filters. Exit 1 when a plugin listed is broken
// (cannot be loaded, or shadowed by another copy without TRIAD_PLUGIN_OVERRIDE=1), 2 on bad use.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/plugins/tensor_backend.hpp"

namespace {

// Attention, tensor and pipeline plugins also show what they can run; that needs an instance
// (default params).
template <class Backend>
std::string describe(const std::shared_ptr<const triad::LoadedPlugin>& p,
                     const triad::CoreServices& services) {
  try {
    Backend be(p, triad::resolve_params(p->descriptor(), {}, p->kind()), services.c_services());
    return triad::describe_capabilities(be.capabilities());
  } catch (const std::exception& e) {
    return std::string("unavailable: ") + e.what();
  }
}

std::string capabilities(const std::shared_ptr<const triad::LoadedPlugin>& p,
                         const triad::CoreServices& services) {
  if (p->kind() == "attention") return describe<triad::AttentionBackend>(p, services);
  if (p->kind() == "tensor") return describe<triad::TensorBackend>(p, services);
  if (p->kind() == "pipeline") return describe<triad::PipelineBackend>(p, services);
  return "";
}

// "plugin 1, attention 1" (", adapted to 2" when this Triad translates an older kind ABI).
std::string abi_text(const triad::LoadedPlugin& p) {
  const triad_plugin_v1& d = p.descriptor();
  std::string s = "plugin " + std::to_string(d.abi_version) + ", " + d.kind + " " +
                  std::to_string(p.kind_abi_version());
  if (p.adapted()) s += ", adapted to " + std::to_string(d.kind_abi_version);
  return s;
}

// "TRIAD_PLUGIN_PATH (/opt/plugins)": which entry of the search path the file came from.
std::string origin(const triad::FoundPlugin& f) {
  return std::string(triad::source_name(f.source)) + " (" +
         std::filesystem::path(f.path).parent_path().string() + ")";
}

void print_plugin(const std::shared_ptr<const triad::LoadedPlugin>& p, const triad::FoundPlugin& f,
                  const triad::CoreServices& services) {
  const triad_plugin_v1& d = p->descriptor();
  std::cout << d.kind << " " << d.name << "\n";
  std::cout << "  version:      " << d.version << "\n";
  std::cout << "  abi:          " << abi_text(*p) << "\n";
  std::cout << "  file:         " << p->path() << "\n";
  std::cout << "  origin:       " << origin(f) << "\n";
  std::cout << "  description:  " << d.description << "\n";
  std::string caps = capabilities(p, services);
  if (!caps.empty()) std::cout << "  capabilities: " << caps << "\n";
  if (d.num_params == 0) {
    std::cout << "  parameters:   none\n";
    return;
  }
  // The config key of each kind is its name, but for data plugins: `data:` is the dataset's.
  const std::string key = std::string(d.kind) == "data" ? "data_parallel" : d.kind;
  std::cout << "  parameters:   (YAML: " << key << ": {name: " << d.name
            << ", <param>: <value>})\n";
  size_t w = 4;
  for (size_t i = 0; i < d.num_params; ++i) w = std::max(w, std::string(d.params[i].name).size());
  for (size_t i = 0; i < d.num_params; ++i) {
    const auto& s = d.params[i];
    std::cout << "    " << std::left << std::setw(static_cast<int>(w)) << s.name << "  "
              << std::setw(6) << triad::param_type_name(s.type) << "  default "
              << (*s.default_value ? s.default_value : "''") << "  " << s.help << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lists the Triad plugins found on the plugin search path, with their parameters."};
  std::string kind;
  app.add_option("--kind", kind,
                 "only plugins of this kind (attention, transport, data, tensor, pipeline)");
  return triad::cli::run_main("triad-info", app, [&] {
    triad::cli::parse(app, argc, argv);
    // A kind that is no plugin kind (or --kind "") would list nothing; name the kinds there are.
    if (app.count("--kind") > 0 && triad::current_kind_abi(kind) == 0) {
      std::string kinds;
      for (const auto& k : triad::kind_abis())
        kinds += std::string(kinds.empty() ? "" : ", ") + k.kind;
      throw triad::UserError("--kind '" + kind + "' is not a plugin kind; use one of " + kinds);
    }
    triad::PluginLoader loader;
    triad::CoreServices services;
    std::cout << "Triad plugin ABI " << TRIAD_ABI_VERSION_1 << "; kind ABIs ";
    const char* sep = "";
    for (const auto& k : triad::kind_abis()) {
      std::cout << sep << k.kind << " " << k.current;
      sep = ", ";
    }
    std::cout << "\nsearch path (in this order; the same plugin in two folders is an error "
                 "unless TRIAD_PLUGIN_OVERRIDE=1; add folders with TRIAD_PLUGIN_PATH):\n";
    for (const auto& d : loader.search_path())
      std::cout << "  " << d.dir << "  (" << triad::source_name(d.source) << ")\n";
    // Plugins log through `services` while they are described; their lines follow the listing.
    services.hold_logs();
    int shown = 0, broken = 0;
    for (const auto& f : loader.discover()) {
      if (!kind.empty() && f.kind != kind) continue;
      // The files of this plugin in search order, as load() sees them: one linked into two
      // folders is listed once.
      const std::vector<triad::FoundPlugin> files = loader.copies(f.kind, f.name);
      const bool first = files.front().path == f.path;
      if (!first && files.size() == 1) continue;
      std::cout << "\n";
      ++shown;
      if (!first) {  // a later copy of a plugin listed above
        const bool override_set = triad::plugin_override();
        std::cout << (override_set ? "SHADOWED " : "BROKEN ") << f.path << "\n  "
                  << triad::shadowing(files, override_set) << "\n";
        broken += override_set ? 0 : 1;
        continue;
      }
      try {
        print_plugin(loader.load_file(f.path), f, services);
      } catch (const triad::UserError& e) {
        std::cout << "BROKEN " << f.path << "\n  origin:       " << origin(f) << "\n  " << e.what()
                  << "\n";
        ++broken;
      }
    }
    if (shown == 0) std::cout << "\nno " << (kind.empty() ? "" : kind + " ") << "plugins found\n";
    std::cout << std::flush;
    services.release_logs();
    // A plugin that cannot be loaded fails the listing, as it would fail a run that names it.
    return broken > 0 ? 1 : 0;
  });
}
