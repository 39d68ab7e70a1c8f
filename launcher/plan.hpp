// Where this launcher stands in the job: which ranks it runs, how many launchers there are,
// where the rendezvous is and which token opens it. Built from the flags (plan.cpp), from
// SLURM's variables (slurm.cpp) or from Open MPI's (mpi.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cli.hpp"

namespace triad::launch {

// A snapshot of the environment, so plans can be built (and tested) from any variables.
using Environment = std::map<std::string, std::string>;
Environment current_environment();

struct RankSlot {
  int rank = 0;
  int local_rank = 0;
};

struct JobPlan {
  std::string source;  // "local", "SLURM, one task per node", ... (for messages)
  int world_size = 1;
  int local_world_size = 1;     // ranks on this node (LOCAL_WORLD_SIZE)
  std::vector<RankSlot> ranks;  // the ranks this launcher starts
  // Launchers ("agents") in the job: one per node, or one per rank under srun -n / mpirun.
  int agent = 0;
  int agents = 1;
  std::string agent_kind = "node";  // "node" or "task": how messages name an agent
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: the host agent picks a free port (only when agents == 1)
  std::string token;
  bool hosts_store() const { return agent == 0; }
  std::string agent_name(int a) const { return agent_kind + " " + std::to_string(a); }
};

// Chooses the source (args.scheduler, then what the environment shows) and builds the plan,
// port included. Throws UserError on contradictory flags or variables.
JobPlan make_plan(const LaunchArgs& args, const Environment& env);
// The job token: a fresh random one when this launcher runs the whole job; else
// TRIAD_JOB_TOKEN, which every launcher must share (UserError when absent or short).
void assign_token(JobPlan& plan, const Environment& env);

// Builders for each source; they fill everything but the token and the default port.
JobPlan plan_local(const LaunchArgs& args);
JobPlan plan_slurm(const LaunchArgs& args, const Environment& env);
JobPlan plan_mpi(const LaunchArgs& args, const Environment& env);

// How many ranks share this launcher's CPUs when OMP_NUM_THREADS is not set: its own ranks;
// with one task per rank (srun, mpirun), the node's tasks, unless the scheduler bound the task
// to fewer CPUs than the node has (then its CPUs are its own). Each rank gets cpus / sharing.
int ranks_sharing_cpus(const JobPlan& plan, int usable_cpus, int online_cpus);

bool under_slurm(const Environment& env);
bool under_mpi(const Environment& env);

// Helpers shared by the builders.
const std::string* find(const Environment& env, const std::string& name);
int env_int(const Environment& env, const std::string& name);  // required, whole integer
void reject_layout_flags(const LaunchArgs& args, const std::string& under);

constexpr int kDefaultMasterPort = 29500;

}  // namespace triad::launch
