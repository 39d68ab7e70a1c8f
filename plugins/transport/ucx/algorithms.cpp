#include "algorithms.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace triad::ucx {

namespace {

int mod(int x, int n) {
  return ((x % n) + n) % n;
}

Xfer send_to(int peer, const void* buf, size_t bytes, uint64_t tag) {
  return Xfer{true, peer, const_cast<void*>(buf), bytes, tag};
}
Xfer recv_from(int peer, void* buf, size_t bytes, uint64_t tag) {
  return Xfer{false, peer, buf, bytes, tag};
}

void copy_if_distinct(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

// The slice of block j that lane L covers, in elements from the start of the buffer.
struct Seg {
  uint64_t off = 0, len = 0;
};

class Slicer {
 public:
  Slicer(uint64_t count, int n, uint64_t chunk) : count_(count), n_(n), chunk_(chunk) {}
  Seg seg(int j, size_t lane) const {
    sdk::Block b = sdk::block_of(count_, n_, j);
    uint64_t lo = std::min<uint64_t>(uint64_t(lane) * chunk_, b.size);
    uint64_t hi = std::min<uint64_t>(lo + chunk_, b.size);
    return {b.offset + lo, hi - lo};
  }
  size_t lanes() const {
    uint64_t biggest = sdk::block_of(count_, n_, 0).size;
    return size_t((biggest + chunk_ - 1) / chunk_);
  }

 private:
  uint64_t count_;
  int n_;
  uint64_t chunk_;
};

// Elements per lane: chunk_bytes, but smaller for blocks that would otherwise fill fewer
// lanes than the window holds, so medium messages still pipeline (never below 16 KiB).
uint64_t chunk_elems(const Tuning& t, size_t esize, uint64_t block_elems) {
  esize = std::max<size_t>(1, esize);
  const uint64_t chunk = std::max<uint64_t>(1, t.chunk_bytes / esize);
  const uint64_t floor = std::max<uint64_t>(1, (16u << 10) / esize);
  const uint64_t spread = (block_elems + t.window - 1) / std::max<size_t>(1, t.window);
  return std::max<uint64_t>(std::min(chunk, floor), std::min(chunk, std::max(spread, floor)));
}

// Message ids inside one collective: lane-major so that lanes never share an id.
uint64_t msg_id(size_t lane, size_t steps, size_t step) {
  return uint64_t(lane) * steps + step;
}

// The communicator: its id, size n and this rank r.
struct Who {
  uint32_t id = 0;
  int n = 0, r = 0;
};

// Direct reduce-scatter of lane L's slice: segment j goes straight to rank j, and this
// rank folds the n contributions to its own segment, in rank order, into `dst`. The
// contributions of the others land in `slot` ((n-1) x chunk elements).

Step direct_reduce_step(Who w, uint32_t seq, uint64_t msg, const CollArgs& a, const Slicer& sl,
                        size_t L, uint64_t chunk, char* slot, char* dst) {
  const int n = w.n, r = w.r;
  const uint32_t id = w.id;
  const size_t es = a.esize;
  const Seg own = sl.seg(r, L);
  auto part = [=](int j) -> const char* {
    return j == r ? a.send + own.off * es : slot + size_t(j < r ? j : j - 1) * chunk * es;
  };
  Step st;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    const Seg out = sl.seg(j, L);
    st.xfers.push_back(send_to(j, a.send + out.off * es, out.len * es, coll_tag(id, r, seq, msg)));
    st.xfers.push_back(
        recv_from(j, const_cast<char*>(part(j)), own.len * es, coll_tag(id, j, seq, msg)));
  }
  ReduceFn f = a.reduce;
  st.after = [=] {
    std::vector<const void*> parts(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) parts[size_t(j)] = part(j);
    fold(f, dst, parts.data(), n, own.len, es);
  };
  return st;
}

// Few ranks on one node: a direct reduce-scatter, then every rank sends its reduced
// segment straight to every other. Two dependent steps per lane instead of the ring's
// 2(n-1), so ranks sharing cores wait on each other far less often, with the same bytes.
Plan direct_all_reduce(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t) {
  const int n = c.size(), r = c.rank();
  // Full-size chunks: every message costs a handshake with a peer that may have to be
  // scheduled first, so splitting mid-size messages further only adds waits.
  const uint64_t chunk = std::max<uint64_t>(1, t.chunk_bytes / a.esize);
  Slicer sl(a.count, n, chunk);
  Plan p;
  p.num_lanes = sl.lanes();
  p.window = t.window;
  p.slot_bytes = size_t(n - 1) * chunk * a.esize;
  const Who w{c.id(), n, r};
  const uint32_t id = c.id();
  p.make_lane = [=](size_t L, char* slot) {
    const size_t es = a.esize;
    const Seg own = sl.seg(r, L);
    char* mine = a.recv + own.off * es;
    Lane lane;
    lane.push_back(direct_reduce_step(w, seq, msg_id(L, 2, 0), a, sl, L, chunk, slot, mine));
    Step out;
    const uint64_t msg = msg_id(L, 2, 1);
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const Seg in = sl.seg(j, L);
      out.xfers.push_back(send_to(j, mine, own.len * es, coll_tag(id, r, seq, msg)));
      out.xfers.push_back(
          recv_from(j, a.recv + in.off * es, in.len * es, coll_tag(id, j, seq, msg)));
    }
    lane.push_back(std::move(out));
    return lane;
  };
  return p;
}

Plan ring_all_reduce(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t) {
  const int n = c.size(), r = c.rank(), right = mod(r + 1, n), left = mod(r - 1, n);
  const uint64_t chunk = chunk_elems(t, a.esize, sdk::block_of(a.count, n, 0).size);
  Slicer sl(a.count, n, chunk);
  const size_t steps = size_t(2 * (n - 1));
  Plan p;
  p.num_lanes = sl.lanes();
  p.window = t.window;
  p.slot_bytes = chunk * a.esize;
  const uint32_t id = c.id();
  p.make_lane = [=](size_t L, char* tmp) {
    Lane lane;
    lane.reserve(steps);
    const size_t es = a.esize;
    // Reduce-scatter: after step s this rank holds the partial sum of segment r-2-s; the
    // last step leaves segment r complete. Own data is read from send, partials from recv.
    for (int s = 0; s < n - 1; ++s) {
      Seg so = sl.seg(mod(r - 1 - s, n), L), ro = sl.seg(mod(r - 2 - s, n), L);
      const char* src = (s == 0 ? a.send : a.recv) + so.off * es;
      Step st;
      st.xfers = {send_to(right, src, so.len * es, coll_tag(id, r, seq, msg_id(L, steps, s))),
                  recv_from(left, tmp, ro.len * es, coll_tag(id, left, seq, msg_id(L, steps, s)))};
      char* dst = a.recv + ro.off * es;
      const char* mine = a.send + ro.off * es;
      ReduceFn f = a.reduce;
      uint64_t len = ro.len;
      st.after = [=] { f(dst, mine, tmp, len); };
      lane.push_back(std::move(st));
    }
    // All-gather: pass the complete segments around the ring, straight into recv.
    for (int s = 0; s < n - 1; ++s) {
      Seg so = sl.seg(mod(r - s, n), L), ro = sl.seg(mod(r - s - 1, n), L);
      size_t k = size_t(n - 1 + s);
      Step st;
      st.xfers = {send_to(right, a.recv + so.off * es, so.len * es,
                          coll_tag(id, r, seq, msg_id(L, steps, k))),
                  recv_from(left, a.recv + ro.off * es, ro.len * es,
                            coll_tag(id, left, seq, msg_id(L, steps, k)))};
      lane.push_back(std::move(st));
    }
    return lane;
  };
  return p;
}

Plan recursive_doubling_all_reduce(const UcxComm& c, uint32_t seq, const CollArgs& a) {
  const int n = c.size(), r = c.rank();
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int rem = n - pof2;
  const size_t bytes = a.count * a.esize;
  Plan p;
  p.num_lanes = 1;
  p.window = 1;
  p.slot_bytes = bytes;
  const uint32_t id = c.id();
  char* recv = a.recv;
  const char* send = a.send;
  p.before = [=] { copy_if_distinct(recv, send, bytes); };
  p.make_lane = [=](size_t, char* tmp) {
    Lane lane;
    ReduceFn f = a.reduce;
    uint64_t count = a.count;
    // The first 2*rem ranks pair up: even ones hand their data to the odd neighbour and
    // sit out the doubling, then get the result back.
    int newrank;
    if (r < 2 * rem) {
      Step st;
      if (r % 2 == 0) {
        st.xfers = {send_to(r + 1, recv, bytes, coll_tag(id, r, seq, 0))};
        newrank = -1;
      } else {
        st.xfers = {recv_from(r - 1, tmp, bytes, coll_tag(id, r - 1, seq, 0))};
        st.after = [=] { f(recv, recv, tmp, count); };
        newrank = r / 2;
      }
      lane.push_back(std::move(st));
    } else {
      newrank = r - rem;
    }
    if (newrank >= 0) {
      int round = 1;
      for (int mask = 1; mask < pof2; mask <<= 1, ++round) {
        int pn = newrank ^ mask;
        int peer = pn < rem ? pn * 2 + 1 : pn + rem;
        Step st;
        st.xfers = {send_to(peer, recv, bytes, coll_tag(id, r, seq, uint64_t(round))),
                    recv_from(peer, tmp, bytes, coll_tag(id, peer, seq, uint64_t(round)))};
        // x op y == y op x bit for bit (sum and max commute), so both partners agree.
        st.after = [=] { f(recv, recv, tmp, count); };
        lane.push_back(std::move(st));
      }
    }
    if (r < 2 * rem) {
      Step st;
      if (r % 2 == 0)
        st.xfers = {recv_from(r + 1, recv, bytes, coll_tag(id, r + 1, seq, 63))};
      else
        st.xfers = {send_to(r - 1, recv, bytes, coll_tag(id, r, seq, 63))};
      lane.push_back(std::move(st));
    }
    return lane;
  };
  return p;
}

Plan local_copy(const char* src, char* dst, size_t bytes) {
  Plan p;
  p.before = [=] { copy_if_distinct(dst, src, bytes); };
  return p;
}

}  // namespace

Plan plan_all_reduce(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t) {
  const int n = c.size();
  if (n == 1 || a.count == 0) return local_copy(a.send, a.recv, a.count * a.esize);
  if (a.count * a.esize <= t.small_bytes || a.count < uint64_t(n))
    return recursive_doubling_all_reduce(c, seq, a);
  if (n <= t.direct_max_ranks) return direct_all_reduce(c, seq, a, t);
  return ring_all_reduce(c, seq, a, t);
}

Plan plan_reduce_scatter(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t) {
  const int n = c.size(), r = c.rank();
  const size_t es = a.esize;
  const sdk::Block mine = sdk::block_of(a.count, n, r);
  if (n == 1 || a.count == 0) return local_copy(a.send + mine.offset * es, a.recv, mine.size * es);
  const uint32_t id = c.id();
  if (a.count * es <= t.small_bytes) {
    // Direct, in one lane: block j goes to rank j, which folds its n contributions.
    const uint64_t chunk = std::max<uint64_t>(1, sdk::block_of(a.count, n, 0).size);
    Slicer sl(a.count, n, chunk);
    Plan p;
    p.num_lanes = 1;
    p.slot_bytes = size_t(n - 1) * chunk * es;
    const Who w{id, n, r};
    p.make_lane = [=](size_t, char* slot) {
      return Lane{direct_reduce_step(w, seq, 0, a, sl, 0, chunk, slot, a.recv)};
    };
    return p;
  }
  // Ring: like all_reduce's first half, but partials live in the lane's scratch (recv only
  // holds this rank's block) and the last step reduces straight into recv.
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const uint64_t chunk = chunk_elems(t, es, sdk::block_of(a.count, n, 0).size);
  Slicer sl(a.count, n, chunk);
  const size_t steps = size_t(n - 1);
  Plan p;
  p.num_lanes = sl.lanes();
  p.window = t.window;
  p.slot_bytes = 2 * chunk * es;
  p.make_lane = [=](size_t L, char* slot) {
    Lane lane;
    char* bufs[2] = {slot, slot + chunk * es};
    for (int s = 0; s < n - 1; ++s) {
      Seg so = sl.seg(mod(r - 1 - s, n), L), ro = sl.seg(mod(r - 2 - s, n), L);
      char* in = bufs[s % 2];
      const char* src = s == 0 ? a.send + so.off * es : bufs[(s + 1) % 2];
      Step st;
      st.xfers = {send_to(right, src, so.len * es, coll_tag(id, r, seq, msg_id(L, steps, s))),
                  recv_from(left, in, ro.len * es, coll_tag(id, left, seq, msg_id(L, steps, s)))};
      const char* own = a.send + ro.off * es;
      char* dst = s == n - 2 ? a.recv + (ro.off - mine.offset) * es : in;
      ReduceFn f = a.reduce;
      uint64_t len = ro.len;
      st.after = [=] { f(dst, own, in, len); };
      lane.push_back(std::move(st));
    }
    return lane;
  };
  return p;
}

Plan plan_all_gather(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t) {
  const int n = c.size(), r = c.rank();
  const size_t es = a.esize;
  const sdk::Block mine = sdk::block_of(a.count, n, r);
  char* recv = a.recv;
  const char* send = a.send;
  auto copy_own = [=] { copy_if_distinct(recv + mine.offset * es, send, mine.size * es); };
  if (n == 1 || a.count == 0) {
    Plan p;
    p.before = copy_own;
    return p;
  }
  const uint32_t id = c.id();
  // Direct: every block goes straight from its owner to every rank. On one node the
  // receivers copy in parallel (UCX's CMA / shared memory), and no rank forwards data, so
  // it beats the ring's n-1 dependent steps; the ring is for larger communicators.
  if (a.count * es <= t.small_bytes || n <= t.direct_max_ranks) {
    Plan p;
    p.num_lanes = 1;
    p.overlap = copy_own;  // sends read from `send`, so the copy can wait
    p.make_lane = [=](size_t, char*) {
      Step st;
      for (int j = 0; j < n; ++j) {
        if (j == r) continue;
        sdk::Block b = sdk::block_of(a.count, n, j);
        st.xfers.push_back(send_to(j, send, mine.size * es, coll_tag(id, r, seq, 0)));
        st.xfers.push_back(
            recv_from(j, recv + b.offset * es, b.size * es, coll_tag(id, j, seq, 0)));
      }
      return Lane{std::move(st)};
    };
    return p;
  }
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Full-size chunks: with nothing to compute, smaller ones only add handshakes.
  Slicer sl(a.count, n, std::max<uint64_t>(1, t.chunk_bytes / es));
  const size_t steps = size_t(n - 1);
  Plan p;
  p.num_lanes = sl.lanes();
  p.window = t.window;
  p.overlap = copy_own;
  p.make_lane = [=](size_t L, char*) {
    Lane lane;
    for (int s = 0; s < n - 1; ++s) {
      Seg so = sl.seg(mod(r - s, n), L), ro = sl.seg(mod(r - s - 1, n), L);
      // This rank's own segment leaves from `send`: recv gets its copy in `overlap`.
      const char* from = s == 0 ? send + (so.off - mine.offset) * es : recv + so.off * es;
      Step st;
      st.xfers = {send_to(right, from, so.len * es, coll_tag(id, r, seq, msg_id(L, steps, s))),
                  recv_from(left, recv + ro.off * es, ro.len * es,
                            coll_tag(id, left, seq, msg_id(L, steps, s)))};
      lane.push_back(std::move(st));
    }
    return lane;
  };
  return p;
}

Plan plan_broadcast(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t) {
  const int n = c.size(), r = c.rank();
  const size_t es = a.esize;
  Plan p;
  if (n == 1 || a.count == 0) return p;
  const int v = mod(r - a.root, n);  // rank relative to the root
  auto real = [=](int rel) { return mod(rel + a.root, n); };
  const uint32_t id = c.id();
  char* buf = a.recv;
  const size_t bytes = a.count * es;
  if (bytes <= t.small_bytes) {
    // Binomial tree: receive from the parent, then send to every child at once.
    p.num_lanes = 1;
    p.make_lane = [=](size_t, char*) {
      Lane lane;
      int mask = 1;
      while (mask < n) {
        if (v & mask) {
          int parent = real(v - mask);
          lane.push_back(Step{{recv_from(parent, buf, bytes, coll_tag(id, parent, seq, 0))}, {}});
          break;
        }
        mask <<= 1;
      }
      Step out;
      for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < n)
          out.xfers.push_back(send_to(real(v + mask), buf, bytes, coll_tag(id, r, seq, 0)));
      if (!out.xfers.empty()) lane.push_back(std::move(out));
      return lane;
    };
    return p;
  }
  if (n <= t.direct_max_ranks) {
    // Direct from the root: the receivers pull their copies in parallel (as all_gather).
    p.num_lanes = 1;
    p.make_lane = [=](size_t, char*) {
      Step st;
      if (v == 0) {
        for (int j = 0; j < n; ++j)
          if (j != r) st.xfers.push_back(send_to(j, buf, bytes, coll_tag(id, r, seq, 0)));
      } else {
        st.xfers.push_back(recv_from(a.root, buf, bytes, coll_tag(id, a.root, seq, 0)));
      }
      return Lane{std::move(st)};
    };
    return p;
  }
  // Chain root -> root+1 -> ...: each chunk is a lane, so chunks stream down the chain.
  const uint64_t chunk = chunk_elems(t, es, a.count);
  p.num_lanes = size_t((a.count + chunk - 1) / chunk);
  p.window = t.window;
  p.make_lane = [=](size_t L, char*) {
    Lane lane;
    uint64_t lo = uint64_t(L) * chunk, len = std::min<uint64_t>(chunk, a.count - lo);
    char* at = buf + lo * es;
    if (v > 0) {
      int prev = real(v - 1);
      lane.push_back(Step{{recv_from(prev, at, len * es, coll_tag(id, prev, seq, L))}, {}});
    }
    if (v < n - 1)
      lane.push_back(Step{{send_to(real(v + 1), at, len * es, coll_tag(id, r, seq, L))}, {}});
    return lane;
  };
  return p;
}

Plan plan_all_to_all(const UcxComm& c, uint32_t seq, const CollArgs& a) {
  const int n = c.size(), r = c.rank();
  const size_t block = a.count * a.esize;
  const char* send = a.send;
  char* recv = a.recv;
  auto copy_own = [=] {
    copy_if_distinct(recv + size_t(r) * block, send + size_t(r) * block, block);
  };
  Plan p;
  if (n == 1 || a.count == 0) {
    p.before = copy_own;
    return p;
  }
  // Direct, as all_gather on few ranks: the n - 1 exchanges are independent, so they all go in
  // one step and UCX moves them in parallel. One message id: the source rank in the tag tells
  // the blocks apart.
  const uint32_t id = c.id();
  p.num_lanes = 1;
  p.overlap = copy_own;  // nothing sent reads recv
  p.make_lane = [=](size_t, char*) {
    Step st;
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      st.xfers.push_back(send_to(j, send + size_t(j) * block, block, coll_tag(id, r, seq, 0)));
      st.xfers.push_back(recv_from(j, recv + size_t(j) * block, block, coll_tag(id, j, seq, 0)));
    }
    return Lane{std::move(st)};
  };
  return p;
}

Plan plan_barrier(const UcxComm& c, uint32_t seq) {
  const int n = c.size(), r = c.rank();
  Plan p;
  if (n == 1) return p;
  const uint32_t id = c.id();
  p.num_lanes = 1;
  p.make_lane = [=](size_t, char*) {
    Lane lane;
    int k = 0;
    for (int d = 1; d < n; d <<= 1, ++k) {
      int to = mod(r + d, n), from = mod(r - d, n);
      lane.push_back(Step{{send_to(to, nullptr, 0, coll_tag(id, r, seq, uint64_t(k))),
                           recv_from(from, nullptr, 0, coll_tag(id, from, seq, uint64_t(k)))},
                          {}});
    }
    return lane;
  };
  return p;
}

Plan plan_p2p(const UcxComm& c, bool is_send, void* buf, size_t bytes, int peer, uint32_t tag) {
  Plan p;
  p.num_lanes = 1;
  const int r = c.rank();
  const uint32_t id = c.id();
  p.make_lane = [=](size_t, char*) {
    Xfer x = is_send ? send_to(peer, buf, bytes, p2p_tag(id, r, tag))
                     : recv_from(peer, buf, bytes, p2p_tag(id, peer, tag));
    return Lane{Step{{x}, {}}};
  };
  return p;
}

}  // namespace triad::ucx
