// A UCX communicator: a rank set over the instance's world endpoints, and the tag layout
// that keeps its messages apart from every other communicator's and collective's.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <vector>

#include "triad/sdk/transport.hpp"

namespace triad::ucx {

// 64-bit UCP tags:
//   bit 63      1 = point-to-point, 0 = collective
//   bits 49-62  communicator id (14 bits; agreed by the members at split)
//   bits 35-48  source rank in the communicator (14 bits)
//   collective: bits 23-34 sequence number of the collective on this communicator (12
//               bits, wraps), bits 0-22 message id inside the collective (wraps)
//   p2p:        bits 0-31 the caller's tag
// UCP matching ignores the sender, so the source rank is part of the tag.
constexpr int kMaxCommIds = 1 << 14;
constexpr int kMaxRanks = 1 << 14;
constexpr uint64_t kFullMask = ~uint64_t(0);

inline uint64_t coll_tag(uint32_t comm_id, int src, uint32_t seq, uint64_t msg) {
  return (uint64_t(comm_id) << 49) | (uint64_t(src) << 35) | (uint64_t(seq & 0xfff) << 23) |
         (msg & 0x7fffff);
}

inline uint64_t p2p_tag(uint32_t comm_id, int src, uint32_t tag) {
  return (uint64_t(1) << 63) | (uint64_t(comm_id) << 49) | (uint64_t(src) << 35) | tag;
}

class UcxComm : public sdk::TransportComm {
 public:
  UcxComm(uint32_t id, int rank, std::vector<int> world_ranks)
      : id_(id), rank_(rank), world_ranks_(std::move(world_ranks)) {}
  int rank() const override { return rank_; }
  int size() const override { return int(world_ranks_.size()); }
  uint32_t id() const { return id_; }
  int world_rank(int r) const { return world_ranks_[size_t(r)]; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  uint32_t next_seq() { return seq_++; }

 private:
  uint32_t id_;
  int rank_;
  std::vector<int> world_ranks_;
  uint32_t seq_ = 0;
};

}  // namespace triad::ucx
