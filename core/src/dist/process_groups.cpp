#include "triad/core/dist/process_groups.hpp"

#include "triad/core/dist/transport.hpp"
#include "triad/core/error.hpp"

namespace triad {

namespace {

// Digits indices (fastest first) and the masks of the groups over them.
enum : unsigned { kTp = 0, kCp = 1, kDp = 2, kPp = 3 };
constexpr unsigned bit(unsigned d) {
  return 1u << d;
}

std::string str(int v) {
  return std::to_string(v);
}

}  // namespace

ProcessGroups::ProcessGroups(int world_size, int tp, int pp, int dp, int cp)
    : world_(world_size), tp_(tp), pp_(pp), dp_(dp), cp_(cp) {
  if (world_ < 1) throw UserError("world size " + str(world_) + " must be at least 1");
  if (cp_ < 1) throw UserError("context_parallel_size (" + str(cp_) + ") must be at least 1");
  if (tp_ < 1 || pp_ < 1 || dp_ < 0)
    throw UserError("tensor_model_parallel_size (" + str(tp_) +
                    ") and pipeline_model_parallel_size (" + str(pp_) +
                    ") must be at least 1, data_parallel_size (" + str(dp_) +
                    ") at least 0 (0: derived)");
  // Context parallelism joins the messages only where it is used, so that the 3D layout's read
  // as they always have.
  const std::string cps = cp_ > 1 ? " x context_parallel_size " + str(cp_) : "";
  const int model = tp_ * cp_ * pp_;
  if (dp_ == 0) {
    if (world_ % model != 0)
      throw UserError("world size " + str(world_) +
                      " is not a multiple of tensor_model_parallel_size " + str(tp_) + cps +
                      " x pipeline_model_parallel_size " + str(pp_) + " = " + str(model) +
                      "; change the sizes or the number of ranks");
    dp_ = world_ / model;
  }
  if (model * dp_ != world_)
    throw UserError("tensor_model_parallel_size " + str(tp_) + cps +
                    " x pipeline_model_parallel_size " + str(pp_) + " x data_parallel_size " +
                    str(dp_) + " = " + str(model * dp_) + ", but the world has " + str(world_) +
                    " ranks; make the product equal the world size (or leave "
                    "data_parallel_size out to derive it)");
}

void ProcessGroups::check_rank(int rank) const {
  if (rank < 0 || rank >= world_)
    throw UserError("rank " + str(rank) + " is outside the world of " + str(world_) + " ranks");
}

ProcessGroups::Digits ProcessGroups::digits(int rank) const {
  check_rank(rank);
  const Digits size = sizes();
  Digits d{};
  for (unsigned i = 0; i < d.size(); ++i) {
    d[i] = rank % size[i];
    rank /= size[i];
  }
  return d;
}

int ProcessGroups::rank_at(const Digits& d) const {
  const Digits size = sizes();
  int rank = 0;
  for (unsigned i = d.size(); i-- > 0;) rank = rank * size[i] + d[i];
  return rank;
}

RankCoords ProcessGroups::coords(int rank) const {
  const Digits d = digits(rank);
  return RankCoords{d[kTp], d[kDp], d[kPp], d[kCp]};
}

int ProcessGroups::rank_of(const RankCoords& c) const {
  if (c.tp < 0 || c.tp >= tp_ || c.dp < 0 || c.dp >= dp_ || c.pp < 0 || c.pp >= pp_ || c.cp < 0 ||
      c.cp >= cp_)
    throw UserError("coordinates (tp " + str(c.tp) + (cp_ > 1 || c.cp ? ", cp " + str(c.cp) : "") +
                    ", dp " + str(c.dp) + ", pp " + str(c.pp) + ") are outside " + describe());
  return rank_at(Digits{c.tp, c.cp, c.dp, c.pp});
}

std::vector<int> ProcessGroups::group(int rank, unsigned vary) const {
  const Digits size = sizes(), at = digits(rank);
  int members = 1;
  for (unsigned i = 0; i < size.size(); ++i)
    if (vary & bit(i)) members *= size[i];
  std::vector<int> g;
  for (int m = 0; m < members; ++m) {
    Digits d = at;
    int rest = m;
    for (unsigned i = 0; i < size.size(); ++i)
      if (vary & bit(i)) {
        d[i] = rest % size[i];
        rest /= size[i];
      }
    g.push_back(rank_at(d));
  }
  return g;
}

// The color numbers the groups by the fixed coordinates, the key orders members by their own
// (both mixed-radix, fastest first).
SplitSpec ProcessGroups::split(int rank, unsigned vary) const {
  const Digits size = sizes(), d = digits(rank);
  SplitSpec s;
  for (unsigned i = size.size(); i-- > 0;) {
    int& v = (vary & bit(i)) ? s.key : s.color;
    v = v * size[i] + d[i];
  }
  return s;
}

std::vector<int> ProcessGroups::tp_group(int rank) const {
  return group(rank, bit(kTp));
}
std::vector<int> ProcessGroups::cp_group(int rank) const {
  return group(rank, bit(kCp));
}
std::vector<int> ProcessGroups::dp_group(int rank) const {
  return group(rank, bit(kDp));
}
std::vector<int> ProcessGroups::pp_group(int rank) const {
  return group(rank, bit(kPp));
}
std::vector<int> ProcessGroups::dp_cp_group(int rank) const {
  return group(rank, bit(kCp) | bit(kDp));
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
std::vector<std::vector<int>> ProcessGroups::cp_groups() const {
  return all_groups(world_, [this](int r) { return cp_group(r); });
}
std::vector<std::vector<int>> ProcessGroups::dp_groups() const {
  return all_groups(world_, [this](int r) { return dp_group(r); });
}
std::vector<std::vector<int>> ProcessGroups::pp_groups() const {
  return all_groups(world_, [this](int r) { return pp_group(r); });
}
std::vector<std::vector<int>> ProcessGroups::dp_cp_groups() const {
  return all_groups(world_, [this](int r) { return dp_cp_group(r); });
}

SplitSpec ProcessGroups::tp_split(int rank) const {
  return split(rank, bit(kTp));
}
SplitSpec ProcessGroups::cp_split(int rank) const {
  return split(rank, bit(kCp));
}
SplitSpec ProcessGroups::dp_split(int rank) const {
  return split(rank, bit(kDp));
}
SplitSpec ProcessGroups::pp_split(int rank) const {
  return split(rank, bit(kPp));
}
SplitSpec ProcessGroups::dp_cp_split(int rank) const {
  return split(rank, bit(kCp) | bit(kDp));
}

std::string ProcessGroups::describe() const {
  return "world " + str(world_) + " = tp " + str(tp_) + (cp_ > 1 ? " x cp " + str(cp_) : "") +
         " x pp " + str(pp_) + " x dp " + str(dp_);
}

ParallelComms::ParallelComms() = default;
ParallelComms::~ParallelComms() = default;
ParallelComms::ParallelComms(ParallelComms&&) noexcept = default;
ParallelComms& ParallelComms::operator=(ParallelComms&&) noexcept = default;

Communicator& ParallelComms::grad_reduce() const {
  return dp_cp ? *dp_cp : *dp;
}

ParallelComms make_parallel_comms(Communicator& world, const ProcessGroups& groups) {
  if (world.size() != groups.world_size())
    throw UserError("the world communicator has " + str(world.size()) +
                    " ranks but the layout is " + groups.describe());
  const int r = world.rank();
  ParallelComms pc;
  // Every rank splits the same groups in the same order (split is collective over the world).
  auto make = [&](SplitSpec s, const char* label, const std::vector<int>& members,
                  const char* trace) {
    auto c = std::make_unique<Communicator>(world.split(s.color, s.key));
    // For what a stuck rank's launcher reports (rank_status.hpp), and what the step trace names
    // it (trace.hpp).
    if (*c) c->label(label, members);
    c->trace_group(trace);
    return c;
  };
  pc.tp = make(groups.tp_split(r), "the tensor-parallel group", groups.tp_group(r), "tp");
  pc.dp = make(groups.dp_split(r), "the data-parallel group", groups.dp_group(r), "dp");
  pc.pp = make(groups.pp_split(r), "the pipeline group", groups.pp_group(r), "pp");
  if (groups.cp_size() > 1) {
    pc.cp = make(groups.cp_split(r), "the context-parallel group", groups.cp_group(r), "cp");
    pc.dp_cp = make(groups.dp_cp_split(r), "the data- and context-parallel group",
                    groups.dp_cp_group(r), "dp_cp");
  }
  return pc;
}

uint32_t context_parallel_transport_ops(int cp, const std::string& method) {
  if (cp <= 1) return 0;
  return method == "ulysses" ? uint32_t(TRIAD_TRANSPORT_OP_ALL_TO_ALL)
                             : uint32_t(TRIAD_TRANSPORT_OP_SEND_RECV);
}

void check_context_parallel_transport(const Transport& transport, int cp,
                                      const std::string& method) {
  const uint32_t ops = context_parallel_transport_ops(cp, method);
  if ((transport.capabilities().ops & ops) == ops) return;
  const bool ulysses = method == "ulysses";
  throw UserError("parallel.context_parallel_method " + method + " (context_parallel_size " +
                  str(cp) + ") needs a transport with " +
                  (ulysses ? "all_to_all (TRIAD_TRANSPORT_OP_ALL_TO_ALL)" : "send/recv") +
                  ", but transport '" + transport.name() +
                  "' has none; use transport: ucx or nccl" +
                  (ulysses ? ", or context_parallel_method: ring" : ""));
}

}  // namespace triad
