// The layout under Open MPI's mpirun: one task per rank, from OMPI_COMM_WORLD_*. No host
// list is exported, so a job over several nodes names the master itself.
#include "plan.hpp"
#include "triad/core/error.hpp"

namespace triad::launch {

JobPlan plan_mpi(const LaunchArgs& a, const Environment& env) {
  reject_layout_flags(a, "mpirun");
  const int rank = env_int(env, "OMPI_COMM_WORLD_RANK");
  const int size = env_int(env, "OMPI_COMM_WORLD_SIZE");
  const int local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK");
  const int local_size = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
  if (size < 1 || rank >= size || local_size < 1 || local_size > size || local_rank >= local_size)
    throw UserError("Open MPI's variables disagree: OMPI_COMM_WORLD_RANK=" + std::to_string(rank) +
                    " SIZE=" + std::to_string(size) + " LOCAL_RANK=" + std::to_string(local_rank) +
                    " LOCAL_SIZE=" + std::to_string(local_size));
  if (a.nproc_given && a.nproc_per_node != 1)
    throw UserError("mpirun started " + std::to_string(size) +
                    " tasks, one per rank, so each launcher runs one rank; drop "
                    "--nproc-per-node " +
                    std::to_string(a.nproc_per_node) + " (use mpirun -n to choose the ranks)");

  JobPlan p;
  p.source = "Open MPI, one task per rank";
  p.world_size = size;
  p.local_world_size = local_size;
  p.ranks.push_back({rank, local_rank});
  p.agent = rank;
  p.agents = size;
  p.agent_kind = "task";
  if (!a.master_addr.empty()) {
    p.master_addr = a.master_addr;
  } else if (const std::string* m = find(env, "MASTER_ADDR")) {
    p.master_addr = *m;
  } else if (local_size == size) {
    p.master_addr = "127.0.0.1";  // every task on this one node
  } else {
    throw UserError("mpirun spread " + std::to_string(size) +
                    " tasks over several nodes, and Open MPI does not say where task 0 runs; "
                    "pass --master-addr (the host of task 0) or export MASTER_ADDR");
  }
  return p;
}

}  // namespace triad::launch
