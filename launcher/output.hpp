// Rank output, line by line, with a "[rank N] " prefix, so interleaved ranks stay readable.
#pragma once

#include <string>
#include <string_view>

namespace triad::launch {

// Writes all of s to fd, retrying on EINTR and short writes; drops it if fd is gone.
void write_all(int fd, std::string_view s);

class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), fd_(out_fd) {}
  // Emits every complete line in data (a partial last line waits for its end).
  void feed(std::string_view data);
  // End of stream: a partial last line is emitted with a newline.
  void finish();

 private:
  std::string prefix_;
  int fd_;
  std::string partial_;
};

}  // namespace triad::launch
