// The 3D layout of the world: world = TP x PP x DP in Megatron's order (tensor parallel
// fastest, then data parallel, then pipeline parallel):
//   rank = tp + TP * (dp + DP * pp)
// so a TP group is TP consecutive ranks, and a PP group strides by TP * DP.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace triad {

class Communicator;

struct RankCoords {
  int tp = 0, dp = 0, pp = 0;
  bool operator==(const RankCoords&) const = default;
};

// (color, key) for Communicator::split that forms one kind of group.
struct SplitSpec {
  int color = 0, key = 0;
};

class ProcessGroups {
 public:
  // dp == 0 derives it as world / (tp * pp). Throws UserError when the sizes do not
  // multiply to the world size (naming all of them).
  ProcessGroups(int world_size, int tp, int pp, int dp = 0);

  int world_size() const { return world_; }
  int tp_size() const { return tp_; }
  int pp_size() const { return pp_; }
  int dp_size() const { return dp_; }

  RankCoords coords(int rank) const;
  int rank_of(const RankCoords& c) const;

  // Ranks of the group containing `rank`, ordered by the coordinate that varies in it
  // (so a rank's index in its TP group is its tp coordinate, and so on).
  std::vector<int> tp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  // Every group of a kind, ordered by their lowest rank.
  std::vector<std::vector<int>> tp_groups() const;
  std::vector<std::vector<int>> dp_groups() const;
  std::vector<std::vector<int>> pp_groups() const;

  SplitSpec tp_split(int rank) const;
  SplitSpec dp_split(int rank) const;
  SplitSpec pp_split(int rank) const;

  std::string describe() const;  // "world 8 = tp 2 x pp 2 x dp 2"

 private:
  void check_rank(int rank) const;
  int world_, tp_, pp_, dp_;
};

// This rank's TP, DP and PP communicators, split from the world communicator.
struct ParallelComms {
  ParallelComms();
  ~ParallelComms();
  ParallelComms(ParallelComms&&) noexcept;
  ParallelComms& operator=(ParallelComms&&) noexcept;
  std::unique_ptr<Communicator> tp, dp, pp;
};
ParallelComms make_parallel_comms(Communicator& world, const ProcessGroups& groups);

}  // namespace triad
