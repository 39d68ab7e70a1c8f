// The rendezvous protocol's messages and store (rendezvous_wire.hpp), and the message helper
// describe_missing_ranks (rendezvous.hpp): no sockets here.
#include "rendezvous_wire.hpp"

#include <algorithm>
#include <charconv>
#include <set>

#include "triad/core/dist/rendezvous.hpp"

namespace triad {

namespace rendezvous_wire {

Writer& Writer::str(std::string_view s) {
  u32(uint32_t(s.size()));
  buf_ += s;
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(char((v >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  uint64_t u = uint64_t(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(char((u >> (8 * i)) & 0xff));
  return *this;
}

std::string Writer::frame() {
  uint32_t n = uint32_t(buf_.size() - 4);
  for (int i = 0; i < 4; ++i) buf_[i] = char((n >> (8 * i)) & 0xff);
  return std::move(buf_);
}

uint32_t Reader::u32() {
  auto b = take(4);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(b[i])) << (8 * i);
  return v;
}

int64_t Reader::i64() {
  auto b = take(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(b[i])) << (8 * i);
  return int64_t(v);
}

std::string Reader::str() {
  uint32_t n = u32();
  return std::string(take(n));
}

std::string_view Reader::take(size_t n) {
  if (n > left()) throw ProtocolError("truncated rendezvous message");
  std::string_view v = p_.substr(pos_, n);
  pos_ += n;
  return v;
}

uint32_t frame_length(const std::array<char, 4>& h) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(uint8_t(h[i])) << (8 * i);
  return n;
}

namespace {

// A count of strings followed by the strings. Each takes at least its 4-byte length, so a
// count the payload cannot hold is refused before anything is allocated for it.
std::vector<std::string> read_strings(Reader& r) {
  const uint32_t n = r.u32();
  if (n > r.left() / 4) throw ProtocolError("truncated rendezvous message (a count past its end)");
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(r.str());
  return out;
}

void write_strings(Writer& w, const std::vector<std::string>& v) {
  w.u32(uint32_t(v.size()));
  for (const auto& s : v) w.str(s);
}

}  // namespace

Request parse_request(std::string_view payload) {
  Reader r(payload);
  Request q;
  q.op = r.op();
  switch (q.op) {
    case kAuth:
    case kGet:
      q.key = r.str();
      break;
    case kSet:
      q.key = r.str();
      q.value = r.str();
      break;
    case kAdd:
      q.key = r.str();
      q.number = r.i64();
      break;
    case kWait:
      q.number = r.i64();
      q.keys = read_strings(r);
      break;
    default:
      break;
  }
  return q;
}

std::string encode_request(const Request& q) {
  Writer w(q.op);
  switch (q.op) {
    case kAuth:
    case kGet:
      w.str(q.key);
      break;
    case kSet:
      w.str(q.key).str(q.value);
      break;
    case kAdd:
      w.str(q.key).i64(q.number);
      break;
    case kWait:
      w.i64(q.number);
      write_strings(w, q.keys);
      break;
    default:
      break;
  }
  return w.frame();
}

Reply parse_reply(std::string_view payload) {
  Reader r(payload);
  Reply a;
  a.op = r.op();
  switch (a.op) {
    case kValue:
    case kErr:
      a.text = r.str();
      break;
    case kInt:
      a.number = r.i64();
      break;
    case kMissing:
      a.keys = read_strings(r);
      break;
    default:
      break;
  }
  return a;
}

std::string encode_reply(const Reply& a) {
  Writer w(a.op);
  switch (a.op) {
    case kValue:
    case kErr:
      w.str(a.text);
      break;
    case kInt:
      w.i64(a.number);
      break;
    case kMissing:
      write_strings(w, a.keys);
      break;
    default:
      break;
  }
  return w.frame();
}

std::chrono::milliseconds wait_duration(int64_t timeout_ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, kMaxWait.count()));
}

bool parse_int64(std::string_view s, int64_t& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return !s.empty() && ec == std::errc() && p == end;
}

Reply Store::apply(const Request& q) {
  switch (q.op) {
    case kSet:
      kv_[q.key] = q.value;
      return {kOk};
    case kGet: {
      auto it = kv_.find(q.key);
      if (it == kv_.end()) return {kNotFound};
      return {kValue, it->second};
    }
    case kAdd: {
      int64_t v = 0;
      auto it = kv_.find(q.key);
      if (it != kv_.end() && !parse_int64(it->second, v))
        return {kErr, "add: key '" + q.key + "' holds a non-integer value"};
      if (__builtin_add_overflow(v, q.number, &v))
        return {kErr, "add: key '" + q.key + "' would overflow a 64-bit integer"};
      kv_[q.key] = std::to_string(v);
      return {kInt, {}, v};
    }
    default:
      return {kErr, "unknown request " + std::to_string(q.op)};
  }
}

std::vector<std::string> Store::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> m;
  for (const auto& k : keys)
    if (!kv_.count(k)) m.push_back(k);
  return m;
}

}  // namespace rendezvous_wire

std::string describe_missing_ranks(const std::vector<std::string>& keys) {
  // Keys ending in "/rank/<digits>"; a number too large for a rank is not named.
  static constexpr std::string_view kMark = "/rank/";
  std::set<long> ranks;
  for (const auto& k : keys) {
    const std::string_view key(k);
    const size_t last = key.find_last_not_of("0123456789");
    const size_t digits = last == std::string_view::npos ? key.size() : key.size() - last - 1;
    if (digits == 0 || key.size() < kMark.size() + digits ||
        key.substr(key.size() - digits - kMark.size(), kMark.size()) != kMark)
      continue;
    long r = 0;
    const char* end = key.data() + key.size();
    auto [p, ec] = std::from_chars(end - digits, end, r);
    if (ec == std::errc() && p == end) ranks.insert(r);
  }
  if (ranks.empty()) return "";
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  bool first = true;
  for (long r : ranks) s += (first ? "" : ", ") + std::to_string(r), first = false;
  return s;
}

}  // namespace triad
