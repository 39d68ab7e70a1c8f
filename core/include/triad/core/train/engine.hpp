// The training engine: builds the run from a validated config (plugins, data, model), then
// steps AdamW over micro-batches with gradient accumulation, logging one line and one JSONL
// record per step.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/dist/dist_env.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/model/param_spec.hpp"

namespace triad {

// Bytes one rank moves per step in its tensor-parallel group (ring accounting, see
// TensorCommVolume in model.hpp).
struct TensorTraffic {
  double activations = 0, logits = 0, replicated_grads = 0;
  double total() const { return activations + logits + replicated_grads; }
};

// What a run will cost per rank of its layout, computed without allocating (for --dry-run).
struct RunPlan {
  size_t num_params = 0;       // the whole model, unpadded
  size_t params_per_rank = 0;  // a tensor-parallel rank's slice, vocabulary padded
  int64_t padded_vocab_size = 0;
  TensorTraffic tensor_traffic;      // per step per rank (Megatron's formula), stage 0
  TensorShards shards;               // which parts the tensor plugin's plan splits
  std::vector<int> stage_layers;     // per pipeline stage
  std::vector<size_t> stage_params;  // per rank of each pipeline stage
  // Per rank of each pipeline stage: each unit's elements in arena order (the embedding, each
  // block, the head: the units ZeRO-1 and ZeRO-2 reduce one by one, param_spec.hpp's arena_units).
  std::vector<std::vector<size_t>> stage_units;
  std::vector<size_t> stage_bytes;  // per rank of each stage: its estimated peak
  // The memory estimate (memory_plan.hpp) of a rank of each stage, at the configured ZeRO stage.
  std::vector<MemoryEstimate> stage_memory;
  double flops_per_step = 0;  // Megatron's formula, see model_flops_per_step
};
// Loads the attention, tensor and pipeline plugins the config names (see estimate_memory).
RunPlan plan_run(const Config& cfg);
// Loads every plugin the config names and checks its parameters and, for the tensor plugin,
// the plan of the layout: the launcher's check before it starts ranks, so a bad choice is one
// message rather than one per rank. Throws UserError. Returns what the configuration gives
// that has no effect with the chosen plugins, one line each, for the log and the dry run.
std::vector<std::string> preflight(const Config& cfg);
// The layers of each pipeline stage (uniform, or parallel.pipeline_partition).
std::vector<int> pipeline_partition(const Config& cfg);

// Megatron-LM's model FLOPs per iteration (Narayanan et al. 2021, no activation recompute):
//   72 · B · s · l · h² · (1 + s/(6h) + V/(12·l·h))
// B global batch, s sequence length, l layers, h hidden size, V vocabulary.
double model_flops_per_step(const ModelConfig& m, int global_batch);

// Megatron's schedule: linear warmup to lr over the warm-up (step s gets lr·s/warmup), then
// cosine / linear / inverse-square-root decay to min_lr at the decay's end, min_lr after
// (lr_phases); step k applies the value at k - lr_lag_steps. Steps from 1.
double learning_rate(const OptimizerConfig& o, const LrScheduleConfig& s, int train_iters,
                     int global_batch, int step);

struct StepRecord {
  int step = 0;
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, samples_per_s = 0, tokens_per_s = 0;
  double tflops = 0;  // per device (Megatron's formula over the job, divided by the ranks)
  double mfu = 0;     // tflops / the device's peak; 0 when the peak is unknown
  size_t peak_bytes = 0;
  double valid_loss = std::nan("");      // validation loss after this step, if it evaluated
  double valid_loss_end = std::nan("");  // the end of training's second evaluation (last step)
  bool scaled = false;                   // fp16: the loss was scaled (loss_scale, skipped hold)
  bool skipped = false;                  // fp16: gradients overflowed, no update
  double loss_scale = 1;                 // fp16: the loss scale of the step
};

// Megatron's count for a rank of pipeline stage `stage`: per micro-batch 4 all-reduces of the
// (b,s,h) activations per layer of the stage (4 all-gathers + 4 reduce-scatters with sequence
// parallelism) plus one at each end the stage holds (the embedding's output, the head's
// input), three per-token statistics of the vocab-parallel cross-entropy (last stage), and with
// sequence parallelism one all-reduce of the layernorm and row-parallel bias gradients per
// step. A part the plan keeps whole on every rank (`shards`) moves nothing without sequence
// parallelism; with it, its input is all-gathered forward and its output's gradient backward
// (half an all-reduce each), and its projection's bias gradient is whole, not all-reduced.
TensorTraffic tensor_traffic_formula(const Config& cfg, int stage, const TensorShards& shards);

struct RunResult {
  std::vector<StepRecord> steps;
  std::string output_dir;
  TensorTraffic tensor_traffic_counted;  // by the model, averaged over the steps
  TensorTraffic tensor_traffic_formula;
  // ZeRO: this rank's model-state bytes (parameters, gradients, Adam's moments) against the
  // ZeRO paper's formula for the stage (fp32: 16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N for the Ψ
  // elements this rank's layout slice holds), and the data-parallel bytes it sent per step
  // (counted as the data plugin issued them, ring accounting) against the paper's 2Ψ (3Ψ at
  // stage 3) in the same accounting.
  double model_state_bytes = 0, model_state_paper = 0;
  double zero_traffic_counted = 0, zero_traffic_paper = 0;
  // A run that ended before train_iters: after step stopped_at, on signal stop_signal (SIGTERM,
  // SIGINT) or else on training.exit_interval. 0: it trained every step.
  int stopped_at = 0, stop_signal = 0;
  std::string checkpoint;            // the last checkpoint this run saved; empty: none
  double valid_loss = std::nan("");  // the last validation loss (training.eval_interval)
  // This rank's peak over the whole run, output.export_hf's gathers included (bytes; the steps'
  // peak_bytes stop at the last step).
  size_t peak_bytes = 0;
};

struct TrainOptions {
  bool quiet = false;        // no per-step log lines (tests, benches)
  bool write_output = true;  // create output.dir with config.yaml and metrics.jsonl
  DistEnv dist;              // this rank's place in the job (world of one by default)
  // When set: after step 1's gradients are final (reduced, before clipping), rank 0 writes
  // the whole model's gradients to DIR/grads.safetensors (tests of the parallel layouts).
  std::string grads_dump_dir;
};

// Runs the whole training. Everything that can be wrong with the inputs is checked before
// the output folder is created; UserError on bad input.
RunResult train(const Config& cfg, const TrainOptions& opts = {});

}  // namespace triad
