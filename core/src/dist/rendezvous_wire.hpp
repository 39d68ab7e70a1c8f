// The rendezvous store's protocol without the sockets: frames, the messages in them and the
// key-value store they act on. rendezvous.cpp carries these over TCP; the fuzz target
// tests/fuzz/fuzz_rendezvous.cpp feeds them arbitrary bytes.
//
// Wire format: every message is a frame [u32 length][payload]; a payload is an opcode byte
// followed by fields (u32-length-prefixed strings, i64s, all little-endian). The protocol is
// strictly request/reply per connection, and the first request must be AUTH with the job token.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "triad/core/error.hpp"

namespace triad::rendezvous_wire {

enum Op : uint8_t {
  kAuth = 1,  // token
  kSet = 2,   // key, value
  kGet = 3,   // key
  kWait = 4,  // timeout ms (i64), count (u32), keys
  kAdd = 5,   // key, delta (i64)
  // replies
  kOk = 100,
  kValue = 101,     // value
  kNotFound = 102,  //
  kMissing = 103,   // count (u32), keys
  kInt = 104,       // value (i64)
  kErr = 105,       // message
};

constexpr uint32_t kMaxFrame = 256u << 20;  // a value is at most a few KiB in practice
constexpr uint32_t kMaxAuthFrame = 4096;    // before the token, accept only a small frame
// The longest WAIT the server arms a timer for (a longer one is cut to this): 30 days.
constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24 * 30);

// A payload that is not a well-formed message (truncated, or a count past its end).
class ProtocolError : public UserError {
 public:
  using UserError::UserError;
};

// Builds one frame: the opcode, then fields; frame() fills in the length prefix.
class Writer {
 public:
  explicit Writer(uint8_t op) { buf_.assign(4, '\0'), buf_.push_back(char(op)); }
  Writer& str(std::string_view s);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  std::string frame();

 private:
  std::string buf_;
};

// Reads the fields of one payload in order; throws ProtocolError past its end.
class Reader {
 public:
  explicit Reader(std::string_view payload) : p_(payload) {}
  uint8_t op() { return uint8_t(take(1)[0]); }
  uint32_t u32();
  int64_t i64();
  std::string str();
  size_t left() const { return p_.size() - pos_; }

 private:
  std::string_view take(size_t n);
  std::string_view p_;
  size_t pos_ = 0;
};

// The payload length in a frame's 4-byte header.
uint32_t frame_length(const std::array<char, 4>& header);

// A request as the server reads it. An unknown opcode parses (the server answers it with an
// error); a truncated request throws ProtocolError. Bytes after the last field are ignored.
struct Request {
  Request(uint8_t o = 0, std::string k = {}, std::string v = {}, int64_t n = 0,
          std::vector<std::string> ks = {})
      : op(o), key(std::move(k)), value(std::move(v)), number(n), keys(std::move(ks)) {}
  uint8_t op;
  std::string key;                // AUTH: the token; SET, GET, ADD: the key
  std::string value;              // SET
  int64_t number;                 // ADD: the delta; WAIT: the timeout in ms
  std::vector<std::string> keys;  // WAIT
  bool operator==(const Request&) const = default;
};
Request parse_request(std::string_view payload);
std::string encode_request(const Request& r);  // a whole frame

// A reply as the client reads it, with the same rules.
struct Reply {
  Reply(uint8_t o = 0, std::string t = {}, int64_t n = 0, std::vector<std::string> ks = {})
      : op(o), text(std::move(t)), number(n), keys(std::move(ks)) {}
  uint8_t op;
  std::string text;               // VALUE: the value; ERR: the message
  int64_t number;                 // INT
  std::vector<std::string> keys;  // MISSING
  bool operator==(const Reply&) const = default;
};
Reply parse_reply(std::string_view payload);
std::string encode_reply(const Reply& r);  // a whole frame

// How long the server waits for a WAIT request's keys: its timeout, within [0, kMaxWait].
std::chrono::milliseconds wait_duration(int64_t timeout_ms);

// The server's key-value store: answers SET, GET and ADD at once; AUTH and WAIT are the
// connection's business (the token, the timers).
class Store {
 public:
  // SET: OK; GET: VALUE or NOT_FOUND; ADD: INT, or ERR when the key holds something other than
  // a decimal integer or the sum would overflow. Any other request: ERR.
  Reply apply(const Request& r);
  // The keys of `keys` not in the store, in order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  size_t size() const { return kv_.size(); }

 private:
  std::map<std::string, std::string, std::less<>> kv_;
};

// The decimal integer s holds (optional '-', digits, nothing else, within int64); false if not.
bool parse_int64(std::string_view s, int64_t& out);

}  // namespace triad::rendezvous_wire
