// The rendezvous store's server over TCP (the launcher runs it): the messages and the store are
// rendezvous_wire.cpp's; here are the sockets, the job token check and the WAIT timers.
#include "triad/core/dist/rendezvous.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstring>
#include <list>
#include <mutex>
#include <random>
#include <thread>

#include "rendezvous_wire.hpp"

namespace triad {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;
using namespace rendezvous_wire;

namespace {

bool equal_tokens(const std::string& a, const std::string& b) {
  // Constant time in the token's content, so a wrong token reveals nothing by timing.
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b[i]));
  return diff == 0;
}

}  // namespace

std::string make_job_token() {
  std::random_device rd;
  std::string s;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) s.push_back(hex[rd() % 16]);
  return s;
}

// ---------------------------------------------------------------------------------------
// Server

struct RendezvousServer::Impl {
  struct Session;
  struct Waiter {
    std::shared_ptr<Session> session;  // keeps the connection open while it waits
    std::vector<std::string> keys;
    std::unique_ptr<asio::steady_timer> timer;
  };

  struct Session : std::enable_shared_from_this<Session> {
    Session(Impl* s, tcp::socket sock) : srv(s), socket(std::move(sock)) {}
    Impl* srv;
    tcp::socket socket;
    bool authed = false;
    std::array<char, 4> header{};
    std::string body;
    std::string peer;

    void start() {
      boost::system::error_code ec;
      auto ep = socket.remote_endpoint(ec);
      peer = ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
      read_header();
    }
    void read_header() {
      auto self = shared_from_this();
      asio::async_read(socket, asio::buffer(header), [self](boost::system::error_code ec, size_t) {
        if (ec) return;
        uint32_t n = frame_length(self->header);
        if (n == 0 || n > (self->authed ? kMaxFrame : kMaxAuthFrame)) {
          if (!self->authed) self->srv->refuse(*self, "oversized first message");
          return self->close();
        }
        self->read_body(n);
      });
    }
    void read_body(uint32_t n) {
      body.resize(n);
      auto self = shared_from_this();
      asio::async_read(socket, asio::buffer(body), [self](boost::system::error_code ec, size_t) {
        if (ec) return;
        self->srv->handle(self);
      });
    }
    // Sends a reply and then reads the next request (or closes).
    void reply(std::string frame, bool then_close = false) {
      auto self = shared_from_this();
      auto data = std::make_shared<std::string>(std::move(frame));
      asio::async_write(socket, asio::buffer(*data),
                        [self, data, then_close](boost::system::error_code ec, size_t) {
                          if (ec || then_close) return self->close();
                          self->read_header();
                        });
    }
    void close() {
      boost::system::error_code ec;
      socket.shutdown(tcp::socket::shutdown_both, ec);
      socket.close(ec);
    }
  };

  Impl(const std::string& h, uint16_t p, std::string t)
      : host(h), token(std::move(t)), acceptor(io) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(h, ec);
    if (ec)
      throw UserError("rendezvous: '" + h +
                      "' is not an IP address to listen on; give the master's address as "
                      "digits, e.g. 127.0.0.1 or 0.0.0.0");
    tcp::endpoint ep(addr, p);
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      std::string why =
          ec == asio::error::address_in_use ? "the port is already in use" : ec.message();
      throw UserError("rendezvous: cannot listen on " + h + ":" + std::to_string(p) + ": " + why +
                      "; choose another master port (or stop the process holding it)");
    }
    port = acceptor.local_endpoint().port();
  }

  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket sock) {
      if (ec) return;  // acceptor closed
      sock.set_option(tcp::no_delay(true));
      std::make_shared<Session>(this, std::move(sock))->start();
      accept();
    });
  }

  void refuse(Session& s, const std::string& why) {
    ++refused;
    spdlog::warn("rendezvous: refused connection from {}: {}", s.peer, why);
  }

  void handle(const std::shared_ptr<Session>& s) {
    try {
      if (!s->authed) {
        // Only an AUTH request is read before the token (the body is never empty).
        const bool auth = uint8_t(s->body[0]) == kAuth;
        if (!auth || !equal_tokens(parse_request(s->body).key, token)) {
          refuse(*s, auth ? "wrong job token" : "no job token presented");
          return s->reply(encode_reply({kErr, "wrong job token"}), true);
        }
        s->authed = true;
        return s->reply(encode_reply({kOk}));
      }
      const Request q = parse_request(s->body);
      switch (q.op) {
        case kSet:
        case kGet:
        case kAdd: {
          const Reply a = store.apply(q);
          s->reply(encode_reply(a));
          if (a.op == kOk || a.op == kInt) wake_waiters();
          return;
        }
        case kWait: {
          auto w = std::make_shared<Waiter>();
          w->session = s;
          w->keys = q.keys;
          if (store.missing(w->keys).empty()) return s->reply(encode_reply({kOk}));
          w->timer = std::make_unique<asio::steady_timer>(io);
          w->timer->expires_after(wait_duration(q.number));
          waiters.push_back(w);
          w->timer->async_wait([this, w](boost::system::error_code ec) {
            if (ec) return;  // cancelled: satisfied
            auto it = std::find(waiters.begin(), waiters.end(), w);
            if (it == waiters.end()) return;
            waiters.erase(it);
            w->session->reply(encode_reply({kMissing, {}, 0, store.missing(w->keys)}));
          });
          return;
        }
        default:
          return s->reply(encode_reply({kErr, "unknown request " + std::to_string(q.op)}), true);
      }
    } catch (const std::exception& e) {
      s->reply(encode_reply({kErr, std::string("malformed request: ") + e.what()}), true);
    }
  }

  void wake_waiters() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      auto w = *it;
      if (!store.missing(w->keys).empty()) {
        ++it;
        continue;
      }
      it = waiters.erase(it);
      w->timer->cancel();
      w->session->reply(encode_reply({kOk}));
    }
  }

  std::string host;
  std::string token;
  uint16_t port = 0;
  asio::io_context io;
  tcp::acceptor acceptor;
  Store store;
  std::list<std::shared_ptr<Waiter>> waiters;
  std::thread thread;
  std::atomic<int> refused{0};
};

RendezvousServer::RendezvousServer(const std::string& host, uint16_t port, std::string token)
    : impl_(std::make_unique<Impl>(host, port, std::move(token))) {}

RendezvousServer::~RendezvousServer() {
  stop();
}

uint16_t RendezvousServer::port() const {
  return impl_->port;
}
const std::string& RendezvousServer::host() const {
  return impl_->host;
}
int RendezvousServer::refused_connections() const {
  return impl_->refused.load();
}

void RendezvousServer::start() {
  if (impl_->thread.joinable()) return;
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

void RendezvousServer::stop() {
  if (!impl_) return;
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
}

}  // namespace triad
