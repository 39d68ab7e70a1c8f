#include "rank_set.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace triad::launch {

namespace {

void close_pipe(int& fd, LinePrefixer* pre) {
  if (fd < 0) return;
  if (pre) pre->finish();
  close(fd);
  fd = -1;
}

// Reads what is there; at EOF (or an error) ends the stream.
void drain(int& fd, LinePrefixer& pre) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      pre.feed(std::string_view(buf, size_t(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    return close_pipe(fd, &pre);
  }
}

}  // namespace

RankSet::~RankSet() {
  for (auto& r : ranks_) {
    if (r.running) killpg(r.child.pid, SIGKILL);
    close_pipe(r.child.out_fd, r.out.get());
    close_pipe(r.child.err_fd, r.err.get());
  }
}

void RankSet::start(ChildSpec spec, const std::vector<RankSlot>& slots, bool prefix,
                    const std::function<LinePrefixer::Filter(const RankSlot&)>& err_filter,
                    const triad::RankStatusBoard* board) {
  for (const RankSlot& slot : slots) {
    spec.env["RANK"] = std::to_string(slot.rank);
    spec.env["LOCAL_RANK"] = std::to_string(slot.local_rank);
    if (board) spec.env["TRIAD_RANK_STATUS"] = board->env_value(int(ranks_.size()));
    Rank r;
    r.slot = slot;
    r.child = spawn_child(spec, prefix);
    if (prefix) {
      std::string p = "[rank " + std::to_string(slot.rank) + "] ";
      r.out = std::make_unique<LinePrefixer>(p, 1);
      r.err = std::make_unique<LinePrefixer>(
          p, 2, err_filter ? err_filter(slot) : LinePrefixer::Filter{});
    }
    ranks_.push_back(std::move(r));
  }
}

void RankSet::signal(int sig, bool as_stop) {
  for (auto& r : ranks_) {
    if (!r.running) continue;
    killpg(r.child.pid, sig);
    if (as_stop) r.stopped_by_us = true;
  }
}

void RankSet::reap(const std::function<void(Rank&, int)>& on_exit) {
  for (auto& r : ranks_) {
    if (!r.running) continue;
    int st;
    if (waitpid(r.child.pid, &st, WNOHANG) != r.child.pid) continue;
    r.running = false;
    on_exit(r, st);
  }
}

void RankSet::add_pollfds(std::vector<pollfd>& fds) const {
  for (const auto& r : ranks_) {
    if (r.child.out_fd >= 0) fds.push_back({r.child.out_fd, POLLIN, 0});
    if (r.child.err_fd >= 0) fds.push_back({r.child.err_fd, POLLIN, 0});
  }
}

void RankSet::on_readable(int fd) {
  for (auto& r : ranks_) {
    if (r.child.out_fd == fd) return drain(r.child.out_fd, *r.out);
    if (r.child.err_fd == fd) return drain(r.child.err_fd, *r.err);
  }
}

void RankSet::read_output(Rank& r) {
  if (r.child.out_fd >= 0 && r.out) drain(r.child.out_fd, *r.out);
  if (r.child.err_fd >= 0 && r.err) drain(r.child.err_fd, *r.err);
}

void RankSet::close_pipes() {
  for (auto& r : ranks_) {
    close_pipe(r.child.out_fd, r.out.get());
    close_pipe(r.child.err_fd, r.err.get());
  }
}

bool RankSet::running() const {
  for (const auto& r : ranks_)
    if (r.running) return true;
  return false;
}

bool RankSet::pipes_open() const {
  for (const auto& r : ranks_)
    if (r.child.out_fd >= 0 || r.child.err_fd >= 0) return true;
  return false;
}

}  // namespace triad::launch
