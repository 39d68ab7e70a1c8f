#include "triad/core/dist/process_groups.hpp"

#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"

namespace triad {

ProcessGroups::ProcessGroups(int world_size, int tp, int pp, int dp)
    : world_(world_size), tp_(tp), pp_(pp), dp_(dp) {
  if (world_ < 1) throw UserError("world size " + std::to_string(world_) + " must be at least 1");
  if (tp_ < 1 || pp_ < 1 || dp_ < 0)
    throw UserError("tensor_model_parallel_size (" + std::to_string(tp_) +
                    ") and pipeline_model_parallel_size (" + std::to_string(pp_) +
                    ") must be at least 1, data_parallel_size (" + std::to_string(dp_) +
                    ") at least 0 (0: derived)");
  if (dp_ == 0) {
    if (world_ % (tp_ * pp_) != 0)
      throw UserError("world size " + std::to_string(world_) +
                      " is not a multiple of tensor_model_parallel_size " + std::to_string(tp_) +
                      " x pipeline_model_parallel_size " + std::to_string(pp_) + " = " +
                      std::to_string(tp_ * pp_) + "; change the sizes or the number of ranks");
    dp_ = world_ / (tp_ * pp_);
  }
  if (tp_ * pp_ * dp_ != world_)
    throw UserError(
        "tensor_model_parallel_size " + std::to_string(tp_) + " x pipeline_model_parallel_size " +
        std::to_string(pp_) + " x data_parallel_size " + std::to_string(dp_) + " = " +
        std::to_string(tp_ * pp_ * dp_) + ", but the world has " + std::to_string(world_) +
        " ranks; make the product equal the world size (or leave "
        "data_parallel_size out to derive it)");
}

void ProcessGroups::check_rank(int rank) const {
  if (rank < 0 || rank >= world_)
    throw UserError("rank " + std::to_string(rank) + " is outside the world of " +
                    std::to_string(world_) + " ranks");
}

RankCoords ProcessGroups::coords(int rank) const {
  check_rank(rank);
  return RankCoords{rank % tp_, (rank / tp_) % dp_, rank / (tp_ * dp_)};
}

int ProcessGroups::rank_of(const RankCoords& c) const {
  if (c.tp < 0 || c.tp >= tp_ || c.dp < 0 || c.dp >= dp_ || c.pp < 0 || c.pp >= pp_)
    throw UserError("coordinates (tp " + std::to_string(c.tp) + ", dp " + std::to_string(c.dp) +
                    ", pp " + std::to_string(c.pp) + ") are outside " + describe());
  return c.tp + tp_ * (c.dp + dp_ * c.pp);
}

std::vector<int> ProcessGroups::tp_group(int rank) const {
  RankCoords c = coords(rank);
  std::vector<int> g;
  for (int i = 0; i < tp_; ++i) g.push_back(rank_of({i, c.dp, c.pp}));
  return g;
}

std::vector<int> ProcessGroups::dp_group(int rank) const {
  RankCoords c = coords(rank);
  std::vector<int> g;
  for (int i = 0; i < dp_; ++i) g.push_back(rank_of({c.tp, i, c.pp}));
  return g;
}

std::vector<int> ProcessGroups::pp_group(int rank) const {
  RankCoords c = coords(rank);
  std::vector<int> g;
  for (int i = 0; i < pp_; ++i) g.push_back(rank_of({c.tp, c.dp, i}));
  return g;
}

namespace {
template <class F>
std::vector<std::vector<int>> all_groups(int world, F group_of) {
  std::vector<std::vector<int>> gs;
  std::vector<bool> seen(world, false);
  for (int r = 0; r < world; ++r) {
    if (seen[r]) continue;
    auto g = group_of(r);
    for (int m : g) seen[m] = true;
    gs.push_back(std::move(g));
  }
  return gs;
}
}  // namespace

std::vector<std::vector<int>> ProcessGroups::tp_groups() const {
  return all_groups(world_, [this](int r) { return tp_group(r); });
}
std::vector<std::vector<int>> ProcessGroups::dp_groups() const {
  return all_groups(world_, [this](int r) { return dp_group(r); });
}
std::vector<std::vector<int>> ProcessGroups::pp_groups() const {
  return all_groups(world_, [this](int r) { return pp_group(r); });
}

// Colors number the groups by the other two coordinates; keys order members by their own.
SplitSpec ProcessGroups::tp_split(int rank) const {
  RankCoords c = coords(rank);
  return {c.dp + dp_ * c.pp, c.tp};
}
SplitSpec ProcessGroups::dp_split(int rank) const {
  RankCoords c = coords(rank);
  return {c.tp + tp_ * c.pp, c.dp};
}
SplitSpec ProcessGroups::pp_split(int rank) const {
  RankCoords c = coords(rank);
  return {c.tp + tp_ * c.dp, c.pp};
}

std::string ProcessGroups::describe() const {
  return "world " + std::to_string(world_) + " = tp " + std::to_string(tp_) + " x pp " +
         std::to_string(pp_) + " x dp " + std::to_string(dp_);
}

ParallelComms::ParallelComms() = default;
ParallelComms::~ParallelComms() = default;
ParallelComms::ParallelComms(ParallelComms&&) noexcept = default;
ParallelComms& ParallelComms::operator=(ParallelComms&&) noexcept = default;

ParallelComms make_parallel_comms(Communicator& world, const ProcessGroups& groups) {
  if (world.size() != groups.world_size())
    throw UserError("the world communicator has " + std::to_string(world.size()) +
                    " ranks but the layout is " + groups.describe());
  int r = world.rank();
  ParallelComms pc;
  auto s = groups.tp_split(r);
  pc.tp = std::make_unique<Communicator>(world.split(s.color, s.key));
  s = groups.dp_split(r);
  pc.dp = std::make_unique<Communicator>(world.split(s.color, s.key));
  s = groups.pp_split(r);
  pc.pp = std::make_unique<Communicator>(world.split(s.color, s.key));
  // For what a stuck rank's launcher reports (rank_status.hpp).
  if (*pc.tp) pc.tp->label("the tensor-parallel group", groups.tp_group(r));
  if (*pc.dp) pc.dp->label("the data-parallel group", groups.dp_group(r));
  if (*pc.pp) pc.pp->label("the pipeline group", groups.pp_group(r));
  // And what the step trace names them (trace.hpp).
  pc.tp->trace_group("tp");
  pc.dp->trace_group("dp");
  pc.pp->trace_group("pp");
  return pc;
}

}  // namespace triad
