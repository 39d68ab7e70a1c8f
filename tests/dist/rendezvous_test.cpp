// The rendezvous store over real TCP on 127.0.0.1.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>
#include <thread>

#include "triad/core/dist/rendezvous.hpp"

using namespace std::chrono_literals;
using triad::RendezvousClient;
using triad::RendezvousServer;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST(Rendezvous, SetGetAddAndBinaryValues) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  server.start();
  RendezvousClient a("127.0.0.1", server.port(), "secret", 5s);
  RendezvousClient b("127.0.0.1", server.port(), "secret", 5s);
  std::string bin("a\0b\xff", 4);
  a.set("k", bin);
  EXPECT_EQ(b.get("k", 1s), bin);
  EXPECT_FALSE(b.try_get("absent").has_value());
  EXPECT_EQ(a.add("counter", 5), 5);
  EXPECT_EQ(b.add("counter", -2), 3);
  EXPECT_EQ(a.get("counter", 1s), "3");
  a.set("text", "x");
  EXPECT_THROW(a.add("text", 1), triad::UserError);
}

TEST(Rendezvous, WaitReturnsWhenAnotherClientSetsTheKeys) {
  RendezvousServer server("127.0.0.1", 0, "t");
  server.start();
  RendezvousClient waiter("127.0.0.1", server.port(), "t", 5s);
  std::thread setter([&] {
    RendezvousClient c("127.0.0.1", server.port(), "t", 5s);
    std::this_thread::sleep_for(50ms);
    c.set("job/rank/0", "a");
    std::this_thread::sleep_for(50ms);
    c.add("job/rank/1", 1);
  });
  auto t0 = std::chrono::steady_clock::now();
  waiter.wait({"job/rank/0", "job/rank/1"}, 10s);
  setter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(waiter.get("job/rank/1", 1s), "1");
}

TEST(Rendezvous, ConcurrentAddsAreAtomic) {
  RendezvousServer server("127.0.0.1", 0, "t");
  server.start();
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      RendezvousClient c("127.0.0.1", server.port(), "t", 5s);
      for (int j = 0; j < 50; ++j) c.add("n", 1);
    });
  for (auto& t : ts) t.join();
  RendezvousClient c("127.0.0.1", server.port(), "t", 5s);
  EXPECT_EQ(c.add("n", 0), 200);
}

TEST(Rendezvous, WrongTokenIsRefusedAndCounted) {
  RendezvousServer server("127.0.0.1", 0, "right-token");
  server.start();
  try {
    RendezvousClient c("127.0.0.1", server.port(), "wrong-token", 5s);
    FAIL() << "a wrong token was accepted";
  } catch (const triad::UserError& e) {
    EXPECT_TRUE(contains(e.what(), "refused")) << e.what();
    EXPECT_TRUE(contains(e.what(), "token")) << e.what();
  }
  EXPECT_EQ(server.refused_connections(), 1);
  // The server keeps serving the right token afterwards.
  RendezvousClient ok("127.0.0.1", server.port(), "right-token", 5s);
  ok.set("a", "b");
  EXPECT_EQ(ok.get("a", 1s), "b");
}

TEST(Rendezvous, TimeoutNamesMissingKeysAndRanks) {
  RendezvousServer server("127.0.0.1", 0, "t");
  server.start();
  RendezvousClient c("127.0.0.1", server.port(), "t", 5s);
  c.set("transport/ucx/addr/rank/0", "x");
  try {
    c.wait({"transport/ucx/addr/rank/0", "transport/ucx/addr/rank/1", "transport/ucx/addr/rank/3"},
           200ms);
    FAIL() << "wait returned with keys missing";
  } catch (const triad::RendezvousTimeout& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "transport/ucx/addr/rank/1")) << m;
    EXPECT_TRUE(contains(m, "transport/ucx/addr/rank/3")) << m;
    EXPECT_FALSE(contains(m, "addr/rank/0,")) << m;
    EXPECT_TRUE(contains(m, "ranks 1, 3")) << m;
    EXPECT_TRUE(contains(m, "200 ms")) << m;
    EXPECT_EQ(e.missing(),
              (std::vector<std::string>{"transport/ucx/addr/rank/1", "transport/ucx/addr/rank/3"}));
  }
  // The connection stays usable after a timeout.
  EXPECT_EQ(c.get("transport/ucx/addr/rank/0", 1s), "x");
  EXPECT_THROW(c.get("never", 100ms), triad::RendezvousTimeout);
}

TEST(Rendezvous, PortInUseIsAClearError) {
  RendezvousServer first("127.0.0.1", 0, "t");
  try {
    RendezvousServer second("127.0.0.1", first.port(), "t");
    FAIL() << "two servers bound one port";
  } catch (const triad::UserError& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "127.0.0.1:" + std::to_string(first.port()))) << m;
    EXPECT_TRUE(contains(m, "already in use")) << m;
  }
}

TEST(Rendezvous, UnreachableMasterRetriesThenNamesTheAddress) {
  uint16_t port;
  {
    RendezvousServer gone("127.0.0.1", 0, "t");
    port = gone.port();
  }
  auto t0 = std::chrono::steady_clock::now();
  try {
    RendezvousClient c("127.0.0.1", port, "t", 400ms);
    FAIL() << "connected to a closed port";
  } catch (const triad::UserError& e) {
    EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
  }
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 350ms);  // it kept retrying until the timeout
  EXPECT_LT(waited, 5s);
}

TEST(Rendezvous, ClientRetriesUntilTheMasterComesUp) {
  uint16_t port;
  {
    RendezvousServer probe("127.0.0.1", 0, "t");  // finds a free port, then frees it
    port = probe.port();
  }
  std::unique_ptr<RendezvousServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);  // the client meets "connection refused" meanwhile
    server = std::make_unique<RendezvousServer>("127.0.0.1", port, "t");
    server->start();
  });
  auto t0 = std::chrono::steady_clock::now();
  RendezvousClient c("127.0.0.1", port, "t", 10s);
  late.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
  c.set("k", "v");
  EXPECT_EQ(c.get("k", 1s), "v");
}

// Found with tests/fuzz/fuzz_rendezvous.cpp: a sum past int64 was signed overflow in the master.
TEST(Rendezvous, AddPastInt64IsRefusedAndLeavesTheValue) {
  RendezvousServer server("127.0.0.1", 0, "t");
  server.start();
  RendezvousClient c("127.0.0.1", server.port(), "t", 5s);
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(c.add("n", max), max);
  try {
    c.add("n", 1);
    ADD_FAILURE() << "an add past int64 was accepted";
  } catch (const triad::UserError& e) {
    EXPECT_TRUE(contains(e.what(), "overflow")) << e.what();
  }
  EXPECT_EQ(c.get("n", 1s), std::to_string(max));
  // A WAIT whose timeout would overflow the timer's clock waits (here: returns) as usual.
  c.wait({"n"}, std::chrono::milliseconds::max() - 60s);
}

// std::stol threw std::out_of_range (not a UserError) for a rank number past long.
TEST(Rendezvous, MissingRanksPastLongAreNotNamed) {
  EXPECT_EQ(triad::describe_missing_ranks({"job/rank/99999999999999999999", "job/rank/3"}),
            "rank 3");
  EXPECT_EQ(triad::describe_missing_ranks({"a/rank/2", "b/rank/10", "x/rank/", "rank/4"}),
            "ranks 2, 10");
}
