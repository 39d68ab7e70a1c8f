#include "triad/core/dist/rank_status.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "triad/core/error.hpp"

namespace triad {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

namespace {

RankStatusSlot* g_slot = nullptr;
std::mutex g_wait_mu;
int g_waiting = 0;  // transport waits in progress (threads), under g_wait_mu

void write_what(RankStatusSlot& s, const std::string& what, uint64_t since) {
  const uint32_t q = s.seq.load(std::memory_order_relaxed);
  s.seq.store(q + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  const size_t n = std::min(what.size(), sizeof s.what - 1);
  std::memcpy(s.what, what.data(), n);
  s.what[n] = '\0';
  s.wait_since_ns.store(since, std::memory_order_relaxed);
  s.seq.store(q + 2, std::memory_order_release);
}

}  // namespace

void attach_rank_status_from_env() {
  const char* v = std::getenv("TRIAD_RANK_STATUS");
  if (!v || !*v || g_slot) return;
  const std::string s(v);
  const size_t colon = s.rfind(':');
  char* end = nullptr;
  const long slot = colon == std::string::npos ? -1 : std::strtol(s.c_str() + colon + 1, &end, 10);
  if (slot < 0 || slot > 100000 || !end || *end)
    throw UserError(
        "TRIAD_RANK_STATUS='" + s +
        "' is not PATH:SLOT (the launcher sets it; unset it to run without a launcher)");
  const std::string path = s.substr(0, colon);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    throw UserError("TRIAD_RANK_STATUS: cannot open '" + path + "': " + std::strerror(errno) +
                    " (the launcher sets it; unset it to run without a launcher)");
  const size_t bytes = size_t(slot + 1) * kRankStatusSlotBytes;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    throw UserError("TRIAD_RANK_STATUS: cannot map slot " + std::to_string(slot) + " of '" + path +
                    "': " + std::strerror(errno));
  g_slot = reinterpret_cast<RankStatusSlot*>(static_cast<char*>(m) +
                                             size_t(slot) * kRankStatusSlotBytes);
  g_slot->heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
  // The heartbeat: a thread of its own, so a long kernel or a long wait still beats, and only
  // a stopped or frozen process falls silent. It lives as long as the process.
  std::thread([slot = g_slot] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      slot->heartbeat_ns.store(monotonic_ns(), std::memory_order_release);
    }
  }).detach();
}

bool rank_status_watched() {
  return g_slot != nullptr;
}

void rank_status_step(int64_t step) {
  if (g_slot) g_slot->step.store(step, std::memory_order_relaxed);
}

RankWaitScope::RankWaitScope(const std::string& what) {
  if (!g_slot) return;
  std::lock_guard<std::mutex> lock(g_wait_mu);
  marked_ = true;
  if (g_waiting++ == 0) write_what(*g_slot, what, monotonic_ns());
}

RankWaitScope::~RankWaitScope() {
  if (!marked_) return;
  std::lock_guard<std::mutex> lock(g_wait_mu);
  if (--g_waiting == 0) g_slot->wait_since_ns.store(0, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------

RankStatusBoard::RankStatusBoard(int slots) : slots_(std::max(slots, 1)) {
  fd_ = memfd_create("triad-rank-status", MFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  const size_t bytes = size_t(slots_) * kRankStatusSlotBytes;
  if (ftruncate(fd_, off_t(bytes)) != 0) {
    close(fd_);
    throw std::runtime_error(std::string("ftruncate of the rank status: ") + std::strerror(errno));
  }
  map_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    close(fd_);
    throw std::runtime_error(std::string("mmap of the rank status: ") + std::strerror(errno));
  }
  std::memset(map_, 0, bytes);  // zero: no heartbeat yet
}

RankStatusBoard::~RankStatusBoard() {
  if (map_ && map_ != MAP_FAILED) munmap(map_, size_t(slots_) * kRankStatusSlotBytes);
  if (fd_ >= 0) close(fd_);
}

std::string RankStatusBoard::env_value(int i) const {
  return "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd_) + ":" +
         std::to_string(i);
}

RankStatusView RankStatusBoard::read(int i) const {
  RankStatusView v;
  if (i < 0 || i >= slots_) return v;
  const auto& s = *reinterpret_cast<const RankStatusSlot*>(static_cast<const char*>(map_) +
                                                           size_t(i) * kRankStatusSlotBytes);
  const uint64_t now = monotonic_ns();
  const auto age = [now](uint64_t t) { return t >= now ? 0.0 : double(now - t) * 1e-9; };
  const uint64_t beat = s.heartbeat_ns.load(std::memory_order_acquire);
  if (!beat) return v;
  v.attached = true;
  v.heartbeat_age = age(beat);
  v.step = s.step.load(std::memory_order_relaxed);
  for (int tries = 0; tries < 100; ++tries) {
    const uint32_t q = s.seq.load(std::memory_order_acquire);
    if (q & 1u) continue;
    const uint64_t since = s.wait_since_ns.load(std::memory_order_relaxed);
    char buf[sizeof s.what];
    std::memcpy(buf, s.what, sizeof buf);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != q) continue;
    buf[sizeof buf - 1] = '\0';
    if (since) {
      v.wait_age = age(since);
      v.what = buf;
    }
    break;
  }
  return v;
}

}  // namespace triad
