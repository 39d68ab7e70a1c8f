// Choosing where the layout comes from, and the rules every source shares: the job token
// and the default rendezvous port.
#include "plan.hpp"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/error.hpp"

extern char** environ;

namespace triad::launch {

Environment current_environment() {
  Environment env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

const std::string* find(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int env_int(const Environment& env, const std::string& name) {
  const std::string* v = find(env, name);
  // --scheduler slurm / mpi outside a job step, or a step whose environment lacks a variable.
  if (!v)
    throw UserError(name + " is not set" +
                    (name.starts_with("SLURM_")
                         ? std::string(": --scheduler slurm reads the job step's variables; run "
                                       "under srun, or use --scheduler none (or auto) with "
                                       "--nproc-per-node")
                         : std::string(": --scheduler mpi reads Open MPI's variables; run under "
                                       "mpirun, or use --scheduler none (or auto) with "
                                       "--nproc-per-node")));
  errno = 0;
  char* end = nullptr;
  long n = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE || n < 0 || n > INT_MAX)
    throw UserError(name + "='" + *v + "' is not a non-negative integer");
  return int(n);
}

void reject_layout_flags(const LaunchArgs& a, const std::string& under) {
  if (a.nnodes_given || a.node_rank_given)
    throw UserError("--nnodes/--node-rank were given, but under " + under +
                    " the node count and this node's rank come from the scheduler; drop them, "
                    "or pass --scheduler none to ignore the scheduler");
}

bool under_slurm(const Environment& env) {
  // Inside a job step (srun), not merely inside an allocation (sbatch, salloc), where one
  // launcher runs the whole node by its flags.
  return find(env, "SLURM_PROCID") && find(env, "SLURM_NTASKS") &&
         (find(env, "SLURM_STEP_ID") || find(env, "SLURM_STEPID"));
}

bool under_mpi(const Environment& env) {
  return find(env, "OMPI_COMM_WORLD_RANK") && find(env, "OMPI_COMM_WORLD_SIZE");
}

int ranks_sharing_cpus(const JobPlan& plan, int usable_cpus, int online_cpus) {
  if (plan.ranks.size() > 1) return int(plan.ranks.size());
  return usable_cpus >= online_cpus ? plan.local_world_size : 1;
}

JobPlan plan_local(const LaunchArgs& a) {
  if (a.node_rank >= a.nnodes)
    throw UserError("--node-rank " + std::to_string(a.node_rank) + " is outside 0.." +
                    std::to_string(a.nnodes - 1) + " (--nnodes " + std::to_string(a.nnodes) + ")");
  if (!a.nnodes_given && a.node_rank_given && a.node_rank > 0)
    throw UserError("--node-rank " + std::to_string(a.node_rank) + " needs --nnodes");
  if (int64_t(a.nnodes) * a.nproc_per_node > INT_MAX)
    throw UserError("--nnodes " + std::to_string(a.nnodes) + " × --nproc-per-node " +
                    std::to_string(a.nproc_per_node) + " makes " +
                    std::to_string(int64_t(a.nnodes) * a.nproc_per_node) +
                    " ranks, more than a job can have (" + std::to_string(INT_MAX) +
                    "); give fewer nodes or ranks per node");
  JobPlan p;
  p.source = a.nnodes > 1
                 ? "flags, node " + std::to_string(a.node_rank) + " of " + std::to_string(a.nnodes)
                 : "flags";
  p.world_size = a.nnodes * a.nproc_per_node;
  p.local_world_size = a.nproc_per_node;
  for (int i = 0; i < a.nproc_per_node; ++i)
    p.ranks.push_back({a.node_rank * a.nproc_per_node + i, i});
  p.agent = a.node_rank;
  p.agents = a.nnodes;
  p.agent_kind = "node";
  p.master_addr = a.master_addr.empty() ? "127.0.0.1" : a.master_addr;
  return p;
}

namespace {

// A token shared by launchers that cannot hand one to each other: taken from the
// environment, and refused when too short to keep other users' processes out.
std::string shared_token(const Environment& env, const JobPlan& p) {
  const std::string how =
      "export TRIAD_JOB_TOKEN=$(head -c16 /dev/urandom | xxd -p) before starting the "
      "launchers (srun and mpirun pass the environment on; with --nnodes give every node the "
      "same value)";
  const std::string* t = find(env, "TRIAD_JOB_TOKEN");
  const std::string why = "this job has " + std::to_string(p.agents) + " launchers (" + p.source +
                          "), which must share one job token";
  if (!t || t->empty()) throw UserError("TRIAD_JOB_TOKEN is not set, but " + why + "; " + how);
  if (t->size() < 16)
    throw UserError("TRIAD_JOB_TOKEN has " + std::to_string(t->size()) +
                    " characters; use at least 16 random ones: " + how);
  for (unsigned char c : *t)
    if (!std::isgraph(c))
      throw UserError("TRIAD_JOB_TOKEN contains a space or control character; " + how);
  return *t;
}

}  // namespace

JobPlan make_plan(const LaunchArgs& a, const Environment& env) {
  std::string s = a.scheduler;
  if (s == "auto") s = under_slurm(env) ? "slurm" : under_mpi(env) ? "mpi" : "none";
  JobPlan p = s == "slurm" ? plan_slurm(a, env) : s == "mpi" ? plan_mpi(a, env) : plan_local(a);

  // Port: the flag; under a scheduler also MASTER_PORT; else a free one when no other
  // launcher needs to know it, 29500 (torchrun's) when one does.
  const std::string* env_port = s != "none" ? find(env, "MASTER_PORT") : nullptr;
  if (a.master_port) {
    p.master_port = *a.master_port;
  } else if (env_port) {
    p.master_port = env_int(env, "MASTER_PORT");
    if (p.master_port < 1 || p.master_port > 65535)
      throw UserError("MASTER_PORT=" + *env_port + " is outside 1..65535");
  } else {
    p.master_port = p.agents == 1 ? 0 : kDefaultMasterPort;
  }
  if (p.master_port == 0 && p.agents > 1)
    throw UserError(
        "--master-port 0 (a free port) works only when one launcher runs the whole "
        "job; this job has " +
        std::to_string(p.agents) + " launchers (" + p.source +
        "), which must all know the port: give one, e.g. --master-port 29500");
  return p;
}

void assign_token(JobPlan& p, const Environment& env) {
  p.token = p.agents == 1 ? make_job_token() : shared_token(env, p);
}

}  // namespace triad::launch
