// triad-checkpoint: what a checkpoint holds, whether it is intact, and the Hugging Face GPT-2
// folder of its weights, whatever layout it was saved in.
//
//   triad-checkpoint info DIR               step, layout, model, files (checksums verified)
//   triad-checkpoint verify DIR             every file against its CRC-32; exit 2 if one differs
//   triad-checkpoint convert DIR --to-hf OUT [--overwrite]
//
// DIR is a checkpoint.save folder (its `latest` is followed) or one iter_* folder in it. Bad
// input is one line on stderr and exit 2. convert never replaces a model without --overwrite.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "triad/core/cli.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/io/hf.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/train/checkpoint.hpp"

namespace {

// A --to-hf folder that cannot be written, or that already holds a model, is refused before
// anything is read or written, unless --overwrite says to replace it.
void refuse_to_replace(const std::string& out, bool overwrite) {
  triad::check_output_folder("convert --to-hf", out,
                             "give a folder you can write to hold the model, e.g. runs/my-run/hf");
  if (overwrite) return;
  if (const std::string f = triad::hf_model_file_in(out); !f.empty())
    throw triad::UserError("convert --to-hf '" + out + "' already holds a model (" + f +
                           "); add --overwrite to replace it, or choose another folder");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"triad-checkpoint: inspect, verify and convert Triad checkpoints"};
  app.require_subcommand(1);
  std::string dir, out;
  auto* info = app.add_subcommand("info", "print what a checkpoint holds (and verify it)");
  info->add_option("DIR", dir, "a checkpoint.save folder or one of its iter_* folders")->required();
  auto* verify = app.add_subcommand("verify", "check every file against its CRC-32");
  verify->add_option("DIR", dir, "a checkpoint.save folder or one of its iter_* folders")
      ->required();
  auto* convert = app.add_subcommand(
      "convert",
      "write the weights as a Hugging Face GPT-2 folder (model.safetensors + config.json)");
  convert->add_option("DIR", dir, "a checkpoint.save folder or one of its iter_* folders")
      ->required();
  convert->add_option("--to-hf", out, "the folder to write")->required();
  bool overwrite = false;
  convert->add_flag("--overwrite", overwrite, "replace the model a --to-hf folder already holds");
  // A misspelt subcommand is named (CLI11 would only say that one is required).
  const auto named = [&](const CLI::App* sub) { return sub->get_name() == argv[1]; };
  if (argc > 1 && argv[1][0] != '-' && app.get_subcommands(named).empty())
    return triad::cli::fail("triad-checkpoint", "'" + std::string(argv[1]) +
                                                    "' is not a subcommand; use info, verify or "
                                                    "convert (see triad-checkpoint --help)");
  try {
    app.parse(argc, argv);
    if (*convert) refuse_to_replace(out, overwrite);
    const triad::Checkpoint ck(dir, "DIR");
    if (*info) {
      std::cout << ck.describe();
      ck.verify();
      std::cout << "checksums: all files intact\n";
    } else if (*verify) {
      ck.verify();
      std::cout << ck.path() << ": all files intact\n";
    } else {
      ck.verify();
      const triad::ModelConfig m = ck.model();
      const triad::GptLayout layout = triad::gpt_layout(m);
      triad::export_hf(out, m, layout, ck.full_model(layout).data());
      std::cout << "wrote " << out << " (step " << ck.step() << ", " << layout.total
                << " parameters)\n";
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    return triad::cli::parse_error("triad-checkpoint", app, e);
  } catch (const triad::UserError& e) {
    return triad::cli::fail("triad-checkpoint", e.what());
  }
}
