// CoreServices: the allocator counts what plugins hold; the logger reaches spdlog, or holds its
// lines until released.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <sstream>

#include "triad/core/plugins/services.hpp"

namespace triad {
namespace {

TEST(CoreServices, AllocatorCountsCurrentAndPeakBytes) {
  CoreServices s(3);
  const triad_services_v1* c = s.c_services();
  EXPECT_EQ(c->struct_size, sizeof(triad_services_v1));
  EXPECT_EQ(c->num_threads, 3);
  EXPECT_EQ(c->stream, nullptr);
  const triad_allocator_v1* a = c->allocator;
  const DLDevice cpu{kDLCPU, 0};
  void* x = a->alloc(a->ctx, 1000, cpu);
  void* y = a->alloc(a->ctx, 24, cpu);
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x) % 64, 0u);
  static_cast<char*>(x)[999] = 1;  // the whole block is usable
  EXPECT_EQ(s.current_bytes(), 1024u);
  a->free(a->ctx, x, cpu);
  EXPECT_EQ(s.current_bytes(), 24u);
  void* z = a->alloc(a->ctx, 500, cpu);
  EXPECT_EQ(s.peak_bytes(), 1024u);
  a->free(a->ctx, y, cpu);
  a->free(a->ctx, z, cpu);
  a->free(a->ctx, nullptr, cpu);
  EXPECT_EQ(s.current_bytes(), 0u);
  EXPECT_EQ(s.peak_bytes(), 1024u);
  EXPECT_EQ(a->alloc(a->ctx, 16, DLDevice{kDLCUDA, 0}), nullptr);  // no device memory yet
}

TEST(CoreServices, LoggerForwardsToSpdlogWithThePluginName) {
  std::ostringstream os;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  logger->set_pattern("%l %v");
  logger->set_level(spdlog::level::debug);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  CoreServices s;
  const triad_logger_v1* l = s.c_services()->logger;
  l->log(l->ctx, TRIAD_LOG_WARN, "naive", "slow path");
  l->log(l->ctx, TRIAD_LOG_DEBUG, "flash2", "block 64");
  spdlog::set_default_logger(previous);
  EXPECT_EQ(os.str(), "warning [naive] slow path\ndebug [flash2] block 64\n");
}

TEST(CoreServices, HeldLogLinesComeOutOnReleaseInOrder) {
  std::ostringstream os;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(os);
  auto logger = std::make_shared<spdlog::logger>("test", sink);
  logger->set_pattern("%l %v");
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  CoreServices s;
  const triad_logger_v1* l = s.c_services()->logger;
  s.hold_logs();
  l->log(l->ctx, TRIAD_LOG_INFO, "chatty", "created");
  l->log(l->ctx, TRIAD_LOG_WARN, nullptr, "asked");
  const std::string while_held = os.str();
  s.release_logs();
  const std::string released = os.str();
  l->log(l->ctx, TRIAD_LOG_INFO, "chatty", "after");
  spdlog::set_default_logger(previous);
  EXPECT_EQ(while_held, "");
  EXPECT_EQ(released, "info [chatty] created\nwarning [plugin] asked\n");
  EXPECT_EQ(os.str(), released + "info [chatty] after\n");  // no longer held
}

}  // namespace
}  // namespace triad
