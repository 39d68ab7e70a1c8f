#include "triad/core/train/engine.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>

#include "triad/core/dist/rank_status.hpp"
#include "triad/core/train/optimizer.hpp"
#include "triad/core/train/run.hpp"
#include "triad/core/train/step_observers.hpp"
#include "triad/core/train/stop_signals.hpp"
#include "triad/core/train/trace.hpp"
#include "triad/core/train/training_step.hpp"

namespace triad {

double model_flops_per_step(const ModelConfig& m, int global_batch) {
  const double B = global_batch, s = m.seq_length, l = m.num_layers, h = m.hidden_size,
               V = m.vocab_size;
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double learning_rate(const OptimizerConfig& o, const LrScheduleConfig& s, int train_iters,
                     int global_batch, int step) {
  const LrPhases p = lr_phases(s, train_iters, global_batch);
  // The lagged step before the first lands on 0: the warm-up's start (DeepSpeed's schedulers
  // and Megatron's apply their first value, at the warm-up's start, before stepping).
  const double at = std::max(0, step - s.lr_lag_steps);
  // DeepSpeed's log warm-up reaches the peak one step before the linear one (log(W) / log(W));
  // it divides by log(max(2, W)) as DeepSpeed does.
  if (p.warmup > 0 && at <= p.warmup)
    return s.lr_warmup_style == "log"
               ? o.lr * std::min(1.0, std::log(at + 1.0) / std::log(std::max(2.0, p.warmup)))
               : o.lr * at / p.warmup;
  if (s.lr_decay_style == "constant") return o.lr;
  // Past the decay's end every style holds min_lr (Megatron tests this before the styles).
  if (at > p.decay) return o.min_lr;
  // Megatron's inverse-square-root: lr · sqrt(warmup / step) after the warm-up, floored at
  // min_lr.
  if (s.lr_decay_style == "inverse-square-root")
    return std::max(o.min_lr, o.lr * std::sqrt(std::max(p.warmup, 1.0) / std::max(at, 1.0)));
  const double span = p.decay - p.warmup;
  const double ratio = span > 0 ? (at - p.warmup) / span : 1.0;
  const double coeff =
      s.lr_decay_style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return o.min_lr + coeff * (o.lr - o.min_lr);
}

std::vector<int> pipeline_partition(const Config& cfg) {
  const std::vector<int>& layers = cfg.parallel.stage_layers;  // checked by load_config
  if (int(layers.size()) != cfg.parallel.pipeline_model_parallel_size)
    throw std::logic_error("pipeline_partition: the config was not checked by load_config");
  return layers;
}

std::vector<std::string> preflight(const Config& cfg) {
  PluginLoader loader;
  CoreServices services(1, nullptr);
  auto a = loader.load("attention", cfg.attention.name);
  resolve_params(a->descriptor(), cfg.attention.params, cfg.attention.yaml_path);
  auto t = loader.load("tensor", cfg.tensor.name);
  TensorBackend tensor(t, resolve_params(t->descriptor(), cfg.tensor.params, cfg.tensor.yaml_path),
                       services.c_services());
  tensor.plan(cfg.parallel.tensor_model_parallel_size, cfg.parallel.sequence_parallel);
  auto p = loader.load("pipeline", cfg.pipeline.name);
  PipelineBackend pipeline(
      p, resolve_params(p->descriptor(), cfg.pipeline.params, cfg.pipeline.yaml_path),
      services.c_services());
  std::vector<std::string> notes;
  make_data_plugin(cfg, loader, services, &notes);
  // Every stage's stream, run together: a schedule that would deadlock is refused here.
  pipeline.schedules(cfg.parallel.pipeline_model_parallel_size,
                     cfg.training.gradient_accumulation_steps,
                     cfg.parallel.virtual_pipeline_model_parallel_size);
  return notes;
}

TensorTraffic tensor_traffic_formula(const Config& cfg, int stage, const TensorShards& shards) {
  TensorTraffic f;
  const auto& m = cfg.model;
  const double t = cfg.parallel.tensor_model_parallel_size;
  if (t <= 1) return f;
  const int pp = cfg.parallel.pipeline_model_parallel_size;
  const double layers = pipeline_partition(cfg)[stage];
  const bool first = stage == 0, last = stage == pp - 1;
  const double ring = 2 * (t - 1) / t;  // an all-reduce; all-gather + reduce-scatter alike
  const double tokens = double(cfg.training.micro_batch_size) * m.seq_length;
  const int accum = cfg.training.gradient_accumulation_steps;
  // Megatron: per layer, forward and backward, four all-reduces of the (b,s,h) activations
  // (with sequence parallelism four all-gathers and four reduce-scatters, the same bytes);
  // plus the embedding's output (first stage) and the LM head's input (last stage).
  // Recomputing each block's forward repeats its two forward boundaries.
  // A whole part under sequence parallelism: an all-gather forward and one backward.
  // Under sequence parallelism each part's layernorm output is gathered once more in the
  // backward, for its weight gradient (not kept gathered): half a ring more per part.
  const bool sp = cfg.parallel.sequence_parallel;
  const double again = cfg.training.checkpoint_activations ? 1.0 : 0.0;
  const double regather = sp ? 0.5 : 0.0;
  auto part = [&](int ways, double split, double whole_sp) {
    return ways > 1 ? split : sp ? whole_sp : 0.0;
  };
  const double per_split = 2 + again + regather, per_whole = 1 + again / 2 + regather;
  const double per_layer =
      part(shards.attention, per_split, per_whole) + part(shards.mlp, per_split, per_whole);
  const double ends = (first + last) * part(shards.vocab, 1, 0.5);
  f.activations = accum * (per_layer * layers + ends) * ring * tokens * m.hidden_size * 4;
  // Vocab-parallel cross-entropy (last stage): max, sum of exponentials and target logit.
  if (last && shards.vocab > 1) f.logits = accum * 3 * ring * tokens * 4;
  // Sequence parallelism: the layernorms' and row-parallel biases' gradients, once per step;
  // with ZeRO-2/3 once per micro-batch (each micro-batch's gradients are reduced over the
  // data-parallel group), except the last stage's head when a pipeline defers it (tied wte).
  if (cfg.parallel.sequence_parallel) {
    const bool each = cfg.zero_optimization.stage >= 2;
    const double blocks = each ? accum : 1, head = each && pp == 1 ? accum : 1;
    const double per_block = 4.0 + (shards.attention > 1) + (shards.mlp > 1);
    f.replicated_grads = ring * (per_block * layers * blocks + 2 * last * head) * m.hidden_size * 4;
  }
  return f;
}

// A training run: its parts built (bad input refused before anything is written), then one step
// after another with the observers at each step's end, then the closing report.
RunResult train(const Config& cfg, const TrainOptions& opts) {
  Run run(cfg, opts);
  RunResult result;
  result.model_state_bytes = run.model_state_bytes;
  result.model_state_paper = run.model_state_paper;
  result.output_dir = cfg.output.dir;
  MetricsLog metrics(run);
  TensorBoardLog tensorboard(run);
  if (run.ckpt && !run.opts.quiet)
    spdlog::info("resuming from checkpoint {} (step {}, {} samples consumed)", run.ckpt->path(),
                 run.start_step, int64_t(run.start_step) * cfg.training.global_batch_size);
  if (!run.opts.quiet) run.describe();
  Optimizer optimizer(*run.state, run.spec, run.arena, cfg.optimizer,
                      {run.me.tp, run.tp(), run.me.pp, run.stages()}, run.dist.get());
  TrainingStep trainer(run, optimizer);
  CheckpointSaver checkpoints(run);
  // SIGTERM / SIGINT (stop_signals.hpp): the step in progress finishes, the ranks agree to stop
  // after the same step, save a checkpoint when checkpoint.save is set, and the run ends.
  const StopSignalsArmed stop_signals;
  const TrainingConfig& t = cfg.training;
  StepTrace trace(run.opts.dist.rank, t.profile_step_numbers);
  for (int step = run.start_step + 1; step <= t.train_iters; ++step) {
    rank_status_step(step);
    trace.begin_step(step);
    StepOutcome outcome = trainer.run(step);
    trace.end_step();
    outcome.valid_loss = trainer.evaluate_after(step);
    if (std::isfinite(outcome.valid_loss)) result.valid_loss = outcome.valid_loss;
    // Megatron's exit on --exit-interval comes before its end-of-training evaluation, also at
    // the last step: none then.
    const bool interval_exit = t.exit_interval > 0 && step % t.exit_interval == 0;
    if (!interval_exit) outcome.valid_loss_end = trainer.evaluate_at_end(step);
    if (std::isfinite(outcome.valid_loss_end)) result.valid_loss = outcome.valid_loss_end;
    result.steps.push_back(metrics.record(outcome));
    tensorboard.record(result.steps.back());
    // Megatron's --exit-interval, and a stop signal: save (when checkpoints are on) and end.
    const bool exit_now = outcome.stop_requested || (interval_exit && step < t.train_iters);
    checkpoints.after_step(step, exit_now);
    if (exit_now) {
      result.stop_signal = outcome.stop_requested ? (stop_signal() ? stop_signal() : SIGTERM) : 0;
      result.stopped_at = step;
      break;
    }
  }
  run.state->settle();  // the last step's deferred parameter gathers (data_v4.h)
  result.checkpoint = checkpoints.last();
  metrics.close();
  tensorboard.close();
  write_step_trace(run, trace);
  finish_run(run, optimizer, result);
  return result;
}

}  // namespace triad
