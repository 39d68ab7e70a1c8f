// A whole file mapped read-only: data sources are read in place, however large, and the
// kernel pages them in on demand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace triad::data {

class MappedFile {
 public:
  // Throws UserError naming `what` (e.g. "data.path") and the path when the file cannot be
  // opened or is not a regular file. An empty file maps to size() == 0, data() == nullptr.
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace triad::data
