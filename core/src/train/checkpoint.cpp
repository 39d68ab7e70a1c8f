#include "triad/core/train/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <sys/stat.h>
#include <zlib.h>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "triad/core/error.hpp"
#include "triad/core/io/files.hpp"
#include "triad/core/io/safetensors.hpp"
#include "triad/core/plugins/tensor_backend.hpp"
#include "triad/core/train/engine.hpp"

namespace triad {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "triad-checkpoint";
constexpr int kVersion = 1;
const char* const kKinds[3] = {"param", "exp_avg", "exp_avg_sq"};

std::string iter_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07d", step);
  return buf;
}

std::string rank_file(int rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
  return buf;
}

uint32_t crc_of(const uint8_t* p, uint64_t n) {
  return uint32_t(crc32_z(crc32_z(0L, Z_NULL, 0), p, size_t(n)));
}

nlohmann::json model_json(const ModelConfig& m) {
  return {{"num_layers", m.num_layers},
          {"hidden_size", m.hidden_size},
          {"num_attention_heads", m.num_attention_heads},
          {"seq_length", m.seq_length},
          {"max_position_embeddings", m.max_position_embeddings},
          {"vocab_size", m.vocab_size},
          {"position_embedding", m.position_embedding},
          {"rope_base", m.rope_base},
          {"init_std", m.init_std},
          {"layernorm_epsilon", m.layernorm_epsilon},
          {"make_vocab_size_divisible_by", m.make_vocab_size_divisible_by}};
}

ModelConfig model_of(const nlohmann::json& j) {
  ModelConfig m;
  m.num_layers = j.at("num_layers").get<int>();
  m.hidden_size = j.at("hidden_size").get<int>();
  m.num_attention_heads = j.at("num_attention_heads").get<int>();
  m.seq_length = j.at("seq_length").get<int>();
  m.max_position_embeddings = j.at("max_position_embeddings").get<int>();
  m.vocab_size = j.at("vocab_size").get<int>();
  m.position_embedding = j.at("position_embedding").get<std::string>();
  m.rope_base = j.at("rope_base").get<double>();
  m.init_std = j.at("init_std").get<double>();
  m.layernorm_epsilon = j.at("layernorm_epsilon").get<double>();
  m.make_vocab_size_divisible_by = j.at("make_vocab_size_divisible_by").get<int>();
  return m;
}

// What the learning rate of each step follows (metadata.json's "lr_schedule"): a resume under
// another schedule is said (Checkpoint::schedule_change). The decay length is the effective one
// (lr_decay_iters, else train_iters), so that a changed train_iters shows where it moves it.
nlohmann::json schedule_json(const Config& c) {
  const LrScheduleConfig& s = c.lr_schedule;
  // The phases in steps, however they were given (iterations, samples, a fraction).
  const LrPhases p = lr_phases(s, c.training.train_iters, c.training.global_batch_size);
  return {{"lr", c.optimizer.lr},
          {"min_lr", c.optimizer.min_lr},
          {"warmup_steps", p.warmup},
          {"lr_warmup_style", s.lr_warmup_style},
          {"lr_decay_style", s.lr_decay_style},
          {"decay_steps", p.decay},
          {"lr_lag_steps", s.lr_lag_steps}};
}

// The folder of another trainer's checkpoint, which Triad does not read: Megatron-LM's
// (latest_checkpointed_iteration.txt; iter_NNNNNNN/mp_rank_XX/model_optim_rng.pt) or any other
// of PyTorch .pt files (DeepSpeed's global_stepN/). Said as what it is, with what to do instead,
// rather than as a folder that is "not a checkpoint" or an iter_ folder to point at.
void refuse_pytorch_checkpoint(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  const auto holds = [&](const fs::path& d, const auto& is) {
    for (const auto& e : fs::directory_iterator(d, ec))
      if (is(e.path().filename().string())) return true;
    return false;
  };
  const auto rank_folder = [](const std::string& n) { return n.starts_with("mp_rank_"); };
  const auto pt_file = [](const std::string& n) { return n.ends_with(".pt"); };
  const auto iter_holding_ranks = [&](const std::string& n) {
    return checkpoint_folder_step(n) >= 0 && holds(dir / n, rank_folder);
  };
  std::string what;
  if (fs::exists(dir / "latest_checkpointed_iteration.txt", ec) || holds(dir, rank_folder) ||
      holds(dir, iter_holding_ranks))
    what = "a Megatron checkpoint (PyTorch .pt files under iter_*/mp_rank_*/)";
  else if (holds(dir, pt_file))
    what = "a PyTorch checkpoint (.pt files, as Megatron and DeepSpeed write)";
  if (what.empty()) return;
  throw UserError(key + " '" + dir.string() + "' is " + what +
                  ", which Triad does not read (it shares only Megatron's folder naming); "
                  "convert the model to a Hugging Face GPT-2 folder (e.g. transformers' "
                  "convert_megatron_gpt2_checkpoint.py) and start from it with "
                  "output.init_from_hf");
}

// A value as a config writes it: a string bare, a number as JSON does ("1e-05", "10000.0").
std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// A double as metadata.json and the config write it ("1e-05", "10000.0"; "inf" where JSON has
// no word for it).
std::string number_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return nlohmann::json(v).dump();
}

// Every tensor of the model (all layers, both ends) as tensor-parallel rank `tp_rank` of `tp`
// holds it under the role splits `split`.
ParamSpec whole_spec(const ModelConfig& m, int tp_rank, int tp,
                     const std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT>& split) {
  Placement p;
  p.tp_rank = tp_rank;
  p.tp_size = tp;
  p.make_vocab_size_divisible_by = m.make_vocab_size_divisible_by;
  p.split = split;
  return build_param_spec(m, p);
}

// What each rank tells every other after writing its file.
struct FileReport {
  uint32_t written = 0, failed = 0, crc = 0, pad = 0;
  uint64_t bytes = 0;
};

}  // namespace

// --- saving -----------------------------------------------------------------------------------

namespace {

// This rank's file: the master weights and moments of the pieces its optimizer steps.
void write_rank_file(const fs::path& path, const ParamSpec& spec, const ModelState& state,
                     const CheckpointRank& me, int step) {
  Device& opt = state.host() ? *state.host() : state.device();
  const size_t n = state.opt_count();
  std::vector<float> host[3] = {std::vector<float>(n), std::vector<float>(n),
                                std::vector<float>(n)};
  for (const ModelState::Piece& pc : state.pieces()) {
    const size_t bytes = pc.count * sizeof(float);
    if (state.host())  // ZeRO-Offload: the master copy the optimizer steps is the host's
      opt.to_host(host[0].data() + pc.pos, state.piece_master(pc), bytes);
    else
      state.device().to_host(host[0].data() + pc.pos, state.piece_params(pc), bytes);
    opt.to_host(host[1].data() + pc.pos, state.piece_m(pc), bytes);
    opt.to_host(host[2].data() + pc.pos, state.piece_v(pc), bytes);
  }
  std::vector<safetensors::TensorRef> refs;
  // Entry "K/NAME/LO": the piece's elements from `at` on, LO elements into the tensor.
  for (int k = 0; k < 3; ++k)
    for_each_overlap(state.pieces(), spec.tensors,
                     [&](const ModelState::Piece& pc, const TensorSpec& ts, size_t at, size_t n) {
                       refs.push_back({std::string(kKinds[k]) + "/" + ts.name + "/" +
                                           std::to_string(pc.arena + at - ts.offset),
                                       {int64_t(n)},
                                       host[k].data() + pc.pos + at});
                     });
  safetensors::write_f32(path.string(), refs,
                         {{"format", kFormat},
                          {"rank", std::to_string(me.rank)},
                          {"tp", std::to_string(me.coords.tp)},
                          {"pp", std::to_string(me.coords.pp)},
                          {"dp", std::to_string(me.coords.dp)},
                          {"step", std::to_string(step)}});
}

nlohmann::json metadata(const Config& cfg, const ParamSpec& spec, const CheckpointRank& me,
                        int step, const TrainingProgress& progress,
                        const std::vector<FileReport>& reports) {
  const auto& par = cfg.parallel;
  const int tp = par.tensor_model_parallel_size;
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorSpec& t : whole_spec(cfg.model, 0, tp, spec.placement.split).tensors)
    tensors.push_back({{"name", t.name},
                       {"role", role_name(t.role)},
                       {"global_shape", t.global_shape},
                       {"split",
                        {{"dim", t.split.dim},
                         {"chunks", t.split.chunks},
                         {"strided_parts", t.split.strided_parts}}},
                       {"tie_group", t.tie_group}});
  const ProcessGroups groups(me.world, tp, par.pipeline_model_parallel_size, par.data_parallel_size,
                             par.context_parallel_size);
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < me.world; ++r) {
    const FileReport& f = reports[size_t(r)];
    if (!f.written) continue;
    const RankCoords c = groups.coords(r);
    files.push_back({{"name", rank_file(r)},
                     {"rank", r},
                     {"tp", c.tp},
                     {"pp", c.pp},
                     {"dp", c.dp},
                     {"cp", c.cp},
                     {"bytes", f.bytes},
                     {"crc32", f.crc}});
  }
  const int64_t consumed = int64_t(step) * cfg.training.global_batch_size;
  nlohmann::json scaler;  // null without fp16
  if (progress.scaler) {
    scaler = LossScaler::to_json(*progress.scaler);
    scaler["hysteresis"] = cfg.fp16.hysteresis;  // the bound of hysteresis_left, checked on load
  }
  return {{"format", kFormat},
          {"version", kVersion},
          {"step", step},
          {"consumed_samples", consumed},
          {"global_batch_size", cfg.training.global_batch_size},
          {"train_iters", cfg.training.train_iters},
          {"layout",
           {{"tensor_model_parallel_size", tp},
            {"pipeline_model_parallel_size", par.pipeline_model_parallel_size},
            {"data_parallel_size", par.data_parallel_size},
            {"context_parallel_size", par.context_parallel_size},
            {"virtual_pipeline_model_parallel_size", par.virtual_pipeline_model_parallel_size},
            {"sequence_parallel", par.sequence_parallel},
            {"world_size", me.world},
            {"zero_stage", cfg.zero_optimization.stage},
            {"split", spec.placement.split}}},
          {"model", model_json(cfg.model)},
          // Training draws no random numbers after initialisation (no dropout), and the data
          // order is a function of the seed and the step: the seeds are the whole RNG state.
          {"rng",
           {{"training_seed", cfg.training.seed},
            {"data_seed", cfg.data.seed ? cfg.data.seed : cfg.training.seed}}},
          {"data",
           {{"kind", cfg.data.kind},
            {"path", cfg.data.path},
            {"consumed_samples", consumed},
            {"next_step", step + 1}}},
          {"optimizer", {{"steps", progress.optimizer_steps}, {"loss_scaler", scaler}}},
          {"lr_schedule", schedule_json(cfg)},
          {"tensors", tensors},
          {"files", files},
          {"config", to_yaml(cfg)}};
}

// Rank 0, once every rank file is complete: metadata, the folder's rename, `latest`, pruning.
void publish(const Config& cfg, const fs::path& tmp, const fs::path& final,
             const nlohmann::json& meta) {
  // Files a killed earlier attempt at this step left behind belong to no rank of this save.
  std::set<std::string> keep{"metadata.json"};
  for (const auto& f : meta["files"]) keep.insert(f["name"].get<std::string>());
  for (const auto& e : fs::directory_iterator(tmp))
    if (!keep.count(e.path().filename().string())) fs::remove_all(e.path());
  write_file_atomic(tmp / "metadata.json", meta.dump(1));
  const fs::path root = final.parent_path();
  if (fs::exists(final)) {  // an earlier save of this step that `latest` never named
    const fs::path old = final.string() + ".old";
    fs::remove_all(old);
    fs::rename(final, old);
    fs::rename(tmp, final);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final);
  }
  fsync_dir(root);
  write_file_atomic(root / "latest", final.filename().string() + "\n");
  if (cfg.checkpoint.keep_last <= 0) return;
  // The newest keep_last complete checkpoints stay; `latest` is the newest. A checkpoint goes by
  // a rename first (one step, so a kill never leaves a half-removed iter_ folder), then its files;
  // what a killed pruning left (a .pruned folder, or an iter_ folder whose metadata.json is
  // already gone) goes now.
  const auto prune = [&](const fs::path& dir) {
    const fs::path doomed = dir.string() + ".pruned";
    fs::rename(dir, doomed);
    fs::remove_all(doomed);
  };
  std::vector<std::pair<int, fs::path>> done;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    const int s = checkpoint_folder_step(n);
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".pruned") == 0 && n.rfind("iter_", 0) == 0) {
      fs::remove_all(e.path());
    } else if (s >= 0 && e.path() != final) {
      if (fs::exists(e.path() / "metadata.json"))
        done.emplace_back(s, e.path());
      else
        prune(e.path());
    }
  }
  std::sort(done.begin(), done.end());
  const size_t others = size_t(cfg.checkpoint.keep_last) - 1;  // kept beside `final`
  for (size_t i = 0; i + others < done.size(); ++i) prune(done[i].second);
}

}  // namespace

std::string save_checkpoint(const Config& cfg, const ParamSpec& spec, const ModelState& state,
                            const CheckpointRank& me, int step, const TrainingProgress& progress) {
  const fs::path root = cfg.checkpoint.save;
  const fs::path final = root / iter_name(step), tmp = root / (iter_name(step) + ".tmp");
  // ZeRO 1-3 partition the optimizer over the data-parallel group: each rank saves its part.
  // Without ZeRO the replicas (and the context-parallel ranks, which hold the same weights) are
  // equal and the group's first rank saves for all.
  const bool writes = cfg.zero_optimization.stage >= 1 || (me.coords.dp == 0 && me.coords.cp == 0);
  FileReport mine;
  std::string error;
  if (writes) {
    try {
      std::error_code ec;
      fs::create_directories(tmp, ec);
      if (ec)
        throw UserError("cannot create folder '" + tmp.string() + "': " + ec.message() +
                        "; check checkpoint.save '" + cfg.checkpoint.save + "'");
      const fs::path file = tmp / rank_file(me.rank);
      write_rank_file(file, spec, state, me, step);
      const safetensors::Mapped back(file.string());  // as it is on disk
      mine.crc = crc_of(back.file_bytes(), back.file_size());
      mine.bytes = back.file_size();
      mine.written = 1;
    } catch (const std::exception& e) {
      error = e.what();
      mine.failed = 1;
    }
  }
  std::vector<uint8_t> blob(sizeof mine);
  std::memcpy(blob.data(), &mine, sizeof mine);
  const std::vector<uint8_t> all = me.world_gather(blob);
  std::vector<FileReport> reports(size_t(me.world));
  std::memcpy(reports.data(), all.data(), all.size());
  const std::string what = "checkpoint.save: saving step " + std::to_string(step) + " into '" +
                           cfg.checkpoint.save + "' failed";
  // What stays: the checkpoint `latest` names, if this run (or the one it continues) saved one.
  const std::string kept = has_checkpoint(cfg.checkpoint.save)
                               ? "; the previous checkpoint stays the latest"
                               : "; no checkpoint was saved before it (free space, or choose "
                                 "another checkpoint.save, and run again)";
  if (!error.empty()) throw UserError(what + ": " + error + kept);
  for (int r = 0; r < me.world; ++r)
    if (reports[size_t(r)].failed)
      throw UserError(what + " on rank " + std::to_string(r) + " (its message says why)" + kept);
  // Rank 0 makes it the latest; the others wait for that, so a rank that exits after a save
  // (a signal, exit_interval) leaves a complete checkpoint behind.
  uint32_t ok = 1;
  if (me.rank == 0) {
    try {
      publish(cfg, tmp, final, metadata(cfg, spec, me, step, progress, reports));
    } catch (const std::exception& e) {
      error = e.what();
      ok = 0;
    }
  }
  std::vector<uint8_t> flag(4);
  std::memcpy(flag.data(), &ok, 4);
  const std::vector<uint8_t> oks = me.world_gather(flag);
  if (!error.empty()) throw UserError(what + ": " + error + kept);
  if (oks[0] == 0) throw UserError(what + " on rank 0 (its message says why)" + kept);
  return final.string();
}

bool check_checkpoint_to_load(const Config& cfg) {
  // Everything a rank would refuse, said once by the launcher before the ranks start.
  const CheckpointConfig& cc = cfg.checkpoint;
  const std::string& named = cc.load.empty() ? cc.save : cc.load;
  // Before checkpoint_to_load, which would offer one of its iter_ folders to load.
  std::error_code ec;
  if (cc.resume && !has_checkpoint(named) && fs::is_directory(named, ec))
    refuse_pytorch_checkpoint(named, std::string("--resume: ") +
                                         (cc.load.empty() ? "checkpoint.save" : "checkpoint.load"));
  const std::string dir = checkpoint_to_load(cfg);
  if (dir.empty()) return true;
  const Checkpoint ck(dir);
  // A requeued job runs the same command every time, also once the run is complete (Megatron
  // exits 0 there too); a checkpoint.load given without --resume is a run to train, refused.
  if (cc.resume && ck.step() >= cfg.training.train_iters) {
    ck.check_same_run(cfg);
    spdlog::info(
        "--resume: the run is complete: checkpoint '{}' is at step {}, training.train_iters "
        "is {}; nothing is left to train (raise training.train_iters to go on)",
        ck.path(), ck.step(), cfg.training.train_iters);
    return false;
  }
  ck.check_continues(cfg);
  if (const std::string change = ck.schedule_change(cfg); !change.empty())
    spdlog::warn("{}", change);
  return true;
}

void Checkpoint::check_same_run(const Config& cfg) const {
  const auto& t = cfg.training;
  check_model(cfg.model, "checkpoint.load");
  if (global_batch_size() != t.global_batch_size)
    throw UserError("checkpoint.load '" + path() + "' was saved with global_batch_size " +
                    std::to_string(global_batch_size()) + " but this run has " +
                    std::to_string(t.global_batch_size) +
                    "; the data position is counted in steps of that batch: keep "
                    "training.global_batch_size " +
                    std::to_string(global_batch_size()) +
                    " (micro batch, accumulation and layout may change)");
}

void Checkpoint::check_continues(const Config& cfg) const {
  const auto& t = cfg.training;
  check_same_run(cfg);
  if (step() >= t.train_iters)
    throw UserError("checkpoint.load '" + path() + "' is at step " + std::to_string(step()) +
                    ", not before training.train_iters " + std::to_string(t.train_iters) +
                    ": nothing is left to train; raise train_iters to continue");
}

// --- loading ----------------------------------------------------------------------------------

struct Checkpoint::Impl {
  std::string dir;
  nlohmann::json meta;
  ModelConfig model;
  int tp = 1;
  std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> split{};
  struct File {
    std::string name;
    int rank = 0, tp = 0;
    uint64_t bytes = 0;
    uint32_t crc = 0;
    std::unique_ptr<safetensors::Mapped> map;
  };
  std::vector<File> files;
  TrainingProgress progress;
  struct Part {
    size_t lo = 0, n = 0;
    const float* data = nullptr;
  };
  // (kind/name, tensor-parallel rank) -> the saved parts of that slice.
  std::map<std::pair<std::string, int>, std::vector<Part>> parts;

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("checkpoint '" + dir + "' " + what);
  }

  // The whole number metadata.json holds at `where` ("optimizer/loss_scaler/iter"), within
  // low..high (`bound` says what high is). Out of range, it was edited or damaged: a count the
  // JSON holds as any number would otherwise wrap in an int (a step of 1e15 reads as
  // -1530494976) or train wrongly, and fail far from here if at all.
  int64_t count(const std::string& where, int64_t low, int64_t high,
                const std::string& bound = "") const {
    const nlohmann::json& v = meta.at(nlohmann::json::json_pointer("/" + where));
    std::string name = where;
    std::replace(name.begin(), name.end(), '/', '.');
    if (!v.is_number_integer() || v.get<int64_t>() < low || v.get<int64_t>() > high)
      fail("metadata.json has " + name + " " + v.dump() + ", outside " + std::to_string(low) +
           ".." + std::to_string(high) + (bound.empty() ? "" : " (" + bound + ")") +
           "; the file was edited or damaged, load an earlier checkpoint");
    return v.get<int64_t>();
  }

  // metadata.json's "optimizer" (absent before fp16: one optimizer step per step, no scaler),
  // each count within what a run could have reached by `step`.
  TrainingProgress progress_of(int64_t step) const {
    TrainingProgress p;
    p.optimizer_steps = step;
    if (!meta.contains("optimizer")) return p;
    const nlohmann::json& ls = meta.at("optimizer").at("loss_scaler");
    int64_t skipped = 0;
    if (!ls.is_null()) {
      const std::string at = "optimizer/loss_scaler/";
      const double scale = ls.at("scale").get<double>();
      if (!std::isfinite(scale) || scale <= 0)
        fail("metadata.json has optimizer.loss_scaler.scale " + number_text(scale) +
             ", not a positive finite number; the file was edited or damaged, load an earlier "
             "checkpoint");
      const int64_t iter = count(at + "iter", 0, step, "at most the checkpoint's step");
      count(at + "last_overflow", -1, iter - 1, "-1 for none, else a step before loss_scaler.iter");
      skipped = count(at + "skipped", 0, iter, "at most loss_scaler.iter");
      // The configured fp16.hysteresis it was saved under (absent in older checkpoints).
      const bool known = ls.contains("hysteresis");
      const int64_t most = known ? count(at + "hysteresis", 1, INT32_MAX) : INT32_MAX;
      count(at + "hysteresis_left", 1, most,
            known ? "at most loss_scaler.hysteresis, the fp16.hysteresis it was saved with" : "");
      p.scaler = LossScaler::from_json(ls);
    }
    p.optimizer_steps = count("optimizer/steps", 0, step - skipped,
                              skipped ? "the checkpoint's step less the steps skipped on overflow"
                                      : "at most the checkpoint's step");
    return p;
  }

  // layout.split as a tensor plan could have saved it, and the tensors it describes as listed:
  // an edited split is said here, by its field, rather than later as a plan to fix.
  void check_split(const nlohmann::json& layout) const {
    const std::string edited = "; the file was edited or damaged, load an earlier checkpoint";
    if (const std::string broken = tensor_split_error(tp, split); !broken.empty())
      fail("metadata.json has layout.split " + layout.at("split").dump() + " (tp " +
           std::to_string(tp) + "), which no tensor plan saves: " + broken + edited);
    ParamSpec spec;
    try {
      spec = whole_spec(model, 0, tp, split);
    } catch (const UserError& e) {
      fail("metadata.json's model and layout describe no model Triad splits (" +
           std::string(e.what()) + ")" + edited);
    }
    const nlohmann::json& listed = meta.at("tensors");
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
      const TensorSpec& t = spec.tensors[i];
      const nlohmann::json want = {{"name", t.name},
                                   {"global_shape", t.global_shape},
                                   {"dim", t.split.dim},
                                   {"chunks", t.split.chunks}};
      nlohmann::json have;
      if (i < listed.size())
        have = {{"name", listed[i].at("name")},
                {"global_shape", listed[i].at("global_shape")},
                {"dim", listed[i].at("split").at("dim")},
                {"chunks", listed[i].at("split").at("chunks")}};
      if (have != want)
        fail("metadata.json's tensors[" + std::to_string(i) + "] is " + have.dump() +
             ", but its model and layout.split " + layout.at("split").dump() + " make it " +
             want.dump() + edited);
    }
    if (listed.size() != spec.tensors.size())
      fail("metadata.json lists " + std::to_string(listed.size()) + " tensors, but its model has " +
           std::to_string(spec.tensors.size()) + edited);
  }

  // The whole model's `kind` in the Hugging Face layout.
  std::vector<float> full(const char* kind, const GptLayout& layout) const {
    std::vector<float> out(layout.total, 0.0f);
    for (int q = 0; q < tp; ++q) {
      const ParamSpec spec = whole_spec(model, q, tp, split);
      std::vector<float> local(spec.total, 0.0f);
      for (const TensorSpec& ts : spec.tensors) {
        const auto it = parts.find({std::string(kind) + "/" + ts.name, q});
        std::vector<Part> have = it == parts.end() ? std::vector<Part>{} : it->second;
        std::sort(have.begin(), have.end(),
                  [](const Part& a, const Part& b) { return a.lo < b.lo; });
        size_t covered = 0;  // [0, covered) is present
        for (const Part& p : have) {
          if (p.lo > covered) break;
          if (p.lo + p.n > ts.numel)
            fail("holds " + std::string(kind) + " of " + ts.name + " past its " +
                 std::to_string(ts.numel) + " elements; the files do not match metadata.json");
          std::memcpy(local.data() + ts.offset + p.lo, p.data, p.n * sizeof(float));
          covered = std::max(covered, p.lo + p.n);
        }
        if (covered < ts.numel)
          fail("lacks " + std::string(kind) + " of " + ts.name + " (tensor-parallel rank " +
               std::to_string(q) + ", elements from " + std::to_string(covered) +
               "): a rank file is missing from it; load an earlier checkpoint");
      }
      full_from_local(spec, q, layout, local.data(), out.data());
    }
    return out;
  }
};

Checkpoint::Checkpoint(const std::string& dir_in, const std::string& key)
    : impl_(std::make_unique<Impl>()) {
  Impl& c = *impl_;
  c.dir = dir_in;
  const fs::path latest = fs::path(dir_in) / "latest";
  const std::string to_iter = "point " + key + " at one of its iter_* folders";
  std::error_code ec;
  if (fs::exists(latest, ec)) {
    // Read without ever blocking (a FIFO is refused by name), as every file a run reads.
    const std::string text = read_regular_file(latest.string(), "checkpoint file", to_iter);
    const std::string name = text.substr(0, text.find('\n'));
    // As a JSON string: control bytes and broken UTF-8 escaped, never sent raw to a terminal.
    const std::string shown = nlohmann::json(name.substr(0, 64))
                                  .dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    if (name.empty() || name.find('/') != std::string::npos)
      c.fail("has a `latest` file that names no checkpoint (" + shown + "); " + to_iter);
    c.dir = (fs::path(dir_in) / name).string();
    if (!fs::exists(fs::path(c.dir) / "metadata.json", ec)) {
      // Megatron-DeepSpeed writes a `latest` too, naming its global_stepN folder.
      refuse_pytorch_checkpoint(dir_in, "checkpoint");
      refuse_pytorch_checkpoint(c.dir, "checkpoint");
      throw UserError("checkpoint '" + dir_in + "': `latest` names " + shown +
                      ", which has no metadata.json; point " + key +
                      " at one of its complete iter_* folders");
    }
  } else if (!fs::exists(fs::path(dir_in) / "metadata.json", ec)) {
    const std::string point =
        "point " + key + " at a checkpoint.save folder or one of its iter_* folders";
    struct stat st {};
    if (::stat(dir_in.c_str(), &st) != 0) c.fail("does not exist; check " + key);
    if (S_ISDIR(st.st_mode)) refuse_pytorch_checkpoint(dir_in, "checkpoint");
    if (S_ISDIR(st.st_mode))
      c.fail("is not a checkpoint (no `latest`, no metadata.json); " + point);
    // A file, a FIFO: said by its kind, never opened.
    c.fail("is " + file_type_name(st.st_mode) + ", not a folder; " + point);
  }
  const fs::path meta_path = fs::path(c.dir) / "metadata.json";
  try {
    c.meta = nlohmann::json::parse(read_regular_file(meta_path.string(), "checkpoint file",
                                                     "point " + key + " at a checkpoint folder"));
    if (c.meta.value("format", "") != kFormat) c.fail("metadata.json is not a Triad checkpoint's");
    if (c.meta.at("version").get<int>() != kVersion)
      c.fail("has format version " + c.meta.at("version").dump() + "; this Triad reads version " +
             std::to_string(kVersion));
    for (const char* k : {"num_layers", "hidden_size", "num_attention_heads", "seq_length",
                          "vocab_size", "make_vocab_size_divisible_by"})
      c.count(std::string("model/") + k, 1, INT32_MAX);
    c.count("model/max_position_embeddings", 0, INT32_MAX);
    c.model = model_of(c.meta.at("model"));
    const auto& layout = c.meta.at("layout");
    c.tp = int(c.count("layout/tensor_model_parallel_size", 1, INT32_MAX));
    c.split = layout.at("split").get<std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT>>();
    for (const auto& f : c.meta.at("files"))
      c.files.push_back({f.at("name").get<std::string>(), f.at("rank").get<int>(),
                         f.at("tp").get<int>(), f.at("bytes").get<uint64_t>(),
                         f.at("crc32").get<uint32_t>(), nullptr});
    // Everything describe() and the loader read, read once here and each count in range: a
    // damaged or edited metadata.json is this one message, never a JSON exception or a wrong
    // run later.
    const int64_t iters = c.count("train_iters", 1, INT32_MAX);
    const int64_t step = c.count("step", 0, iters, "at most train_iters");
    const int64_t batch = c.count("global_batch_size", 1, INT32_MAX);
    c.count("consumed_samples", 0, step * batch, "at most the step times the global batch");
    c.check_split(layout);
    c.progress = c.progress_of(step);
    c.meta.at("rng").at("training_seed").get<uint64_t>();
    c.meta.at("rng").at("data_seed").get<uint64_t>();
    for (const char* k :
         {"pipeline_model_parallel_size", "data_parallel_size", "world_size", "zero_stage"})
      layout.at(k).get<int>();
    layout.at("sequence_parallel").get<bool>();
    for (const Impl::File& f : c.files)
      if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.' || f.tp < 0 ||
          f.tp >= c.tp)
        c.fail("metadata.json lists the file '" + f.name + "' (tensor-parallel rank " +
               std::to_string(f.tp) + "), which is not a rank file of this folder");
  } catch (const nlohmann::json::exception& e) {
    throw UserError("checkpoint metadata '" + meta_path.string() + "' is damaged or incomplete (" +
                    e.what() + "); load an earlier checkpoint");
  }
  for (Impl::File& f : c.files) {
    const fs::path p = fs::path(c.dir) / f.name;
    const auto size = fs::file_size(p, ec);
    struct stat st {};
    if (ec && ::stat(p.c_str(), &st) == 0)  // there, but a FIFO or a folder: never opened
      throw UserError("checkpoint file '" + p.string() + "' (rank " + std::to_string(f.rank) +
                      "'s state) is " + file_type_name(st.st_mode) +
                      ", not a regular file; the checkpoint is damaged, load an earlier one");
    if (ec)
      throw UserError("checkpoint file '" + p.string() + "' (rank " + std::to_string(f.rank) +
                      "'s state) is missing: " + ec.message() +
                      "; the checkpoint is incomplete, load an earlier one");
    if (size != f.bytes)
      throw UserError("checkpoint file '" + p.string() + "' is " + std::to_string(size) +
                      " bytes but was saved with " + std::to_string(f.bytes) +
                      " (truncated or replaced); load an earlier checkpoint");
    f.map = std::make_unique<safetensors::Mapped>(p.string());
    for (const auto& [key, t] : f.map->tensors()) {
      const size_t a = key.find('/'), b = key.rfind('/');
      if (t.dtype != "F32" || t.shape.size() != 1 || a == std::string::npos || a == b)
        throw UserError("checkpoint file '" + p.string() + "' holds '" + key +
                        "', which is no checkpoint entry; the file is not this checkpoint's");
      // The element offset LO of "K/NAME/LO": digits only (std::stoull would throw a
      // std::invalid_argument, not a UserError, on a damaged name).
      size_t lo = 0;
      const char* first = key.data() + b + 1;
      const char* last = key.data() + key.size();
      const auto [end, err] = std::from_chars(first, last, lo);
      if (first == last || err != std::errc() || end != last)
        throw UserError("checkpoint file '" + p.string() + "' holds '" + key +
                        "', whose element offset is not a number; the file is damaged, load an "
                        "earlier checkpoint");
      c.parts[{key.substr(0, b), f.tp}].push_back(
          {lo, size_t(t.shape[0]), reinterpret_cast<const float*>(t.data)});
    }
  }
}

Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::path() const {
  return impl_->dir;
}
int Checkpoint::step() const {
  return impl_->meta.at("step").get<int>();
}
int Checkpoint::global_batch_size() const {
  return impl_->meta.at("global_batch_size").get<int>();
}
TrainingProgress Checkpoint::progress() const {
  return impl_->progress;
}
ModelConfig Checkpoint::model() const {
  return impl_->model;
}

std::string Checkpoint::schedule_change(const Config& cfg) const {
  const nlohmann::json& meta = impl_->meta;
  if (!meta.contains("lr_schedule")) return "";
  const nlohmann::json saved = meta.at("lr_schedule"), now = schedule_json(cfg);
  // The saved schedule, its phases as samples of a global batch of 1 (= steps).
  Config was = cfg;
  try {
    was.optimizer.lr = saved.at("lr").get<double>();
    was.optimizer.min_lr = saved.at("min_lr").get<double>();
    was.lr_schedule = LrScheduleConfig{};
    was.lr_schedule.lr_warmup_samples = saved.at("warmup_steps").get<double>();
    was.lr_schedule.lr_warmup_style = saved.at("lr_warmup_style").get<std::string>();
    was.lr_schedule.lr_decay_style = saved.at("lr_decay_style").get<std::string>();
    was.lr_schedule.lr_decay_samples = saved.at("decay_steps").get<double>();
    was.lr_schedule.lr_lag_steps = saved.at("lr_lag_steps").get<int>();
    was.training.global_batch_size = 1;
  } catch (const nlohmann::json::exception&) {
    return "";  // not a schedule this Triad wrote: nothing to compare with
  }
  // The optimizer steps drive the schedule (a step skipped on overflow leaves it).
  const int64_t next = impl_->progress.optimizer_steps + 1;
  const auto lr = [&](const Config& c, int64_t s) {
    return learning_rate(c.optimizer, c.lr_schedule, c.training.train_iters,
                         c.training.global_batch_size, int(s));
  };
  // The same lr from here to the end (every step, or 100000 spread over a longer run) is the
  // same schedule, whatever its keys say (a constant lr has no decay length).
  const int64_t last = cfg.training.train_iters,
                stride = std::max<int64_t>(1, (last - next) / 100000);
  bool same = true;
  for (int64_t s = next; s <= last && same; s = s == last ? last + 1 : std::min(last, s + stride))
    same = lr(was, s) == lr(cfg, s);
  if (same) return "";
  // Steps are whole numbers mostly: "4", not "4.0".
  const auto text = [](const nlohmann::json& v) {
    const bool whole = v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
                       std::abs(v.get<double>()) < 1e15;
    return whole ? std::to_string(static_cast<long long>(v.get<double>())) : value_text(v);
  };
  std::string changed;
  for (auto it = now.begin(); it != now.end(); ++it)
    if (saved.contains(it.key()) && saved.at(it.key()) != it.value())
      changed += (changed.empty() ? "" : ", ") + it.key() + " " + text(saved.at(it.key())) +
                 " -> " + text(it.value()) +
                 (it.key() == "decay_steps" && cfg.lr_schedule.lr_decay_iters == 0 &&
                          cfg.lr_schedule.lr_decay_samples == 0
                      ? " (training.train_iters)"
                      : "");
  return "checkpoint.load '" + path() +
         "': the learning-rate schedule differs from the one it was trained with (" + changed +
         "): optimizer step " + std::to_string(next) + " gets lr " +
         fmt::format("{:.6g}", lr(cfg, next)) + " instead of " +
         fmt::format("{:.6g}", lr(was, next)) + ", and the schedule goes on from there";
}

std::string Checkpoint::describe() const {
  const auto& m = impl_->meta;
  const auto& l = m.at("layout");
  const ModelConfig& md = impl_->model;
  uint64_t bytes = 0;
  for (const auto& f : impl_->files) bytes += f.bytes;
  std::ostringstream s;
  s << "checkpoint: " << impl_->dir << "\n"
    << "step: " << m.at("step") << " (consumed samples " << m.at("consumed_samples")
    << ", global batch " << m.at("global_batch_size") << ", of train_iters " << m.at("train_iters")
    << ")\n"
    << "layout: tp " << l.at("tensor_model_parallel_size") << " x pp "
    << l.at("pipeline_model_parallel_size") << " x dp " << l.at("data_parallel_size")
    << (l.value("context_parallel_size", 1) > 1
            ? " x cp " + std::to_string(l.value("context_parallel_size", 1))
            : std::string())
    << " (world " << l.at("world_size") << "), ZeRO stage " << l.at("zero_stage")
    << (l.at("sequence_parallel").get<bool>() ? ", sequence parallel" : "") << "\n"
    << "model: " << md.num_layers << " layers, hidden " << md.hidden_size << ", "
    << md.num_attention_heads << " heads, vocab " << md.vocab_size << ", context "
    << context_length(md) << ", " << md.position_embedding << " positions, " << gpt_layout(md).total
    << " parameters\n"
    << "tensors: " << m.at("tensors").size()
    << "; state: fp32 weights + AdamW exp_avg, exp_avg_sq\n"
    << "files: " << impl_->files.size() << " rank files, " << bytes << " bytes, CRC-32 each\n"
    << "seeds: training " << m.at("rng").at("training_seed") << ", data "
    << m.at("rng").at("data_seed") << "\n";
  const TrainingProgress& p = impl_->progress;
  s << "optimizer steps: " << p.optimizer_steps;
  if (p.scaler)
    s << " (fp16: loss scale " << p.scaler->scale << ", " << p.scaler->skipped
      << " steps skipped on overflow)";
  s << "\n";
  return s.str();
}

void Checkpoint::check_model(const ModelConfig& m, const std::string& key) const {
  const ModelConfig& s = impl_->model;
  // model.NAME, said with `note` where the key alone would mislead ("(the context)").
  auto differ = [&](const std::string& name, const nlohmann::json& saved,
                    const nlohmann::json& here, const std::string& note = "") {
    if (saved != here)
      throw UserError(key + " '" + impl_->dir + "' holds another model: model." + name + note +
                      " is " + value_text(saved) + " there but " + value_text(here) +
                      " in this config; train it with the model it was saved with (--set model." +
                      name + "=" + value_text(saved) + "; its config is in metadata.json)");
  };
  // Every stored field that changes what the model computes. Not compared: init_std (it only
  // draws the first weights, which the checkpoint replaces), seq_length (the samples' length:
  // any up to the context runs the same weights), make_vocab_size_divisible_by (the padded
  // rows never get probability, and loading cuts the vocabulary anew).
  differ("num_layers", s.num_layers, m.num_layers);
  differ("hidden_size", s.hidden_size, m.hidden_size);
  differ("num_attention_heads", s.num_attention_heads, m.num_attention_heads);
  differ("vocab_size", s.vocab_size, m.vocab_size);
  differ("position_embedding", s.position_embedding, m.position_embedding);
  differ("max_position_embeddings", context_length(s), context_length(m), " (the context)");
  differ("layernorm_epsilon", s.layernorm_epsilon, m.layernorm_epsilon);
  if (m.position_embedding == "rope") differ("rope_base", s.rope_base, m.rope_base);
}

void Checkpoint::verify() const {
  for (const Impl::File& f : impl_->files) {
    const uint32_t crc = crc_of(f.map->file_bytes(), f.map->file_size());
    if (crc != f.crc)
      throw UserError("checkpoint file '" + (fs::path(impl_->dir) / f.name).string() +
                      "' is corrupt: its CRC-32 is " + std::to_string(crc) + ", saved as " +
                      std::to_string(f.crc) + "; load an earlier checkpoint");
  }
}

std::vector<float> Checkpoint::full_model(const GptLayout& layout) const {
  return impl_->full("param", layout);
}

std::vector<float> Checkpoint::params(const ParamSpec& spec) const {
  const GptLayout layout = gpt_layout(impl_->model);
  const std::vector<float> full = impl_->full("param", layout);
  std::vector<float> local(spec.total);
  local_from_full(spec, layout, full.data(), local.data());
  return local;
}

void Checkpoint::load_optimizer(ModelState& state) const {
  const GptLayout layout = gpt_layout(impl_->model);
  Device& opt = state.host() ? *state.host() : state.device();
  std::vector<float> local(state.spec().total);
  for (int k = 1; k < 3; ++k) {
    const std::vector<float> full = impl_->full(kKinds[k], layout);
    local_from_full(state.spec(), layout, full.data(), local.data());
    for (const ModelState::Piece& pc : state.pieces())
      opt.to_device(k == 1 ? state.piece_m(pc) : state.piece_v(pc), local.data() + pc.arena,
                    pc.count * sizeof(float));
  }
}

}  // namespace triad
