#include "mapped_file.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "triad/core/error.hpp"

namespace triad::data {

namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// What a path that is not a regular file is, for the message.
const char* type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "of an unusual type";
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer forever (the
  // type is refused just below; O_NONBLOCK does not affect a regular file's mapping).
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0)
    throw UserError(what + " '" + path + "' cannot be opened: " + std::strerror(errno) +
                    "; check the path");
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw UserError(what + " '" + path + "' cannot be read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw UserError(what + " '" + path + "' is " + type_name(st.st_mode) +
                    ", not a regular file; point it at a data file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (p == MAP_FAILED)
    throw UserError(what + " '" + path + "' cannot be mapped into memory: " + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace triad::data
