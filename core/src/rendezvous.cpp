// Rendezvous store over TCP. Wire format: every message is a frame [u32 length][payload];
// a payload is an opcode byte followed by fields (u32-length-prefixed strings, i64s, all
// little-endian). The protocol is strictly request/reply per connection, and the first
// request must be AUTH with the job token.
#include "triad/core/rendezvous.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <thread>

namespace triad {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

enum Op : uint8_t {
  kAuth = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kAdd = 5,
  // replies
  kOk = 100,
  kValue = 101,
  kNotFound = 102,
  kMissing = 103,
  kInt = 104,
  kErr = 105,
};

constexpr uint32_t kMaxFrame = 256u << 20;  // a value is at most a few KiB in practice
constexpr uint32_t kMaxAuthFrame = 4096;    // before the token, accept only a small frame

class Writer {
 public:
  explicit Writer(uint8_t op) { buf_.assign(4, '\0'), buf_.push_back(char(op)); }
  Writer& str(const std::string& s) {
    u32(uint32_t(s.size()));
    buf_ += s;
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(char((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& i64(int64_t v) {
    uint64_t u = uint64_t(v);
    for (int i = 0; i < 8; ++i) buf_.push_back(char((u >> (8 * i)) & 0xff));
    return *this;
  }
  // The finished frame, length prefix filled in.
  std::string frame() {
    uint32_t n = uint32_t(buf_.size() - 4);
    for (int i = 0; i < 4; ++i) buf_[i] = char((n >> (8 * i)) & 0xff);
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& payload) : p_(payload) {}
  uint8_t op() { return uint8_t(take(1)[0]); }
  uint32_t u32() {
    auto b = take(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(b[i])) << (8 * i);
    return v;
  }
  int64_t i64() {
    auto b = take(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(b[i])) << (8 * i);
    return int64_t(v);
  }
  std::string str() {
    uint32_t n = u32();
    return std::string(take(n));
  }

 private:
  std::string_view take(size_t n) {
    if (pos_ + n > p_.size()) throw std::runtime_error("truncated rendezvous message");
    std::string_view v(p_.data() + pos_, n);
    pos_ += n;
    return v;
  }
  const std::string& p_;
  size_t pos_ = 0;
};

uint32_t frame_length(const std::array<char, 4>& h) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(uint8_t(h[i])) << (8 * i);
  return n;
}

bool equal_tokens(const std::string& a, const std::string& b) {
  // Constant time in the token's content, so a wrong token reveals nothing by timing.
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b[i]));
  return diff == 0;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

std::string describe_missing_ranks(const std::vector<std::string>& keys) {
  static const std::regex kRankKey(".*/rank/([0-9]+)$");
  std::set<long> ranks;
  for (const auto& k : keys) {
    std::smatch m;
    if (std::regex_match(k, m, kRankKey)) ranks.insert(std::stol(m[1]));
  }
  if (ranks.empty()) return "";
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  bool first = true;
  for (long r : ranks) s += (first ? "" : ", ") + std::to_string(r), first = false;
  return s;
}

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
    std::string frame;
    try {
      Reader r(s->body);
      uint8_t op = r.op();
      if (!s->authed) {
        if (op != kAuth || !equal_tokens(r.str(), token)) {
          refuse(*s, op == kAuth ? "wrong job token" : "no job token presented");
          return s->reply(Writer(kErr).str("wrong job token").frame(), true);
        }
        s->authed = true;
        return s->reply(Writer(kOk).frame());
      }
      switch (op) {
        case kSet: {
          std::string k = r.str();
          store[k] = r.str();
          frame = Writer(kOk).frame();
          s->reply(std::move(frame));
          return wake_waiters();
        }
        case kGet: {
          auto it = store.find(r.str());
          return s->reply(it == store.end() ? Writer(kNotFound).frame()
                                            : Writer(kValue).str(it->second).frame());
        }
        case kAdd: {
          std::string k = r.str();
          int64_t d = r.i64();
          int64_t v = 0;
          auto it = store.find(k);
          if (it != store.end()) {
            size_t used = 0;
            try {
              v = std::stoll(it->second, &used);
            } catch (...) {
              used = 0;
            }
            if (used == 0 || used != it->second.size())
              return s->reply(
                  Writer(kErr).str("add: key '" + k + "' holds a non-integer value").frame());
          }
          v += d;
          store[k] = std::to_string(v);
          s->reply(Writer(kInt).i64(v).frame());
          return wake_waiters();
        }
        case kWait: {
          int64_t timeout_ms = r.i64();
          uint32_t n = r.u32();
          auto w = std::make_shared<Waiter>();
          w->session = s;
          for (uint32_t i = 0; i < n; ++i) w->keys.push_back(r.str());
          if (missing(*w).empty()) return s->reply(Writer(kOk).frame());
          w->timer = std::make_unique<asio::steady_timer>(io);
          w->timer->expires_after(std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms)));
          waiters.push_back(w);
          w->timer->async_wait([this, w](boost::system::error_code ec) {
            if (ec) return;  // cancelled: satisfied
            auto it = std::find(waiters.begin(), waiters.end(), w);
            if (it == waiters.end()) return;
            waiters.erase(it);
            Writer m(kMissing);
            auto miss = missing(*w);
            m.u32(uint32_t(miss.size()));
            for (auto& k : miss) m.str(k);
            w->session->reply(m.frame());
          });
          return;
        }
        default:
          return s->reply(Writer(kErr).str("unknown request " + std::to_string(op)).frame(), true);
      }
    } catch (const std::exception& e) {
      s->reply(Writer(kErr).str(std::string("malformed request: ") + e.what()).frame(), true);
    }
  }

  std::vector<std::string> missing(const Waiter& w) const {
    std::vector<std::string> m;
    for (auto& k : w.keys)
      if (!store.count(k)) m.push_back(k);
    return m;
  }

  void wake_waiters() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      auto w = *it;
      if (!missing(*w).empty()) {
        ++it;
        continue;
      }
      it = waiters.erase(it);
      w->timer->cancel();
      w->session->reply(Writer(kOk).frame());
    }
  }

  std::string host;
  std::string token;
  uint16_t port = 0;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::map<std::string, std::string> store;
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

[[noreturn]] void unexpected_reply(Reader& r, uint8_t op, const std::string& where) {
  std::string msg = op == kErr ? r.str() : "unexpected reply " + std::to_string(op);
  throw UserError("rendezvous: the master at " + where + " answered: " + msg);
}
}  // namespace

RendezvousClient::RendezvousClient(const std::string& host, uint16_t port, const std::string& token,
                                   std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>(host, port)) {
  impl_->connect(connect_timeout);
  std::string reply;
  try {
    reply = impl_->transact(Writer(kAuth).str(token).frame(), kReplyLimit);
  } catch (const UserError&) {
    throw UserError("rendezvous: the master at " + impl_->where() +
                    " closed the connection while checking the job token; every rank must "
                    "use the job's token");
  }
  Reader r(reply);
  uint8_t op = r.op();
  if (op == kErr)
    throw UserError("rendezvous: the master at " + impl_->where() + " refused this process: " +
                    r.str() + "; every rank must use the job's token (the one the launcher made)");
  if (op != kOk) unexpected_reply(r, op, impl_->where());
}

RendezvousClient::~RendezvousClient() = default;

std::string RendezvousClient::address() const {
  return impl_->where();
}

void RendezvousClient::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = impl_->transact(Writer(kSet).str(key).str(value).frame(), kReplyLimit);
  Reader r(reply);
  uint8_t op = r.op();
  if (op != kOk) unexpected_reply(r, op, impl_->where());
}

std::optional<std::string> RendezvousClient::try_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::string reply = impl_->transact(Writer(kGet).str(key).frame(), kReplyLimit);
  Reader r(reply);
  uint8_t op = r.op();
  if (op == kNotFound) return std::nullopt;
  if (op != kValue) unexpected_reply(r, op, impl_->where());
  return r.str();
}

void RendezvousClient::wait(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) {
  std::vector<std::string> missing;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    Writer w(kWait);
    w.i64(timeout.count()).u32(uint32_t(keys.size()));
    for (auto& k : keys) w.str(k);
    std::string reply = impl_->transact(w.frame(), timeout + kReplyLimit);
    Reader r(reply);
    uint8_t op = r.op();
    if (op == kOk) return;
    if (op != kMissing) unexpected_reply(r, op, impl_->where());
    uint32_t n = r.u32();
    for (uint32_t i = 0; i < n; ++i) missing.push_back(r.str());
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
  std::string reply = impl_->transact(Writer(kAdd).str(key).i64(delta).frame(), kReplyLimit);
  Reader r(reply);
  uint8_t op = r.op();
  if (op != kInt) unexpected_reply(r, op, impl_->where());
  return r.i64();
}

}  // namespace triad
