// Small formatting helpers shared by the core and the entry points.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace triad {

// Bytes as mebibytes with one decimal: "12.3 MiB".
inline std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace triad
