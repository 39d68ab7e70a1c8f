#include "triad/core/io/plot.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <boost/dll/runtime_symbol_info.hpp>

#include "triad/core/cli.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"

namespace triad {

namespace fs = std::filesystem;

fs::path installed_share_dir() {
  try {
    return fs::path(boost::dll::program_location().parent_path().parent_path().string()) /
           "share/triad";
  } catch (const std::exception&) {
    return {};
  }
}

namespace {

// 'text' for a POSIX shell.
std::string quoted(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string script_path(const std::string& name, const std::string& source_path) {
  const fs::path share = installed_share_dir();
  if (!share.empty() && fs::is_regular_file(share / name)) return (share / name).string();
  return source_path;
}

}  // namespace

void check_png_path(const std::string& png, bool overwrite) {
  std::error_code ec;
  if (fs::is_directory(png, ec))
    throw UserError("--png '" + png + "' is a folder; give a file name, e.g. " +
                    (fs::path(png) / "picture.png").string());
  std::string ext = fs::path(png).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (ext != ".png")
    throw UserError("--png '" + png +
                    "' does not end in .png: the file is written as PNG; give a " + "name like " +
                    fs::path(png).replace_extension(".png").string());
  if (is_dangling_link(png))
    throw UserError("--png '" + png +
                    "' is a symbolic link to nothing; remove the link, or choose another file");
  if (fs::exists(fs::symlink_status(png, ec)) && !overwrite)
    throw UserError("--png '" + png +
                    "' already exists; add --overwrite to replace it, or choose another file");
  const fs::path folder = fs::absolute(png, ec).parent_path();
  if (!fs::exists(folder, ec))
    throw UserError("--png '" + png + "': the folder '" + folder.string() +
                    "' does not exist; create it or give a path in a folder that exists");
  check_output_folder("--png '" + png + "': the folder", folder.string(),
                      "give a --png path in a folder you can write");
}

int draw_png(const std::string& tool, const std::string& script_name,
             const std::string& source_path, const nlohmann::json& data, const std::string& png,
             bool overwrite) {
  // Debian's python3 (python3-matplotlib), as the Python tools' first line says; else PATH's.
  const std::string python =
      ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  if (python == "python3" && std::system("command -v python3 > /dev/null 2>&1") != 0)
    return cli::fail(tool,
                     "--png needs python3 with matplotlib, and python3 was not found "
                     "(Debian: apt-get install python3-matplotlib)");
  const fs::path json =
      fs::temp_directory_path() / (tool + "-" + std::to_string(getpid()) + ".json");
  std::ofstream(json) << data.dump() << "\n";
  const std::string script = script_path(script_name, source_path);
  const std::string cmd = python + " " + quoted(script) + " " + quoted(json.string()) + " " +
                          quoted(png) + (overwrite ? " --overwrite" : " --keep");
  const int status = std::system(cmd.c_str());
  std::error_code ec;
  fs::remove(json, ec);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc == 0) std::cout << "picture: " << png << std::endl;
  if (rc != 0 && rc != kExitUserError)
    return cli::fail(tool, "--png '" + png + "': " + script_name + " failed (exit " +
                               std::to_string(rc) + "); nothing was drawn");
  return rc;
}

}  // namespace triad
