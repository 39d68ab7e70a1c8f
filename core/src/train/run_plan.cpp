// The dry run's plan: what a run costs per rank of its layout, computed without allocating.
#include <algorithm>
#include <utility>

#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/train/engine.hpp"

namespace triad {

RunPlan plan_run(const Config& cfg) {
  RunPlan p;
  const auto& m = cfg.model;
  const auto& par = cfg.parallel;
  const int tp = par.tensor_model_parallel_size, pp = par.pipeline_model_parallel_size;
  const int world = tp * pp * std::max(1, par.data_parallel_size);
  p.stage_layers = pipeline_partition(cfg);
  Placement place;
  place.tp_size = tp;
  place.make_vocab_size_divisible_by = m.make_vocab_size_divisible_by;
  place.split = planned_splits(cfg);
  ParamSpec first;
  for (int st = 0; st < pp; ++st) {
    place.num_layers = p.stage_layers[st];
    place.has_embedding = st == 0;
    place.has_head = st == pp - 1;
    const ParamSpec spec = build_param_spec(m, place);
    if (st == 0) first = spec;
    p.stage_params.push_back(spec.total);
    std::vector<size_t> units;
    for (const ArenaRange& r : arena_units(spec)) units.push_back(r.size());
    p.stage_units.push_back(std::move(units));
    place.first_layer += place.num_layers;
  }
  p.num_params = gpt_layout(m).total;
  p.params_per_rank = first.total;
  p.padded_vocab_size = first.padded_vocab_size;
  // Memory per rank of each stage: the estimator's replay of the engine's allocations (model
  // states as the configured ZeRO stage keeps them, activation sets as the schedule keeps them,
  // scratch, workspace, communication buffers and windows).
  p.stage_memory = estimate_memory(cfg, world);
  for (const MemoryEstimate& e : p.stage_memory) p.stage_bytes.push_back(e.total());
  p.flops_per_step = model_flops_per_step(m, cfg.training.global_batch_size);
  p.shards = tensor_shards(place);
  p.tensor_traffic = tensor_traffic_formula(cfg, 0, p.shards);
  return p;
}

}  // namespace triad
