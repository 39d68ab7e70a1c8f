// The rendezvous protocol (core/src/dist/rendezvous_wire.cpp): what the master reads from a rank's
// connection and what the rank reads back, sockets apart.
//
// Input: the bytes of one connection, as frames [u32 length][payload]. A length of 0 or past
// kMaxFrame ends the input (the master closes such a connection); a short last frame is read as
// far as it goes. Checks, for every payload:
//  - read as a request and as a reply it parses or throws ProtocolError (a UserError); what
//    parses encodes to a frame whose payload begins the payload read and parses back the same;
//  - a request applied to the store (one per input) gets a reply that encodes and parses back to
//    itself: SET then GET gives the value back, ADD's sum is what the key then holds, in decimal;
//  - a WAIT's timer lies in [0, kMaxWait] and its missing keys are among its keys;
//  - describe_missing_ranks names ranks for the keys of a WAIT or a MISSING reply, or nothing.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dist/rendezvous_wire.hpp"
#include "fuzz_common.hpp"
#include "triad/core/dist/rendezvous.hpp"

namespace {

namespace wire = triad::rendezvous_wire;
using triad::fuzz::check;

// The payload of a frame Writer made (the length prefix checked and dropped).
std::string payload_of(const std::string& frame) {
  check(frame.size() >= 5, "an encoded frame has no opcode");
  std::array<char, 4> h{};
  std::memcpy(h.data(), frame.data(), 4);
  check(wire::frame_length(h) == frame.size() - 4, "an encoded frame's length prefix is wrong");
  return frame.substr(4);
}

void check_ranks(const std::vector<std::string>& keys) {
  const std::string r = triad::describe_missing_ranks(keys);
  check(r.empty() || r.rfind("rank ", 0) == 0 || r.rfind("ranks ", 0) == 0,
        "describe_missing_ranks wrote '" + r + "'");
}

void request(std::string_view payload, wire::Store& store) {
  std::optional<wire::Request> q;
  triad::fuzz::expect_success_or_user_error([&] { q = wire::parse_request(payload); });
  if (!q) return;
  const std::string again = payload_of(wire::encode_request(*q));
  check(payload.substr(0, again.size()) == again, "an encoded request differs from the one read");
  check(wire::parse_request(again) == *q, "a request does not parse back to itself");

  if (q->op == wire::kWait) {
    const auto t = wire::wait_duration(q->number);
    check(t.count() >= 0 && t <= wire::kMaxWait, "a WAIT's timer is out of range");
    for (const auto& k : store.missing(q->keys))
      check(std::find(q->keys.begin(), q->keys.end(), k) != q->keys.end(),
            "a missing key that was not asked for");
    check_ranks(q->keys);
    return;
  }
  const wire::Reply a = store.apply(*q);
  const std::string reply = payload_of(wire::encode_reply(a));
  check(wire::parse_reply(reply) == a, "a reply does not parse back to itself");
  if (q->op == wire::kSet) {
    check(a.op == wire::kOk, "SET was not answered OK");
    const wire::Reply got = store.apply(wire::Request(wire::kGet, q->key));
    check(got.op == wire::kValue && got.text == q->value, "GET after SET differs");
  } else if (q->op == wire::kAdd && a.op == wire::kInt) {
    const wire::Reply got = store.apply(wire::Request(wire::kGet, q->key));
    check(got.op == wire::kValue && got.text == std::to_string(a.number),
          "the key does not hold ADD's sum");
  } else if (q->op == wire::kAdd) {
    check(a.op == wire::kErr, "ADD answered neither INT nor ERR");
  }
}

void reply(std::string_view payload) {
  std::optional<wire::Reply> a;
  triad::fuzz::expect_success_or_user_error([&] { a = wire::parse_reply(payload); });
  if (!a) return;
  const std::string again = payload_of(wire::encode_reply(*a));
  check(payload.substr(0, again.size()) == again, "an encoded reply differs from the one read");
  check(wire::parse_reply(again) == *a, "a reply does not parse back to itself");
  check_ranks(a->keys);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  wire::Store store;
  for (int frames = 0; in.size() >= 4 && frames < 64; ++frames) {
    std::array<char, 4> h{};
    std::memcpy(h.data(), in.data(), 4);
    const uint32_t n = wire::frame_length(h);
    if (n == 0 || n > wire::kMaxFrame) break;
    in.remove_prefix(4);
    const std::string_view payload = in.substr(0, n);
    in.remove_prefix(payload.size());
    request(payload, store);
    reply(payload);
  }
  return 0;
}
