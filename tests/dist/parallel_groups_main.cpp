// parallel-groups-check PLUGIN.so WORLD TP PP: forks WORLD ranks, builds the TP / DP / PP
// communicators with make_parallel_comms, and checks on each that its size and rank match
// ProcessGroups and that an all-reduce of world ranks sums exactly the group's members.
#include <cstdio>
#include <numeric>
#include <string>

#include "forked_ranks.hpp"
#include "triad/core/dist/process_groups.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"

namespace {

int run_rank(const std::string& path, int rank, int world, int tp, int pp, uint16_t port,
             const std::string& token) {
  using namespace triad;
  auto plugin = PluginLoader().load_file(path, "transport");
  CoreServices services;
  Transport t(plugin, resolve_params(plugin->descriptor(), {}, "transport"), services.c_services());
  RendezvousClient store("127.0.0.1", port, token, std::chrono::seconds(30));
  Communicator w = t.init_world(rank, world, store, "groups/", std::chrono::seconds(60));
  ProcessGroups g(world, tp, pp);
  ParallelComms pc = make_parallel_comms(w, g);
  const RankCoords c = g.coords(rank);
  struct Kind {
    const char* name;
    Communicator* comm;
    std::vector<int> members;
    int index;
  } kinds[] = {{"tp", pc.tp.get(), g.tp_group(rank), c.tp},
               {"dp", pc.dp.get(), g.dp_group(rank), c.dp},
               {"pp", pc.pp.get(), g.pp_group(rank), c.pp}};
  int bad = 0;
  for (auto& k : kinds) {
    float v[3] = {float(rank), 1.0f, float(rank * rank)};
    k.comm->all_reduce(v, v, 3, dl_float32()).wait(std::chrono::seconds(60));
    float want = 0, want_sq = 0;
    for (int m : k.members) want += float(m), want_sq += float(m * m);
    if (k.comm->size() != int(k.members.size()) || k.comm->rank() != k.index || v[0] != want ||
        v[1] != float(k.members.size()) || v[2] != want_sq) {
      std::fprintf(
          stderr,
          "rank %d %s group: size %d rank %d sums %g %g, expected size %zu rank %d sums %g %g\n",
          rank, k.name, k.comm->size(), k.comm->rank(), double(v[0]), double(v[1]),
          k.members.size(), k.index, double(want), double(k.members.size()));
      ++bad;
    }
  }
  w.barrier().wait(std::chrono::seconds(60));
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: parallel-groups-check PLUGIN.so WORLD TP PP\n");
    return 2;
  }
  const std::string path = argv[1];
  const int world = std::stoi(argv[2]), tp = std::stoi(argv[3]), pp = std::stoi(argv[4]);
  const int failed =
      triad::test::run_forked_ranks(world, [&](int rank, uint16_t port, const std::string& token) {
        return run_rank(path, rank, world, tp, pp, port, token);
      });
  triad::ProcessGroups g(world, tp, pp);
  std::printf("%s over %d ranks: %d passed, %d failed\n", g.describe().c_str(), world,
              world - failed, failed);
  return failed ? 1 : 0;
}
