#include "output.hpp"

#include <unistd.h>

#include <cerrno>

namespace triad::launch {

namespace {
// A line longer than this is cut, so a rank printing without newlines cannot grow us forever.
constexpr size_t kMaxLine = 64 * 1024;
}  // namespace

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // EPIPE and the like: nobody is reading any more
    s.remove_prefix(size_t(n));
  }
}

void LinePrefixer::feed(std::string_view data) {
  // One write per chunk, so lines from different ranks interleave whole, never mid-line.
  std::string out;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      size_t cut = 0;
      for (; partial_.size() - cut >= kMaxLine; cut += kMaxLine)
        out += prefix_ + partial_.substr(cut, kMaxLine) + "\n";
      partial_.erase(0, cut);
      break;
    }
    partial_.append(data.substr(0, nl));
    if (!filter_ || filter_(partial_)) {
      out += prefix_;
      out += partial_;
      out += '\n';
    }
    partial_.clear();
    data.remove_prefix(nl + 1);
  }
  write_all(fd_, out);
}

void LinePrefixer::finish() {
  if (partial_.empty()) return;
  if (!filter_ || filter_(partial_)) write_all(fd_, prefix_ + partial_ + "\n");
  partial_.clear();
}

}  // namespace triad::launch
