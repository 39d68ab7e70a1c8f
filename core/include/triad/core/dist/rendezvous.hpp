// The job's rendezvous: a small TCP key-value store (Boost.Asio). The launcher runs the
// server on node 0; every rank connects a client and exchanges what its transport needs
// (UCX worker addresses, the NCCL unique id). Every connection presents the job token
// first; every wait has a timeout whose message names the keys, and the ranks, missing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "triad/core/error.hpp"

namespace triad {

// A wait or get ran past its timeout; the message names what is missing.
class RendezvousTimeout : public UserError {
 public:
  RendezvousTimeout(const std::string& msg, std::vector<std::string> missing)
      : UserError(msg), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  std::vector<std::string> missing_;
};

class RendezvousServer {
 public:
  // Binds host:port at once (port 0: a free port, see port()), so clients may be started
  // before start(). Throws UserError when the port is in use or the address is invalid.
  RendezvousServer(const std::string& host, uint16_t port, std::string token);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  uint16_t port() const;
  const std::string& host() const;
  // Serves in a background thread until stop() or destruction.
  void start();
  void stop();
  // Connections refused for a wrong token so far (they are also logged).
  int refused_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class RendezvousClient {
 public:
  // Connects, retrying with backoff until connect_timeout, then presents the token.
  // Throws UserError naming host:port when the master stays unreachable, or when it
  // refuses the token.
  RendezvousClient(const std::string& host, uint16_t port, const std::string& token,
                   std::chrono::milliseconds connect_timeout = std::chrono::seconds(60));
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits for key, then returns its value. Throws RendezvousTimeout.
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  std::optional<std::string> try_get(const std::string& key);
  // Returns once every key exists. Throws RendezvousTimeout naming the missing keys and,
  // for keys ending in "/rank/<N>", the missing ranks.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Adds delta to the integer at key (absent: 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  std::string address() const;  // "host:port"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A random job token (32 hex digits) for launchers and tests.
std::string make_job_token();

// "ranks 2, 5" for keys ending in "/rank/<N>" (empty when none does); used in messages.
std::string describe_missing_ranks(const std::vector<std::string>& keys);

}  // namespace triad
