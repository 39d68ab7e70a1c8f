#include "monitor.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include "triad/core/error.hpp"
#include "watchdog.hpp"

namespace triad::launch {

JobMonitor::JobMonitor(JobStore& store, const JobPlan& plan,
                       std::chrono::milliseconds heartbeat_timeout)
    : store_(store), plan_(plan), heartbeat_timeout_(heartbeat_timeout) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  auto now = std::chrono::steady_clock::now();
  peers_.assign(size_t(plan.agents), Peer{false, -1, now});
  peers_[size_t(plan.agent)].finished = true;  // itself: the main loop knows
  others_finished_ = plan.agents == 1;
  thread_ = std::thread([this] { loop(); });
}

JobMonitor::~JobMonitor() {
  stop();
  if (event_fd_ >= 0) close(event_fd_);
}

void JobMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobMonitor::clear() {
  uint64_t v;
  ssize_t n = read(event_fd_, &v, sizeof v);
  (void)n;
}

std::optional<Failure> JobMonitor::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool JobMonitor::others_finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return others_finished_;
}

void JobMonitor::notify() {
  uint64_t one = 1;
  ssize_t n = write(event_fd_, &one, sizeof one);
  (void)n;
}

void JobMonitor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      poll_once();
    } catch (const std::exception& e) {
      lock.lock();
      if (stopping_) break;
      if (!failure_) {
        failure_ = Failure{1, "lost contact with the rendezvous at " + plan_.master_addr + ":" +
                                  std::to_string(plan_.master_port) + " (" + plan_.agent_name(0) +
                                  "'s launcher): " + e.what()};
        notify();
      }
      break;
    }
    lock.lock();
    cv_.wait_for(lock, kPoll, [this] { return stopping_; });
  }
}

void JobMonitor::poll_once() {
  store_.heartbeat();
  bool known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = failure_.has_value();
  }
  if (!known) {
    if (auto f = store_.failure()) {
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = f;
      notify();
    }
  }
  if (plan_.hosts_store()) check_agents();
  check_ranks();
}

void JobMonitor::watch_ranks(const triad::RankStatusBoard* board, std::vector<WatchedRank> ranks,
                             std::chrono::milliseconds collective_timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  board_ = board;
  watched_ = std::move(ranks);
  collective_timeout_ = collective_timeout;
}

void JobMonitor::check_ranks() {
  const triad::RankStatusBoard* board;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_ || !board_) return;
    board = board_;
  }
  std::vector<RankReport> local;
  for (size_t i = 0; i < watched_.size(); ++i) {
    const triad::RankStatusView v = board->read(int(i));
    if (!v.attached) continue;
    local.push_back(
        RankReport{watched_[i].rank, watched_[i].who, v.heartbeat_age, v.step, v.wait_age, v.what});
  }
  // Every poll, so the launcher that decides sees the ranks that are not waiting too (a few
  // hundred bytes per launcher, four times a second).
  if (plan_.agents > 1) store_.set_rank_reports(encode_reports(local));
  const double limit = std::chrono::duration<double>(collective_timeout_).count();
  bool over = false;
  for (const RankReport& r : local) over = over || r.wait_age > limit;
  if (!over) return;
  std::vector<RankReport> all = local;
  for (int a = 0; a < plan_.agents; ++a) {
    if (a == plan_.agent) continue;
    for (RankReport& r : decode_reports(store_.rank_reports_of(a))) all.push_back(std::move(r));
  }
  auto verdict = diagnose_stuck(std::move(all), limit);
  if (!verdict) return;
  Failure f = store_.publish_failure(Failure{1, *verdict});
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_) {
    failure_ = f;
    notify();
  }
}

void JobMonitor::check_agents() {
  const auto now = std::chrono::steady_clock::now();
  bool all = true;
  for (int a = 0; a < plan_.agents; ++a) {
    Peer& p = peers_[size_t(a)];
    if (p.finished) continue;
    if (store_.finished(a)) {
      p.finished = true;
      continue;
    }
    int64_t beats = store_.heartbeat_of(a);
    if (beats != p.beats) {
      p.beats = beats;
      p.changed = now;
    } else if (now - p.changed > heartbeat_timeout_) {
      std::optional<Failure> known;
      {
        std::lock_guard<std::mutex> lock(mu_);
        known = failure_;
      }
      p.finished = true;  // gone: nobody waits for it any more
      if (!known) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_timeout_);
        Failure f{1, "the launcher of " + plan_.agent_name(a) + " (" + store_.where(a) +
                         ") stopped answering (no heartbeat for " + std::to_string(ms.count()) +
                         " ms); its ranks are presumed dead"};
        f = store_.publish_failure(f);
        std::lock_guard<std::mutex> lock(mu_);
        failure_ = f;
        notify();
      }
      continue;
    }
    all = false;
  }
  if (all) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!others_finished_) {
      others_finished_ = true;
      notify();
    }
  }
}

}  // namespace triad::launch
