#include "triad/core/io/files.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "triad/core/error.hpp"

namespace triad {

namespace fs = std::filesystem;

namespace {

// Writes all of [p, p + n); the system's reason on failure (ENOSPC: "No space left on device").
std::string write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return std::strerror(errno);
    p += w;
    n -= size_t(w);
  }
  return {};
}

}  // namespace

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "of an unusual type";
  }
}

int open_regular_file(const std::string& path, const std::string& what, const std::string& fix,
                      size_t* size) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer forever (the type
  // is refused just below; O_NONBLOCK changes nothing for a regular file).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw UserError(what + " '" + path + "' cannot be opened: " + std::strerror(errno) +
                    "; check the path");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw UserError(what + " '" + path + "' cannot be read: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(what + " '" + path + "' is " + file_type_name(st.st_mode) +
                    ", not a regular file; " + fix);
  }
  if (size) *size = size_t(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& what,
                              const std::string& fix) {
  const int fd = open_regular_file(path, what, fix);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, size_t(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int err = errno;
      ::close(fd);
      throw UserError(what + " '" + path + "' cannot be read: " + std::strerror(err));
    }
  }
  ::close(fd);
  return out;
}

bool is_dangling_link(const std::string& path) {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(path, ec)) && !fs::exists(path, ec);
}

void check_output_folder(const std::string& key, const std::string& dir, const std::string& fix) {
  if (dir.empty()) throw UserError(key + " is empty; " + fix);
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  if (ec) at = dir;
  bool itself = true;  // `at` is the folder, not an ancestor
  for (;;) {
    const fs::file_status st = fs::status(at, ec);
    if (fs::exists(st)) break;
    if (fs::is_symlink(fs::symlink_status(at, ec)))
      throw UserError(key + " '" + dir + "' cannot be created: '" + at.string() +
                      "' is a symbolic link to nothing; remove the link or " + fix);
    const fs::path up = at.parent_path();
    if (up.empty() || up == at) break;
    at = up;
    itself = false;
  }
  struct stat st {};
  if (::stat(at.c_str(), &st) != 0)
    throw UserError(key + " '" + dir + "' cannot be created: " + std::strerror(errno) + "; " + fix);
  if (!S_ISDIR(st.st_mode))
    throw UserError(key + " '" + dir + "' " +
                    (itself ? "is " : "cannot be created: '" + at.string() + "' is ") +
                    file_type_name(st.st_mode) + ", not a folder; " + fix);
  std::string probe = (at / ".triad-write-check-XXXXXX").string();
  if (!::mkdtemp(probe.data()))
    throw UserError(
        key + " '" + dir + "' " +
        (itself ? "is not writable" : "cannot be created: cannot write in '" + at.string() + "'") +
        " (" + std::strerror(errno) + "); " + fix);
  ::rmdir(probe.c_str());
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw UserError("cannot open folder '" + dir.string() + "': " + std::strerror(errno));
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (r != 0)
    throw UserError("flushing folder '" + dir.string() + "' failed: " + std::strerror(err));
}

void write_file_atomic(const fs::path& path, const std::vector<std::string_view>& parts) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw UserError("cannot create '" + tmp.string() + "': " + std::strerror(errno) +
                    "; check that its folder exists and is writable");
  std::string failed;
  for (std::string_view p : parts)
    if (failed.empty()) failed = write_all(fd, p.data(), p.size());
  // Flushed before the rename, so a crash can never leave a complete-looking empty file.
  if (failed.empty() && ::fsync(fd) != 0) failed = std::strerror(errno);
  if (::close(fd) != 0 && failed.empty()) failed = std::strerror(errno);
  if (failed.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) failed = std::strerror(errno);
  if (!failed.empty()) {
    ::unlink(tmp.c_str());
    throw UserError("writing '" + path.string() + "' failed: " + failed +
                    "; it was left as it was");
  }
  fsync_dir(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

RecordFile::RecordFile(const fs::path& path, Open how, std::string key)
    : path_(path), key_(std::move(key)) {
  const int mode = how == Open::append ? O_APPEND : how == Open::truncate ? O_TRUNC : O_EXCL;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0644);
  if (fd_ < 0 && !(how == Open::create_new && errno == EEXIST))
    throw UserError("cannot open '" + path.string() + "' for writing: " + std::strerror(errno) +
                    "; make it writable or choose another " + key_);
}

void RecordFile::close() {
  if (fd_ < 0) return;
  const bool synced = ::fsync(fd_) == 0;
  const int err = errno;
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!synced || !closed)
    throw UserError("writing '" + path_.string() +
                    "' failed: " + std::strerror(synced ? errno : err));
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordFile::write(std::string_view bytes) {
  const std::string failed = write_all(fd_, bytes.data(), bytes.size());
  if (!failed.empty())
    throw UserError("writing '" + path_.string() + "' failed: " + failed +
                    "; free space there (or choose another " + key_ + ") and resume");
}

}  // namespace triad
