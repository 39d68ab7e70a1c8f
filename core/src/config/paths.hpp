// The files a run reads and the folders it writes, checked before it starts (paths.cpp).
#pragma once

#include <string>

namespace triad::config_detail {

// "a FIFO (named pipe)", "a socket", "a character device", ...: what a path that is not a
// regular file is, for messages; "" for a regular file and for a path that cannot be looked at
// (following symbolic links). Never opens the path, so a FIFO cannot block it.
std::string non_regular_file_type(const std::string& path);

}  // namespace triad::config_detail
