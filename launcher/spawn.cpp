// fork + execve rather than posix_spawn: the child must ask for PR_SET_PDEATHSIG, so ranks
// never outlive a launcher killed with SIGKILL. Between fork and exec only async-signal-safe
// calls run (the launcher may have a rendezvous thread), so everything is prepared before.
#include "spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "triad/core/error.hpp"

namespace triad::launch {

namespace {

void close_from(int lowest, int keep) {
  // close_range is async-signal-safe; the loop is for kernels without it.
  if (keep >= lowest) {
    if (keep > lowest && close_range(lowest, keep - 1, 0) != 0)
      for (int fd = lowest; fd < keep; ++fd) close(fd);
    if (close_range(keep + 1, ~0U, 0) != 0)
      for (int fd = keep + 1; fd < 4096; ++fd) close(fd);
  } else if (close_range(lowest, ~0U, 0) != 0) {
    for (int fd = lowest; fd < 4096; ++fd) close(fd);
  }
}

[[noreturn]] void child_fail(int report_fd) {
  int e = errno;
  ssize_t w = write(report_fd, &e, sizeof e);
  (void)w;
  _exit(127);
}

}  // namespace

Child spawn_child(const ChildSpec& spec, bool capture) {
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2];
  if (capture && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0))
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (pipe2(report, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();

  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(report[1]);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
    // Undo what the launcher set for itself: blocked signals and SIG_IGN survive exec.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD})
      sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (devnull >= 0) dup2(devnull, 0);
    if (capture) {
      if (dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0) child_fail(report[1]);
    }
    // The report pipe keeps O_CLOEXEC: exec closing it is how the parent learns success.
    close_from(3, report[1]);
    execve(spec.path.c_str(), argv.data(), envp.data());
    child_fail(report[1]);
  }

  setpgid(pid, pid);  // also here, so a signal sent right after fork reaches the group
  close(report[1]);
  if (devnull >= 0) close(devnull);
  if (capture) close(out[1]), close(err[1]);
  int child_errno = 0;
  ssize_t n;
  do n = read(report[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n > 0) {
    int st;
    waitpid(pid, &st, 0);
    if (capture) close(out[0]), close(err[0]);
    throw UserError("cannot run '" + spec.path + "': " + std::strerror(child_errno));
  }

  Child c;
  c.pid = pid;
  if (capture) {
    c.out_fd = out[0];
    c.err_fd = err[0];
    fcntl(c.out_fd, F_SETFL, fcntl(c.out_fd, F_GETFL) | O_NONBLOCK);
    fcntl(c.err_fd, F_SETFL, fcntl(c.err_fd, F_GETFL) | O_NONBLOCK);
  }
  return c;
}

std::string resolve_program(const std::string& name, const std::string& path_env) {
  auto usable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (usable(name)) return name;
    struct stat st;
    throw UserError("--exec: '" + name + "' " +
                    (stat(name.c_str(), &st) != 0 ? "does not exist"
                     : S_ISREG(st.st_mode)        ? "is not executable (chmod +x it)"
                                                  : "is not a file"));
  }
  size_t start = 0;
  while (start <= path_env.size()) {
    size_t colon = path_env.find(':', start);
    std::string dir = path_env.substr(start, colon == std::string::npos ? colon : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (usable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw UserError("--exec: program '" + name + "' is not on PATH (" + path_env +
                  "); give its path, e.g. ./" + name);
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, size_t(n));
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

ExitInfo describe_exit(int st) {
  if (WIFEXITED(st))
    return {WEXITSTATUS(st), "exited with code " + std::to_string(WEXITSTATUS(st))};
  if (WIFSIGNALED(st)) {
    int s = WTERMSIG(st);
    return {128 + s, "was killed by signal " + std::to_string(s) + " (" + signal_name(s) + ")" +
                         (WCOREDUMP(st) ? ", core dumped" : "")};
  }
  return {1, "ended with wait status " + std::to_string(st)};
}

int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : 1;
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return online_cpus();
}

}  // namespace triad::launch
