// triad-plugin-test KIND PLUGIN.so [--quick]: runs the conformance suite of KIND against one
// plugin file, in-tree or third-party. Exit 0 if every case passed, 1 if one failed, 2 if the
// file cannot be used (missing, not a Triad plugin, wrong kind, bad parameter).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "triad/core/attention.hpp"
#include "triad/core/conformance.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugin_loader.hpp"
#include "triad/core/services.hpp"
#include "triad/core/transport_conformance.hpp"

namespace {

std::map<std::string, std::string> parse_params(const std::vector<std::string>& items) {
  std::map<std::string, std::string> out;
  for (const auto& it : items) {
    auto eq = it.find('=');
    if (eq == std::string::npos || eq == 0)
      throw triad::UserError("--param '" + it + "': expected key=value");
    out[it.substr(0, eq)] = it.substr(eq + 1);
  }
  return out;
}

// Transport plugins run in real processes (worlds of 1..4 ranks, forked here).
int run_transport(const std::string& path, bool quick, const std::vector<std::string>& items) {
  using namespace triad;
  conformance::TransportSuiteOptions options;
  options.quick = quick;
  options.params = parse_params(items);
  options.on_case = [](const conformance::CaseResult& r) {
    std::cout << conformance::format_case(r) << std::endl;
  };
  std::cout << "triad-plugin-test: transport plugin " << path << (quick ? ", quick sweep" : "")
            << std::endl;
  const conformance::Summary s = conformance::run_transport_suite(path, options);
  std::cout << conformance::format_summary(s) << std::endl;
  return s.failed == 0 ? 0 : 1;
}

int run(const std::string& kind, const std::string& path, bool quick, int threads,
        const std::vector<std::string>& param_items) {
  using namespace triad;
  if (kind == "transport") return run_transport(path, quick, param_items);
  if (kind != "attention")
    throw UserError("no conformance suite for plugin kind '" + kind +
                    "' (available: attention, transport)");
  PluginLoader loader;
  auto plugin = loader.load_file(path, kind);
  const auto& d = plugin->descriptor();
  ResolvedParams params = resolve_params(d, parse_params(param_items), kind);
  CoreServices services(threads);
  AttentionBackend backend(plugin, params, services.c_services());
  std::cout << "triad-plugin-test: " << d.kind << " plugin '" << d.name << "' version " << d.version
            << " (" << plugin->path() << ")" << (quick ? ", quick sweep" : "") << std::endl;

  conformance::AttentionSuiteOptions options;
  options.quick = quick;
  options.on_case = [](const conformance::CaseResult& r) {
    std::cout << conformance::format_case(r) << std::endl;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const conformance::Summary s = conformance::run_attention_suite(backend, options);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("suite ran in %.1f s\n", secs);
  std::cout << conformance::format_summary(s) << std::endl;
  return s.failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs the conformance suite of a plugin kind against one plugin .so file."};
  std::string kind, path;
  bool quick = false;
  int threads = 0;
  std::vector<std::string> params;
  app.add_option("kind", kind, "plugin kind (attention, transport)")->required();
  app.add_option("plugin", path, "the plugin file, libtriad-<kind>-<name>.so")->required();
  app.add_flag("--quick", quick, "a smaller sweep of shapes (same checks)");
  app.add_option("--threads", threads, "CPU threads the plugin may use (0: its own choice)");
  app.add_option("--param", params, "plugin parameter key=value (repeatable); default: defaults");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : triad::kExitUserError;
  }
  try {
    return run(kind, path, quick, threads, params);
  } catch (const triad::UserError& e) {
    std::cerr << "triad-plugin-test: " << e.what() << std::endl;
    return triad::kExitUserError;
  } catch (const std::exception& e) {
    std::cerr << "triad-plugin-test: internal error: " << e.what() << std::endl;
    return 1;
  }
}
