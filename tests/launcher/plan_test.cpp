// Plans from flags and from the variables srun and mpirun set (copied from real runs of
// slurm-wlm 22.05 and Open MPI 4.1), and the token and port rules.
#include <gtest/gtest.h>

#include "plan.hpp"
#include "triad/core/error.hpp"

using namespace triad::launch;

namespace {

std::string error_of(const LaunchArgs& a, const Environment& env, bool token = false) {
  try {
    JobPlan p = make_plan(a, env);
    if (token) assign_token(p, env);
  } catch (const triad::UserError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::pair<int, int>> slots(const JobPlan& p) {
  std::vector<std::pair<int, int>> v;
  for (auto& s : p.ranks) v.emplace_back(s.rank, s.local_rank);
  return v;
}

LaunchArgs nodes(int nproc, int nnodes, int node_rank) {
  LaunchArgs a;
  a.nproc_per_node = nproc;
  a.nproc_given = true;
  a.nnodes = nnodes;
  a.nnodes_given = true;
  a.node_rank = node_rank;
  a.node_rank_given = true;
  return a;
}

// One srun task, as srun -N2 -n2 (one task per node) shows it to the task on the second node.
Environment srun_per_node() {
  return {{"SLURM_PROCID", "1"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_NNODES", "2"},
          {"SLURM_NODEID", "1"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEPID", "0"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"},
          {"SLURM_TASKS_PER_NODE", "1(x2)"}};
}

const std::string kToken = "0123456789abcdef0123456789abcdef";

}  // namespace

TEST(Plan, LocalNodeGetsItsSliceOfRanks) {
  JobPlan p = make_plan(nodes(3, 2, 1), {});
  EXPECT_EQ(p.world_size, 6);
  EXPECT_EQ(p.local_world_size, 3);
  EXPECT_EQ(slots(p), (std::vector<std::pair<int, int>>{{3, 0}, {4, 1}, {5, 2}}));
  EXPECT_EQ(p.agent, 1);
  EXPECT_EQ(p.agents, 2);
  EXPECT_FALSE(p.hosts_store());
  EXPECT_EQ(p.master_addr, "127.0.0.1");
  EXPECT_EQ(p.master_port, kDefaultMasterPort);
}

TEST(Plan, SingleLauncherPicksAFreePortAndMakesItsOwnToken) {
  LaunchArgs a;
  a.nproc_per_node = 4;
  Environment env{{"TRIAD_JOB_TOKEN", kToken}};
  JobPlan p = make_plan(a, env);
  EXPECT_EQ(p.master_port, 0);
  EXPECT_TRUE(p.hosts_store());
  assign_token(p, env);
  EXPECT_EQ(p.token.size(), 32u);
  EXPECT_NE(p.token, kToken);  // a fresh one, not whatever the environment carried
}

TEST(Plan, SeveralLaunchersShareTheEnvironmentsToken) {
  Environment env{{"TRIAD_JOB_TOKEN", kToken}};
  JobPlan p = make_plan(nodes(1, 2, 0), env);
  assign_token(p, env);
  EXPECT_EQ(p.token, kToken);
  EXPECT_NE(error_of(nodes(1, 2, 0), {}, true).find("export TRIAD_JOB_TOKEN=$(head -c16"),
            std::string::npos);
  EXPECT_NE(error_of(nodes(1, 2, 0), {{"TRIAD_JOB_TOKEN", "short"}}, true).find("5 characters"),
            std::string::npos);
  EXPECT_NE(error_of(nodes(1, 2, 0), {{"TRIAD_JOB_TOKEN", kToken + " x"}}, true).find("space"),
            std::string::npos);
}

TEST(Plan, BadLocalLayoutsAreRefused) {
  EXPECT_NE(error_of(nodes(1, 2, 2), {}).find("--node-rank 2 is outside 0..1"), std::string::npos);
  LaunchArgs a = nodes(1, 2, 0);
  a.master_port = 0;
  EXPECT_NE(error_of(a, {}).find("--master-port 0"), std::string::npos);
}

TEST(Plan, SrunWithOneTaskPerNodeSpawnsTheNodesRanks) {
  LaunchArgs a;
  a.nproc_per_node = 4;
  a.nproc_given = true;
  JobPlan p = make_plan(a, srun_per_node());
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_EQ(slots(p), (std::vector<std::pair<int, int>>{{4, 0}, {5, 1}, {6, 2}, {7, 3}}));
  EXPECT_EQ(p.agent, 1);
  EXPECT_EQ(p.agents, 2);
  EXPECT_EQ(p.agent_kind, "node");
  EXPECT_EQ(p.master_addr, "gpu07");
  EXPECT_EQ(p.master_port, kDefaultMasterPort);
}

TEST(Plan, SrunWithOneTaskPerRankRunsItsOwnRank) {
  // srun -N2 -n6 inside a larger allocation: the step's values win over the job's.
  Environment env{{"SLURM_PROCID", "4"},
                  {"SLURM_NTASKS", "12"},
                  {"SLURM_STEP_NUM_TASKS", "6"},
                  {"SLURM_NNODES", "4"},
                  {"SLURM_STEP_NUM_NODES", "2"},
                  {"SLURM_NODEID", "1"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_STEP_ID", "3"},
                  {"SLURM_JOB_NODELIST", "n[1-4]"},
                  {"SLURM_STEP_NODELIST", "n[3-4]"},
                  {"SLURM_TASKS_PER_NODE", "3(x4)"},
                  {"SLURM_STEP_TASKS_PER_NODE", "3(x2)"}};
  JobPlan p = make_plan(LaunchArgs{}, env);
  EXPECT_EQ(p.world_size, 6);
  EXPECT_EQ(p.local_world_size, 3);
  EXPECT_EQ(slots(p), (std::vector<std::pair<int, int>>{{4, 1}}));
  EXPECT_EQ(p.agent, 4);
  EXPECT_EQ(p.agents, 6);
  EXPECT_EQ(p.agent_kind, "task");
  EXPECT_EQ(p.master_addr, "n3");

  LaunchArgs two;
  two.nproc_per_node = 2;
  two.nproc_given = true;
  EXPECT_NE(error_of(two, env).find("drop --nproc-per-node 2"), std::string::npos);
}

// Threads per rank without OMP_NUM_THREADS: a launcher's own ranks share its CPUs; one task per
// rank shares the node's with the node's tasks, unless bound to fewer CPUs than the node has.
TEST(Plan, RanksSharingTheCpus) {
  JobPlan local;
  local.ranks = {{0, 0}, {1, 1}, {2, 2}, {3, 3}};
  local.local_world_size = 4;
  EXPECT_EQ(ranks_sharing_cpus(local, 16, 16), 4);
  JobPlan task;  // mpirun -n 8 on one node: this task runs rank 3
  task.ranks = {{3, 3}};
  task.local_world_size = 8;
  EXPECT_EQ(ranks_sharing_cpus(task, 16, 16), 8);  // unbound: the node's 16 CPUs, 8 tasks
  EXPECT_EQ(ranks_sharing_cpus(task, 2, 16), 1);   // bound to 2 CPUs: its own
  JobPlan alone;
  alone.ranks = {{0, 0}};
  EXPECT_EQ(ranks_sharing_cpus(alone, 16, 16), 1);
}

TEST(Plan, MasterFromFlagThenEnvironmentThenNodeList) {
  Environment env = srun_per_node();
  env["MASTER_ADDR"] = "10.1.2.3";
  env["MASTER_PORT"] = "31000";
  JobPlan p = make_plan(LaunchArgs{}, env);
  EXPECT_EQ(p.master_addr, "10.1.2.3");
  EXPECT_EQ(p.master_port, 31000);
  LaunchArgs a;
  a.master_addr = "gpu08";
  a.master_port = 32000;
  p = make_plan(a, env);
  EXPECT_EQ(p.master_addr, "gpu08");
  EXPECT_EQ(p.master_port, 32000);
}

TEST(Plan, SchedulerOwnsTheNodeFlagsUnlessToldNone) {
  EXPECT_NE(error_of(nodes(1, 2, 1), srun_per_node()).find("--scheduler none"), std::string::npos);
  LaunchArgs a = nodes(2, 2, 1);
  a.scheduler = "none";
  JobPlan p = make_plan(a, srun_per_node());
  EXPECT_EQ(p.world_size, 4);
  EXPECT_EQ(p.agent_kind, "node");
}

TEST(Plan, BatchScriptIsNotAStep) {
  // sbatch's script sees SLURM_PROCID but no step id: one launcher runs the node by its flags.
  Environment env{{"SLURM_JOB_ID", "7"},  {"SLURM_PROCID", "0"}, {"SLURM_NODEID", "0"},
                  {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a"}};
  LaunchArgs a;
  a.nproc_per_node = 2;
  JobPlan p = make_plan(a, env);
  EXPECT_EQ(p.source, "flags");
  EXPECT_EQ(p.agents, 1);
}

TEST(Plan, MpirunTasksAreRanks) {
  Environment env{{"OMPI_COMM_WORLD_RANK", "1"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  JobPlan p = make_plan(LaunchArgs{}, env);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(slots(p), (std::vector<std::pair<int, int>>{{1, 1}}));
  EXPECT_EQ(p.agents, 2);
  EXPECT_EQ(p.master_addr, "127.0.0.1");
  EXPECT_EQ(p.master_port, kDefaultMasterPort);

  env["OMPI_COMM_WORLD_SIZE"] = "4";  // two nodes: nobody says where task 0 is
  EXPECT_NE(error_of(LaunchArgs{}, env).find("--master-addr"), std::string::npos);
  env["MASTER_ADDR"] = "node0";
  EXPECT_EQ(make_plan(LaunchArgs{}, env).master_addr, "node0");
}
