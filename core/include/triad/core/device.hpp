// Devices own memory and count it. The model and engine allocate through a Device and call
// kernels through it; they never test which device it is. CPU first; CUDA plugs in beside it.
#pragma once

#include <dlpack/dlpack.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

namespace triad {

class Device {
 public:
  virtual ~Device() = default;
  virtual DLDevice dl_device() const = 0;
  virtual std::string name() const = 0;
  // Counts the bytes; on failure throws UserError naming what, how much and the peak so far.
  void* allocate(size_t bytes, const char* what);
  void release(void* ptr, size_t bytes);
  size_t current_bytes() const { return current_.load(); }
  size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_release(void* ptr) = 0;

 private:
  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
};

// "cpu"; throws UserError for a device this build or machine cannot provide.
std::unique_ptr<Device> make_device(const std::string& name);

// An owned, zero-initialised array of T on a device.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device& dev, size_t n, const char* what) : dev_(&dev), n_(n) {
    ptr_ = static_cast<T*>(dev.allocate(n * sizeof(T), what));
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    reset();
    swap(o);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* data() const { return ptr_; }
  size_t size() const { return n_; }
  void reset() {
    if (ptr_) dev_->release(ptr_, n_ * sizeof(T));
    ptr_ = nullptr;
    n_ = 0;
  }

 private:
  void swap(Buffer& o) {
    std::swap(dev_, o.dev_);
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
  }
  Device* dev_ = nullptr;
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace triad
