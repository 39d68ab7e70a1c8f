// The rendezvous store's client over TCP (every rank has one): connecting with the job token,
// one request and its reply at a time, every wait bounded (rendezvous_server.cpp is the other
// end; rendezvous_wire.cpp the messages).
#include "triad/core/dist/rendezvous.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <mutex>

#include "rendezvous_wire.hpp"

namespace triad {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;
using namespace rendezvous_wire;

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Client

struct RendezvousClient::Impl {
  Impl(std::string h, uint16_t p) : host(std::move(h)), port(p), socket(io) {}

  std::string where() const { return host + ":" + std::to_string(port); }

  // Runs the queued async work until `done` or the deadline; false on timeout.
  bool run_until(const bool& done, std::chrono::milliseconds limit) {
    io.restart();
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      io.run_one_for(deadline - now);
    }
    if (done) return true;
    boost::system::error_code ec;
    socket.cancel(ec);
    socket.close(ec);
    io.restart();
    io.run();  // lets the cancelled handlers finish
    return false;
  }

  void connect(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto backoff = 20ms;
    std::string last = "no attempt";
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) break;
      boost::system::error_code ec;
      tcp::resolver resolver(io);
      auto eps = resolver.resolve(host, std::to_string(port), ec);
      if (!ec) {
        bool done = false;
        boost::system::error_code cec;
        socket = tcp::socket(io);
        asio::async_connect(socket, eps, [&](boost::system::error_code e, const tcp::endpoint&) {
          cec = e;
          done = true;
        });
        if (!run_until(done, std::min<std::chrono::milliseconds>(left, 5000ms))) {
          last = "connection attempt timed out";
        } else if (!cec) {
          socket.set_option(tcp::no_delay(true));
          return;
        } else {
          last = cec.message();
        }
      } else {
        last = ec.message();
      }
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(backoff, left));
      backoff = std::min<std::chrono::milliseconds>(backoff * 2, 1000ms);
    }
    throw UserError("rendezvous: cannot reach the master at " + where() + " within " +
                    std::to_string(timeout.count()) + " ms (last error: " + last +
                    "); check that rank 0 / the launcher is running and the master address "
                    "and port are right");
  }

  // Sends one request frame and returns the reply's payload.
  std::string transact(std::string frame, std::chrono::milliseconds limit) {
    if (!socket.is_open())
      throw UserError("rendezvous: the connection to " + where() + " is closed");
    bool done = false;
    boost::system::error_code err;
    std::array<char, 4> hdr{};
    std::string body;
    asio::async_write(socket, asio::buffer(frame), [&](boost::system::error_code ec, size_t) {
      if (ec) {
        err = ec;
        done = true;
        return;
      }
      asio::async_read(socket, asio::buffer(hdr), [&](boost::system::error_code ec2, size_t) {
        if (ec2) {
          err = ec2;
          done = true;
          return;
        }
        uint32_t n = frame_length(hdr);
        if (n == 0 || n > kMaxFrame) {
          err = asio::error::message_size;
          done = true;
          return;
        }
        body.resize(n);
        asio::async_read(socket, asio::buffer(body), [&](boost::system::error_code ec3, size_t) {
          err = ec3;
          done = true;
        });
      });
    });
    if (!run_until(done, limit))
      throw UserError("rendezvous: the master at " + where() + " did not answer within " +
                      std::to_string(limit.count()) + " ms");
    if (err)
      throw UserError("rendezvous: lost the connection to the master at " + where() + ": " +
                      err.message());
    return body;
  }

  std::string host;
  uint16_t port;
  asio::io_context io;
  tcp::socket socket;
  std::mutex mu;
};

namespace {
constexpr auto kReplyLimit = 30000ms;  // a master that answers nothing in 30 s is gone

// The reply's fields; a malformed reply is a UserError naming the master.
Reply read_reply(const std::string& payload, const std::string& where) {
  try {
    return parse_reply(payload);
  } catch (const ProtocolError& e) {
    throw UserError("rendezvous: the master at " + where + " sent a malformed reply (" + e.what() +
                    "); is another program listening on the master port?");
  }
}

[[noreturn]] void unexpected_reply(const Reply& a, const std::string& where) {
  std::string msg = a.op == kErr ? a.text : "unexpected reply " + std::to_string(a.op);
  throw UserError("rendezvous: the master at " + where + " answered: " + msg);
}
}  // namespace

RendezvousClient::RendezvousClient(const std::string& host, uint16_t port, const std::string& token,
                                   std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>(host, port)) {
  impl_->connect(connect_timeout);
  std::string reply;
  try {
    reply = impl_->transact(encode_request({kAuth, token}), kReplyLimit);
  } catch (const UserError&) {
    throw UserError("rendezvous: the master at " + impl_->where() +
                    " closed the connection while checking the job token; every rank must "
                    "use the job's token");
  }
  const Reply a = read_reply(reply, impl_->where());
  if (a.op == kErr)
    throw UserError("rendezvous: the master at " + impl_->where() + " refused this process: " +
                    a.text + "; every rank must use the job's token (the one the launcher made)");
  if (a.op != kOk) unexpected_reply(a, impl_->where());
}

RendezvousClient::~RendezvousClient() = default;

std::string RendezvousClient::address() const {
  return impl_->where();
}

void RendezvousClient::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = impl_->transact(encode_request({kSet, key, value}), kReplyLimit);
  const Reply a = read_reply(reply, impl_->where());
  if (a.op != kOk) unexpected_reply(a, impl_->where());
}

std::optional<std::string> RendezvousClient::try_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = impl_->transact(encode_request({kGet, key}), kReplyLimit);
  Reply a = read_reply(reply, impl_->where());
  if (a.op == kNotFound) return std::nullopt;
  if (a.op != kValue) unexpected_reply(a, impl_->where());
  return std::move(a.text);
}

void RendezvousClient::wait(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) {
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    // The master waits at most wait_duration (so a huge timeout overflows no clock here either).
    std::string reply = impl_->transact(encode_request({kWait, {}, {}, timeout.count(), keys}),
                                        wait_duration(timeout.count()) + kReplyLimit);
    Reply a = read_reply(reply, impl_->where());
    if (a.op == kOk) return;
    if (a.op != kMissing) unexpected_reply(a, impl_->where());
    missing = std::move(a.keys);
  }
  std::string ranks = describe_missing_ranks(missing);
  throw RendezvousTimeout("rendezvous: timed out after " + std::to_string(timeout.count()) +
                              " ms waiting for " + std::to_string(missing.size()) + " of " +
                              std::to_string(keys.size()) + " keys at " + impl_->where() +
                              ": missing " + join(missing) +
                              (ranks.empty() ? "" : " (" + ranks + " did not arrive)") +
                              "; check that every rank started and can reach the master",
                          missing);
}

std::string RendezvousClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  auto v = try_get(key);
  if (!v) throw UserError("rendezvous: key '" + key + "' vanished at " + impl_->where());
  return *v;
}

int64_t RendezvousClient::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = impl_->transact(encode_request({kAdd, key, {}, delta}), kReplyLimit);
  const Reply a = read_reply(reply, impl_->where());
  if (a.op != kInt) unexpected_reply(a, impl_->where());
  return a.number;
}

}  // namespace triad
