// The agent's main loop is one poll() over a signalfd (SIGCHLD and the signals it forwards),
// the monitor's eventfd and the ranks' output pipes. Signals are blocked before any thread
// starts, so only this loop ever sees them.
#include "agent.hpp"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "job_store.hpp"
#include "monitor.hpp"
#include "output.hpp"
#include "rank_set.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/error.hpp"
#include "triad/core/train/stop_signals.hpp"

namespace triad::launch {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool is_ip_literal(const std::string& a) {
  unsigned char buf[16];
  return inet_pton(AF_INET, a.c_str(), buf) == 1 || inet_pton(AF_INET6, a.c_str(), buf) == 1;
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string seconds(std::chrono::milliseconds ms) {
  auto s = std::to_string(ms.count() / 1000.0);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s + " s";
}

class Agent {
 public:
  // A stop signal before the ranks started: the launcher just ends.
  struct Interrupted {
    int code;
    std::string what;
  };

  Agent(const JobPlan& plan, const ChildSpec& program, const AgentSettings& s)
      : plan_(plan), program_(program), s_(s), host_(host_name()) {
    for (const RankSlot& r : plan.ranks)
      lowest_rank_ = &r == &plan.ranks.front() ? r.rank : std::min(lowest_rank_, r.rank);
    tag_ =
        plan.agents > 1 ? "triad-launch[" + plan.agent_name(plan.agent) + "]: " : "triad-launch: ";
  }
  ~Agent() {
    if (monitor_) monitor_->stop();
    if (sig_fd_ >= 0) close(sig_fd_);
  }

  int run() {
    block_signals();
    join_job();
    try {
      spawn_ranks();
    } catch (const UserError& e) {
      publish(Failure{kExitUserError, plan_.agent_name(plan_.agent) + ": " + e.what()});
      throw;
    }
    loop();
    return finish();
  }

 private:
  void say(const std::string& msg) { write_all(2, tag_ + msg + "\n"); }

  void block_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    sig_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd_ < 0) throw std::runtime_error("signalfd failed");
    signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher (and its ranks)
  }

  // Before the ranks start, a stop signal simply ends the launcher (after telling the others).
  void check_interrupted(const char* during) {
    signalfd_siginfo si;
    while (read(sig_fd_, &si, sizeof si) == sizeof si) {
      int sig = int(si.ssi_signo);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        std::string what = "the launcher of " + plan_.agent_name(plan_.agent) + " (host " + host_ +
                           ") received " + signal_name(sig) + " " + during;
        if (store_) publish(Failure{128 + sig, what});
        throw Interrupted{128 + sig, what};
      }
    }
    if (store_) {
      if (auto f = store_->failure())
        throw UserError(plan_.agent_name(plan_.agent) + " gives up " + during + ": " + f->desc);
    }
  }

  void join_job() {
    const auto deadline = Clock::now() + s_.rdzv_timeout;
    const std::string bind = is_ip_literal(plan_.master_addr) ? plan_.master_addr : "0.0.0.0";
    std::string connect_to = plan_.master_addr;
    port_ = plan_.master_port;
    if (plan_.hosts_store()) {
      try {
        server_ = std::make_unique<RendezvousServer>(bind, uint16_t(port_), plan_.token);
      } catch (const UserError& e) {
        if (plan_.agents == 1 || std::string(e.what()).find("in use") != std::string::npos) throw;
        throw UserError(std::string(e.what()) + " (" + plan_.agent_name(0) + " on host " + host_ +
                        " runs the rendezvous, so the master address '" + plan_.master_addr +
                        "' must be one of its own)");
      }
      server_->start();
      port_ = server_->port();
      if (bind == "0.0.0.0") connect_to = "127.0.0.1";
      if (bind == "::") connect_to = "::1";
    }
    master_ = plan_.master_addr + ":" + std::to_string(port_);

    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        client_ = std::make_unique<RendezvousClient>(connect_to, uint16_t(port_), plan_.token,
                                                     std::clamp(left, 1ms, 2000ms));
        break;
      } catch (const UserError& e) {
        if (std::string(e.what()).find("cannot reach") == std::string::npos) throw;
      }
      check_interrupted("while connecting to the rendezvous");
      if (Clock::now() >= deadline)
        throw UserError(plan_.agent_name(plan_.agent) + " cannot reach the rendezvous at " +
                        master_ + " within " + seconds(s_.rdzv_timeout) + ": start " +
                        plan_.agent_name(0) + "'s launcher, and check --master-addr, " +
                        "--master-port and the firewall");
    }
    store_ = std::make_unique<JobStore>(*client_, plan_);
    store_->announce(host_, int(getpid()));

    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      std::vector<int> missing = store_->wait_for_agents(std::clamp(left, 1ms, 1000ms));
      if (missing.empty()) break;
      check_interrupted("while waiting for the other launchers");
      if (Clock::now() >= deadline) {
        std::string msg = describe_agents(plan_, missing) + " of " + std::to_string(plan_.agents) +
                          " did not arrive at the rendezvous " + master_ + " within " +
                          seconds(s_.rdzv_timeout) +
                          "; start their launchers with the same --nnodes, --master-addr and "
                          "--master-port (or raise --rdzv-timeout)";
        publish(Failure{1, msg});
        throw UserError(msg);
      }
    }
    try {
      store_->check_agreement();
    } catch (const UserError& e) {
      publish(Failure{kExitUserError, e.what()});
      throw;
    }
    monitor_ = std::make_unique<JobMonitor>(*store_, plan_, s_.heartbeat_timeout);
  }

  Failure publish(const Failure& f) {
    try {
      return store_->publish_failure(f);
    } catch (const std::exception& e) {
      say("could not tell the other launchers (" + std::string(e.what()) + ")");
      return f;
    }
  }

  void spawn_ranks() {
    ChildSpec spec = program_;
    spec.env["WORLD_SIZE"] = std::to_string(plan_.world_size);
    spec.env["LOCAL_WORLD_SIZE"] = std::to_string(plan_.local_world_size);
    spec.env["MASTER_ADDR"] = plan_.master_addr;
    spec.env["MASTER_PORT"] = std::to_string(port_);
    spec.env["TRIAD_JOB_TOKEN"] = plan_.token;
    // Ranks sharing a node would otherwise each start a thread per CPU (torchrun does this).
    const int cpus = usable_cpus();
    const int sharing = ranks_sharing_cpus(plan_, cpus, online_cpus());
    if (sharing > 1 && !spec.env.count("OMP_NUM_THREADS")) {
      const int threads = std::max(1, cpus / sharing);
      spec.env["OMP_NUM_THREADS"] = std::to_string(threads);
      say("OMP_NUM_THREADS is not set; giving each of the " + std::to_string(sharing) +
          " ranks on this node " + std::to_string(threads) + " (" + std::to_string(cpus) +
          " CPUs); set it to override");
    }
    std::function<LinePrefixer::Filter(const RankSlot&)> err_filter;
    if (s_.training)
      err_filter = [this](const RankSlot& slot) {
        return
            [this, rank = slot.rank](std::string_view line) { return on_error_line(rank, line); };
      };
    if (s_.training && s_.collective_timeout.count() > 0)
      board_ = std::make_unique<triad::RankStatusBoard>(int(plan_.ranks.size()));
    ranks_.start(std::move(spec), plan_.ranks, s_.prefix, err_filter, board_.get());
    if (board_) {
      std::vector<JobMonitor::WatchedRank> watched;
      for (const auto& r : ranks_.ranks()) watched.push_back({r.slot.rank, who(r)});
      monitor_->watch_ranks(board_.get(), std::move(watched), s_.collective_timeout);
    }
  }

  // A training rank's stderr line. Its report ("triad-launch: error: ..." or "...: internal
  // error: ...") is shown once for the job however many ranks find the same, and as the lowest
  // rank's: another rank's report waits up to kHoldReport for the lowest rank's same line.
  bool on_error_line(int rank, std::string_view line) {
    static constexpr std::string_view kHeads[] = {"triad-launch: error: ",
                                                  "triad-launch: internal error: "};
    const auto head = std::find_if(std::begin(kHeads), std::end(kHeads),
                                   [&](std::string_view h) { return line.starts_with(h); });
    if (head == std::end(kHeads)) return true;
    if (head == std::begin(kHeads)) reported_.emplace(rank, std::string(line.substr(head->size())));
    const std::string text(line);
    if (shown_.count(text)) return false;
    const auto held = held_.find(text);
    if (rank == lowest_rank_) {
      if (held != held_.end()) held_.erase(held);
      shown_.insert(text);
      return true;
    }
    if (held != held_.end())
      held->second.rank = std::min(held->second.rank, rank);
    else
      held_[text] = HeldReport{rank, Clock::now() + kHoldReport};
    return false;
  }

  // Writes the held reports whose wait is over (all of them with `all`).
  void show_held(bool all) {
    const auto now = Clock::now();
    for (auto it = held_.begin(); it != held_.end();) {
      if (!all && now < it->second.until) {
        ++it;
        continue;
      }
      write_all(2, "[rank " + std::to_string(it->second.rank) + "] " + it->first + "\n");
      shown_.insert(it->first);
      it = held_.erase(it);
    }
  }

  std::string who(const RankSet::Rank& r) const {
    std::string s = "rank " + std::to_string(r.slot.rank) + " (pid " + std::to_string(r.child.pid);
    // Under srun -n / mpirun the launcher is the rank's own task, so the host says it all.
    if (plan_.agents > 1)
      s += plan_.agent_kind == "node" ? " on " + plan_.agent_name(plan_.agent) + ", host " + host_
                                      : " on host " + host_;
    return s + ")";
  }

  void begin_stop(int sig) {
    if (!stopping_) {
      stopping_ = true;
      kill_at_ = Clock::now() + s_.stop_grace;
    }
    if (sig == SIGKILL) killed_ = true;
    ranks_.signal(sig, /*as_stop=*/true);
  }
  // A failure elsewhere ends the ranks at once: on SIGTERM a training rank finishes its step and
  // saves a checkpoint (a preemption), which a job that already failed must not wait for.
  void stop_after_failure() { begin_stop(SIGKILL); }

  void on_failure_known(const Failure& f) {
    if (!failure_) ack_deadline_ = Clock::now() + s_.stop_grace + 5s;
    failure_ = f;
  }

  void on_rank_exit(RankSet::Rank& r, int status) {
    ExitInfo e = describe_exit(status);
    if (e.code == 0 || r.stopped_by_us) return;
    ranks_.read_output(r);  // its last lines, which may be its report
    auto report = reported_.find(r.slot.rank);
    if (e.code == kExitUserError && report != reported_.end()) {
      // The rank's own line (shown once) says what is wrong; the launcher adds nothing here.
      // Other launchers get it in the failure they print.
      if (failure_) return;
      on_failure_known(publish(Failure{e.code, who(r) + " failed: " + report->second}));
      stop_after_failure();
      return;
    }
    std::string what = who(r) + " " + e.how;
    if (failure_) {
      say(what);
      return;
    }
    // Offered now, decided kDeathWindow later: the job's failure is the death that caused the
    // others (job_store.hpp), not the first one reported. A death by a signal comes before any
    // exit with a code: Triad's ranks end on errors with a code, so a signal is never the
    // consequence of another rank's failure, while an error exit often is.
    const Failure f{e.code, what};
    try {
      store_->offer_candidate(f, realtime_ns(), WIFSIGNALED(status));
    } catch (const std::exception&) {
      // the store is gone: this launcher decides alone
    }
    pending_.push_back(f);
    if (!decide_at_) decide_at_ = Clock::now() + kDeathWindow;
  }

  // The end of kDeathWindow after this launcher's first failed rank: the job's failure is the
  // earliest death offered by any launcher (unless one is known already).
  void decide_failure() {
    decide_at_.reset();
    if (failure_) {
      for (const Failure& p : pending_) say(p.desc);
      pending_.clear();
      return;
    }
    std::optional<Failure> first;
    try {
      first = store_->earliest_candidate();
    } catch (const std::exception&) {
      // the store is gone: this launcher's own first death
    }
    const Failure chosen = publish(first ? *first : pending_.front());
    bool ours = false;
    for (const Failure& p : pending_) {
      if (p.desc == chosen.desc) {
        ours = true;
        say(p.desc + "; stopping " +
            (plan_.agents > 1 ? "every rank of the job" : "the other ranks"));
      } else {
        say(p.desc);
      }
    }
    pending_.clear();
    if (!ours) say(chosen.desc + "; stopping the ranks of " + plan_.agent_name(plan_.agent));
    on_failure_known(chosen);
    stop_after_failure();
  }

  void reap() {
    ranks_.reap([this](RankSet::Rank& r, int status) { on_rank_exit(r, status); });
  }

  void on_signal(int sig) {
    if (sig == SIGCHLD) return reap();
    if (sig == SIGUSR1 || sig == SIGUSR2) return ranks_.signal(sig, /*as_stop=*/false);
    // One request delivered twice (`timeout` signals the launcher, then its process group) is
    // one request: the same signal again within kRepeatWindow leaves the orderly stop alone.
    if (stopping_ && sig == stop_signal_ && Clock::now() - stop_signal_at_ < triad::kRepeatWindow)
      return;
    if (stopping_) {
      say("received " + signal_name(sig) + (stop_signal_ ? " again" : " while stopping") +
          "; killing the ranks");
      begin_stop(SIGKILL);
      killed_ = true;
      return;
    }
    stop_signal_ = sig;
    stop_signal_at_ = Clock::now();
    std::string what = plan_.agents > 1 ? "the launcher of " + plan_.agent_name(plan_.agent) +
                                              " (host " + host_ + ") received " + signal_name(sig)
                                        : "the launcher received " + signal_name(sig);
    say("received " + signal_name(sig) + "; passing it to the ranks");
    if (!failure_) on_failure_known(publish(Failure{128 + sig, what}));
    begin_stop(sig);
  }

  void on_monitor() {
    monitor_->clear();
    auto f = monitor_->failure();
    if (f && !failure_) {
      say(f->desc + "; stopping the ranks of " + plan_.agent_name(plan_.agent));
      on_failure_known(*f);
      stop_after_failure();
    }
  }

  // The host keeps the store up until every launcher is done with it.
  bool others_done() const {
    if (!plan_.hosts_store()) return true;
    if (monitor_->others_finished()) return true;
    return failure_ && Clock::now() >= ack_deadline_;
  }

  void loop() {
    std::optional<Clock::time_point> drain_until;
    for (;;) {
      const auto now = Clock::now();
      const bool running = ranks_.running();
      if (!running && ranks_.pipes_open()) {
        // Something the rank left behind still holds its output; give it a moment.
        if (!drain_until) drain_until = now + 2s;
        if (now >= *drain_until) ranks_.close_pipes();
      }
      if (decide_at_ && now >= *decide_at_) decide_failure();
      show_held(/*all=*/!running);
      if (!running && !ranks_.pipes_open() && !decide_at_ && others_done()) return;
      if (stopping_ && !killed_ && now >= kill_at_) {
        for (const auto& r : ranks_.ranks())
          if (r.running)
            say(who(r) + " did not stop within " + seconds(s_.stop_grace) + "; sending SIGKILL");
        ranks_.signal(SIGKILL, /*as_stop=*/true);
        killed_ = true;
      }

      std::vector<pollfd> fds{{sig_fd_, POLLIN, 0}, {monitor_->fd(), POLLIN, 0}};
      ranks_.add_pollfds(fds);
      if (poll(fds.data(), fds.size(), held_.empty() && !decide_at_ ? 250 : 20) < 0 &&
          errno != EINTR)
        throw std::runtime_error("poll failed");
      if (fds[1].revents) on_monitor();
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents) ranks_.on_readable(fds[i].fd);
      // Signals after output, so a rank's last lines come before the launcher's verdict.
      if (fds[0].revents) {
        signalfd_siginfo si;
        while (read(sig_fd_, &si, sizeof si) == sizeof si) on_signal(int(si.ssi_signo));
      }
      reap();  // SIGCHLD can merge; a cheap WNOHANG sweep catches every exit
    }
  }

  int finish() {
    monitor_->stop();
    try {
      store_->mark_finished(!failure_);
    } catch (const std::exception&) {
      // The host is gone; nobody is waiting for this mark.
    }
    if (failure_) return failure_->code;
    return stop_signal_ ? 128 + stop_signal_ : 0;
  }

  const JobPlan& plan_;
  const ChildSpec& program_;
  AgentSettings s_;
  std::string host_, tag_, master_;
  int port_ = 0;
  int sig_fd_ = -1;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<RendezvousClient> client_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<triad::RankStatusBoard> board_;  // before the monitor that reads it
  std::unique_ptr<JobMonitor> monitor_;
  RankSet ranks_;
  std::optional<Failure> failure_;
  // Reports of a bad input (or a bug) from training ranks: shown, held back, and by rank.
  struct HeldReport {
    int rank;
    Clock::time_point until;
  };
  static constexpr std::chrono::milliseconds kHoldReport{300};
  std::set<std::string> shown_;
  std::map<std::string, HeldReport> held_;
  std::map<int, std::string> reported_;  // rank -> its bad-input report (without the head)
  int lowest_rank_ = 0;                  // of this launcher's ranks: its reports are not held
  // Failed ranks of this launcher waiting for the job's verdict (decide_failure).
  static constexpr std::chrono::milliseconds kDeathWindow{500};
  std::vector<Failure> pending_;
  std::optional<Clock::time_point> decide_at_;
  int stop_signal_ = 0;
  Clock::time_point stop_signal_at_{};
  bool stopping_ = false, killed_ = false;
  Clock::time_point kill_at_, ack_deadline_;
};

}  // namespace

int run_agent(const JobPlan& plan, const ChildSpec& program, const AgentSettings& settings) {
  Agent agent(plan, program, settings);
  try {
    return agent.run();
  } catch (const Agent::Interrupted& i) {
    write_all(2, "triad-launch: " + i.what + "; stopping\n");
    return i.code;
  }
}

}  // namespace triad::launch
