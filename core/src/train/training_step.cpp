#include "triad/core/train/training_step.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numeric>
#include <vector>

#include "triad/core/dist/rank_status.hpp"
#include "triad/core/io/safetensors.hpp"
#include "triad/core/train/stop_signals.hpp"
#include "triad/core/train/trace.hpp"

namespace triad {

namespace {

// Evaluation's messages apart from training's.
constexpr uint32_t kEvalTags = 1u << 30;

PipelineExecutor::Place executor_place(const Run& run) {
  PipelineExecutor::Place p;
  p.stage = run.me.pp;
  p.stages = run.stages();
  p.chunks = run.chunks_per_stage;
  p.buffers = run.schedule.buffers;
  p.micro_batch = run.cfg.training.micro_batch_size;
  p.send_copies = run.send_copies;
  p.tagged = !run.dist || run.dist->tagged();
  p.seq_length = run.cfg.model.seq_length;
  return p;
}

std::vector<GPT*> chunk_pointers(const Run& run) {
  std::vector<GPT*> out;
  for (const auto& c : run.chunks) out.push_back(c.get());
  return out;
}

// Writes the whole model's gradients (Hugging Face names, Triad's (out,in) shapes) to
// DIR/grads.safetensors.
void write_grads(const std::string& dir, const GptLayout& layout, const std::vector<float>& g) {
  std::filesystem::create_directories(dir);
  std::vector<safetensors::TensorRef> ts;
  for (const auto& p : layout.params) ts.push_back({p.name, p.shape, g.data() + p.offset});
  safetensors::write_f32((std::filesystem::path(dir) / "grads.safetensors").string(), ts);
}

// TRIAD_INJECT_OVERFLOW="STEP[,STEP...]@RANK": the steps at which `rank` puts an inf into its
// gradients before the overflow check (how the tests overflow fp16's loss scaling on one rank
// of a job at chosen steps). Empty when unset or naming another rank.
std::vector<int> overflow_steps_of(int rank) {
  const char* v = std::getenv("TRIAD_INJECT_OVERFLOW");
  if (!v) return {};
  const std::string text = v;
  const size_t at = text.find('@');
  std::vector<int> steps;
  try {
    if (at == std::string::npos || std::stoi(text.substr(at + 1)) != rank) return {};
    for (size_t i = 0; i < at;) {
      size_t used = 0;
      steps.push_back(std::stoi(text.substr(i, at - i), &used));
      i += used + 1;
    }
  } catch (const std::exception&) {
    throw UserError("TRIAD_INJECT_OVERFLOW '" + text +
                    "' is not STEP[,STEP...]@RANK (e.g. 2,5@0); unset it to train normally");
  }
  return steps;
}

}  // namespace

TrainingStep::TrainingStep(Run& run, Optimizer& optimizer)
    : run_(run),
      optimizer_(optimizer),
      // With data (and context) parallelism each rank also scales by 1/(dp cp), so the data
      // plugin's sum over the group is the mean (zero_optimization: no pass over the gradients
      // after the reduction). A context-parallel rank's loss is the mean over its tokens, all
      // ranks holding as many.
      executor_(
          chunk_pointers(run), executor_place(run), *run.device, run.act,
          run.dist ? run.dist->comms.pp.get() : nullptr, run.timeout,
          1.0f / (float(run.cfg.training.gradient_accumulation_steps) * float(run.grad_ranks())),
          run.pipeline->name()),
      partitioned_(run.state->grads_partitioned()),
      // Without interleaving the last BACKWARD of the step hands finished gradient ranges to
      // the data plugin as it goes (overlapping its reduction); with interleaved chunks the
      // data plugin gets the whole arena at REDUCE_GRADS.
      overlap_(run.chunks_per_stage == 1),
      // With pipeline stages the tied word embedding's gradient is summed over the first and
      // last stage before the data plugin may reduce it: the range holding it waits for
      // REDUCE_TIED_GRADS.
      tied_split_(run.stages() > 1),
      tied_range_(run.me.pp == 0 ? run.spec.embedding : run.spec.head),
      scaler_(run.cfg.fp16) {
  // A resumed run goes on with the scale it had (a checkpoint without fp16 starts it afresh).
  if (scaler_.enabled() && run.progress.scaler) scaler_.restore(*run.progress.scaler);
  inject_overflow_ = overflow_steps_of(run.opts.dist.rank);
  // ZeRO-2/3 reduce every micro-batch's gradients unit by unit, but the tied embedding's only
  // once, after REDUCE_TIED_GRADS summed it over the stages.
  if (partitioned_ && tied_split_ && tied_range_.size()) run.state->defer_unit(tied_range_);
  if (run.spec.placement.has_embedding || run.spec.placement.has_head) {
    wte_off_ = run.spec.find("wte.weight").offset;
    wte_n_ = run.spec.find("wte.weight").numel;
  }
}

StepOutcome TrainingStep::run(int step) {
  const Config& cfg = run_.cfg;
  const auto t0 = std::chrono::steady_clock::now();
  step_ = step;
  // The schedule follows the optimizer steps taken: a step skipped on overflow leaves it where
  // it was (DeepSpeed and Megatron do not advance the scheduler on a skipped step).
  lr_ = learning_rate(cfg.optimizer, cfg.lr_schedule, cfg.training.train_iters,
                      cfg.training.global_batch_size, int(run_.progress.optimizer_steps) + 1);
  norm_ = 0;
  step_scale_ = scaler_.scale();
  skipped_ = false;
  executor_.set_loss_scale(step_scale_);
  run_.model().zero_grad();
  const PipelineExecutor::Work work =
      executor_.run(run_.schedule.instrs, *run_.data, step - 1, this);
  StepOutcome out;
  out.step = step;
  out.lr = lr_;
  out.grad_norm = norm_;
  out.scaled = scaler_.enabled();
  out.skipped = skipped_;
  out.loss_scale = step_scale_;
  out.skipped_total = scaler_.state().skipped;
  // The last stage computed the loss; every rank reports the data-parallel mean. A stop
  // signal any rank received rides along, so that every rank stops after the same step.
  DistributedRun* dist = run_.dist.get();
  const int pp = run_.stages();
  std::vector<double> agreed{work.loss / cfg.training.gradient_accumulation_steps,
                             double(stop_signal() != 0)};
  if (pp > 1) agreed = dist->sum(*dist->comms.pp, agreed);
  if (dist) agreed = dist->sum(dist->comms.grad_reduce(), agreed);
  if (run_.tp() > 1) agreed[1] = dist->sum(*dist->comms.tp, agreed[1]);
  out.loss = agreed[0] / (dist ? run_.grad_ranks() : 1);
  out.stop_requested = agreed[1] > 0;
  run_.device->synchronize();  // the step's time includes its device work
  const auto end = std::chrono::steady_clock::now();
  out.ms = std::chrono::duration<double, std::milli>(end - t0).count();
  // Pipeline efficiency: the stages' compute time over stages x the step time (1 - bubble,
  // communication and waiting included); and each stage's peak memory (GPipe's grows with
  // the micro-batches, 1F1B's with the stages). One all-reduce over the stages, each stage
  // filling its own slot of three rows: its peak, the tail after its last pass, its busy time.
  if (pp > 1) {
    const size_t me = size_t(run_.me.pp), p = size_t(pp);
    std::vector<double> mine(3 * p, 0.0);
    mine[me] = double(run_.peak_bytes());
    // The step ends at once on every stage (the agreement above): how long before it each
    // stage's last pass ended, on its own clock.
    mine[p + me] = std::chrono::duration<double, std::milli>(end - work.last_pass_end).count();
    mine[2 * p + me] = work.busy_ms;
    const std::vector<double> all = dist->sum(*dist->comms.pp, mine);
    out.stage_peak.assign(all.begin(), all.begin() + pp);
    out.stage_busy_ms.assign(all.begin() + 2 * pp, all.end());
    const double busy = std::accumulate(out.stage_busy_ms.begin(), out.stage_busy_ms.end(), 0.0);
    const double tail = *std::min_element(all.begin() + pp, all.begin() + 2 * pp);
    out.efficiency = busy / (pp * out.ms);
    out.pass_efficiency = busy / (pp * (out.ms - tail));
  }
  return out;
}

GPT::GradsReady TrainingStep::grads_ready(bool last) {
  ModelState& state = *run_.state;
  state.settle();  // deferred parameter gathers end before any gradient reduction (data_v4.h)
  if (partitioned_)
    return [this, &state](size_t off, size_t n) {
      if (!is_tied(off, n)) state.grads_done({off, off + n});
    };
  if (run_.dist && overlap_ && last)
    return [this](size_t off, size_t n) {
      if (!is_tied(off, n)) run_.dist->data->grads_ready(run_.model().grads(), off, n);
    };
  return nullptr;
}

void TrainingStep::reduce_tied_grads() {
  if (!tied_split_) return;
  DistributedRun& dist = *run_.dist;  // pipeline stages run in a job of several ranks
  ModelState& state = *run_.state;
  if (dist.embedding)
    dist.embedding
        .all_reduce(state.grad(wte_off_), state.grad(wte_off_), wte_n_, dl_float32(),
                    TRIAD_REDUCE_SUM, run_.device->dl_device())
        .wait(run_.timeout);
  if (partitioned_)
    state.grads_done(tied_range_);
  else if (overlap_)
    dist.data->grads_ready(run_.model().grads(), tied_range_.begin, tied_range_.size());
}

void TrainingStep::reduce_grads() {
  // The data plugin calls the transport itself (not through the core's Communicator), so its
  // reduction is one span here: the data-parallel group's gradients, as the trace counts them.
  if (!partitioned_ && !run_.dist) return;
  TraceSpan span(TraceKind::communication, "reduce_grads");
  if (span)
    span.arg("group", "dp").arg("bytes", uint64_t(run_.model().num_params()) * sizeof(float));
  if (partitioned_) {
    run_.state->finish_grads();
  } else {
    GPT& model = run_.model();
    if (!overlap_) run_.dist->data->grads_ready(model.grads(), 0, model.num_params());
    run_.dist->data->finish_grads(model.grads());
  }
}

void TrainingStep::optimizer_step() {
  if (scaler_.enabled()) {
    skipped_ = scaler_.update(grads_overflowed(), step_);
    run_.progress.scaler = scaler_.state();
    if (skipped_) {
      norm_ = std::nan("");
      optimizer_.skip();
      if (!run_.opts.quiet)
        spdlog::info(
            "step {}: gradients overflowed at loss scale {:.6g}: step skipped{}", step_,
            step_scale_,
            scaler_.dynamic() ? fmt::format(", loss scale now {:.6g}", scaler_.scale()) : "");
      return;
    }
  }
  norm_ = optimizer_.grad_norm(step_scale_);
  if (step_ == 1 && !run_.opts.grads_dump_dir.empty()) {
    const Buffer<float> whole = whole_grads();
    std::vector<float> g = run_.whole_model(whole.data());
    if (step_scale_ != 1)
      for (float& x : g) x = float(x / step_scale_);
    if (run_.opts.dist.rank == 0)
      write_grads(run_.opts.grads_dump_dir, run_.model().full_layout(), g);
  }
  optimizer_.step(norm_, lr_, int(run_.progress.optimizer_steps) + 1, step_scale_);
  ++run_.progress.optimizer_steps;
}

// The step's whole summed gradient arena of this rank's tensor/pipeline slice. Under ZeRO-1 only
// the owned block (or the owned slice of each unit) holds the group's sum (the rest is the
// reduce-scatter's partial sums): zero the rest and add the pieces up over the group.
Buffer<float> TrainingStep::whole_grads() const {
  ModelState& state = *run_.state;
  Buffer<float> whole = state.whole_grads();
  if (!run_.dist || state.grads_partitioned() || !state.grads_sharded()) return whole;
  Device& dev = *run_.device;
  size_t at = 0;  // the pieces lie in arena order
  for (const ModelState::Piece& own : state.pieces()) {
    dev.fill_zero(whole.data() + at, (own.arena - at) * sizeof(float));
    at = own.arena + own.count;
  }
  dev.fill_zero(whole.data() + at, (state.size() - at) * sizeof(float));
  run_.dist->comms.grad_reduce()
      .all_reduce(whole.data(), whole.data(), state.size(), dl_float32(), TRIAD_REDUCE_SUM,
                  dev.dl_device())
      .wait(run_.timeout);
  return whole;
}

// Whether any rank's gradients hold an inf or a NaN: each rank looks at every gradient it holds
// (its shard under ZeRO-2/3), and one all-reduce over the job agrees on it.
bool TrainingStep::grads_overflowed() {
  ModelState& state = *run_.state;
  const auto& own = state.pieces();
  if (!own.empty() && own.front().count &&
      std::find(inject_overflow_.begin(), inject_overflow_.end(), step_) !=
          inject_overflow_.end()) {
    const float inf = std::numeric_limits<float>::infinity();
    run_.device->to_device(state.piece_grads(own.front()), &inf, sizeof inf);
  }
  double bad = std::isfinite(state.owned_grad_sum_squares()) ? 0 : 1;
  if (run_.dist) bad = run_.dist->sum(run_.dist->world, bad);
  return bad > 0;
}

double TrainingStep::evaluate_after(int step) {
  const TrainingConfig& t = run_.cfg.training;
  // Validation every eval_interval steps, and after the last step (Megatron's end-of-training
  // evaluation) when that is not one of them.
  const int every = t.eval_interval;
  if (!run_.valid || (step % every != 0 && step != t.train_iters)) return std::nan("");
  const int64_t round = step % every == 0 ? step / every - 1 : step / every;
  const double loss = evaluate(round);
  if (!run_.opts.quiet)
    spdlog::info("validation loss at step {} | loss {:.4f} | perplexity {:.3f} | {} batches", step,
                 loss, std::exp(loss), t.eval_iters);
  return loss;
}

double TrainingStep::evaluate_at_end(int step) {
  const TrainingConfig& t = run_.cfg.training;
  if (!run_.valid || step != t.train_iters || step % t.eval_interval != 0) return std::nan("");
  const double loss = evaluate(step / t.eval_interval);
  if (!run_.opts.quiet)
    spdlog::info(
        "validation loss at the end of training (step {}, the next validation batches) | loss "
        "{:.4f} | perplexity {:.3f} | {} batches",
        step, loss, std::exp(loss), t.eval_iters);
  return loss;
}

// Validation: forward passes only, over eval_iters global batches of the validation data, the
// pipeline's activations passed on as in training (buffer 0; no backward follows). Evaluation
// `round` reads validation batches [round·eval_iters, (round+1)·eval_iters): like Megatron's
// validation iterator, each evaluation moves on to new samples, and the round is a function of
// the step, so a resumed run evaluates what the run that never stopped did.
double TrainingStep::evaluate(int64_t round) {
  const TrainingConfig& t = run_.cfg.training;
  const int accum = t.gradient_accumulation_steps;
  const std::vector<triad_pipe_instr_v1> stream =
      forward_only_stream(run_.me.pp, run_.stages(), run_.chunks_per_stage, accum);
  PipelineExecutor::Work sum;
  // The traffic per training step the log reports leaves validation's forwards out.
  std::vector<GPT::TrafficCounters> counters;
  for (const auto& c : run_.chunks) counters.push_back(c->traffic_counters());
  for (int it = 0; it < t.eval_iters; ++it)
    sum = executor_.run(stream, *run_.valid, round * t.eval_iters + it, nullptr, kEvalTags, sum);
  for (size_t i = 0; i < counters.size(); ++i)
    run_.chunks[i]->restore_traffic_counters(counters[i]);
  executor_.drain_sends();
  double loss = sum.loss / (double(t.eval_iters) * accum);
  DistributedRun* dist = run_.dist.get();
  if (run_.stages() > 1) loss = dist->sum(*dist->comms.pp, loss);
  if (dist) loss = dist->sum(dist->comms.grad_reduce(), loss) / run_.grad_ranks();
  return loss;
}

}  // namespace triad
