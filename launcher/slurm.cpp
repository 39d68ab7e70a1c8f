// The layout under srun: one task per node (this launcher spawns the node's ranks) or one
// task per rank (this launcher runs its task's rank), from SLURM's variables.
#include "slurm.hpp"

#include <cctype>

#include "plan.hpp"
#include "triad/core/error.hpp"

namespace triad::launch {

namespace {

[[noreturn]] void bad_list(const std::string& list, const std::string& why) {
  throw UserError("cannot read the SLURM host list '" + list + "': " + why +
                  "; set MASTER_ADDR or pass --master-addr to name the first host yourself");
}

// Splits at commas outside brackets.
std::vector<std::string> split_top(const std::string& s, const std::string& whole) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) bad_list(whole, "unbalanced ']'");
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (depth != 0) bad_list(whole, "unbalanced '['");
  out.push_back(cur);
  return out;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "01-03,7" -> 01 02 03 7 (zero padding kept from the lower bound).
std::vector<std::string> expand_ranges(const std::string& body, const std::string& whole) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = item.find('-');
    if (dash == std::string::npos) {
      if (!all_digits(item)) bad_list(whole, "'" + item + "' is not a number");
      out.push_back(item);
    } else {
      std::string lo = item.substr(0, dash), hi = item.substr(dash + 1);
      if (!all_digits(lo) || !all_digits(hi)) bad_list(whole, "'" + item + "' is not a range");
      long a = std::stol(lo), b = std::stol(hi);
      if (b < a) bad_list(whole, "range '" + item + "' runs backwards");
      if (b - a > 100000) bad_list(whole, "range '" + item + "' is too long");
      for (long n = a; n <= b; ++n) {
        std::string d = std::to_string(n);
        if (d.size() < lo.size()) d.insert(0, lo.size() - d.size(), '0');
        out.push_back(d);
      }
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_top(list, list)) {
    if (item.empty()) bad_list(list, "empty host name");
    std::vector<std::string> names{""};
    size_t pos = 0;
    while (pos < item.size()) {
      size_t open = item.find('[', pos);
      std::string text = item.substr(pos, open == std::string::npos ? open : open - pos);
      for (auto& n : names) n += text;
      if (open == std::string::npos) break;
      size_t close = item.find(']', open);
      std::vector<std::string> next;
      for (const auto& n : names)
        for (const auto& r : expand_ranges(item.substr(open + 1, close - open - 1), list))
          next.push_back(n + r);
      names = std::move(next);
      pos = close + 1;
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& list) {
  std::vector<int> out;
  auto bad = [&](const std::string& why) {
    throw UserError("cannot read SLURM_TASKS_PER_NODE='" + list + "': " + why);
  };
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t paren = item.find("(x");
    std::string count = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string::npos) {
      std::string rep = item.substr(paren + 2);
      if (rep.empty() || rep.back() != ')') bad("'" + item + "' lacks ')'");
      rep.pop_back();
      if (!all_digits(rep)) bad("'" + item + "' has no repeat count");
      repeat = std::stoi(rep);
    }
    if (!all_digits(count)) bad("'" + item + "' is not a task count");
    for (int i = 0; i < repeat; ++i) out.push_back(std::stoi(count));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {

// The step's value when srun set one (a step may use part of the allocation), else the job's.
const std::string* step_or_job(const Environment& env, const char* step, const char* job) {
  const std::string* v = find(env, step);
  return v ? v : find(env, job);
}

int step_or_job_int(const Environment& env, const char* step, const char* job) {
  return find(env, step) ? env_int(env, step) : env_int(env, job);
}

}  // namespace

JobPlan plan_slurm(const LaunchArgs& a, const Environment& env) {
  reject_layout_flags(a, "srun");
  const int ntasks = step_or_job_int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS");
  const int nnodes = step_or_job_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES");
  const int procid = env_int(env, "SLURM_PROCID");
  const int nodeid = env_int(env, "SLURM_NODEID");
  const int localid = env_int(env, "SLURM_LOCALID");
  if (ntasks < 1 || nnodes < 1 || procid >= ntasks || nodeid >= nnodes)
    throw UserError("SLURM's variables disagree: SLURM_PROCID=" + std::to_string(procid) + " of " +
                    std::to_string(ntasks) + " tasks, SLURM_NODEID=" + std::to_string(nodeid) +
                    " of " + std::to_string(nnodes) + " nodes");

  JobPlan p;
  if (ntasks == nnodes) {
    // One task per node: this launcher starts the node's --nproc-per-node ranks.
    p.source = "SLURM, one task per node";
    p.world_size = nnodes * a.nproc_per_node;
    p.local_world_size = a.nproc_per_node;
    for (int i = 0; i < a.nproc_per_node; ++i)
      p.ranks.push_back({nodeid * a.nproc_per_node + i, i});
    p.agent = nodeid;
    p.agents = nnodes;
    p.agent_kind = "node";
  } else {
    // One task per rank: this launcher runs its own task's rank.
    if (a.nproc_given && a.nproc_per_node != 1)
      throw UserError("srun started " + std::to_string(ntasks) + " tasks on " +
                      std::to_string(nnodes) +
                      " nodes, one per rank, so each launcher runs one rank; drop "
                      "--nproc-per-node " +
                      std::to_string(a.nproc_per_node) +
                      ", or start one task per node (srun --ntasks-per-node=1) and keep it");
    const std::string* tpn = step_or_job(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE");
    int local = ntasks;
    if (tpn) {
      auto counts = expand_tasks_per_node(*tpn);
      if (nodeid >= int(counts.size()))
        throw UserError("SLURM_TASKS_PER_NODE='" + *tpn + "' lists " +
                        std::to_string(counts.size()) + " nodes but SLURM_NODEID is " +
                        std::to_string(nodeid));
      local = counts[nodeid];
    } else if (nnodes > 1) {
      throw UserError("SLURM_TASKS_PER_NODE is not set, so the tasks on this node are unknown");
    }
    if (localid >= local)
      throw UserError("SLURM_LOCALID=" + std::to_string(localid) + " but this node has " +
                      std::to_string(local) + " tasks");
    p.source = "SLURM, one task per rank";
    p.world_size = ntasks;
    p.local_world_size = local;
    p.ranks.push_back({procid, localid});
    p.agent = procid;
    p.agents = ntasks;
    p.agent_kind = "task";
  }

  if (!a.master_addr.empty()) {
    p.master_addr = a.master_addr;
  } else if (const std::string* m = find(env, "MASTER_ADDR")) {
    p.master_addr = *m;
  } else {
    const std::string* list = find(env, "SLURM_STEP_NODELIST");
    if (!list) list = find(env, "SLURM_JOB_NODELIST");
    if (!list) list = find(env, "SLURM_NODELIST");
    if (!list)
      throw UserError(
          "none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST is set, "
          "so the first host is unknown; pass --master-addr or set MASTER_ADDR");
    p.master_addr = expand_hostlist(*list).front();
  }
  return p;
}

}  // namespace triad::launch
