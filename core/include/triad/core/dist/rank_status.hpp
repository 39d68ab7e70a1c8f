// What a training rank is doing, as its launcher sees it: a heartbeat, the step, and the
// transport wait it is in (what, and since when). The launcher keeps one slot per rank it
// starts in a shared-memory file and names the file and the slot in TRIAD_RANK_STATUS
// ("PATH:SLOT"); the rank maps it and writes, the launcher only reads. So the launcher can tell
// a stopped or frozen rank (no heartbeat) from a busy one and from the ranks that wait for it,
// without a message on any socket. Clocks are CLOCK_MONOTONIC, the same for every process of
// a host; what crosses hosts are ages (see launcher/monitor.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace triad {

// One rank's slot. A single writer (the rank) and lock-free readers: `what` is guarded by a
// sequence counter (odd while it is written).
struct RankStatusSlot {
  std::atomic<uint64_t> heartbeat_ns;   // last sign of life; 0 before the rank attached
  std::atomic<int64_t> step;            // the step it trains (0 before the first)
  std::atomic<uint64_t> wait_since_ns;  // when its current transport wait began; 0: none
  std::atomic<uint32_t> seq;
  char what[220];  // the operation it waits for, "all_reduce(4096 x fp32) over ..."
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
inline constexpr size_t kRankStatusSlotBytes = 256;
static_assert(sizeof(RankStatusSlot) <= kRankStatusSlotBytes);

uint64_t monotonic_ns();

// ---- The rank's side ------------------------------------------------------------------------

// Maps this rank's slot when TRIAD_RANK_STATUS is set and starts a thread that beats every
// 250 ms; a no-op otherwise. A malformed value is a UserError naming it.
void attach_rank_status_from_env();
// Whether a launcher watches this rank (the slot is mapped).
bool rank_status_watched();
void rank_status_step(int64_t step);
// Marks the calling thread's transport wait for its lifetime (nests: the outermost counts).
class RankWaitScope {
 public:
  explicit RankWaitScope(const std::string& what);
  ~RankWaitScope();
  RankWaitScope(const RankWaitScope&) = delete;
  RankWaitScope& operator=(const RankWaitScope&) = delete;

 private:
  bool marked_ = false;
};

// ---- The launcher's side --------------------------------------------------------------------

// A snapshot of one slot: ages in seconds at the time of reading.
struct RankStatusView {
  bool attached = false;  // the rank has mapped its slot and beaten at least once
  double heartbeat_age = 0;
  int64_t step = 0;
  double wait_age = -1;  // < 0: not in a transport wait
  std::string what;      // what it waits for, when wait_age >= 0
};

// The slots of the ranks one launcher starts: an anonymous shared-memory file (memfd) that
// the ranks open through /proc/<launcher pid>/fd, so nothing is left behind on any exit.
class RankStatusBoard {
 public:
  explicit RankStatusBoard(int slots);
  ~RankStatusBoard();
  RankStatusBoard(const RankStatusBoard&) = delete;
  RankStatusBoard& operator=(const RankStatusBoard&) = delete;

  // The value of TRIAD_RANK_STATUS for slot i.
  std::string env_value(int i) const;
  RankStatusView read(int i) const;
  int slots() const { return slots_; }

 private:
  int slots_ = 0;
  int fd_ = -1;
  void* map_ = nullptr;
};

}  // namespace triad
