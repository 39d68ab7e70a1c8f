#include "monitor.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include "triad/core/error.hpp"

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
