// Where this process stands in the job, as the launcher tells its ranks through the
// environment (torchrun's names, so tools that read them keep working):
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TRIAD_JOB_TOKEN
// A process started without them is a world of one.
#pragma once

#include <string>

namespace triad {

struct DistEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string token;
  bool distributed() const { return world_size > 1; }
  // Reads the variables above; absent RANK/WORLD_SIZE: a world of one. Throws UserError on
  // malformed or inconsistent values (naming the variable and value).
  static DistEnv from_environment();
};

}  // namespace triad
