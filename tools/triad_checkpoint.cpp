// triad-checkpoint: what a checkpoint holds, whether it is intact, and the Hugging Face GPT-2
// folder of its weights, whatever layout it was saved in.
//
//   triad-checkpoint info DIR               step, layout, model, files (checksums verified)
//   triad-checkpoint verify DIR             every file against its CRC-32; exit 2 if one differs
//   triad-checkpoint convert DIR --to-hf OUT [--overwrite]
//
// DIR is a checkpoint.save folder (its `latest` is followed; verify checks every iter_* folder
// in it) or one iter_* folder in it. Bad input is one line on stderr (one per damaged checkpoint
// for verify) and exit 2; info prints nothing on stdout then. convert never replaces a model
// without --overwrite.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

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

// verify DIR: DIR's checkpoint (`latest`'s, in a save folder), and in a save folder every other
// complete iter_* folder too, each said on a line of its own: intact on stdout, damaged on
// stderr. Returns the exit code: 2 when one is damaged.
int verify_all(const std::string& dir) {
  namespace fs = std::filesystem;
  const triad::Checkpoint named(dir, "DIR");  // a dangling `latest`, a damaged metadata.json
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "latest", ec)) {
    named.verify();
    std::cout << named.path() << ": all files intact\n";
    return 0;
  }
  std::vector<fs::path> saved;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (triad::checkpoint_folder_step(e.path().filename().string()) >= 0 && e.is_directory(ec))
      saved.push_back(e.path());
  std::sort(saved.begin(), saved.end());  // by step: the names have a fixed width
  if (std::find(saved.begin(), saved.end(), fs::path(named.path())) == saved.end())
    saved.push_back(named.path());  // `latest` may name a folder of another name
  int damaged = 0;
  for (const fs::path& path : saved) {
    // What a killed pruning leaves (an iter_ folder that lost its metadata.json first) is no
    // checkpoint; the next save removes it.
    if (!fs::exists(path / "metadata.json", ec)) {
      std::cout << path.string() << ": skipped, no metadata.json (left by an interrupted pruning; "
                << "the next save removes it)\n";
      continue;
    }
    try {
      triad::Checkpoint(path.string(), "DIR").verify();
      std::cout << path.string() << ": all files intact"
                << (path.string() == named.path() ? " (latest)" : "") << "\n";
    } catch (const triad::UserError& e) {
      triad::cli::fail("triad-checkpoint", e.what());
      ++damaged;
    }
  }
  return damaged ? triad::kExitUserError : 0;
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
  return triad::cli::run_main("triad-checkpoint", app, [&] {
    triad::cli::parse(app, argc, argv);
    if (*convert) refuse_to_replace(out, overwrite);
    if (*verify) return verify_all(dir);
    const triad::Checkpoint ck(dir, "DIR");
    ck.verify();  // before anything is printed: a damaged checkpoint is its error line alone
    if (*info) {
      std::cout << ck.describe() << "checksums: all files intact\n";
    } else {
      const triad::ModelConfig m = ck.model();
      const triad::GptLayout layout = triad::gpt_layout(m);
      triad::export_hf(out, m, layout, ck.full_model(layout).data());
      std::cout << "wrote " << out << " (step " << ck.step() << ", " << layout.total
                << " parameters)\n";
    }
    return 0;
  });
}
