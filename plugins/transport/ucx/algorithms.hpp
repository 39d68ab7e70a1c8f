// Collective algorithms as Plans for the schedule engine (schedule.hpp).
//   all_reduce     small: recursive doubling (non-power-of-two ranks fold in first);
//                  <= direct_max_ranks ranks: direct reduce-scatter then direct all-gather;
//                  else ring reduce-scatter then ring all-gather
//   reduce_scatter small: direct (each rank sends every block to its owner); large: ring
//   all_gather     small or <= direct_max_ranks ranks: direct; else ring
//   broadcast      small: binomial tree; <= direct_max_ranks ranks: direct; else chain
//   barrier        dissemination
//   all_to_all     direct: every block straight to its rank, all in one step
// "Large" rings, chains and direct all-reduces are cut into lanes of (at most) chunk_bytes
// per block that stream through `window` lanes at once. All ranks choose the same algorithm because
// they see the same count, dtype and tuning parameters.
#pragma once

#include "reduce.hpp"
#include "schedule.hpp"

namespace triad::ucx {

struct Tuning {
  size_t chunk_bytes = 512u << 10;
  size_t window = 4;
  size_t small_bytes = 64u << 10;
  int direct_max_ranks = 8;  // all_reduce / all_gather / broadcast go direct up to here
};

struct CollArgs {
  const char* send = nullptr;
  char* recv = nullptr;
  uint64_t count = 0;  // elements, as in transport_v1.h
  size_t esize = 0;    // bytes per element
  ReduceFn reduce = nullptr;
  int root = 0;
};

Plan plan_all_reduce(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t);
Plan plan_reduce_scatter(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t);
Plan plan_all_gather(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t);
Plan plan_broadcast(const UcxComm& c, uint32_t seq, const CollArgs& a, const Tuning& t);
// a.count is elements per peer block here (transport_v2.h), not the whole buffer.
Plan plan_all_to_all(const UcxComm& c, uint32_t seq, const CollArgs& a);
Plan plan_barrier(const UcxComm& c, uint32_t seq);
Plan plan_p2p(const UcxComm& c, bool is_send, void* buf, size_t bytes, int peer, uint32_t tag);

}  // namespace triad::ucx
