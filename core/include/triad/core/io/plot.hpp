// Pictures the C++ tools draw through a Python script (matplotlib): the --png path checked before
// anything is computed, and the script, found installed (<prefix>/share/triad) or in the source
// tree, run on a JSON file of what to draw.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace triad {

// Refuses a --png path that cannot be written: a folder, a name not ending in .png, a missing or
// read-only folder, a file where its folder should be, and an existing file unless `overwrite`
// (the tool's --overwrite). Throws UserError naming the path and the fix.
void check_png_path(const std::string& png, bool overwrite);

// <prefix>/share/triad beside the running program (<exe>/../share/triad), where an installation
// keeps the tools' scripts and data; it need not exist (a build tree). Empty when the program's
// own location cannot be found.
std::filesystem::path installed_share_dir();

// Writes `data` to a temporary JSON file and runs `python3 SCRIPT JSON PNG --overwrite|--keep`
// (the script checks PNG again, as the tool's --overwrite says), SCRIPT being
// share/triad/`script_name` beside the running program when installed, else `source_path`.
// Returns the exit code: 0 drawn ("picture: PNG" printed), 2 when the script refused (its own
// line on stderr), or 2 after one line "TOOL: error: ..." when python3 is missing or the script
// failed.
int draw_png(const std::string& tool, const std::string& script_name,
             const std::string& source_path, const nlohmann::json& data, const std::string& png,
             bool overwrite);

}  // namespace triad
