#include "ranks.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <stdexcept>

#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/plugins/plugin_loader.hpp"

namespace triad::conformance::ranks {

void report(int fd, Outcome o, const std::string& name, std::string detail) {
  std::replace(detail.begin(), detail.end(), '\n', ' ');
  std::replace(detail.begin(), detail.end(), '|', '/');
  const char c = o == Outcome::kPass ? 'P' : o == Outcome::kFail ? 'F' : 'S';
  const std::string line = std::string(1, c) + "|" + name + "|" + detail + "\n";
  // Lines are written whole; a failed write means the parent is gone.
  if (::write(fd, line.data(), line.size()) < 0) _exit(3);
}

Child spawn(const std::string& setup_case, const std::function<int(int fd)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  Child c;
  c.pid = ::fork();
  if (c.pid < 0) throw std::runtime_error("fork failed");
  if (c.pid == 0) {
    ::close(fds[0]);
    int code = 0;
    try {
      code = body(fds[1]);
    } catch (const Abort&) {
      code = 1;
    } catch (const std::exception& e) {
      std::string line = "F|" + setup_case + "|" + e.what() + "\n";
      std::replace(line.begin(), line.end() - 1, '\n', ' ');
      if (::write(fds[1], line.data(), line.size()) < 0) code = 3;
      code = 1;
    }
    std::cout.flush();
    ::_exit(code);
  }
  ::close(fds[1]);
  c.fd = fds[0];
  return c;
}

void collect(std::vector<Child>& kids, Clock::time_point deadline,
             const std::function<void(const std::string&)>& on_line) {
  std::vector<char> buf(1 << 16);
  for (;;) {
    bool all_done = true;
    std::vector<pollfd> p;
    for (auto& k : kids) {
      if (k.fd >= 0) p.push_back({k.fd, POLLIN, 0});
      if (!k.exited) {
        int st = 0;
        if (::waitpid(k.pid, &st, WNOHANG) == k.pid) k.exited = true, k.status = st;
      }
      if (!k.exited || k.fd >= 0) all_done = false;
    }
    if (all_done || Clock::now() >= deadline) return;
    ::poll(p.data(), p.size(), 100);
    for (auto& k : kids) {
      if (k.fd < 0) continue;
      pollfd q{k.fd, POLLIN, 0};
      if (::poll(&q, 1, 0) <= 0) continue;
      ssize_t got = ::read(k.fd, buf.data(), buf.size());
      if (got <= 0) {
        ::close(k.fd);
        k.fd = -1;
        continue;
      }
      k.partial.append(buf.data(), size_t(got));
      size_t nl;
      while ((nl = k.partial.find('\n')) != std::string::npos) {
        on_line(k.partial.substr(0, nl));
        k.partial.erase(0, nl + 1);
      }
    }
  }
}

RankWorld::RankWorld(const RankContext& c, const std::string& transport,
                     const std::map<std::string, std::string>& params, const std::string& scope,
                     std::chrono::milliseconds timeout)
    : store_("127.0.0.1", c.port, c.token, std::chrono::seconds(30)) {
  auto plugin = PluginLoader().load("transport", transport);
  transport_ = std::make_unique<Transport>(
      plugin, resolve_params(plugin->descriptor(), params, "transport"), services_.c_services());
  world_ = transport_->init_world(c.rank, c.world_size, store_, scope, timeout);
}

void run_world(int n, const std::string& label, long long timeout_ms,
               const std::function<int(const RankContext&)>& body,
               const std::function<void(const CaseResult&)>& emit) {
  const std::string token = make_job_token();
  RendezvousServer server("127.0.0.1", 0, token);
  const uint16_t port = server.port();
  std::vector<Child> kids;
  for (int r = 0; r < n; ++r) {
    kids.push_back(spawn(label + " init_world", [&, r](int fd) {
      for (auto& k : kids) ::close(k.fd);  // the siblings' pipes are not ours
      return body(RankContext{r, n, fd, port, token});
    }));
  }
  server.start();

  struct Verdict {
    Outcome outcome = Outcome::kPass;
    std::string detail;
    int ranks = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Verdict> verdicts;
  auto on_line = [&](const std::string& l) {
    size_t a = l.find('|'), b = l.find('|', a + 1);
    if (a == std::string::npos || b == std::string::npos) return;
    std::string case_name = l.substr(a + 1, b - a - 1), detail = l.substr(b + 1);
    Outcome out = l[0] == 'P' ? Outcome::kPass : l[0] == 'F' ? Outcome::kFail : Outcome::kSkip;
    auto [it, fresh] = verdicts.try_emplace(case_name);
    if (fresh) order.push_back(case_name);
    Verdict& v = it->second;
    ++v.ranks;
    if (fresh || (out == Outcome::kFail && v.outcome != Outcome::kFail)) {
      v.outcome = out;
      v.detail = detail;
    }
  };
  const auto t0 = Clock::now();
  collect(kids, t0 + std::chrono::milliseconds(timeout_ms), on_line);

  std::vector<std::string> problems;
  for (int r = 0; r < n; ++r) {
    Child& k = kids[size_t(r)];
    if (!k.exited) {
      ::kill(k.pid, SIGKILL);
      ::waitpid(k.pid, &k.status, 0);
      problems.push_back("rank " + std::to_string(r) + " hung and was killed after " +
                         std::to_string(timeout_ms / 1000) + " s");
    } else if (WIFSIGNALED(k.status)) {
      problems.push_back("rank " + std::to_string(r) + " died of signal " +
                         std::to_string(WTERMSIG(k.status)));
    } else if (WEXITSTATUS(k.status) != 0) {
      problems.push_back("rank " + std::to_string(r) + " exited with status " +
                         std::to_string(WEXITSTATUS(k.status)));
    }
    if (k.fd >= 0) ::close(k.fd);
  }
  server.stop();

  for (const auto& c : order) {
    Verdict& v = verdicts[c];
    if (v.outcome != Outcome::kFail && v.ranks != n) {
      v.outcome = Outcome::kFail;
      v.detail =
          "only " + std::to_string(v.ranks) + " of " + std::to_string(n) + " ranks reported it";
    }
    emit(CaseResult{c, v.outcome, v.detail});
  }
  const std::string pname = label + " ranks";
  if (problems.empty()) {
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    char d[64];
    std::snprintf(d, sizeof(d), "all exited cleanly in %.1f s", secs);
    emit(CaseResult{pname, Outcome::kPass, d});
  } else {
    std::string d;
    for (size_t i = 0; i < problems.size(); ++i) d += (i ? "; " : "") + problems[i];
    emit(CaseResult{pname, Outcome::kFail, d});
  }
}

}  // namespace triad::conformance::ranks
