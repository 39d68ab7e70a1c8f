// The layout of the world: world = TP x CP x DP x PP in Megatron's order (tensor parallel
// fastest, then context parallel, then data parallel, then pipeline parallel):
//   rank = tp + TP * (cp + CP * (dp + DP * pp))
// so a TP group is TP consecutive ranks, a CP group strides by TP, and a PP group by TP * CP * DP.
// With CP = 1 (no context parallelism) this is the 3D layout rank = tp + TP * (dp + DP * pp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace triad {

class Communicator;
class Transport;

struct RankCoords {
  int tp = 0, dp = 0, pp = 0, cp = 0;  // cp last: {tp, dp, pp} still reads as the 3D layout
  bool operator==(const RankCoords&) const = default;
};

// (color, key) for Communicator::split that forms one kind of group.
struct SplitSpec {
  int color = 0, key = 0;
};

class ProcessGroups {
 public:
  // dp == 0 derives it as world / (tp * cp * pp). Throws UserError when the sizes do not
  // multiply to the world size (naming all of them).
  ProcessGroups(int world_size, int tp, int pp, int dp = 0, int cp = 1);

  int world_size() const { return world_; }
  int tp_size() const { return tp_; }
  int cp_size() const { return cp_; }
  int pp_size() const { return pp_; }
  int dp_size() const { return dp_; }
  // The ranks that reduce gradients together and over which ZeRO shards: DP x CP (Megatron's
  // data-parallel group with context parallelism); the data-parallel group when CP is 1.
  int dp_cp_size() const { return dp_ * cp_; }

  RankCoords coords(int rank) const;
  int rank_of(const RankCoords& c) const;

  // Ranks of the group containing `rank`, ordered by the coordinate that varies in it
  // (so a rank's index in its TP group is its tp coordinate, and so on); the DP x CP group by
  // cp + CP * dp, which is rank order.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> cp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> dp_cp_group(int rank) const;
  // Every group of a kind, ordered by their lowest rank.
  std::vector<std::vector<int>> tp_groups() const;
  std::vector<std::vector<int>> cp_groups() const;
  std::vector<std::vector<int>> dp_groups() const;
  std::vector<std::vector<int>> pp_groups() const;
  std::vector<std::vector<int>> dp_cp_groups() const;

  SplitSpec tp_split(int rank) const;
  SplitSpec cp_split(int rank) const;
  SplitSpec dp_split(int rank) const;
  SplitSpec pp_split(int rank) const;
  SplitSpec dp_cp_split(int rank) const;

  // "world 8 = tp 2 x pp 2 x dp 2"; with CP > 1 "world 8 = tp 2 x cp 2 x pp 1 x dp 2".
  std::string describe() const;

 private:
  // A rank's coordinates, fastest first: tp, cp, dp, pp (each below sizes()'s entry).
  using Digits = std::array<int, 4>;
  Digits sizes() const { return {tp_, cp_, dp_, pp_}; }
  Digits digits(int rank) const;
  int rank_at(const Digits& d) const;
  // The group of the ranks that differ from `rank` only in the coordinates `vary` marks (a bit
  // per Digits index), and its split: the fixed coordinates number the group, the varying
  // ones order its members.
  std::vector<int> group(int rank, unsigned vary) const;
  SplitSpec split(int rank, unsigned vary) const;
  void check_rank(int rank) const;
  int world_, tp_, pp_, dp_, cp_;
};

// This rank's communicators, split from the world communicator: TP, DP and PP always; with
// CP > 1 also the CP group and the DP x CP group that reduces gradients (null when CP is 1, where
// the DP group is that group).
struct ParallelComms {
  ParallelComms();
  ~ParallelComms();
  ParallelComms(ParallelComms&&) noexcept;
  ParallelComms& operator=(ParallelComms&&) noexcept;
  // The group gradients are reduced (and ZeRO shards) over: dp_cp, or dp when CP is 1.
  Communicator& grad_reduce() const;
  std::unique_ptr<Communicator> tp, dp, pp, cp, dp_cp;
};
ParallelComms make_parallel_comms(Communicator& world, const ProcessGroups& groups);

// What context parallelism needs of the transport beyond the 3D layout (0 with cp 1): ulysses
// all_to_all, ring send/recv (key/value blocks passed to the next rank of the CP group).
uint32_t context_parallel_transport_ops(int cp, const std::string& method);
// Refuses a transport without them (UserError naming parallel.context_parallel_method, the
// transport and the fix); nothing with cp 1.
void check_context_parallel_transport(const Transport& transport, int cp,
                                      const std::string& method);

}  // namespace triad
