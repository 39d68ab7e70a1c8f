// Test driver for the layout equivalence test (layout_equivalence.sh): trains from a config
// as one rank of the job the launcher started (--exec), and has rank 0 write step 1's
// gradients, gathered to whole tensors, to OUT/grads.safetensors.
// Usage: triad-launch --nproc-per-node N --exec tp-grads CONFIG OUT [--set k=v ...]
#include <cstdio>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/dist/dist_env.hpp"
#include "triad/core/error.hpp"
#include "triad/core/train/engine.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG OUT [--set k=v ...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<std::string> sets;
    for (int i = 3; i + 1 < argc; i += 2)
      if (std::string(argv[i]) == "--set") sets.push_back(argv[i + 1]);
    triad::TrainOptions o;
    o.dist = triad::DistEnv::from_environment();
    o.quiet = true;
    o.write_output = false;
    o.grads_dump_dir = argv[2];
    const triad::Config cfg = triad::load_config(argv[1], sets, o.dist.world_size);
    triad::train(cfg, o);
    return 0;
  } catch (const triad::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
