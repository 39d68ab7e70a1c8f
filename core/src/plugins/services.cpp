#include "triad/core/plugins/services.hpp"

#include <cstdlib>
#include <new>

#include <spdlog/spdlog.h>

namespace triad {
namespace {

// Each block carries its size in a header so free() can uncount it; the header is one
// alignment unit so the pointer handed out stays 64-byte aligned (cache line, AVX-512).
constexpr size_t kAlign = 64;

spdlog::level::level_enum to_spdlog(int level) {
  switch (level) {
    case TRIAD_LOG_DEBUG:
      return spdlog::level::debug;
    case TRIAD_LOG_INFO:
      return spdlog::level::info;
    case TRIAD_LOG_WARN:
      return spdlog::level::warn;
    default:
      return spdlog::level::err;
  }
}

}  // namespace

CoreServices::CoreServices(int num_threads, void* stream) {
  logger_ = {this, &CoreServices::log};
  allocator_ = {this, &CoreServices::alloc, &CoreServices::free};
  services_ = {sizeof(triad_services_v1), &logger_, &allocator_, stream, num_threads};
}

void CoreServices::log(void* ctx, int level, const char* plugin_name, const char* message) {
  const char* plugin = plugin_name ? plugin_name : "plugin";
  auto* self = static_cast<CoreServices*>(ctx);
  {
    std::lock_guard<std::mutex> lock(self->held_mutex_);
    if (self->holding_) {
      self->held_.push_back({level, plugin, message ? message : ""});
      return;
    }
  }
  spdlog::log(to_spdlog(level), "[{}] {}", plugin, message ? message : "");
}

void CoreServices::hold_logs() {
  std::lock_guard<std::mutex> lock(held_mutex_);
  holding_ = true;
}

void CoreServices::release_logs() {
  std::vector<LogLine> lines;
  {
    std::lock_guard<std::mutex> lock(held_mutex_);
    holding_ = false;
    lines.swap(held_);
  }
  for (const auto& l : lines) log(this, l.level, l.plugin.c_str(), l.message.c_str());
}

void* CoreServices::alloc(void* ctx, size_t bytes, DLDevice device) {
  // Only host memory for now; a device allocator arrives with the CUDA device.
  if (device.device_type != kDLCPU) return nullptr;
  size_t total = kAlign + (bytes + kAlign - 1) / kAlign * kAlign;
  auto* base = static_cast<char*>(std::aligned_alloc(kAlign, total));
  if (!base) return nullptr;
  *reinterpret_cast<size_t*>(base) = bytes;
  auto* self = static_cast<CoreServices*>(ctx);
  size_t now = self->current_.fetch_add(bytes) + bytes;
  size_t peak = self->peak_.load();
  while (now > peak && !self->peak_.compare_exchange_weak(peak, now)) {
  }
  return base + kAlign;
}

void CoreServices::free(void* ctx, void* ptr, DLDevice) {
  if (!ptr) return;
  char* base = static_cast<char*>(ptr) - kAlign;
  static_cast<CoreServices*>(ctx)->current_.fetch_sub(*reinterpret_cast<size_t*>(base));
  std::free(base);
}

}  // namespace triad
