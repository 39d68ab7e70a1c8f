// Checkpoints: sharded on save, any layout on load.
//
// checkpoint.save holds one folder per saved step, iter_NNNNNNN/, and `latest`, a one-line file
// naming the newest complete one. An iteration folder holds one safetensors file per rank that
// owns state, rank_RRRRR.safetensors, and metadata.json (written by rank 0). A rank file holds
// the fp32 master weights ("param"), and AdamW's moments ("exp_avg", "exp_avg_sq"), of exactly the
// arena ranges the rank's optimizer steps, cut at tensor boundaries: the entry "K/NAME/LO" is
// elements [LO, LO + n) of this rank's tensor-parallel slice of tensor NAME (flattened). Every
// element of the model is so saved once per tensor-parallel slice (ZeRO 1-3: by its owner; ZeRO
// 0: by data-parallel rank 0). metadata.json records the step, the consumed samples, the model,
// the layout (sizes, ZeRO stage, each role's split), every tensor's global shape and split, every
// file's size and CRC-32, the seeds, and the resolved config.
//
// Saving is atomic: the ranks write into iter_NNNNNNN.tmp/ (each file written, fsynced and
// renamed), rank 0 checks every file's checksum report, writes metadata.json, renames the folder
// and only then moves `latest` (temporary file, fsync, rename, fsync of the folder). A save that
// dies or fails at any point leaves `latest` at the previous checkpoint.
//
// Loading rebuilds, for any layout, each global tensor from the slices of the saved layout
// (param_spec's split rules) and cuts this rank's slice of it under the new layout: a
// checkpoint saved under any TP x PP x DP x ZeRO layout loads into any other.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/dist/process_groups.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/model_state.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/train/loss_scaler.hpp"

namespace triad {

// This rank in the job that saves, and how the job sums over all of its ranks.
struct CheckpointRank {
  int rank = 0, world = 1;
  RankCoords coords;
  // Every rank's bytes, in rank order (each calls it with the same length); the identity in a
  // world of one. Also the save's barrier.
  std::function<std::vector<uint8_t>(const std::vector<uint8_t>&)> world_gather;
};

// A run's progress beyond its step: the optimizer steps taken (fewer than the steps when fp16
// skipped some on overflow; AdamW's bias correction and the learning rate follow them) and the
// loss scaler's state (fp16). metadata.json's "optimizer".
struct TrainingProgress {
  int64_t optimizer_steps = 0;
  std::optional<LossScaler::State> scaler;
};

// Saves step `step` into cfg.checkpoint.save. Collective: every rank calls it. `split` is the
// tensor plugin's split of each role (Placement::split). Throws UserError (on every rank) when a
// rank's file cannot be written; the previous checkpoint stays the latest. Returns the iteration
// folder.
std::string save_checkpoint(const Config& cfg, const ParamSpec& spec, const ModelState& state,
                            const CheckpointRank& me, int step, const TrainingProgress& progress);

// The launcher's check before any rank starts: the checkpoint the run would load
// (checkpoint_to_load, config.hpp) has its metadata, every rank file with its size, and the
// config's model. Throws UserError naming the file (also for another trainer's checkpoint, a
// Megatron folder, named as such). (Checksums are verified as ranks load.) Logs one line when the
// learning-rate schedule differs from the one the checkpoint was trained with. Returns false
// when --resume finds the run complete (its checkpoint at training.train_iters or past it), said
// in one info line: nothing is left to train, and nothing is to be written.
bool check_checkpoint_to_load(const Config& cfg);

class Checkpoint {
 public:
  // `dir`: a save folder (its `latest` is followed) or one iteration's folder. Reads
  // metadata.json and maps every rank file, checking each is present with the size it was
  // saved with; throws UserError naming the file and the fix. `key`: what named `dir`, for the
  // fix ("point checkpoint.load at ...", "point DIR at ..." for triad-checkpoint).
  explicit Checkpoint(const std::string& dir, const std::string& key = "checkpoint.load");
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& path() const;  // the iteration folder
  int step() const;
  int global_batch_size() const;
  ModelConfig model() const;  // the model it holds
  // The optimizer steps and loss scaler saved (a checkpoint without them: one optimizer step per
  // step, no scaler).
  TrainingProgress progress() const;
  // One line per fact (step, layout, model, files, sizes) for triad-checkpoint info.
  std::string describe() const;
  // Throws UserError when `m` is another model (the first difference named).
  void check_model(const ModelConfig& m, const std::string& key) const;
  // check_model, and the same global batch (the data position counts steps of it): `cfg` is a
  // run this checkpoint belongs to. Throws UserError.
  void check_same_run(const Config& cfg) const;
  // check_same_run, and a step before training.train_iters: `cfg` can go on from this
  // checkpoint. Throws UserError.
  void check_continues(const Config& cfg) const;
  // One line saying how `cfg`'s learning-rate schedule differs from the one this checkpoint was
  // trained with (what was changed, the lr of the next optimizer step under each), or "" when
  // they give the same lr from here to cfg's training.train_iters, or the checkpoint does not say
  // (saved before metadata.json kept its schedule).
  std::string schedule_change(const Config& cfg) const;
  // Every file's bytes against its CRC-32; throws UserError naming a file that differs.
  void verify() const;

  // This rank's whole arena of master weights under `spec` (spec.total floats, host).
  std::vector<float> params(const ParamSpec& spec) const;
  // AdamW's moments of the pieces `state` steps (on its optimizer's device).
  void load_optimizer(ModelState& state) const;
  // The whole model's weights in the Hugging Face layout of model() (gpt_layout: unpadded
  // vocabulary, every layer).
  std::vector<float> full_model(const GptLayout& layout) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace triad
