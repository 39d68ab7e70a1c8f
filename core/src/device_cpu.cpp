#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "triad/core/device.hpp"
#include "triad/core/error.hpp"

namespace triad {

namespace {

std::string mib(size_t b) {
  return std::to_string(b / (1024 * 1024)) + " MiB";
}

class CpuDevice final : public Device {
 public:
  DLDevice dl_device() const override { return DLDevice{kDLCPU, 0}; }
  std::string name() const override { return "cpu"; }

 protected:
  void* raw_allocate(size_t bytes) override {
    // 64-byte alignment for vector loads; zeroed so fresh arenas are deterministic.
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p) std::memset(p, 0, rounded);
    return p;
  }
  void raw_release(void* ptr) override { std::free(ptr); }
};

}  // namespace

void* Device::allocate(size_t bytes, const char* what) {
  void* p = raw_allocate(bytes);
  if (!p)
    throw UserError("out of " + name() + " memory allocating " + mib(bytes) + " for " + what +
                    " (peak so far " + mib(peak_bytes()) +
                    "); reduce micro_batch_size, seq_length or the model size");
  const size_t now = current_.fetch_add(bytes) + bytes;
  size_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
  return p;
}

void Device::release(void* ptr, size_t bytes) {
  if (!ptr) return;
  raw_release(ptr);
  current_.fetch_sub(bytes);
}

std::unique_ptr<Device> make_device(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuDevice>();
  throw UserError("device '" + name + "' is not available in this build; use device: cpu");
}

}  // namespace triad
