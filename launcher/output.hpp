// Rank output, line by line, with a "[rank N] " prefix, so interleaved ranks stay readable.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace triad::launch {

// Writes all of s to fd, retrying on EINTR and short writes; drops it if fd is gone.
void write_all(int fd, std::string_view s);

class LinePrefixer {
 public:
  // Sees each whole line (without prefix or newline) before it is written; false drops it.
  using Filter = std::function<bool(std::string_view line)>;

  LinePrefixer(std::string prefix, int out_fd, Filter filter = {})
      : prefix_(std::move(prefix)), fd_(out_fd), filter_(std::move(filter)) {}
  // Emits every complete line in data (a partial last line waits for its end).
  void feed(std::string_view data);
  // End of stream: a partial last line is emitted with a newline.
  void finish();

 private:
  std::string prefix_;
  int fd_;
  Filter filter_;
  std::string partial_;
};

}  // namespace triad::launch
