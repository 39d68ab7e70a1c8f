#include "run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "triad/core/error.hpp"

namespace triad::launch {

namespace fs = std::filesystem;

namespace {

// "pid 1234 on node7", as the holder wrote it; what a reader can say when it wrote nothing.
std::string holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, size_t(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "a process that has not said which" : s;
}

// `dir` as an absolute path without ".", ".." or a trailing "/", so its parents are its folders.
fs::path normal(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  return p.has_filename() ? p : p.parent_path();
}

}  // namespace

FolderLock::FolderLock(const std::string& key, const std::string& dir) : dir_(dir) {
  std::error_code ec;
  // The highest folder of the path this lock creates, removed again if the run leaves it empty.
  for (fs::path p = normal(dir); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    created_top_ = p.string();
    if (p == p.parent_path()) break;
  }
  if (!created_top_.empty()) fs::create_directories(dir, ec);
  if (ec)
    throw UserError(key + " '" + dir + "' cannot be created: " + ec.message() +
                    "; choose a folder you can write");
  file_ = (fs::path(dir) / ".triad-run.lock").string();
  // Taken, then checked to be the file still there: a run that removed its folder's lock file
  // at its end (the case above) may have done so between this open and the flock.
  for (;;) {
    fd_ = ::open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw UserError(key + " '" + dir + "': its lock file '" + file_ + "' cannot be opened: " +
                      std::strerror(errno) + "; choose a folder you can write");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string who = holder(fd_);
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK)
        throw UserError(key + " '" + dir + "' is in use by another run (" + who +
                        "); wait for it to end, or choose another " + key);
      // A file system without locks (Lustre mounted without flock, some NFS setups): the run
      // goes on as before there were locks, and says so once.
      spdlog::warn("{} '{}': no lock against a second run at once ({}: {})", key, dir, file_,
                   std::strerror(err));
      return;
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(file_.c_str(), &named) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev)
      break;
    ::close(fd_);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  // The holder's name is a courtesy to a refused run; the lock holds without it.
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t written = ::pwrite(fd_, me.data(), me.size(), 0);
    (void)written;
  }
}

FolderLock::~FolderLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  if (!created_top_.empty() && fs::is_directory(dir_, ec)) {
    bool only_lock = true;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      only_lock = only_lock && e.path().filename() == ".triad-run.lock";
    if (only_lock && !ec) {
      fs::remove(file_, ec);
      // Up to the highest folder created here; fs::remove keeps a folder that is not empty.
      const fs::path top = created_top_;
      for (fs::path p = normal(dir_); fs::remove(p, ec) && p != top;) p = p.parent_path();
    }
  }
  ::close(fd_);  // releases the lock
}

}  // namespace triad::launch
