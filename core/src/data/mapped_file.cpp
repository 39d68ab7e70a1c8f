#include "mapped_file.hpp"

#include <cerrno>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"

namespace triad::data {

namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  Fd f{open_regular_file(path, what, "point it at a data file", &size_)};
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
