#include "triad/core/train/step_observers.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "triad/core/io/hf.hpp"
#include "triad/core/tokenizer/tokenizer.hpp"
#include "triad/core/units.hpp"

namespace triad {

namespace fs = std::filesystem;

namespace {

// Megatron's validation perplexity: exp of the loss, capped at exp(20).
double megatron_ppl(double loss) {
  return std::exp(std::min(20.0, loss));
}

// Resuming into a run's folder: its metrics records up to the resumed step stay, later ones
// (steps the checkpoint does not hold, about to be trained again) go. Rewritten atomically.
void keep_metrics_until(const fs::path& file, int step) {
  std::ifstream in(file);
  if (!in) return;
  std::string kept, line;
  int dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    int s = 0;
    try {
      s = nlohmann::json::parse(line).at("step").get<int>();
    } catch (const nlohmann::json::exception&) {
      ++dropped;  // a torn last line of a run that was killed
      continue;
    }
    if (s <= step)
      kept += line + "\n";
    else
      ++dropped;
  }
  write_file_atomic(file, kept);
  if (dropped)
    spdlog::info("{}: kept the records up to step {}, dropped {} after it (trained again now)",
                 file.string(), step, dropped);
}

}  // namespace

MetricsLog::MetricsLog(const Run& run)
    : run_(run),
      flops_per_step_(model_flops_per_step(run.cfg.model, run.cfg.training.global_batch_size)) {
  if (!run.opts.write_output) return;
  const Config& cfg = run.cfg;
  // A folder holding a run was refused before the ranks started unless it is resumed (then
  // appended to) or output.overwrite (then started anew).
  const fs::path out = cfg.output.dir, metrics = out / "metrics.jsonl";
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw UserError("output.dir '" + cfg.output.dir + "' cannot be created: " + ec.message());
  const bool append = cfg.checkpoint.resume || run.ckpt;
  if (append) keep_metrics_until(metrics, run.start_step);
  write_file_atomic(out / "config.yaml", to_yaml(cfg));
  jsonl_.emplace(metrics, append ? RecordFile::Open::append : RecordFile::Open::truncate);
}

StepRecord MetricsLog::record(const StepOutcome& s) {
  const Config& cfg = run_.cfg;
  const TrainingConfig& t = cfg.training;
  const int pp = run_.stages();
  const double peak_tflops = run_.peak_tflops;
  StepRecord r;
  r.valid_loss = s.valid_loss;
  r.valid_loss_end = s.valid_loss_end;
  r.step = s.step;
  r.loss = s.loss;
  r.lr = s.lr;
  r.grad_norm = s.grad_norm;
  r.scaled = s.scaled;
  r.skipped = s.skipped;
  r.loss_scale = s.loss_scale;
  r.ms = s.ms;
  r.samples_per_s = t.global_batch_size / (s.ms / 1e3);
  r.tokens_per_s = r.samples_per_s * cfg.model.seq_length;
  r.tflops = flops_per_step_ / (s.ms / 1e3) / 1e12 / run_.opts.dist.world_size;
  r.mfu = peak_tflops > 0 ? r.tflops / peak_tflops : 0;
  r.peak_bytes = run_.peak_bytes();
  if (!std::isfinite(s.loss))
    throw UserError("loss is " + std::to_string(s.loss) + " at step " + std::to_string(s.step) +
                    "; lower optimizer.lr or enable clip_grad");
  if (jsonl_) {
    nlohmann::json j{
        {"step", s.step},
        {"loss", s.loss},
        {"lr", s.lr},
        {"grad_norm", s.grad_norm},
        {"ms_per_step", s.ms},
        {"samples_per_s", r.samples_per_s},
        {"tokens_per_s", r.tokens_per_s},
        {"tflops_per_device", r.tflops},
        {"mfu", peak_tflops > 0 ? nlohmann::json(r.mfu) : nlohmann::json()},
        {"pipeline_efficiency", pp > 1 ? nlohmann::json(s.efficiency) : nlohmann::json()},
        {"pipeline_pass_efficiency", pp > 1 ? nlohmann::json(s.pass_efficiency) : nlohmann::json()},
        {"stage_peak_memory_bytes", pp > 1 ? nlohmann::json(s.stage_peak) : nlohmann::json()},
        {"stage_compute_ms", pp > 1 ? nlohmann::json(s.stage_busy_ms) : nlohmann::json()},
        {"peak_memory_bytes", r.peak_bytes}};
    if (s.scaled) {
      j["loss_scale"] = s.loss_scale;
      j["skipped"] = s.skipped;
      j["skipped_total"] = s.skipped_total;
    }
    if (std::isfinite(s.valid_loss)) {
      j["valid_loss"] = s.valid_loss;
      j["valid_ppl"] = megatron_ppl(s.valid_loss);
    }
    if (std::isfinite(s.valid_loss_end)) {
      j["valid_loss_end"] = s.valid_loss_end;
      j["valid_ppl_end"] = megatron_ppl(s.valid_loss_end);
    }
    jsonl_->write_line(j.dump());
  }
  if (!run_.opts.quiet && (s.step % t.log_interval == 0 || s.step == 1 || s.step == t.train_iters))
    spdlog::info(
        "step {:>5}/{} | loss {:.4f} | lr {:.3e} | grad-norm {:.3f} | {:.1f} ms | "
        "{:.1f} samples/s | {:.0f} tokens/s | {:.3f} TFLOP/s{} | peak {}",
        s.step, t.train_iters, s.loss, s.lr, s.grad_norm, s.ms, r.samples_per_s, r.tokens_per_s,
        r.tflops,
        (peak_tflops > 0 ? fmt::format(" | MFU {:.1f}%", 100 * r.mfu) : std::string()) +
            (pp > 1 ? fmt::format(" | pipeline {:.0f}%", 100 * s.efficiency) : std::string()) +
            (s.scaled
                 ? fmt::format(" | loss scale {:.6g} | skipped {}", s.loss_scale, s.skipped_total)
                 : std::string()),
        mib(r.peak_bytes));
  return r;
}

void MetricsLog::close() {
  if (jsonl_) jsonl_->close();
}

TensorBoardLog::TensorBoardLog(const Run& run) : run_(run) {
  const std::string& dir = run.cfg.logging.tensorboard_dir;
  if (!run.opts.write_output || dir.empty()) return;
  events_.emplace(dir, "logging.tensorboard_dir");
  if (!run.opts.quiet)
    spdlog::info("TensorBoard: {} (tensorboard --logdir {})", events_->path().string(), dir);
}

void TensorBoardLog::record(const StepRecord& r) {
  if (!events_) return;
  const TrainingConfig& t = run_.cfg.training;
  const bool grouped = run_.cfg.logging.tensorboard_tags == "megatron-deepspeed";
  // Megatron's tags; the training scalars every tensorboard_log_interval steps, each against the
  // iteration and (" vs samples") the samples consumed; iteration-time (seconds) every
  // log_interval steps, with throughput (TFLOP/s per device) under Megatron-LM's tags;
  // validation whenever the step evaluated. Megatron-DeepSpeed's tags put each in a group
  // ("grad-norm/grad-norm") and add " vs tokens" against the tokens consumed.
  Scalars by_step, by_samples, by_tokens;
  auto both = [&](const std::string& group, const std::string& name, double v) {
    const std::string tag = grouped ? group + "/" + name : name;
    by_step.emplace_back(tag, v);
    by_samples.emplace_back(tag + " vs samples", v);
    if (grouped) by_tokens.emplace_back(tag + " vs tokens", v);
  };
  const double samples = double(r.step) * t.global_batch_size,
               tokens = samples * run_.cfg.model.seq_length;
  if (r.step % run_.cfg.logging.tensorboard_log_interval == 0) {
    if (grouped) {
      by_samples.emplace_back("steps-vs-samples/y=steps,x=samples", r.step);
      by_step.emplace_back("steps-vs-samples/y=samples,x=steps", samples);
      by_tokens.emplace_back("steps-vs-tokens/y=steps,x=tokens", r.step);
      by_step.emplace_back("steps-vs-tokens/y=tokens,x=steps", tokens);
    }
    both("learning-rate", "learning-rate", r.lr);
    both("batch-size", "batch-size", t.global_batch_size);
    both("lm-loss-training", "lm loss", r.loss);
    // Megatron-LM's in every precision (1 without a scaler); Megatron-DeepSpeed's under fp16.
    if (!grouped || r.scaled) both("loss-scale", "loss-scale", r.scaled ? r.loss_scale : 1.0);
    if (grouped) both("world-size", "world-size", run_.opts.dist.world_size);
    both("grad-norm", "grad-norm", r.grad_norm);
    by_step.emplace_back("mem-max-allocated-bytes", double(r.peak_bytes));
  }
  if (r.step % t.log_interval == 0) {
    if (grouped) {
      both("iteration-time", "iteration-time", r.ms / 1e3);
    } else {
      by_step.emplace_back("iteration-time", r.ms / 1e3);
      by_step.emplace_back("throughput", r.tflops);
    }
  }
  auto validation = [&](double loss) {
    both("lm-loss-validation", "lm loss validation", loss);
    both("lm-loss-validation", "lm loss validation ppl", megatron_ppl(loss));
  };
  auto flush = [&] {
    events_->write_scalars(r.step, by_step);
    events_->write_scalars(int64_t(samples), by_samples);
    if (grouped) events_->write_scalars(int64_t(tokens), by_tokens);
    by_step.clear(), by_samples.clear(), by_tokens.clear();
  };
  if (std::isfinite(r.valid_loss)) validation(r.valid_loss);
  flush();
  // The end of training's second evaluation: the same tags at the same step once more, after the
  // first, as Megatron writes them.
  if (std::isfinite(r.valid_loss_end)) {
    validation(r.valid_loss_end);
    flush();
  }
}

void TensorBoardLog::close() {
  if (events_) events_->close();
}

CheckpointSaver::CheckpointSaver(const Run& run) : run_(run) {
  // This rank's place, and how every rank hears of every other's file.
  const DistEnv& env = run.opts.dist;
  rank_.rank = env.rank;
  rank_.world = env.world_size;
  rank_.coords = run.me;
  rank_.world_gather = [&run](const std::vector<uint8_t>& mine) {
    if (!run.dist) return mine;
    Device& device = *run.device;
    const int world = run.opts.dist.world_size;
    // Bytes as they are (a gather never computes on them), in 4-byte words on the device.
    const size_t words = (mine.size() + 3) / 4, n = words * size_t(world);
    std::vector<uint8_t> host(n * 4, 0);
    std::memcpy(host.data(), mine.data(), mine.size());
    Buffer<float> send(device, words, "checkpoint reports"), recv(device, n, "checkpoint reports");
    device.to_device(send.data(), host.data(), words * 4);
    run.dist->world.all_gather(send.data(), recv.data(), n, dl_float32(), device.dl_device())
        .wait(run.dist->timeout);
    device.to_host(host.data(), recv.data(), n * 4);
    std::vector<uint8_t> all;
    for (int r = 0; r < world; ++r)
      all.insert(all.end(), host.begin() + long(size_t(r) * words * 4),
                 host.begin() + long(size_t(r) * words * 4 + mine.size()));
    return all;
  };
}

void CheckpointSaver::after_step(int step, bool stopping) {
  const Config& cfg = run_.cfg;
  const int every = cfg.checkpoint.save_interval;
  if (cfg.checkpoint.save.empty() ||
      !(step == cfg.training.train_iters || stopping || (every > 0 && step % every == 0)))
    return;
  const auto s0 = std::chrono::steady_clock::now();
  last_ = save_checkpoint(cfg, run_.spec, *run_.state, rank_, step, run_.progress);
  // --overwrite: the other run's iteration folders go once this run has a checkpoint of its own
  // (a --resume later would otherwise pick up theirs beside ours). Every rank has saved by now.
  if (!saved_ && rank_.rank == 0 && replaces_saved_checkpoints(cfg)) {
    const std::string mine = std::filesystem::path(last_).filename().string();
    for (const std::string& name : checkpoint_folders(cfg.checkpoint.save)) {
      if (name == mine) continue;
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::path(cfg.checkpoint.save) / name, ec);
      if (ec)
        spdlog::warn("checkpoint.save: the earlier run's {} could not be removed: {}", name,
                     ec.message());
    }
  }
  saved_ = true;
  if (!run_.opts.quiet)
    spdlog::info(
        "saved checkpoint {} in {:.0f} ms", last_,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
}

namespace {

// Context parallelism's traffic per step (what ContextAttention handed the transport) against
// issue 32's formulas: per block and micro-batch one forward and one backward, and one more
// forward where recomputation (full or selective) runs the attention again.
void log_context_traffic(const Run& run, double steps) {
  const Config& cfg = run.cfg;
  const ContextMethod method = parse_context_method(cfg.parallel.context_parallel_method);
  const ModelConfig& m = cfg.model;
  const int64_t heads = m.num_attention_heads / tensor_shards(run.spec.placement).attention;
  const ContextShape shape{cfg.training.micro_batch_size, heads, m.seq_length,
                           m.hidden_size / m.num_attention_heads};
  const size_t e = dtype_bytes(precision_dtype(cfg.precision));
  const uint64_t fwd =
      expected_context_traffic(method, false, shape, run.cp(), shape.max_batch, e).bytes;
  const uint64_t bwd =
      expected_context_traffic(method, true, shape, run.cp(), shape.max_batch, e).bytes;
  const uint64_t forwards = recompute_of(cfg.training) == Recompute::none ? 1 : 2;
  double counted_fwd = 0, counted_bwd = 0, formula = 0;
  for (const auto& ch : run.chunks) {
    if (const ContextAttention* c = ch->context_attention()) {
      counted_fwd += double(c->forward_traffic().bytes) / steps;
      counted_bwd += double(c->backward_traffic().bytes) / steps;
    }
    formula += double(ch->num_blocks()) * cfg.training.gradient_accumulation_steps *
               double(forwards * fwd + bwd);
  }
  spdlog::info(
      "context-parallel traffic per step per rank ({}, cp {}): counted {:.0f} B (forward {:.0f}, "
      "backward {:.0f}); the formula {:.0f} B",
      context_method_name(method), run.cp(), counted_fwd + counted_bwd, counted_fwd, counted_bwd,
      formula);
}

// The GPT-2 tokenizer's files a run with data.tokenizer gpt2 read, to ship with its export; none
// for byte tokens, or where they are not found (data.kind tokens or indexed never reads them).
HfTokenizerFiles hf_tokenizer_of(const DataConfig& d) {
  if (d.tokenizer != "gpt2") return {};
  const Gpt2Files f = gpt2_files(d.vocab_file, d.merge_file);
  std::error_code ec;
  if (!fs::is_regular_file(f.encoder_json, ec) || !fs::is_regular_file(f.vocab_bpe, ec)) return {};
  return {f.encoder_json, f.vocab_bpe};
}

}  // namespace

void finish_run(const Run& run, const Optimizer& optimizer, RunResult& result) {
  const Config& cfg = run.cfg;
  const bool quiet = run.opts.quiet;
  const double ran = std::max<size_t>(1, result.steps.size());
  // The tensor group's traffic per step, as counted against Megatron's formula.
  TensorTraffic counted;
  for (const auto& ch : run.chunks) {
    const TensorCommVolume& vol = ch->comm_volume();
    counted.activations += vol.activations / ran;
    counted.logits += vol.logits / ran;
    counted.replicated_grads += vol.replicated_grads / ran;
  }
  result.tensor_traffic_counted = counted;
  result.tensor_traffic_formula =
      tensor_traffic_formula(cfg, run.me.pp, tensor_shards(run.spec.placement));
  if (run.host_device && !quiet)
    spdlog::info(
        "optimizer offloaded to the host: {} each way per step (gradients down, weights up); "
        "host memory {} (master weights and Adam moments of this rank's shard), training device "
        "peak {}",
        mib(size_t(double(optimizer.offloaded_bytes()) / ran)), mib(run.host_device->peak_bytes()),
        mib(run.device->peak_bytes()));
  if (run.dist) {
    // The paper counts one forward and backward per step: 2Ψ (reduce-scatter + all-gather, or
    // an all-reduce) for stages 0-2, 3Ψ for stage 3, each times (N-1)/N in ring accounting.
    const int zstage = cfg.zero_optimization.stage;
    const double psi = double(run.state->size()), nd = run.dist->comms.grad_reduce().size();
    result.zero_traffic_counted = run.dist->data->take_traffic() / ran;
    result.zero_traffic_paper = (zstage == 3 ? 3 : 2) * psi * 4 * (nd - 1) / nd;
    if (!quiet)
      spdlog::info(
          "data-parallel traffic per step per rank: counted {:.0f} B ({:.2f}Ψ over {} "
          "micro-batches); the ZeRO paper's {}Ψ = {:.0f} B (one micro-batch per step)",
          result.zero_traffic_counted,
          nd > 1 ? result.zero_traffic_counted / (psi * 4 * (nd - 1) / nd) : 0.0,
          cfg.training.gradient_accumulation_steps, zstage == 3 ? 3 : 2, result.zero_traffic_paper);
  }
  if (run.tp() > 1 && !quiet) {
    const TensorTraffic& c = result.tensor_traffic_counted;
    const TensorTraffic& f = result.tensor_traffic_formula;
    spdlog::info(
        "tensor-parallel traffic per step per rank: counted {:.0f} B (activations {:.0f}, "
        "logits {:.0f}, replicated grads {:.0f}); Megatron's formula {:.0f} B ({:.0f}, {:.0f}, "
        "{:.0f})",
        c.total(), c.activations, c.logits, c.replicated_grads, f.total(), f.activations, f.logits,
        f.replicated_grads);
  }
  if (run.cp() > 1 && !quiet) log_context_traffic(run, ran);
  if (!cfg.output.export_hf.empty() && result.stopped_at == 0) {
    // Every tensor-parallel rank takes part in the gather; rank 0 writes.
    const Buffer<float> whole = run.state->whole_params();
    const std::vector<float> full = run.whole_model(whole.data());
    if (run.opts.dist.rank == 0) {
      export_hf(cfg.output.export_hf, cfg.model, run.model().full_layout(), full.data(),
                hf_tokenizer_of(cfg.data));
      if (!quiet) spdlog::info("exported Hugging Face GPT-2 folder: {}", cfg.output.export_hf);
    }
  }
  result.peak_bytes = run.peak_bytes();
}

void write_step_trace(const Run& run, const StepTrace& trace) {
  if (!trace.enabled()) return;
  const Config& cfg = run.cfg;
  const std::string dir =
      cfg.training.profile_dir.empty() ? cfg.output.dir : cfg.training.profile_dir;
  Communicator* world = run.dist ? &run.dist->world : nullptr;
  const std::string merged = trace.write(dir, world, run.opts.dist.world_size, run.timeout);
  if (!merged.empty() && !run.opts.quiet)
    spdlog::info("step trace: {} (read it with tools/triad-trace {})", merged, merged);
}

}  // namespace triad
