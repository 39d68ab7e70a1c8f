// Transport conformance: the parent forks one process per rank; each rank runs every case
// and reports "P|name|detail" lines through its own pipe; the parent merges the ranks'
// verdicts (a case passes when every rank passed it) and kills ranks that hang.
// The cases run once per kind of memory the plugin declares: on host buffers, and on CUDA
// buffers from the core's CUDA device (filled and checked on the host, moved with
// to_device / to_host) where a GPU per rank is visible. The parent never touches CUDA.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <vector>

#include "triad/core/conformance/transport_conformance.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/sdk/half.hpp"

#include "ranks.hpp"

namespace triad::conformance {

namespace {

using ranks::Abort;
using ranks::Child;
using ranks::Clock;
using ranks::collect;
using ranks::spawn;

// ---------------------------------------------------------------------------------------
// Values: integers in [0, 60], so sums over up to 4 ranks stay exact even in bf16 (8 bits).

float value(int rank, uint64_t i) {
  return float((i * 7 + uint64_t(rank) * 13 + 1) % 61);
}
constexpr float kSentinel = -7.0f;

struct DType {
  const char* name;
  DLDataType dl;
  uint32_t bit;
  size_t size;
};
const DType kDTypes[] = {{"fp32", {kDLFloat, 32, 1}, TRIAD_DTYPE_BIT_FP32, 4},
                         {"bf16", {kDLBfloat, 16, 1}, TRIAD_DTYPE_BIT_BF16, 2},
                         {"fp16", {kDLFloat, 16, 1}, TRIAD_DTYPE_BIT_FP16, 2}};
// Integers, which only move (no reduction accepts them): values stay in [0, 255].
const DType kMoveOnly[] = {{"int32", {kDLInt, 32, 1}, 0, 4}, {"uint8", {kDLUInt, 8, 1}, 0, 1}};

void put(const DType& t, void* buf, uint64_t i, float v) {
  if (t.dl.code == kDLInt) {
    static_cast<int32_t*>(buf)[i] = int32_t(v);
  } else if (t.dl.code == kDLUInt) {
    static_cast<uint8_t*>(buf)[i] = uint8_t(v);
  } else if (t.bit == TRIAD_DTYPE_BIT_FP32) {
    static_cast<float*>(buf)[i] = v;
  } else if (t.bit == TRIAD_DTYPE_BIT_BF16) {
    static_cast<uint16_t*>(buf)[i] = sdk::float_to_bf16(v);
  } else {
    static_cast<uint16_t*>(buf)[i] = sdk::float_to_fp16(v);
  }
}

float get(const DType& t, const void* buf, uint64_t i) {
  if (t.dl.code == kDLInt) return float(static_cast<const int32_t*>(buf)[i]);
  if (t.dl.code == kDLUInt) return float(static_cast<const uint8_t*>(buf)[i]);
  if (t.bit == TRIAD_DTYPE_BIT_FP32) return static_cast<const float*>(buf)[i];
  if (t.bit == TRIAD_DTYPE_BIT_BF16)
    return sdk::bf16_to_float(static_cast<const uint16_t*>(buf)[i]);
  return sdk::fp16_to_float(static_cast<const uint16_t*>(buf)[i]);
}

// A buffer the transport reads or writes: host memory, or memory of `dev` (a CUDA device)
// with a host copy. set() writes the host copy, data() uploads it first when it changed,
// and compare() downloads before reading.
struct Buf {
  Buf(const DType& t, uint64_t count, float fill, Device* dev = nullptr)
      : t_(t), bytes_(std::max<size_t>(1, count * t.size)), dev_(dev) {
    host_.resize(bytes_);
    for (uint64_t i = 0; i < count; ++i) put(t, host_.data(), i, fill);
    if (dev_) mem_ = Buffer<char>(*dev_, bytes_, "transport conformance buffer");
  }
  void* data() {
    if (!dev_) return host_.data();
    if (dirty_) dev_->to_device(mem_.data(), host_.data(), bytes_);
    dirty_ = false;
    return mem_.data();
  }
  char* at(uint64_t elem) { return static_cast<char*>(data()) + elem * t_.size; }
  float operator[](uint64_t i) const { return get(t_, host_.data(), i); }
  void set(uint64_t i, float v) {
    put(t_, host_.data(), i, v);
    dirty_ = true;
  }
  // The device's bytes into the host copy (after an operation wrote them).
  void fetch() const {
    if (dev_) dev_->to_host(host_.data(), mem_.data(), bytes_);
  }

 private:
  const DType& t_;
  size_t bytes_;
  Device* dev_;
  mutable std::vector<char> host_;
  Buffer<char> mem_;
  bool dirty_ = true;
};

std::string join_counts(const std::vector<uint64_t>& c) {
  std::string s;
  for (size_t i = 0; i < c.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(c[i]);
  }
  return s;
}

// First mismatch of got[from + i] against want(i) for i < count, or "".
template <class Want>
std::string compare(const Buf& got, uint64_t count, Want want, const std::string& what,
                    uint64_t from = 0) {
  got.fetch();
  for (uint64_t i = 0; i < count; ++i) {
    float w = want(i), g = got[from + i];
    if (g != w)
      return what + ": element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " +
             std::to_string(w);
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// One rank.

class Rank {
 public:
  // dev: the CUDA device whose memory every case uses, or null for host memory.
  Rank(int fd, int world_rank, int world_size, const std::string& plugin_name,
       const TransportSuiteOptions& o, Device* dev)
      : fd_(fd),
        wr_(world_rank),
        wn_(world_size),
        o_(o),
        timeout_(o.op_timeout_ms),
        dev_(dev),
        dl_(dev ? dev->dl_device() : dl_cpu()),
        mem_bit_(dev ? TRIAD_MEM_BIT_CUDA : TRIAD_MEM_BIT_HOST) {
    prefix_ = plugin_name + " n=" + std::to_string(world_size) + (dev ? " cuda " : " ");
    counts_ = {0, 1, 7, 1023};
  }

  void run(Transport& t, RendezvousClient& store) {
    caps_ = t.capabilities();
    transport_ = &t;
    Communicator world = t.init_world(wr_, wn_, store, "conformance/", timeout_);
    report(Outcome::kPass, "init_world", "");
    run_comm("world", world);
    if (!has(TRIAD_TRANSPORT_OP_SPLIT)) {
      skip("split", "the plugin declares no split");
    } else {
      Communicator sub;
      expect_ok("split order", [&] {
        sub = world.split(wr_ % 2, -wr_);
        int size = 0, rank = 0;
        for (int r = 0; r < wn_; ++r)
          if (r % 2 == wr_ % 2) {
            ++size;
            if (r > wr_) ++rank;  // key -r: higher world ranks come first
          }
        if (sub.size() != size || sub.rank() != rank)
          return "rank " + std::to_string(sub.rank()) + " of " + std::to_string(sub.size()) +
                 ", expected rank " + std::to_string(rank) + " of " + std::to_string(size);
        return std::string();
      });
      run_comm("split", sub);
      concurrent(world, sub);
      split_none(world);
      timeout_case(world);
      unreceived_send_case(world);
    }
    invalid_args(world);
    if (has(TRIAD_TRANSPORT_OP_BARRIER)) world.barrier().wait(timeout_);
  }

 private:
  bool has(uint32_t op) const { return (caps_.ops & op) != 0; }
  bool has_dtype(const DType& d) const { return (caps_.dtypes & d.bit) != 0; }
  bool has_redop(int op) const { return (caps_.reduce_ops & (1u << op)) != 0; }
  // The plugin can touch the memory this rank's cases use.
  bool mem_ok() const { return (caps_.memory & mem_bit_) != 0; }

  void report(Outcome o, const std::string& name, std::string detail) {
    ranks::report(fd_, o, prefix_ + name, std::move(detail));
  }
  void skip(const std::string& name, const std::string& why) { report(Outcome::kSkip, name, why); }

  // Runs one case; a TransportError that leaves the communicators unusable aborts the rank.
  template <class F>
  void expect_ok(const std::string& name, F f, const std::string& pass_detail = "") {
    try {
      std::string err = f();
      report(err.empty() ? Outcome::kPass : Outcome::kFail, name, err.empty() ? pass_detail : err);
    } catch (const TransportError& e) {
      report(Outcome::kFail, name,
             std::string(e.unsupported() ? "declared in capabilities but unsupported: " : "") +
                 e.what());
      throw Abort{};
    } catch (const std::exception& e) {
      report(Outcome::kFail, name, e.what());
      throw Abort{};
    }
  }

  std::vector<uint64_t> counts_for(const DType& d) const {
    std::vector<uint64_t> c = counts_;
    c.push_back((uint64_t(1) << 20) / d.size + 1);  // 1 MiB and one element more
    if (!o_.quick) c.push_back((uint64_t(64) << 20) / d.size + 3);
    return c;
  }

  // One case that runs `one(count)` for every count and stops at the first failure; it is
  // skipped when the plugin lacks what it needs.
  template <class F>
  void per_count(const std::string& name, bool supported, const std::vector<uint64_t>& counts,
                 const std::string& detail, F one) {
    if (!supported) return skip(name, "not in the plugin's capabilities");
    expect_ok(
        name,
        [&] {
          for (uint64_t n : counts)
            if (std::string e = one(n); !e.empty()) return e;
          return std::string();
        },
        detail);
  }

  void run_comm(const std::string& label, Communicator& c) {
    const int m = c.size(), r = c.rank();
    for (const DType& d : kDTypes) {
      std::string dn = std::string(" ") + d.name;
      auto counts = counts_for(d);
      std::string detail = "counts " + join_counts(counts);
      bool dt_ok = mem_ok() && has_dtype(d);
      auto count_text = [](uint64_t n) { return "count " + std::to_string(n); };
      for (int op : {TRIAD_REDUCE_SUM, TRIAD_REDUCE_MAX}) {
        per_count(label + " all_reduce(" + (op == TRIAD_REDUCE_SUM ? "sum" : "max") + ")" + dn,
                  has(TRIAD_TRANSPORT_OP_ALL_REDUCE) && dt_ok && has_redop(op), counts,
                  detail + ", in place", [&](uint64_t n) {
                    auto want = [&](uint64_t i) {
                      float acc = value(0, i);
                      for (int k = 1; k < m; ++k)
                        acc =
                            op == TRIAD_REDUCE_SUM ? acc + value(k, i) : std::max(acc, value(k, i));
                      return acc;
                    };
                    Buf s(d, n, 0, dev_), out(d, n, kSentinel, dev_);
                    for (uint64_t i = 0; i < n; ++i) s.set(i, value(r, i));
                    c.all_reduce(s.data(), out.data(), n, d.dl, op, dl_).wait(timeout_);
                    auto e = compare(out, n, want, count_text(n));
                    if (e.empty() && (n == 7 || n == counts.back())) {  // in place
                      c.all_reduce(s.data(), s.data(), n, d.dl, op, dl_).wait(timeout_);
                      e = compare(s, n, want, "in place, " + count_text(n));
                    }
                    return e;
                  });
      }

      per_count(
          label + " reduce_scatter(sum)" + dn, has(TRIAD_TRANSPORT_OP_REDUCE_SCATTER) && dt_ok,
          counts, detail + ", in place", [&](uint64_t n) {
            uint64_t off = 0, len = 0;
            triad_transport_block(n, m, r, &off, &len);
            Buf s(d, n, 0, dev_), out(d, len, kSentinel, dev_);
            for (uint64_t i = 0; i < n; ++i) s.set(i, value(r, i));
            auto want = [&](uint64_t i) {
              float acc = 0;
              for (int k = 0; k < m; ++k) acc += value(k, off + i);
              return acc;
            };
            const std::string block = " (block at " + std::to_string(off) + ")";
            c.reduce_scatter(s.data(), out.data(), n, d.dl, TRIAD_REDUCE_SUM, dl_).wait(timeout_);
            auto e = compare(out, len, want, count_text(n) + block);
            if (!e.empty() || !(n == 7 || n == counts.back())) return e;
            // In place (ZeRO-1's gradients): recv is send + offset(rank).
            c.reduce_scatter(s.data(), s.at(off), n, d.dl, TRIAD_REDUCE_SUM, dl_).wait(timeout_);
            return compare(s, len, want, "in place, " + count_text(n) + block, off);
          });

      per_count(label + " all_gather" + dn, has(TRIAD_TRANSPORT_OP_ALL_GATHER) && mem_ok(), counts,
                detail + ", in place", [&](uint64_t n) {
                  uint64_t off = 0, len = 0;
                  triad_transport_block(n, m, r, &off, &len);
                  std::vector<int> owner(n);
                  for (int k = 0; k < m; ++k) {
                    uint64_t o2 = 0, l2 = 0;
                    triad_transport_block(n, m, k, &o2, &l2);
                    for (uint64_t i = 0; i < l2; ++i) owner[o2 + i] = k;
                  }
                  auto want = [&](uint64_t i) { return value(owner[i], i); };
                  Buf s(d, len, 0, dev_), out(d, n, kSentinel, dev_);
                  for (uint64_t i = 0; i < len; ++i) s.set(i, value(r, off + i));
                  c.all_gather(s.data(), out.data(), n, d.dl, dl_).wait(timeout_);
                  auto e = compare(out, n, want, count_text(n));
                  if (!e.empty()) return e;
                  Buf in(d, n, kSentinel, dev_);  // in place: send is recv + offset(rank)
                  for (uint64_t i = 0; i < len; ++i) in.set(off + i, value(r, off + i));
                  c.all_gather(in.at(off), in.data(), n, d.dl, dl_).wait(timeout_);
                  return compare(in, n, want, "in place, " + count_text(n));
                });

      const int root = m - 1;  // not 0, to catch a plugin that assumes it
      per_count(label + " broadcast" + dn, has(TRIAD_TRANSPORT_OP_BROADCAST) && mem_ok(), counts,
                detail + ", root = last rank", [&](uint64_t n) {
                  Buf b(d, n, kSentinel, dev_);
                  if (r == root)
                    for (uint64_t i = 0; i < n; ++i) b.set(i, value(root, i));
                  c.broadcast(b.data(), n, d.dl, root, dl_).wait(timeout_);
                  return compare(
                      b, n, [&](uint64_t i) { return value(root, i); }, count_text(n));
                });

      const int right = (r + 1) % m, left = (r + m - 1) % m;
      per_count(label + " send/recv ring" + dn, has(TRIAD_TRANSPORT_OP_SEND_RECV) && mem_ok(),
                counts, detail, [&](uint64_t n) {
                  Buf s(d, n, 0, dev_), out(d, n, kSentinel, dev_);
                  for (uint64_t i = 0; i < n; ++i) s.set(i, value(r, i));
                  auto rq = c.recv(out.data(), n, d.dl, left, 0, dl_);
                  auto sq = c.send(s.data(), n, d.dl, right, 0, dl_);
                  transport_->progress();  // moves both on; completes nothing by itself
                  sq.wait(timeout_);
                  rq.wait(timeout_);
                  return compare(
                      out, n, [&](uint64_t i) { return value(left, i); }, count_text(n));
                });

      std::string name = label + " send/recv tag matching" + dn;
      if (!has(TRIAD_TRANSPORT_OP_SEND_RECV) || !has(TRIAD_TRANSPORT_OP_TAGS) || !mem_ok()) {
        skip(name, "not in the plugin's capabilities");
      } else {
        expect_ok(name, [&] {
          // Matching is by tag: receive tag 2 before tag 1, with different lengths.
          Buf a(d, 5, 0, dev_), b(d, 3, 0, dev_), ra(d, 5, kSentinel, dev_),
              rb(d, 3, kSentinel, dev_);
          for (uint64_t i = 0; i < 5; ++i) a.set(i, value(r, i));
          for (uint64_t i = 0; i < 3; ++i) b.set(i, value(r, i + 10));
          auto s1 = c.send(a.data(), 5, d.dl, right, 1, dl_);
          auto s2 = c.send(b.data(), 3, d.dl, right, 2, dl_);
          auto r2 = c.recv(rb.data(), 3, d.dl, left, 2, dl_);
          auto r1 = c.recv(ra.data(), 5, d.dl, left, 1, dl_);
          r2.wait(timeout_);
          r1.wait(timeout_);
          s1.wait(timeout_);
          s2.wait(timeout_);
          auto e = compare(
              ra, 5, [&](uint64_t i) { return value(left, i); }, "tag 1");
          if (e.empty())
            e = compare(
                rb, 3, [&](uint64_t i) { return value(left, i + 10); }, "tag 2");
          return e;
        });
      }
    }
    all_to_all_cases(label, c);
    if (!has(TRIAD_TRANSPORT_OP_BARRIER)) {
      skip(label + " barrier", "not in the plugin's capabilities");
    } else {
      expect_ok(label + " barrier", [&] {
        for (int i = 0; i < 3; ++i) c.barrier().wait(timeout_);
        return std::string();
      });
    }
  }

  // all_to_all on fp32, int32 and uint8: block j of rank k's send holds values of (k, j), so a
  // block that lands at the wrong place or from the wrong rank shows. progress() is called
  // between posting and waiting, as the engine does while it computes.
  void all_to_all_cases(const std::string& label, Communicator& c) {
    const int m = c.size(), r = c.rank();
    auto block_value = [](int from, int to, uint64_t i) {
      return float((uint64_t(from) * 83 + uint64_t(to) * 29 + i * 7 + 1) % 251);
    };
    for (const DType* d : {&kDTypes[0], &kMoveOnly[0], &kMoveOnly[1]}) {
      const std::string name = label + " all_to_all " + d->name;
      if (!has(TRIAD_TRANSPORT_OP_ALL_TO_ALL)) {
        skip(name, "not offered: the plugin's capabilities lack TRIAD_TRANSPORT_OP_ALL_TO_ALL");
        continue;
      }
      std::vector<uint64_t> counts = counts_;
      counts.push_back((uint64_t(256) << 10) / d->size + 1);  // 256 KiB per block, and one more
      per_count(name, mem_ok(), counts, "counts per block " + join_counts(counts), [&](uint64_t n) {
        Buf s(*d, n * uint64_t(m), 0, dev_), out(*d, n * uint64_t(m), kSentinel, dev_);
        for (int j = 0; j < m; ++j)
          for (uint64_t i = 0; i < n; ++i) s.set(uint64_t(j) * n + i, block_value(r, j, i));
        auto req = c.all_to_all(s.data(), out.data(), n, d->dl, dl_);
        for (int k = 0; k < 3; ++k) transport_->progress();
        req.wait(timeout_);
        return compare(
            out, n * uint64_t(m),
            [&](uint64_t i) { return block_value(int(i / std::max<uint64_t>(n, 1)), r, i % n); },
            "count " + std::to_string(n) + " per block");
      });
    }
  }

  // Collectives in flight on two communicators at once, waited in reverse order.
  void concurrent(Communicator& world, Communicator& sub) {
    const std::string name = "concurrent world+split all_reduce fp32";
    if (!has(TRIAD_TRANSPORT_OP_ALL_REDUCE)) return skip(name, "no all_reduce");
    expect_ok(name, [&] {
      const DType& d = kDTypes[0];
      const uint64_t n1 = 1023, n2 = (uint64_t(1) << 18) + 5;
      Buf s1(d, n1, 0, dev_), o1(d, n1, kSentinel, dev_), s2(d, n2, 0, dev_),
          o2(d, n2, kSentinel, dev_), s3(d, n1, 0, dev_), o3(d, n1, kSentinel, dev_);
      for (uint64_t i = 0; i < n1; ++i)
        s1.set(i, value(world.rank(), i)), s3.set(i, value(world.rank(), i + 1));
      for (uint64_t i = 0; i < n2; ++i) s2.set(i, value(sub.rank(), i));
      auto a = world.all_reduce(s1.data(), o1.data(), n1, d.dl, TRIAD_REDUCE_SUM, dl_);
      auto b = sub.all_reduce(s2.data(), o2.data(), n2, d.dl, TRIAD_REDUCE_SUM, dl_);
      auto c = world.all_reduce(s3.data(), o3.data(), n1, d.dl, TRIAD_REDUCE_SUM, dl_);
      transport_->progress();
      c.wait(timeout_);
      b.wait(timeout_);
      a.wait(timeout_);
      auto sum = [](int m, uint64_t i) {
        float acc = 0;
        for (int k = 0; k < m; ++k) acc += value(k, i);
        return acc;
      };
      auto e = compare(
          o1, n1, [&](uint64_t i) { return sum(world.size(), i); }, "world, first");
      if (e.empty())
        e = compare(
            o3, n1, [&](uint64_t i) { return sum(world.size(), i + 1); }, "world, second");
      if (e.empty())
        e = compare(
            o2, n2, [&](uint64_t i) { return sum(sub.size(), i); }, "split");
      return e;
    });
  }

  // Rank 0 joins no group; the others form one of size n-1.
  void split_none(Communicator& world) {
    expect_ok("split with color NONE", [&] {
      Communicator c = world.split(wr_ == 0 ? TRIAD_COMM_SPLIT_NONE : 5, wr_);
      if (wr_ == 0)
        return c ? std::string("rank 0 got a communicator for color NONE") : std::string();
      if (!c || c.size() != wn_ - 1 || c.rank() != wr_ - 1)
        return std::string("expected rank ") + std::to_string(wr_ - 1) + " of " +
               std::to_string(wn_ - 1);
      if (!has(TRIAD_TRANSPORT_OP_ALL_REDUCE)) return std::string();
      const DType& d = kDTypes[0];
      Buf s(d, 7, 0, dev_), o(d, 7, kSentinel, dev_);
      for (uint64_t i = 0; i < 7; ++i) s.set(i, value(c.rank(), i));
      c.all_reduce(s.data(), o.data(), 7, d.dl, TRIAD_REDUCE_SUM, dl_).wait(timeout_);
      return compare(
          o, 7,
          [&](uint64_t i) {
            float acc = 0;
            for (int k = 0; k < c.size(); ++k) acc += value(k, i);
            return acc;
          },
          "all_reduce on it");
    });
  }

  // What is wrong with the error of a wait given 300 ms that could not finish: not a timeout, a
  // message that does not name the operation `op`, or far too late; empty when nothing.
  static std::string timeout_problem(const TransportError& e, const char* op,
                                     Clock::time_point t0) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!e.timed_out())
      return std::string("wrong status ") + std::to_string(e.status()) + ": " + e.what();
    if (std::string(e.what()).find(op) == std::string::npos)
      return std::string("message does not name the operation: ") + e.what();
    if (ms > 5000) return "took " + std::to_string(ms) + " ms for a 300 ms timeout";
    return std::string();
  }

  // A wait that cannot finish must time out with a message naming the operation.
  void timeout_case(Communicator& world) {
    const std::string name = "wait times out naming the operation";
    if (!has(TRIAD_TRANSPORT_OP_SEND_RECV) || !mem_ok())
      return skip(name, dev_ ? "no send/recv of CUDA memory" : "no send/recv of host memory");
    if (dev_) return device_timeout_case(world, name);
    expect_ok(name, [&] {
      Communicator dup = world.split(0, wr_);  // abandoned requests spoil only this one
      float buf[4];
      auto req = dup.recv(buf, 4, kDTypes[0].dl, dup.rank(), 0);
      auto t0 = Clock::now();
      try {
        req.wait(std::chrono::milliseconds(300));
      } catch (const TransportError& e) {
        return timeout_problem(e, "recv", t0);
      }
      return std::string("a receive nobody sends completed");
    });
  }

  // A large send that its receiver never matches: the wait ends (completed, where the plugin
  // buffers the message, or timed out naming the send), and the communicator can be dropped
  // with the transfer still in flight, quietly (UCX: a rendezvous send pending at teardown).
  // Each rank sends to its right neighbour, to itself at world 1.
  void unreceived_send_case(Communicator& world) {
    const std::string name = "a send nobody receives can be abandoned";
    if (!has(TRIAD_TRANSPORT_OP_SEND_RECV) || !mem_ok() || dev_)
      return skip(name, dev_ ? "host memory only (on a device the timeout case covers it)"
                             : "no send/recv of host memory");
    expect_ok(name, [&] {
      Communicator dup = world.split(0, wr_);  // abandoned requests spoil only this one
      // Kept to the end of the process: the transport may still reference a send it abandoned.
      static std::vector<float>* const big = new std::vector<float>(size_t(4) << 20, 1.0f);
      const int right = (dup.rank() + 1) % dup.size();
      const auto t0 = Clock::now();
      try {
        dup.send(big->data(), big->size(), kDTypes[0].dl, right, 9)
            .wait(std::chrono::milliseconds(300));
      } catch (const TransportError& e) {
        return timeout_problem(e, "send", t0);
      }
      return std::string();
    });
  }

  // The same on device memory, where a receive from itself that nothing sends may be refused
  // outright (NCCL: "recv to self without a matching send"), and where a receive from a
  // peer must find its connection made, or it would wait in connection setup rather than on
  // the device: so with peers, a send/recv ring goes first and the lone receive is from the
  // left neighbour. A plugin that refuses the lone self-receive at world 1 is skipped.
  void device_timeout_case(Communicator& world, const std::string& name) {
    try {
      Communicator dup = world.split(0, wr_);  // the timeout may abort this one
      const DType& d = kDTypes[0];
      const int m = dup.size(), me = dup.rank();
      const int left = (me + m - 1) % m, right = (me + 1) % m;
      Buf warm(d, 4, 1, dev_), in(d, 4, kSentinel, dev_);
      if (m > 1) {
        auto rq = dup.recv(in.data(), 4, d.dl, left, 0, dl_);
        auto sq = dup.send(warm.data(), 4, d.dl, right, 0, dl_);
        sq.wait(timeout_);
        rq.wait(timeout_);
      }
      TransportRequest req;
      const auto t0 = Clock::now();
      try {
        req = dup.recv(in.data(), 4, d.dl, left, 0, dl_);
        req.wait(std::chrono::milliseconds(300));
      } catch (const TransportError& e) {
        if (!e.timed_out() && m == 1 && e.status() == TRIAD_ERR_INVALID)
          return skip(name, std::string("the plugin refuses a receive from itself that nothing "
                                        "sends, so a wait cannot be left pending at world 1 (") +
                                e.what() + ")");
        const std::string err = timeout_problem(e, "recv", t0);
        return report(err.empty() ? Outcome::kPass : Outcome::kFail, name, err);
      }
      report(Outcome::kFail, name, "a receive nobody sends completed");
    } catch (const std::exception& e) {
      report(Outcome::kFail, name, e.what());
      throw Abort{};
    }
  }

  // Bad arguments give a status, not a crash; nothing is sent, so no rank falls out of step.
  void invalid_args(Communicator& world) {
    expect_ok("bad arguments are refused", [&] {
      Buf b(kDTypes[0], 4, 0, dev_);
      void* buf = b.data();
      std::string e;
      auto refused = [&](const char* what, auto f) {
        try {
          f();
          e += std::string(e.empty() ? "" : "; ") + what + " was accepted";
        } catch (const TransportError& err) {
          if (err.status() == TRIAD_OK) e += std::string(what) + " failed with status 0";
        }
      };
      const int m = world.size();
      if (has(TRIAD_TRANSPORT_OP_BROADCAST))
        refused("broadcast from root = size",
                [&] { world.broadcast(buf, 4, kDTypes[0].dl, m, dl_).wait(timeout_); });
      if (has(TRIAD_TRANSPORT_OP_SEND_RECV))
        refused("send to rank -1",
                [&] { world.send(buf, 4, kDTypes[0].dl, -1, 0, dl_).wait(timeout_); });
      if (has(TRIAD_TRANSPORT_OP_ALL_REDUCE)) {
        refused("all_reduce of int8", [&] {
          world.all_reduce(buf, buf, 4, DLDataType{kDLInt, 8, 1}, TRIAD_REDUCE_SUM, dl_)
              .wait(timeout_);
        });
        refused("all_reduce with op 99",
                [&] { world.all_reduce(buf, buf, 4, kDTypes[0].dl, 99, dl_).wait(timeout_); });
      }
      if (has(TRIAD_TRANSPORT_OP_ALL_TO_ALL) && m <= 4)
        refused("all_to_all in place",
                [&] { world.all_to_all(buf, buf, 1, kDTypes[0].dl, dl_).wait(timeout_); });
      return e;
    });
  }

  int fd_, wr_, wn_;
  const TransportSuiteOptions& o_;
  std::chrono::milliseconds timeout_;
  std::string prefix_;
  Device* dev_;
  DLDevice dl_;
  uint32_t mem_bit_;
  std::vector<uint64_t> counts_;
  triad_transport_caps_v1 caps_{};
  Transport* transport_ = nullptr;
};

// ---------------------------------------------------------------------------------------
// Parent side.

std::shared_ptr<const LoadedPlugin> load(const std::string& path) {
  return PluginLoader().load_file(path, "transport");
}

}  // namespace

Summary run_transport_suite(const std::string& so_path, const TransportSuiteOptions& o) {
  Summary sum;
  const auto emit = counting(sum, o.on_case);

  // Load and create once in a throwaway child: the parent must stay free of the plugin's
  // state (UCX and CUDA do not survive fork), and a plugin that crashes crashes there.
  // For a plugin that touches CUDA memory it also counts the GPUs that ranks 0..N-1 would get
  // (make_device("cuda", r) takes GPU r modulo the visible ones), or says why there are none.
  std::string name, no_gpu;
  uint32_t memory = 0;
  int gpus = 0, most = 0;  // GPUs visible; the plugin's max_world_size (0: any)
  {
    Child probe = spawn("load", [&](int fd) {
      std::string msg;
      try {
        auto plugin = load(so_path);
        ResolvedParams params = resolve_params(plugin->descriptor(), o.params, "transport");
        CoreServices services;
        Transport t(plugin, params, services.c_services());
        const uint32_t mem = t.capabilities().memory;
        const int32_t largest = t.capabilities().max_world_size;
        int n = 0;
        std::string why;
        if (mem & TRIAD_MEM_BIT_CUDA) {
          try {
            while (n < o.max_world_size && make_device("cuda", n)->dl_device().device_id == n) ++n;
          } catch (const std::exception& e) {
            why = e.what();
          }
        }
        std::replace(why.begin(), why.end(), '|', '/');
        msg = "OK|" + t.name() + "|" + std::to_string(mem) + "|" + std::to_string(largest) + "|" +
              std::to_string(n) + "|" + why + "\n";
      } catch (const std::exception& e) {
        msg = std::string("ERR|") + e.what() + "|\n";
      }
      std::replace(msg.begin(), msg.end() - 1, '\n', ' ');
      return ::write(fd, msg.data(), msg.size()) < 0 ? 3 : 0;
    });
    std::vector<Child> kids{probe};
    std::string line;
    collect(kids, Clock::now() + std::chrono::seconds(60), [&](const std::string& l) { line = l; });
    if (!kids[0].exited) {
      ::kill(kids[0].pid, SIGKILL);
      ::waitpid(kids[0].pid, nullptr, 0);
    }
    if (line.rfind("OK|", 0) == 0) {
      std::vector<std::string> f;  // name, memory, max world size, GPUs, why none
      for (size_t at = 3, bar; f.size() < 4 && (bar = line.find('|', at)) != std::string::npos;
           at = bar + 1) {
        f.push_back(line.substr(at, bar - at));
        if (f.size() == 4) f.push_back(line.substr(bar + 1));
      }
      if (f.size() != 5) throw UserError("transport plugin " + so_path + ": a garbled probe line");
      name = f[0];
      memory = uint32_t(std::stoul(f[1]));
      most = std::stoi(f[2]);
      gpus = std::stoi(f[3]);
      no_gpu = f[4];
    } else if (line.rfind("ERR|", 0) == 0) {
      throw UserError(line.substr(4, line.rfind('|') - 4));
    } else {
      throw UserError("transport plugin " + so_path + " crashed or hung while being loaded");
    }
  }

  if (!(memory & (TRIAD_MEM_BIT_HOST | TRIAD_MEM_BIT_CUDA))) {
    emit(
        CaseResult{name, Outcome::kSkip,
                   "the plugin declares neither host nor CUDA memory, the kinds this suite tests"});
    return sum;
  }
  const long long world_ms =
      o.world_timeout_ms > 0 ? o.world_timeout_ms : (o.quick ? 120000 : 600000);
  // One world of n ranks on host buffers (cuda false) or on CUDA buffers, rank r on GPU r.
  auto run_world = [&](int n, bool cuda) {
    const std::string label = name + " n=" + std::to_string(n) + (cuda ? " cuda" : "");
    ranks::run_world(
        n, label, world_ms,
        [&](const ranks::RankContext& c) {
          auto plugin = load(so_path);
          ResolvedParams params = resolve_params(plugin->descriptor(), o.params, "transport");
          // The device first: it makes its GPU current, and the plugin orders its work on the
          // device's stream (services.stream), as in a training run.
          std::unique_ptr<Device> dev = cuda ? make_device("cuda", c.rank) : nullptr;
          CoreServices services(0, dev ? dev->stream() : nullptr);
          Transport t(plugin, params, services.c_services());
          RendezvousClient store("127.0.0.1", c.port, c.token, std::chrono::seconds(30));
          Rank rank(c.fd, c.rank, n, name, o, dev.get());
          rank.run(t, store);
          return 0;
        },
        emit);
  };

  // Worlds above the plugin's own max_world_size are outside what it promises.
  auto beyond = [&](int n, const std::string& label) {
    if (most <= 0 || n <= most) return false;
    emit(CaseResult{
        label, Outcome::kSkip,
        "the plugin runs worlds of up to " + std::to_string(most) + " ranks (max_world_size)"});
    return true;
  };
  for (int n = 1; n <= o.max_world_size; ++n)
    if ((memory & TRIAD_MEM_BIT_HOST) && !beyond(n, name + " n=" + std::to_string(n)))
      run_world(n, false);
  if (memory & TRIAD_MEM_BIT_CUDA) {
    for (int n = 1; n <= o.max_world_size; ++n) {
      const std::string label = name + " n=" + std::to_string(n) + " cuda";
      if (beyond(n, label)) continue;
      if (gpus == 0)
        emit(CaseResult{label, Outcome::kSkip,
                        "CUDA-memory cases need a GPU: " +
                            (no_gpu.empty() ? std::string("none is visible") : no_gpu)});
      else if (n > gpus)
        emit(CaseResult{
            label, Outcome::kSkip,
            "CUDA-memory cases need one GPU per rank; " + std::to_string(gpus) + " visible"});
      else
        run_world(n, true);
    }
  }
  return sum;
}

int run_transport_conformance(const std::string& so_path, int world_sizes_max, bool quick) {
  TransportSuiteOptions o;
  o.max_world_size = world_sizes_max;
  o.quick = quick;
  o.on_case = [](const CaseResult& r) { std::cout << format_case(r) << std::endl; };
  try {
    Summary s = run_transport_suite(so_path, o);
    std::cout << format_summary(s) << std::endl;
    return s.failed == 0 ? 0 : 1;
  } catch (const UserError& e) {
    std::cerr << "triad-plugin-test: " << e.what() << std::endl;
    return kExitUserError;
  }
}

}  // namespace triad::conformance
