// Starting one rank: fork + execve, in its own process group, stdout/stderr to pipes, and
// killed by the kernel if the launcher itself dies.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace triad::launch {

struct ChildSpec {
  std::string path;               // the executable, resolved (see resolve_program)
  std::vector<std::string> argv;  // argv[0] included
  std::map<std::string, std::string> env;
};

struct Child {
  pid_t pid = -1;   // also its process group id
  int out_fd = -1;  // read ends (non-blocking), -1 when the output is not captured
  int err_fd = -1;
};

// capture: stdout/stderr go to pipes; else the child shares the launcher's. stdin is
// /dev/null. Throws UserError when the program cannot be executed.
Child spawn_child(const ChildSpec& spec, bool capture);

// PATH lookup like execvp, done before fork so the error is one clear message.
std::string resolve_program(const std::string& name, const std::string& path_env);

// /proc/self/exe: the launcher starts its training ranks as itself.
std::string self_executable();

// How a wait status reads: "exited with code 3", "was killed by signal 9 (SIGKILL)", and the
// exit status a shell would show (128 + signal for a signal).
struct ExitInfo {
  int code = 0;
  std::string how;
};
ExitInfo describe_exit(int wait_status);
std::string signal_name(int sig);  // "SIGKILL"

// CPUs this process may run on (its affinity mask, which SLURM and cgroups narrow).
int usable_cpus();
// CPUs online on this machine (what an unbound process could use).
int online_cpus();

}  // namespace triad::launch
