// The dry run's plan: what a run costs per rank of its layout, computed without allocating.
#include <algorithm>

#include "triad/core/engine.hpp"
#include "triad/core/gpt_layout.hpp"
#include "triad/core/param_spec.hpp"

namespace triad {

RunPlan plan_run(const Config& cfg) {
  RunPlan p;
  const auto& m = cfg.model;
  const int tp = cfg.parallel.tensor_model_parallel_size;
  const bool sp = cfg.parallel.sequence_parallel && tp > 1;
  const int pp = cfg.parallel.pipeline_model_parallel_size;
  p.stage_layers = pipeline_partition(cfg);
  Placement place;
  place.tp_size = tp;
  place.make_vocab_size_divisible_by = m.make_vocab_size_divisible_by;
  for (int st = 0; st < pp; ++st) {
    place.num_layers = p.stage_layers[st];
    place.has_embedding = st == 0;
    place.has_head = st == pp - 1;
    p.stage_params.push_back(build_param_spec(m, place).total);
    place.first_layer += place.num_layers;
  }
  // The rest is rank 0's (stage 0): the memory of the first stage.
  place.first_layer = 0;
  place.num_layers = p.stage_layers[0];
  place.has_embedding = true;
  place.has_head = pp == 1;
  const ParamSpec spec = build_param_spec(m, place);
  p.num_params = gpt_layout(m).total;
  p.params_per_rank = spec.total;
  p.padded_vocab_size = spec.padded_vocab_size;
  p.param_bytes = spec.total * 4;
  p.grad_bytes = spec.total * 4;
  // Adam m and v; ZeRO stage 1 keeps this rank's 1/dp of them.
  const size_t dpn = size_t(std::max(1, cfg.parallel.data_parallel_size));
  p.optimizer_bytes =
      (cfg.zero_optimization.stage >= 1 ? (spec.total + dpn - 1) / dpn : spec.total) * 8;
  const size_t BT = size_t(cfg.training.micro_batch_size) * m.seq_length, C = m.hidden_size;
  const size_t BTs = sp ? BT / tp : BT, Cl = C / tp, H = m.num_attention_heads / tp;
  // Per layer: the token-split res_in, ln1, res_mid, ln2 (4 C) and their statistics, the
  // gathered ln1/ln2 under sequence parallelism (2 C), and the split qkv (3), atty (1),
  // fch, fch_gelu (4 + 4) and lse.
  const size_t full_layer =
      BTs * (4 * C + 4) + (sp ? 2 * BT * C : 0) + BT * (3 * Cl + Cl + 8 * Cl + H);
  // With recomputation a micro-batch keeps each block's input; one block's worth is shared.
  const bool recompute = cfg.training.checkpoint_activations;
  const size_t per_layer = recompute ? BTs * C : full_layer;
  // The head: res_out, lnf (+ gathered), statistics, this rank's logits, losses and lse, and
  // the vocab-parallel cross-entropy's row statistics.
  const size_t Vl = size_t(spec.padded_vocab_size / tp);
  const size_t head = BTs * (2 * C + 2) + (sp ? BT * C : 0) + BT * (Vl + 2) + (tp > 1 ? 3 * BT : 0);
  // Backward scratch (dres, dln, dqkv, datty, dfch, dfch_gelu) and the boundaries' buffers.
  const size_t scratch = BTs * 2 * C + BT * (3 * Cl + Cl + 8 * Cl) + (tp > 1 ? 3 * BT * C : 0) +
                         (recompute ? full_layer + BTs * C : 0);
  // Per stage: its model state (parameters and gradients, plus Adam's moments, 1/dp of them
  // with ZeRO stage 1) and its activations. GPipe keeps every micro-batch's activations until
  // its backward; stage s of 1F1B keeps min(pp - s, m). The rank's own figures are stage 0's.
  const int accum = cfg.training.gradient_accumulation_steps;
  for (int st = 0; st < pp; ++st) {
    const size_t flight = pp == 1                        ? 1
                          : cfg.pipeline.name == "gpipe" ? size_t(accum)
                                                         : size_t(std::min(pp - st, accum));
    const size_t acts =
        (per_layer * size_t(p.stage_layers[st]) + (st == pp - 1 ? head : 0)) * flight + scratch;
    const size_t opt = cfg.zero_optimization.stage >= 1 ? (p.stage_params[st] + dpn - 1) / dpn
                                                        : p.stage_params[st];
    p.stage_bytes.push_back(8 * p.stage_params[st] + 8 * opt + 4 * acts);
    if (st == 0) p.activation_bytes = 4 * acts;
  }
  p.flops_per_step = model_flops_per_step(m, cfg.training.global_batch_size);
  p.tensor_traffic = tensor_traffic_formula(cfg, 0);
  return p;
}

}  // namespace triad
