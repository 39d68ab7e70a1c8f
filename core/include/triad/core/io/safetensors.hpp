// The safetensors format: 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then raw
// little-endian tensor bytes. The header is read and written with nlohmann-json.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace triad::safetensors {

struct TensorData {
  std::string dtype;  // "F32", "F16", "BF16", "I32", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<float> to_f32() const;  // F32 (and F16/BF16 converted); throws UserError otherwise
};

struct File {
  std::map<std::string, TensorData> tensors;
  std::map<std::string, std::string> metadata;
};

// Throws UserError naming the file and what is wrong (missing, header length past the end,
// bad JSON, offsets out of range or overlapping, size not matching dtype × shape, truncated).
File read(const std::string& path);

// A file's tensors in place, memory-mapped read-only: only the pages used are ever read. The
// same checks as read() apply to the header; the bytes stay valid while the Mapped lives.
class Mapped {
 public:
  struct Tensor {
    std::string dtype;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;
    uint64_t bytes = 0;
  };
  explicit Mapped(const std::string& path);
  ~Mapped();
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const uint8_t* file_bytes() const { return base_; }  // the whole file
  uint64_t file_size() const { return size_; }

 private:
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // F32
};
// Writes atomically (temporary file + rename): a failure leaves nothing half-written.
void write_f32(const std::string& path, const std::vector<TensorRef>& tensors,
               const std::map<std::string, std::string>& metadata = {});

}  // namespace triad::safetensors
