// triad-config from-megatron [--strict] -- ARGS...: the Triad YAML for a Megatron-LM /
// Megatron-DeepSpeed argument list (a --deepspeed_config FILE among them is read as triad-launch
// reads one), each line commented with the argument it came from; the arguments without effect
// and those not carried over are listed at the end. The YAML goes to stdout; run it with
// triad-launch FILE, or skip the file with triad-launch --megatron-args "ARGS...".
// Exit 0; 2 on a bad argument (one line on stderr), and with --strict when any argument is not
// carried over (nothing printed then).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/config/megatron.hpp"
#include "triad/core/error.hpp"

namespace {

int from_megatron(const std::vector<std::string>& args, bool strict) {
  if (args.empty())
    throw triad::UserError(
        "from-megatron needs Megatron's arguments after --, e.g. triad-config from-megatron -- "
        "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048");
  const triad::MegatronYaml y = triad::megatron_to_yaml(args);
  if (strict && !y.not_carried.empty())
    throw triad::UserError(triad::not_carried_refusal(y.not_carried));
  if (!y.missing.empty()) throw triad::UserError(y.missing);
  std::cout << y.yaml;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after "--" is Megatron's: CLI11 must not read its flags as ours.
  std::vector<std::string> ours{argv[0]}, megatron;
  bool dashes = false;
  for (int i = 1; i < argc; ++i) {
    if (!dashes && std::strcmp(argv[i], "--") == 0) {
      dashes = true;
    } else {
      (dashes ? megatron : ours).emplace_back(argv[i]);
    }
  }
  CLI::App app{"Triad's config from another tool's: triad-config from-megatron -- ARGS..."};
  app.name("triad-config");
  app.require_subcommand(1);
  bool strict = false;
  CLI::App* from = app.add_subcommand(
      "from-megatron",
      "print the Triad YAML for Megatron(-DeepSpeed) arguments given after --, each line naming "
      "the argument it came from");
  from->add_flag("--strict", strict, "exit 2 when any argument is not carried over");
  std::vector<char*> cargv;
  for (std::string& s : ours) cargv.push_back(s.data());
  // A misspelt subcommand is named (CLI11 would only say that one is required).
  if (cargv.size() > 1 && cargv[1][0] != '-' && std::string(cargv[1]) != "from-megatron")
    return triad::cli::fail("triad-config", "'" + std::string(cargv[1]) +
                                                "' is not a subcommand; use from-megatron (see "
                                                "triad-config --help)");
  return triad::cli::run_main("triad-config", app, [&] {
    triad::cli::parse(app, int(cargv.size()), cargv.data());
    return from_megatron(megatron, strict);
  });
}
