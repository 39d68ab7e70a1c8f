// The safetensors reader: triad::safetensors::read() and Mapped on the same file.
//
// Input: the file's bytes. Checks: both succeed or both throw UserError; when they succeed they
// agree on every tensor (dtype, shape, bytes) and the metadata, each tensor's size is its dtype
// × shape, and to_f32() converts F32/F16/BF16 tensors to the right count.
#include <cstring>
#include <optional>

#include "fuzz_common.hpp"
#include "triad/core/io/safetensors.hpp"

namespace st = triad::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace triad::fuzz;
  const std::string path = scratch_path("file.safetensors");
  write_file(path, {reinterpret_cast<const char*>(data), size});
  std::optional<st::File> file;
  expect_success_or_user_error([&] { file = st::read(path); });
  std::optional<st::Mapped> mapped;
  expect_success_or_user_error([&] { mapped.emplace(path); });
  check(file.has_value() == mapped.has_value(),
        "read() and Mapped disagree on whether it is valid");
  if (!file) return 0;
  check(file->metadata == mapped->metadata(), "read() and Mapped disagree on the metadata");
  check(file->tensors.size() == mapped->tensors().size(),
        "read() and Mapped disagree on the tensor count");
  check(mapped->file_size() == size, "Mapped's file_size is not the file's");
  for (const auto& [name, tensor] : file->tensors) {
    const st::TensorData& t = tensor;
    const auto it = mapped->tensors().find(name);
    check(it != mapped->tensors().end(), "Mapped lacks tensor '" + name + "'");
    const st::Mapped::Tensor& m = it->second;
    check(m.dtype == t.dtype && m.shape == t.shape, "tensor '" + name + "' differs");
    check(m.bytes == t.bytes.size(), "tensor '" + name + "' has a different size");
    check(m.bytes == 0 || (m.data >= mapped->file_bytes() &&
                           m.data + m.bytes <= mapped->file_bytes() + mapped->file_size()),
          "tensor '" + name + "' points outside the mapping");
    check(m.bytes == 0 || std::memcmp(m.data, t.bytes.data(), m.bytes) == 0,
          "tensor '" + name + "' has different bytes");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      check(d >= 0, "tensor '" + name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t elem = t.dtype == "F32" ? 4 : (t.dtype == "F16" || t.dtype == "BF16") ? 2 : 0;
    if (elem == 0) {
      expect_success_or_user_error([&] { (void)t.to_f32(); });
      continue;
    }
    check(numel * elem == t.bytes.size(), "tensor '" + name + "' size is not dtype × shape");
    check(t.to_f32().size() == numel, "to_f32 of '" + name + "' has the wrong length");
  }
  return 0;
}
