// triad-plugin-test KIND PLUGIN.so [--quick] [--expect-pass N] [--expect-skip M]: runs the
// conformance suite of KIND (attention, transport, tensor, pipeline, data) against one plugin
// file, in-tree or third-party. Exit 0 if no case failed and at least one passed, 1 if a case
// failed, nothing ran or the counts differ from --expect-pass / --expect-skip, 2 if the file
// cannot be used (missing, not a Triad plugin, wrong kind, bad parameter), 77 if every case was
// skipped (ctest's usual "skipped" code: a suite that checked nothing is never a pass).
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/conformance/conformance.hpp"
#include "triad/core/conformance/transport_conformance.hpp"
#include "triad/core/crash_signals.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

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

constexpr int kExitAllSkipped = 77;

// What the counts of a finished suite mean for the exit code; says why when it is not 0.
// expect_pass / expect_skip < 0: not checked.
int verdict(const triad::conformance::Summary& s, int expect_pass, int expect_skip) {
  int rc = s.failed == 0 ? 0 : 1;
  if (expect_pass >= 0 && s.passed != expect_pass) {
    std::cout << "triad-plugin-test: expected " << expect_pass << " passed cases, got " << s.passed
              << std::endl;
    rc = 1;
  }
  if (expect_skip >= 0 && s.skipped != expect_skip) {
    std::cout << "triad-plugin-test: expected " << expect_skip << " skipped cases, got "
              << s.skipped << std::endl;
    rc = 1;
  }
  if (rc == 0 && s.passed == 0) {
    if (s.skipped == 0) {
      std::cout << "triad-plugin-test: no case ran" << std::endl;
      return 1;
    }
    std::cout << "triad-plugin-test: every case was skipped; nothing was checked" << std::endl;
    return kExitAllSkipped;
  }
  return rc;
}

// A plugin that crashes or hangs ends the run with a FAIL line naming the last case that
// finished, not a bare signal or a wait without end. The crash handler is this process's only
// (forked ranks re-raise the signal, so their suites report them as before); the watchdog ends
// the run when no case has finished for `case_timeout` seconds.
namespace guard {
char last[512] = "none";
pid_t owner = 0;
// Never destroyed: the watchdog thread waits on them while exit() runs the destructors.
std::mutex& mu = *new std::mutex;
std::condition_variable& progress = *new std::condition_variable;
long finished = 0;

void write_all(const char* text) {
  for (size_t n = std::strlen(text); n > 0;) {
    const ssize_t w = ::write(STDOUT_FILENO, text, n);
    if (w <= 0) return;
    text += w;
    n -= size_t(w);
  }
}

void on_crash(int sig) {
  if (::getpid() != owner) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  write_all("FAIL plugin crashed: signal ");
  char num[16] = {0};
  int k = 14;
  for (int v = sig; v > 0 && k >= 0; v /= 10) num[k--] = char('0' + v % 10);
  write_all(num + k + 1);
  write_all(" (");
  write_all(triad::crash_signal_name(sig));
  write_all("); the last case that finished: ");
  write_all(last);
  write_all("\ntriad-plugin-test: the plugin crashed; the harness could not finish its suite\n");
  ::_exit(1);
}

void note(const std::string& name) {
  const std::string text = "'" + name + "'";
  {
    const std::lock_guard<std::mutex> lock(mu);
    std::snprintf(last, sizeof last, "%s", text.c_str());
    ++finished;
  }
  progress.notify_all();
}

// watch: start the watchdog thread; only for suites that never fork (a process that forks must
// stay single-threaded: the child of a multi-threaded parent may not start threads safely).
void start(bool catch_crashes, bool watch, int case_timeout_s) {
  owner = ::getpid();
  if (catch_crashes) triad::on_crash_signals(on_crash);
  if (!watch) return;
  std::thread([case_timeout_s] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      const long seen = finished;
      if (!progress.wait_for(lock, std::chrono::seconds(case_timeout_s),
                             [seen] { return finished != seen; })) {
        std::cout << "FAIL plugin hangs: no case finished within " << case_timeout_s
                  << " s; the last case that finished: " << last
                  << "\ntriad-plugin-test: the plugin hangs (--case-timeout " << case_timeout_s
                  << " s); the harness could not finish its suite" << std::endl;
        ::_exit(1);
      }
    }
  }).detach();
}
}  // namespace guard

void print_case(const triad::conformance::CaseResult& r) {
  std::cout << triad::conformance::format_case(r) << std::endl;
  guard::note(r.name);
}

// Runs a suite, then prints how long it took and its counts.
template <class Suite>
triad::conformance::Summary timed(Suite suite) {
  const auto t0 = std::chrono::steady_clock::now();
  const triad::conformance::Summary s = suite();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("suite ran in %.1f s\n", secs);
  std::cout << triad::conformance::format_summary(s) << std::endl;
  return s;
}

// Transport plugins run in real processes (worlds of 1..4 ranks, forked here).
triad::conformance::Summary run_transport(const std::string& path, bool quick,
                                          const std::vector<std::string>& items) {
  using namespace triad;
  conformance::TransportSuiteOptions options;
  options.quick = quick;
  options.params = parse_params(items);
  options.on_case = print_case;
  std::cout << "triad-plugin-test: transport plugin " << path << (quick ? ", quick sweep" : "")
            << std::endl;
  return timed([&] { return conformance::run_transport_suite(path, options); });
}

// A suite whose only options are the plugin's parameters; its sweep is small, so --quick
// changes nothing.
template <class Options, class Suite>
triad::conformance::Summary run_with_params(const char* kind, const std::string& path,
                                            const std::vector<std::string>& items, Suite suite) {
  Options options;
  options.params = parse_params(items);
  options.on_case = print_case;
  std::cout << "triad-plugin-test: " << kind << " plugin " << path << std::endl;
  return timed([&] { return suite(path, options); });
}

// Pipeline plugins: p 1..8, m 1..32, v 1..4 as the capabilities allow, all in this process;
// --quick: p 1..4, m 1..12.
triad::conformance::Summary run_pipeline(const std::string& path, bool quick,
                                         const std::vector<std::string>& items) {
  using namespace triad;
  conformance::PipelineSuiteOptions options;
  options.params = parse_params(items);
  if (quick) {
    options.max_stages = 4;
    options.max_micro_batches = 12;
  }
  options.on_case = print_case;
  std::cout << "triad-plugin-test: pipeline plugin " << path << (quick ? ", quick sweep" : "")
            << std::endl;
  return timed([&] { return conformance::run_pipeline_suite(path, options); });
}

triad::conformance::Summary run(const std::string& kind, const std::string& path, bool quick,
                                int threads, const std::vector<std::string>& param_items) {
  using namespace triad;
  if (kind == "transport") return run_transport(path, quick, param_items);
  // Tensor plugins: every layout of tp 1, 2, 4 with and without sequence parallelism; tp > 1 in
  // real processes over the ucx transport (forked here).
  if (kind == "tensor")
    return run_with_params<conformance::TensorSuiteOptions>("tensor", path, param_items,
                                                            conformance::run_tensor_suite);
  // Data plugins: every listed ZeRO stage on dp 1, 2, 4; dp > 1 in real processes over the ucx
  // transport (forked here).
  if (kind == "data")
    return run_with_params<conformance::DataSuiteOptions>("data", path, param_items,
                                                          conformance::run_data_suite);
  if (kind == "pipeline") return run_pipeline(path, quick, param_items);
  if (kind != "attention")
    throw UserError("no conformance suite for plugin kind '" + kind +
                    "' (available: attention, transport, tensor, pipeline, data)");
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
  options.on_case = print_case;
  return timed([&] { return conformance::run_attention_suite(backend, options); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs the conformance suite of a plugin kind against one plugin .so file."};
  std::string kind, path;
  bool quick = false;
  int threads = 0, expect_pass = -1, expect_skip = -1;
  std::vector<std::string> params;
  app.add_option("kind", kind, "plugin kind (attention, transport, tensor, pipeline, data)")
      ->required();
  app.add_option("plugin", path, "the plugin file, libtriad-<kind>-<name>.so")->required();
  app.add_flag("--quick", quick, "a smaller sweep of shapes (same checks)");
  app.add_option("--threads", threads, "CPU threads the plugin may use (0: its own choice)")
      ->check(triad::cli::in_range(0, 1024));
  app.add_option("--param", params, "plugin parameter key=value (repeatable); default: defaults");
  app.add_option("--expect-pass", expect_pass, "fail unless exactly N cases pass")
      ->check(triad::cli::at_least(0));
  app.add_option("--expect-skip", expect_skip, "fail unless exactly N cases are skipped")
      ->check(triad::cli::at_least(0));
  int case_timeout = 600;
  app.add_option("--case-timeout", case_timeout,
                 "seconds without a finished case before the plugin is called hung (default 600)")
      ->check(triad::cli::in_range(1, 86400));
  return triad::cli::run_main("triad-plugin-test", app, [&] {
    triad::cli::parse(app, argc, argv);
    // Transport and tensor ranks run in processes of their own, whose crashes and hangs their
    // suites already report by rank; the data suite forks ranks too, so it gets no watchdog
    // thread (its collectives have their own timeouts).
    guard::start(kind != "transport" && kind != "tensor", kind == "attention" || kind == "pipeline",
                 case_timeout);
    return verdict(run(kind, path, quick, threads, params), expect_pass, expect_skip);
  });
}
