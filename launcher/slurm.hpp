// SLURM's compressed lists, expanded without calling scontrol.
#pragma once

#include <string>
#include <vector>

namespace triad::launch {

// "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5; several bracket groups in one
// name multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Throws UserError on bad syntax.
std::vector<std::string> expand_hostlist(const std::string& list);

// SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1. Throws UserError on bad syntax.
std::vector<int> expand_tasks_per_node(const std::string& list);

}  // namespace triad::launch
