// DistEnv::from_environment: the rank's side of the launcher's environment contract.
#include "triad/core/dist/dist_env.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

#include "triad/core/error.hpp"

namespace triad {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

const char* kHint =
    "; these variables are set by triad-launch (or torchrun); start the ranks with "
    "'triad-launch --nproc-per-node N ...' or set them consistently by hand";

// Whole-string decimal integer, so "2x" or "" is an error rather than 2 or 0.
int parse_int(const char* name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || n < INT_MIN || n > INT_MAX)
    throw UserError(std::string(name) + "='" + v + "' is not an integer" + kHint);
  return int(n);
}

std::optional<int> int_var(const char* name) {
  auto v = env(name);
  if (!v) return std::nullopt;
  return parse_int(name, *v);
}

[[noreturn]] void bad(const std::string& what) {
  throw UserError(what + kHint);
}

}  // namespace

DistEnv DistEnv::from_environment() {
  DistEnv e;
  auto rank = int_var("RANK");
  auto world = int_var("WORLD_SIZE");
  auto local_rank = int_var("LOCAL_RANK");
  auto local_world = int_var("LOCAL_WORLD_SIZE");
  auto port = int_var("MASTER_PORT");
  if (auto a = env("MASTER_ADDR")) e.master_addr = *a;
  if (auto t = env("TRIAD_JOB_TOKEN")) e.token = *t;

  if (!rank && !world) {
    // A world of one; the address and token, when given, still describe a store to use.
    if (local_rank || local_world)
      bad("LOCAL_RANK/LOCAL_WORLD_SIZE are set but RANK and WORLD_SIZE are not");
    if (port) e.master_port = *port;
    return e;
  }
  if (!rank) bad("WORLD_SIZE=" + std::to_string(*world) + " is set but RANK is not");
  if (!world) bad("RANK=" + std::to_string(*rank) + " is set but WORLD_SIZE is not");
  if (*world < 1) bad("WORLD_SIZE=" + std::to_string(*world) + " must be at least 1");
  if (*rank < 0 || *rank >= *world)
    bad("RANK=" + std::to_string(*rank) + " is outside 0.." + std::to_string(*world - 1) +
        " (WORLD_SIZE=" + std::to_string(*world) + ")");
  e.rank = *rank;
  e.world_size = *world;

  // Both local variables absent: a hand-started single-node job.
  if (!local_rank && !local_world) {
    e.local_rank = e.rank;
    e.local_world_size = e.world_size;
  } else {
    if (!local_rank) bad("LOCAL_WORLD_SIZE is set but LOCAL_RANK is not");
    if (!local_world) bad("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not");
    if (*local_world < 1 || *local_world > e.world_size)
      bad("LOCAL_WORLD_SIZE=" + std::to_string(*local_world) + " is outside 1.." +
          std::to_string(e.world_size) + " (WORLD_SIZE=" + std::to_string(e.world_size) + ")");
    if (*local_rank < 0 || *local_rank >= *local_world)
      bad("LOCAL_RANK=" + std::to_string(*local_rank) + " is outside 0.." +
          std::to_string(*local_world - 1) + " (LOCAL_WORLD_SIZE=" + std::to_string(*local_world) +
          ")");
    e.local_rank = *local_rank;
    e.local_world_size = *local_world;
  }

  if (port) {
    if (*port < 1 || *port > 65535)
      bad("MASTER_PORT=" + std::to_string(*port) + " is outside 1..65535");
    e.master_port = *port;
  }
  if (e.distributed()) {
    if (!port) bad("WORLD_SIZE=" + std::to_string(e.world_size) + " but MASTER_PORT is not set");
    if (e.master_addr.empty()) bad("MASTER_ADDR is empty");
    if (e.token.empty())
      bad("WORLD_SIZE=" + std::to_string(e.world_size) +
          " but TRIAD_JOB_TOKEN is not set (the rendezvous refuses connections without the "
          "job's token)");
  }
  return e;
}

}  // namespace triad
