// The core's side of triad_services_v1: what every plugin instance gets at create time.
// One CoreServices lives as long as the plugins created with it (the engine owns it).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "triad/sdk/plugin_v1.h"

namespace triad {

class CoreServices {
 public:
  // num_threads: CPU threads a plugin may use (0 = its choice). stream: device stream or null.
  explicit CoreServices(int num_threads = 0, void* stream = nullptr);
  CoreServices(const CoreServices&) = delete;
  CoreServices& operator=(const CoreServices&) = delete;

  // Points into this object: valid while it lives.
  const triad_services_v1* c_services() const { return &services_; }
  // Bytes plugins hold through the allocator now, and the most they ever held at once.
  size_t current_bytes() const { return current_.load(); }
  size_t peak_bytes() const { return peak_.load(); }

  // Keeps the plugins' log lines instead of writing them, until release_logs() writes them in
  // the order they came (triad-info: they never interleave with its listing).
  void hold_logs();
  void release_logs();

 private:
  static void log(void* ctx, int level, const char* plugin_name, const char* message);
  static void* alloc(void* ctx, size_t bytes, DLDevice device);
  static void free(void* ctx, void* ptr, DLDevice device);

  struct LogLine {
    int level;
    std::string plugin, message;
  };
  std::mutex held_mutex_;
  bool holding_ = false;
  std::vector<LogLine> held_;

  std::atomic<size_t> current_{0};
  std::atomic<size_t> peak_{0};
  triad_logger_v1 logger_;
  triad_allocator_v1 allocator_;
  triad_services_v1 services_;
};

}  // namespace triad
