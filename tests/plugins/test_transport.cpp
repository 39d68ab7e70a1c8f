// The core's transport wrapper on version 2's operations where no multi-rank suite reaches:
// all_to_all staged through host buffers (transport_staging.cpp), on ucx at world 1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

namespace triad {
namespace {

TEST(Transport, StagedAllToAllCopiesDownAndUpAround) {
  auto p = PluginLoader().load("transport", "ucx");
  CoreServices services;
  Transport t(p, resolve_params(p->descriptor(), {{"tls", "self"}}, "transport"),
              services.c_services());
  size_t down = 0, up = 0;
  t.stage_through_host(
      [&](void* dst, const void* src, size_t n) {
        down += n;
        std::memcpy(dst, src, n);
      },
      [&](void* dst, const void* src, size_t n) {
        up += n;
        std::memcpy(dst, src, n);
      },
      /*stage_host=*/true);
  ASSERT_TRUE(t.capabilities().ops & TRIAD_TRANSPORT_OP_ALL_TO_ALL);
  RendezvousServer server("127.0.0.1", 0, "t");
  server.start();
  RendezvousClient store("127.0.0.1", server.port(), "t", std::chrono::seconds(5));
  Communicator world = t.init_world(0, 1, store, "transport/ucx/");
  int32_t send[3] = {7, -8, 9}, recv[3] = {0, 0, 0};
  auto req = world.all_to_all(send, recv, 3, DLDataType{kDLInt, 32, 1});
  t.progress();
  req.wait(std::chrono::seconds(10));
  EXPECT_EQ(recv[0], 7);
  EXPECT_EQ(recv[1], -8);
  EXPECT_EQ(recv[2], 9);
  EXPECT_EQ(down, sizeof send);
  EXPECT_EQ(up, sizeof recv);
}

}  // namespace
}  // namespace triad
