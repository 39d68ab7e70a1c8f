#include "triad/core/engine.hpp"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "triad/core/attention.hpp"
#include "triad/core/checkpoint.hpp"
#include "triad/core/data.hpp"
#include "triad/core/data_parallel.hpp"
#include "triad/core/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/files.hpp"
#include "triad/core/gpt_layout.hpp"
#include "triad/core/hf.hpp"
#include "triad/core/memory_plan.hpp"
#include "triad/core/model.hpp"
#include "triad/core/model_state.hpp"
#include "triad/core/param_spec.hpp"
#include "triad/core/pipeline_backend.hpp"
#include "triad/core/plugin_loader.hpp"
#include "triad/core/process_groups.hpp"
#include "triad/core/rank_status.hpp"
#include "triad/core/rendezvous.hpp"
#include "triad/core/safetensors.hpp"
#include "triad/core/services.hpp"
#include "triad/core/stop_signals.hpp"
#include "triad/core/tensor_backend.hpp"
#include "triad/core/transport.hpp"

namespace triad {

namespace fs = std::filesystem;

namespace {
// Every wait's bound: training.collective_timeout, or a little more when a launcher watches
// this rank (rank_status.hpp). The launcher acts at the timeout itself, seeing every rank, so
// it names the rank the others wait for; a wait that runs out here is the backstop.
std::chrono::milliseconds wait_bound(const TrainingConfig& t) {
  double s = t.collective_timeout;
  if (rank_status_watched()) s += std::max(1.0, s / 4);
  return std::chrono::milliseconds(int64_t(s * 1000));
}
}  // namespace

double model_flops_per_step(const ModelConfig& m, int global_batch) {
  const double B = global_batch, s = m.seq_length, l = m.num_layers, h = m.hidden_size,
               V = m.vocab_size;
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double learning_rate(const OptimizerConfig& o, const LrScheduleConfig& s, int train_iters,
                     int step) {
  const int warmup = s.lr_warmup_iters;
  if (warmup > 0 && step <= warmup) return o.lr * step / warmup;
  if (s.lr_decay_style == "constant") return o.lr;
  const int decay_iters = s.lr_decay_iters > 0 ? s.lr_decay_iters : train_iters;
  if (step >= decay_iters) return o.min_lr;
  const double span = std::max(1, decay_iters - warmup);
  const double ratio = (step - warmup) / span;
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

namespace {
std::unique_ptr<DataParallelBackend> make_data_plugin(const Config& cfg, const PluginLoader& loader,
                                                      const CoreServices& services);
}  // namespace

void preflight(const Config& cfg) {
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
  make_data_plugin(cfg, loader, services);
  // Every stage's stream, run together: a schedule that would deadlock is refused here.
  pipeline.schedules(cfg.parallel.pipeline_model_parallel_size,
                     cfg.training.gradient_accumulation_steps,
                     cfg.parallel.virtual_pipeline_model_parallel_size);
}

namespace {

// Resuming into a run's folder: its metrics records up to the resumed step stay, later ones
// (steps the checkpoint does not hold, about to be trained again) go. Rewritten atomically.
void keep_metrics_until(const std::filesystem::path& file, int step) {
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

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

// AdamW over each tensor of a ModelState, decaying only matmul weights and embeddings; only the
// pieces whose moments this rank keeps (its ZeRO shard; the whole arena below stage 1). In
// mixed precision the compute copy of the weights is refreshed in the same pass.
void adamw_step(ModelState& st, const GptLayout& arena, const OptimizerConfig& o, double lr,
                int t) {
  Device& dev = st.device();
  for_each_overlap(st.pieces(), arena.params,
                   [&](const ModelState::Piece& pc, const ParamInfo& p, size_t k, size_t n) {
                     void* compute = st.piece_compute(pc);
                     dev.adamw_update(st.piece_params(pc) + k, st.piece_grads(pc) + k,
                                      st.piece_m(pc) + k, st.piece_v(pc) + k, n, float(lr),
                                      float(o.adam_beta1), float(o.adam_beta2), float(o.adam_eps),
                                      p.weight_decay ? float(o.weight_decay) : 0.0f, t,
                                      compute ? advance(compute, k, st.act()) : nullptr, st.act());
                   });
}

// ZeRO-Offload: the same update on the host: each piece's gradients down, AdamW over the host's
// master weights and moments, the weights back up (and into the compute copy). Returns the
// bytes moved each way.
size_t offloaded_adamw_step(ModelState& st, const GptLayout& arena, const OptimizerConfig& o,
                            double lr, int t) {
  Device& dev = st.device();
  Device& host = *st.host();
  for (const ModelState::Piece& pc : st.pieces())
    dev.to_host(st.piece_host_grads(pc), st.piece_grads(pc), pc.count * sizeof(float));
  for_each_overlap(st.pieces(), arena.params,
                   [&](const ModelState::Piece& pc, const ParamInfo& p, size_t k, size_t n) {
                     host.adamw_update(st.piece_master(pc) + k, st.piece_host_grads(pc) + k,
                                       st.piece_m(pc) + k, st.piece_v(pc) + k, n, float(lr),
                                       float(o.adam_beta1), float(o.adam_beta2), float(o.adam_eps),
                                       p.weight_decay ? float(o.weight_decay) : 0.0f, t, nullptr,
                                       DType::f32);
                   });
  for (const ModelState::Piece& pc : st.pieces())
    dev.to_device(st.piece_params(pc), st.piece_master(pc), pc.count * sizeof(float));
  if (st.act() != DType::f32) st.sync_compute();
  return st.opt_count() * sizeof(float);
}

// ZeRO-2/3: a unit's gradient reduction and weight gather, through the data plugin.
class DataShardComm final : public ShardComm {
 public:
  explicit DataShardComm(DataParallelBackend& data) : data_(data) {}
  void reduce(size_t unit, float* window, float* owned) override {
    data_.reduce_unit(unit, window, owned);
  }
  void gather(size_t unit, const void* owned, void* window, DType t) override {
    data_.gather_unit(unit, owned, window, dl_dtype(t));
  }
  void wait(size_t unit) override { data_.wait_unit(unit); }

 private:
  DataParallelBackend& data_;
};

}  // namespace

namespace {

// Everything a rank of a multi-rank job needs beyond the single-process run: the rendezvous
// client, the transport, the world and its tensor-/data-parallel communicators (Megatron's
// order), and the data plugin, which gets the data-parallel communicator only.
struct DistributedRun {
  std::unique_ptr<RendezvousClient> store;
  std::unique_ptr<Transport> transport;
  Communicator world;
  ParallelComms comms;
  // The first and last pipeline stage of this rank's (tp, dp) position, which both hold the
  // tied word embedding; empty elsewhere and without pipeline parallelism.
  Communicator embedding;
  std::unique_ptr<DataParallelBackend> data;
  Device* device = nullptr;
  Buffer<float> scalars;  // on the run's device: the transport moves that device's memory

  // Element-wise sums of xs over a group, in one all-reduce (fp32 on the wire).
  std::vector<double> sum(Communicator& comm, const std::vector<double>& xs) {
    std::vector<float> v(xs.begin(), xs.end());
    if (scalars.size() < v.size()) scalars = Buffer<float>(*device, v.size(), "collective scalars");
    device->to_device(scalars.data(), v.data(), v.size() * sizeof(float));
    comm.all_reduce(scalars.data(), scalars.data(), v.size(), dl_float32(), TRIAD_REDUCE_SUM,
                    device->dl_device())
        .wait(timeout);
    device->to_host(v.data(), scalars.data(), v.size() * sizeof(float));
    return std::vector<double>(v.begin(), v.end());
  }
  double sum(Communicator& comm, double x) { return sum(comm, std::vector<double>{x})[0]; }

  // Every tensor-parallel rank's `n` elements of `src` (device memory), rank order, on the host.
  std::vector<float> gather_tp(const float* src, size_t n) {
    Communicator& tp = *comms.tp;
    Buffer<float> all(*device, n * size_t(tp.size()), "tensor-parallel gather");
    tp.all_gather(src, all.data(), n * size_t(tp.size()), dl_float32(), device->dl_device())
        .wait(timeout);
    std::vector<float> host(all.size());
    device->to_host(host.data(), all.data(), host.size() * sizeof(float));
    return host;
  }
  // Every wait's bound (training.collective_timeout).
  std::chrono::milliseconds timeout{300000};
};

// The installed plugins of `kind` other than `chosen` that `can` accepts, each created with its
// default parameters; one that fails to load, to be created or the check counts as unable. The
// errors that refuse a choice use it to name the alternatives.
template <class Backend, class Can>
std::vector<std::string> others_that_can(const PluginLoader& loader, const std::string& kind,
                                         const std::string& chosen, const CoreServices& services,
                                         Can can) {
  std::vector<std::string> out;
  for (const auto& name : loader.available(kind)) {
    if (name == chosen) continue;
    try {
      auto p = loader.load(kind, name);
      Backend other(p, resolve_params(p->descriptor(), {}, kind), services.c_services());
      if (can(other)) out.push_back(name);
    } catch (const std::exception&) {
    }
  }
  return out;
}

// The data-parallel plugin with the zero_optimization section as its parameters; refuses a ZeRO
// stage the plugin's capabilities do not list, naming the ones it does.
std::unique_ptr<DataParallelBackend> make_data_plugin(const Config& cfg, const PluginLoader& loader,
                                                      const CoreServices& services) {
  auto plugin = loader.load("data", "zero");
  const auto& z = cfg.zero_optimization;
  const ResolvedParams params =
      resolve_params(plugin->descriptor(),
                     {{"stage", std::to_string(z.stage)},
                      {"reduce_bucket_size", std::to_string(z.reduce_bucket_size)},
                      {"overlap_comm", z.overlap_comm ? "true" : "false"}},
                     "zero_optimization");
  auto data = std::make_unique<DataParallelBackend>(plugin, params, services.c_services());
  const uint32_t stages = data->capabilities().stages;
  if (z.stage < 0 || z.stage > 31 || !(stages & (1u << z.stage))) {
    std::string have;
    for (int s = 0; s < 32; ++s)
      if (stages & (1u << s)) have += (have.empty() ? "" : ", ") + std::to_string(s);
    throw UserError("zero_optimization.stage " + std::to_string(z.stage) + " (" + cfg.source_path +
                    ") is not implemented by data plugin 'zero' (" + plugin->path() +
                    "), which implements stages " + have + "; use one of those");
  }
  return data;
}

// Refuses a transport that cannot touch the run's device memory, before anyone connects, and
// names the installed transports that can.
void check_transport_memory(const Transport& chosen, const std::string& device_name,
                            uint32_t memory, const PluginLoader& loader,
                            const CoreServices& services) {
  if (chosen.capabilities().memory & memory) return;
  const std::vector<std::string> can = others_that_can<Transport>(
      loader, "transport", chosen.name(), services,
      [&](const Transport& t) { return (t.capabilities().memory & memory) != 0; });
  std::string fix = "no installed transport can";
  for (size_t i = 0; i < can.size(); ++i)
    fix = i == 0 ? "set transport: " + can[0] : fix + (i == 1 ? " (or " : ", ") + can[i];
  if (can.size() > 1) fix += ")";
  throw UserError("transport '" + chosen.name() + "' cannot touch " +
                  (memory == TRIAD_MEM_BIT_HOST ? "host" : "CUDA") +
                  " memory, which device: " + device_name + " needs; " + fix);
}

std::unique_ptr<DistributedRun> start_distributed(const Config& cfg, const DistEnv& env,
                                                  const ProcessGroups& groups,
                                                  const PluginLoader& loader,
                                                  const CoreServices& services, Device& device) {
  auto run = std::make_unique<DistributedRun>();
  run->timeout = wait_bound(cfg.training);
  run->device = &device;
  run->scalars = Buffer<float>(device, 1, "collective scalars");
  // Load and check both plugins before connecting to anyone.
  auto tplugin = loader.load("transport", cfg.transport.name);
  const ResolvedParams tparams =
      resolve_params(tplugin->descriptor(), cfg.transport.params, cfg.transport.yaml_path);
  run->data = make_data_plugin(cfg, loader, services);
  run->transport = std::make_unique<Transport>(tplugin, tparams, services.c_services());
  const uint32_t memory =
      device.dl_device().device_type == kDLCPU ? TRIAD_MEM_BIT_HOST : TRIAD_MEM_BIT_CUDA;
  check_transport_memory(*run->transport, cfg.device, memory, loader, services);
  uint32_t ops = run->data->capabilities().transport_ops | TRIAD_TRANSPORT_OP_ALL_REDUCE |
                 TRIAD_TRANSPORT_OP_SPLIT;
  if (groups.tp_size() > 1)
    ops |= TRIAD_TRANSPORT_OP_ALL_GATHER | TRIAD_TRANSPORT_OP_REDUCE_SCATTER;
  if (groups.pp_size() > 1) ops |= TRIAD_TRANSPORT_OP_SEND_RECV | TRIAD_TRANSPORT_OP_TAGS;
  run->transport->check_supported(memory, TRIAD_DTYPE_BIT_FP32, ops);
  run->data->explain_failures_with([t = run->transport.get()] { return t->last_error(); });
  run->store = std::make_unique<RendezvousClient>(env.master_addr, env.master_port, env.token);
  run->world = run->transport->init_world(env.rank, env.world_size, *run->store,
                                          "transport/" + cfg.transport.name + "/");
  run->comms = make_parallel_comms(run->world, groups);
  if (groups.pp_size() > 1) {
    const RankCoords c = groups.coords(env.rank);
    const bool ends = c.pp == 0 || c.pp == groups.pp_size() - 1;
    run->embedding =
        run->world.split(ends ? c.tp + groups.tp_size() * c.dp : TRIAD_COMM_SPLIT_NONE, c.pp);
  }
  return run;
}

}  // namespace

namespace {

// Refuses a shape the chosen attention backend cannot run before anything is allocated, and
// names the installed backends that can.
void check_attention(const AttentionBackend& chosen, const ModelConfig& m, int tp, int micro_batch,
                     DLDevice device, DType act, const PluginLoader& loader,
                     const CoreServices& services) {
  const triad_attention_shape_v1 shape{micro_batch,
                                       m.num_attention_heads / tp,
                                       m.seq_length,
                                       m.hidden_size / m.num_attention_heads,
                                       1,
                                       dl_dtype(act),
                                       device};
  try {
    chosen.check_supported(shape);
  } catch (const UserError& e) {
    std::string can;
    for (const auto& name : others_that_can<AttentionBackend>(
             loader, "attention", chosen.name(), services, [&](const AttentionBackend& other) {
               other.check_supported(shape);  // throws when it cannot
               return true;
             }))
      can += (can.empty() ? "" : ", ") + name;
    throw UserError(std::string(e.what()) +
                    (can.empty() ? "; no installed attention backend can run this shape"
                                 : "; attention backends that can: " + can));
  }
}

}  // namespace

namespace {

// The arena as a GptLayout (the data plugin's and the optimizer's view: tensors in arena order,
// local shapes).
GptLayout arena_layout(const ParamSpec& spec) {
  GptLayout l;
  for (const TensorSpec& t : spec.tensors)
    l.params.push_back(
        {t.name, t.local_shape, t.offset, t.numel, t.weight_decay, t.is_matmul_weight});
  l.total = spec.total;
  return l;
}

// The whole model's host copy of an arena (parameters or gradients) from every
// tensor-parallel rank's slices, in the Hugging Face layout.
std::vector<float> whole_model(const GPT& model, DistributedRun* dist, const float* arena) {
  const ParamSpec& spec = model.spec();
  std::vector<float> full(model.full_layout().total, 0.0f);
  const int tp = spec.placement.tp_size;
  if (tp == 1) {
    std::vector<float> local(spec.total);
    model.state().device().to_host(local.data(), arena, local.size() * sizeof(float));
    full_from_local(spec, 0, model.full_layout(), local.data(), full.data());
  } else {
    const std::vector<float> all = dist->gather_tp(arena, spec.total);
    for (int r = 0; r < tp; ++r)
      full_from_local(spec, r, model.full_layout(), all.data() + size_t(r) * spec.total,
                      full.data());
  }
  if (dist && dist->comms.pp && dist->comms.pp->size() > 1) {
    // Each stage filled its own tensors and left zeros elsewhere; the last stage's copy of the
    // tied wte is dropped so that the sum over the stages holds every tensor once.
    if (!spec.placement.has_embedding && spec.placement.has_head) {
      const ParamInfo& w = model.full_layout().find("wte.weight");
      std::fill(full.begin() + w.offset, full.begin() + w.offset + w.numel, 0.0f);
    }
    Device& dev = model.state().device();
    Buffer<float> buf(dev, full.size(), "pipeline gather");
    dev.to_device(buf.data(), full.data(), full.size() * sizeof(float));
    dist->comms.pp
        ->all_reduce(buf.data(), buf.data(), full.size(), dl_float32(), TRIAD_REDUCE_SUM,
                     dev.dl_device())
        .wait(dist->timeout);
    dev.to_host(full.data(), buf.data(), full.size() * sizeof(float));
  }
  return full;
}

// Writes the whole model's gradients (Hugging Face names, Triad's (out,in) shapes) to
// DIR/grads.safetensors.
void write_grads(const std::string& dir, const GptLayout& layout, const std::vector<float>& g) {
  fs::create_directories(dir);
  std::vector<safetensors::TensorRef> ts;
  for (const auto& p : layout.params) ts.push_back({p.name, p.shape, g.data() + p.offset});
  safetensors::write_f32((fs::path(dir) / "grads.safetensors").string(), ts);
}

}  // namespace

TensorTraffic tensor_traffic_formula(const Config& cfg, int stage) {
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
  const double per_layer = cfg.training.checkpoint_activations ? 6.0 : 4.0;
  f.activations = accum * (per_layer * layers + first + last) * ring * tokens * m.hidden_size * 4;
  // Vocab-parallel cross-entropy (last stage): max, sum of exponentials and target logit.
  if (last) f.logits = accum * 3 * ring * tokens * 4;
  // Sequence parallelism: the layernorms' and row-parallel biases' gradients, once per step;
  // with ZeRO-2/3 once per micro-batch (each micro-batch's gradients are reduced over the
  // data-parallel group), except the last stage's head when a pipeline defers it (tied wte).
  if (cfg.parallel.sequence_parallel) {
    const bool each = cfg.zero_optimization.stage >= 2;
    const double blocks = each ? accum : 1, head = each && pp == 1 ? accum : 1;
    f.replicated_grads = ring * (6.0 * layers * blocks + 2 * last * head) * m.hidden_size * 4;
  }
  return f;
}

RunResult train(const Config& cfg, const TrainOptions& opts_in) {
  const auto& m = cfg.model;
  const auto& t = cfg.training;
  const DistEnv& env = opts_in.dist;
  TrainOptions opts = opts_in;
  if (env.rank != 0) {
    // Rank 0 speaks for the job (DeepSpeed's habit): one log, one output folder.
    opts.quiet = true;
    opts.write_output = false;
  }
  const auto& par = cfg.parallel;
  const int tp = par.tensor_model_parallel_size, dp = par.data_parallel_size;
  if (env.world_size != dp * tp * par.pipeline_model_parallel_size)
    throw UserError("the job has " + std::to_string(env.world_size) +
                    " ranks but the config's layout is tp " + std::to_string(tp) + " x pp " +
                    std::to_string(par.pipeline_model_parallel_size) + " x dp " +
                    std::to_string(dp) + "; load the config with the job's world size");
  const ProcessGroups groups(env.world_size, tp, par.pipeline_model_parallel_size, dp);
  const RankCoords me = groups.coords(env.rank);
  // Everything that can fail on bad input happens before the output folder is touched.
  auto device = make_device(cfg.device, env.local_rank, cfg.allow_tf32, cfg.device_gemm);
  // A GPU's memory is known only here (the launcher checked the host's for a CPU run): the
  // estimate against what the device has free, refused before anything is allocated.
  if (const size_t free = device->memory_free()) check_memory_fits(cfg, env.world_size, free);
  const double peak_tflops =
      cfg.peak_tflops > 0 ? cfg.peak_tflops : device->peak_tflops(cfg.precision, cfg.allow_tf32);
  PluginLoader loader;
  auto plugin = loader.load("attention", cfg.attention.name);
  const ResolvedParams aparams =
      resolve_params(plugin->descriptor(), cfg.attention.params, cfg.attention.yaml_path);
  CoreServices services(omp_get_max_threads(), device->stream());
  AttentionBackend attention(plugin, aparams, services.c_services());
  const DType act = cfg.precision == "bf16" ? DType::bf16 : DType::f32;
  check_attention(attention, m, tp, t.micro_batch_size, device->dl_device(), act, loader, services);
  // The tensor-parallel plan, and this rank's tensors under it.
  auto tplugin = loader.load("tensor", cfg.tensor.name);
  TensorBackend tensor(
      tplugin, resolve_params(tplugin->descriptor(), cfg.tensor.params, cfg.tensor.yaml_path),
      services.c_services());
  const TensorPlan plan = tensor.plan(tp, par.sequence_parallel);
  Placement place;
  place.tp_rank = me.tp;
  place.tp_size = tp;
  place.make_vocab_size_divisible_by = m.make_vocab_size_divisible_by;
  place.split = plan.split;
  const int pp = par.pipeline_model_parallel_size;
  const std::vector<int> layers = pipeline_partition(cfg);
  for (int st = 0; st < me.pp; ++st) place.first_layer += layers[st];
  place.num_layers = layers[me.pp];
  place.has_embedding = me.pp == 0;
  place.has_head = me.pp == pp - 1;
  // Interleaved: model chunk c of this stage is virtual stage c * pp + stage, each
  // num_layers / (pp * v) layers.
  const int v = par.virtual_pipeline_model_parallel_size;
  const int chunk_layers = m.num_layers / (pp * v);
  if (v > 1)
    for (int c = 0; c < v; ++c)
      place.chunks.push_back({(c * pp + me.pp) * chunk_layers, chunk_layers});
  const ParamSpec spec = build_param_spec(m, place);
  // A checkpoint to start from, checked whole (its files, sizes, checksums, the model and the
  // batch) before anything is allocated, connected or written.
  std::unique_ptr<Checkpoint> ckpt;
  if (const std::string dir = checkpoint_to_load(cfg); !dir.empty()) {
    ckpt = std::make_unique<Checkpoint>(dir);
    ckpt->check_model(m, "checkpoint.load");
    if (ckpt->global_batch_size() != t.global_batch_size)
      throw UserError("checkpoint.load '" + ckpt->path() + "' was saved with global_batch_size " +
                      std::to_string(ckpt->global_batch_size()) + " but this run has " +
                      std::to_string(t.global_batch_size) +
                      "; the data position is counted in steps of that batch: keep "
                      "training.global_batch_size " +
                      std::to_string(ckpt->global_batch_size()) +
                      " (micro batch, accumulation and layout may change)");
    if (ckpt->step() >= t.train_iters)
      throw UserError("checkpoint.load '" + ckpt->path() + "' is at step " +
                      std::to_string(ckpt->step()) + ", not before training.train_iters " +
                      std::to_string(t.train_iters) +
                      ": nothing is left to train; raise train_iters to continue");
    ckpt->verify();
  }
  const int start_step = ckpt ? ckpt->step() : 0;
  // This stage's instructions for one step (the one-stage schedule is plain gradient
  // accumulation).
  auto pplugin = loader.load("pipeline", cfg.pipeline.name);
  PipelineBackend pipeline(
      pplugin, resolve_params(pplugin->descriptor(), cfg.pipeline.params, cfg.pipeline.yaml_path),
      services.c_services());
  const PipeSchedule schedule = pipeline.schedule(me.pp, pp, t.gradient_accumulation_steps, v);
  // The transport before the model: one that cannot touch this device's memory stops the run
  // here, before any rank connects or allocates the model.
  std::unique_ptr<DistributedRun> dist;
  if (env.distributed())
    dist = start_distributed(cfg, env, groups, loader, services, *device);
  else
    make_data_plugin(cfg, loader, services);  // a ZeRO stage it lacks is refused alike
  auto data = make_data_loader(cfg.data, m, t.micro_batch_size, t.global_batch_size,
                               cfg.data.seed ? cfg.data.seed : t.seed, me.dp, dp);
  // Validation data (training.eval_interval): data.split's validation part, or data.valid_path
  // whole; opened now, so a part too small is refused before anything trains.
  std::unique_ptr<DataLoader> valid;
  if (t.eval_interval > 0) {
    DataConfig vd = cfg.data;
    DataPart part = DataPart::valid;
    if (!vd.valid_path.empty()) {
      vd.path = vd.valid_path;
      vd.path_list.clear();
      vd.split.clear();
      part = DataPart::train;  // the whole file
    }
    valid = make_data_loader(vd, m, t.micro_batch_size, t.global_batch_size,
                             cfg.data.seed ? cfg.data.seed : t.seed, me.dp, dp, part);
  }
  TensorParallel tpc;
  tpc.rank = me.tp;
  tpc.size = tp;
  tpc.sequence_parallel = par.sequence_parallel;
  tpc.boundary = plan.boundary;
  tpc.comm = dist ? dist->comms.tp.get() : nullptr;
  const std::chrono::milliseconds timeout = wait_bound(t);
  tpc.timeout = timeout;
  // AdamW's moments come once the data plugin says which range this rank steps.
  // ZeRO-Offload's host device: its memory is counted apart from the training device's.
  std::unique_ptr<Device> host_device;
  if (cfg.zero_optimization.offload_optimizer.device == "cpu") host_device = make_device("cpu");
  ModelState state(spec, *device, act, /*optimizer=*/false, /*gradients=*/false);
  // One GPT per model chunk of this stage (one without interleaving), over the same state.
  std::vector<std::unique_ptr<GPT>> chunks;
  for (int c = 0; c < v; ++c) {
    StageChunk sc;
    if (v > 1)
      sc = {c * chunk_layers, chunk_layers, me.pp == 0 && c == 0, me.pp == pp - 1 && c == v - 1};
    chunks.push_back(std::make_unique<GPT>(m, state, tpc, attention, t.micro_batch_size,
                                           schedule.buffers, sc, recompute_of(t)));
  }
  GPT& model = *chunks[0];
  if (ckpt) {
    state.params_from_host(ckpt->params(spec));
  } else if (!cfg.output.init_from_hf.empty()) {
    std::vector<float> full(model.full_layout().total);
    import_hf(cfg.output.init_from_hf, m, model.full_layout(), full.data());
    model.params_from_full(full.data());
  } else {
    model.init_weights(t.seed);
  }
  const GptLayout arena = arena_layout(spec);
  const std::vector<ArenaRange> units = arena_units(spec);
  if (dist) {
    Communicator& dpc = *dist->comms.dp;
    std::vector<std::pair<size_t, size_t>> unit_list;
    for (const ArenaRange& r : units) unit_list.emplace_back(r.begin, r.size());
    dist->data->setup(arena, unit_list, device->dl_device(), dpc.rank(), dpc.size(), dpc.c_ref(),
                      dist->timeout.count());

    // Every data-parallel replica starts from its group's first rank's weights, whatever it
    // initialised or loaded.
    dpc.broadcast(model.params(), model.num_params(), dl_float32(), 0, device->dl_device())
        .wait(dist->timeout);
    model.sync_compute_weights();
  }

  // AdamW's moments: the whole arena, or with ZeRO stage 1+ this rank's shard only; with
  // stage 2 the gradients, with stage 3 the parameters too.
  if (host_device) state.offload_optimizer(*host_device);
  const uint32_t partitioning = dist ? dist->data->partitioning() : 0u;
  std::unique_ptr<DataShardComm> shard_comm;
  if (partitioning & TRIAD_DATA_PARTITION_GRADS) {
    shard_comm = std::make_unique<DataShardComm>(*dist->data);
    state.partition(units, dist->data->shard(), partitioning & TRIAD_DATA_PARTITION_PARAMS,
                    *shard_comm);
  } else {
    size_t own_off = 0, own_n = state.size();
    if (dist) dist->data->owned_range(&own_off, &own_n);
    state.shard_optimizer(own_off, own_n);
  }
  if (ckpt) ckpt->load_optimizer(state);
  const bool partitioned = state.grads_partitioned();
  size_t offloaded_bytes = 0;  // moved each way by the offloaded optimizer steps
  // Model states against the ZeRO paper (fp32 weights, gradients and Adam's two moments; a
  // mixed-precision compute copy is counted apart by the device, not here).
  const int zstage = cfg.zero_optimization.stage;
  const double psi = double(state.size()), nd = dist ? dist->comms.dp->size() : 1;
  RunResult result;
  result.model_state_bytes =
      4.0 * (state.params_size() + state.grads_size()) + 8.0 * state.opt_count();
  result.model_state_paper = zstage == 0   ? 16 * psi
                             : zstage == 1 ? 8 * psi + 8 * psi / nd
                             : zstage == 2 ? 4 * psi + 12 * psi / nd
                                           : 16 * psi / nd;
  if (dist && !opts.quiet)
    spdlog::info(
        "ZeRO stage {} over {} data-parallel ranks: model states {} per rank (parameters {}, "
        "gradients {}, Adam moments {}); the ZeRO paper's {} = {} ({:.0f} B counted, {:.0f} B "
        "by the formula)",
        zstage, int(nd), mib(size_t(result.model_state_bytes)), mib(state.params_size() * 4),
        mib(state.grads_size() * 4), mib(state.opt_count() * 8),
        zstage == 0   ? "16Ψ"
        : zstage == 1 ? "8Ψ + 8Ψ/N"
        : zstage == 2 ? "4Ψ + 12Ψ/N"
                      : "16Ψ/N",
        mib(size_t(result.model_state_paper)), result.model_state_bytes, result.model_state_paper);
  if (dist) dist->data->take_traffic();  // from here on: the steps' own

  result.output_dir = cfg.output.dir;
  std::optional<LineFile> jsonl;
  if (opts.write_output) {
    // A folder holding a run was refused before the ranks started unless it is resumed (then
    // appended to) or output.overwrite (then started anew).
    const fs::path out = cfg.output.dir, metrics = out / "metrics.jsonl";
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec)
      throw UserError("output.dir '" + cfg.output.dir + "' cannot be created: " + ec.message());
    const bool append = cfg.checkpoint.resume || ckpt;
    if (append) keep_metrics_until(metrics, start_step);
    write_file_atomic(out / "config.yaml", to_yaml(cfg));
    jsonl.emplace(metrics, append);
  }
  if (ckpt && !opts.quiet)
    spdlog::info("resuming from checkpoint {} (step {}, {} samples consumed)", ckpt->path(),
                 start_step, int64_t(start_step) * t.global_batch_size);
  if (!opts.quiet) {
    spdlog::info(
        "model: {} layers, hidden {}, {} heads, seq {}, vocab {} (padded {}), {} positions: {} "
        "parameters",
        m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size,
        spec.padded_vocab_size, m.position_embedding, model.full_layout().total);
    spdlog::info("layout: {}; tensor: {}{}; {} parameters on each tensor-parallel rank",
                 groups.describe(), tensor.name(),
                 par.sequence_parallel && tp > 1 ? " with sequence parallelism" : "",
                 model.num_params());
    spdlog::info("batch: global {} = micro {} x accumulation {} x data-parallel {}",
                 t.global_batch_size, t.micro_batch_size, t.gradient_accumulation_steps, dp);
    if (pp > 1) {
      std::string parts;
      for (int st = 0; st < pp; ++st) parts += (st ? ", " : "") + std::to_string(layers[st]);
      spdlog::info(
          "pipeline: {} over {} stages (layers {}), {} micro-batches per step, {} "
          "activation buffers on stage 0; ideal efficiency m/(m+p-1) = {:.1f}%",
          pipeline.name(), pp, parts, t.gradient_accumulation_steps, schedule.buffers,
          100.0 * t.gradient_accumulation_steps / (t.gradient_accumulation_steps + pp - 1));
      if (t.gradient_accumulation_steps < pp)
        spdlog::warn(
            "pipeline: {} micro-batches for {} stages leaves stages idle most of the "
            "step (at best {:.1f}% efficiency); raise "
            "training.gradient_accumulation_steps to "
            "at least {}",
            t.gradient_accumulation_steps, pp,
            100.0 * t.gradient_accumulation_steps / (t.gradient_accumulation_steps + pp - 1), pp);
    }
    spdlog::info("attention: {} ({}); data: {}; threads: {}{}", attention.name(), plugin->path(),
                 data->describe(), omp_get_max_threads(),
                 cfg.device == "cpu" ? "; GEMMs: " + cfg.device_gemm : std::string());
  }

  const int B = t.micro_batch_size, T = m.seq_length;
  const double flops = model_flops_per_step(m, t.global_batch_size);
  const int accum = t.gradient_accumulation_steps;
  // With data parallelism each rank also scales by 1/dp, so the data plugin's sum over the
  // group is the mean (zero_optimization: no pass over the gradients after the reduction).
  const float grad_scale = 1.0f / (float(accum) * float(dp));
  // Tokens of each activation buffer's micro-batch (host), and the pipeline's sends in flight
  // from each buffer (complete before the buffer is reused, and by the end of the step).
  // Indexed by chunk * buffers + buffer.
  const size_t slots = size_t(v) * schedule.buffers;
  std::vector<std::vector<int32_t>> inputs(slots, std::vector<int32_t>(size_t(B) * T)),
      targets = inputs;
  // Sends in flight: each carries a copy of what it sends, so the activation buffer can be
  // reused at once (a stage never waits on a send before the end of its step: the schedule is
  // deadlock-free only with buffered sends). Copies of finished sends are reused.
  struct PendingSend {
    TransportRequest req;
    Buffer<uint8_t> data;
  };
  Communicator* ppc = dist ? dist->comms.pp.get() : nullptr;
  std::vector<PendingSend> inflight;
  std::vector<Buffer<uint8_t>> spare;
  auto send = [&](const void* src, size_t elems, int to, uint32_t tag) {
    for (size_t k = 0; k < inflight.size();) {  // recycle the copies of finished sends
      if (inflight[k].req.test()) {
        spare.push_back(std::move(inflight[k].data));
        inflight.erase(inflight.begin() + long(k));
      } else {
        ++k;
      }
    }
    const size_t bytes = elems * dtype_bytes(act);
    Buffer<uint8_t> copy;
    if (!spare.empty()) {
      copy = std::move(spare.back());
      spare.pop_back();
    } else {
      copy = Buffer<uint8_t>(*device, bytes, "pipeline send buffers");
    }
    device->copy(copy.data(), src, bytes);
    device->synchronize();  // the copy is complete before the transport reads it
    inflight.push_back({ppc->send(copy.data(), elems, dl_dtype(act), to, tag, device->dl_device()),
                        std::move(copy)});
  };
  // Each chunk's last BACKWARD of the step sums sequence parallelism's partial gradients of
  // that chunk's blocks; without interleaving it also hands finished gradient ranges to the
  // data plugin as it goes (overlapping its reduction). With interleaved chunks the data
  // plugin gets the whole arena at REDUCE_GRADS.
  std::vector<size_t> last_backward(v, 0);
  for (size_t i = 0; i < schedule.instrs.size(); ++i)
    if (schedule.instrs[i].op == TRIAD_PIPE_BACKWARD) last_backward[schedule.instrs[i].chunk] = i;
  const bool overlap = v == 1;
  // Where a chunk's activations go and its gradients come from: the next / previous virtual
  // stage (c * pp + stage ± 1); tags name the receiver's micro-batch and chunk.
  auto next_stage = [&](int c) { return std::pair{(me.pp + 1) % pp, c + (me.pp == pp - 1)}; };
  auto prev_stage = [&](int c) { return std::pair{(me.pp + pp - 1) % pp, c - (me.pp == 0)}; };
  auto tag_of = [&](int mb, int chunk, int kind) { return uint32_t((mb * v + chunk) * 2 + kind); };
  // With pipeline stages the tied word embedding's gradient is summed over the first and last
  // stage before the data plugin may reduce it: the range holding it waits for
  // REDUCE_TIED_GRADS.
  const bool tied_split = pp > 1;
  const ArenaRange tied_range = me.pp == 0 ? spec.embedding : spec.head;
  // ZeRO-2/3 reduce every micro-batch's gradients unit by unit, but the tied embedding's only
  // once, after REDUCE_TIED_GRADS summed it over the stages.
  if (partitioned && tied_split && tied_range.size()) state.defer_unit(tied_range);
  const bool holds_wte = spec.placement.has_embedding || spec.placement.has_head;
  const size_t wte_off = holds_wte ? spec.find("wte.weight").offset : 0;
  const size_t wte_n = holds_wte ? spec.find("wte.weight").numel : 0;
  auto peer_wait = [&](TransportRequest r, const char* what, int peer) {
    try {
      r.wait(timeout);
    } catch (const TransportError& e) {
      throw UserError(std::string("pipeline stage ") + std::to_string(me.pp) + ": " + what +
                      " pipeline stage " + std::to_string(peer) + " failed: " + e.what());
    }
  };
  // Validation: forward passes only, over eval_iters global batches of the validation data, the
  // pipeline's activations passed on as in training (buffer 0; no backward follows). Evaluation
  // `round` reads validation batches [round·eval_iters, (round+1)·eval_iters): like Megatron's
  // validation iterator, each evaluation moves on to new samples, and the round is a function
  // of the step, so a resumed run evaluates what the run that never stopped did.
  const uint32_t kEvalTags = 1u << 30;
  auto evaluate = [&](int64_t round) {
    const size_t io = model.stage_bytes(B) / dtype_bytes(act);
    std::vector<int32_t> in(size_t(B) * T), tg(in.size());
    double sum = 0;
    for (int it = 0; it < t.eval_iters; ++it)
      for (int mb = 0; mb < accum; ++mb)
        for (int c = 0; c < v; ++c) {
          GPT& chunk = *chunks[size_t(c)];
          const bool first = me.pp == 0 && c == 0, last = me.pp == pp - 1 && c == v - 1;
          if (first || last)
            valid->micro_batch(round * t.eval_iters + it, mb, in.data(), tg.data());
          if (!first)
            peer_wait(ppc->recv(chunk.stage_io(0).input, io, dl_dtype(act), prev_stage(c).first,
                                kEvalTags + tag_of(mb, c, 0), device->dl_device()),
                      "receiving a validation activation from", prev_stage(c).first);
          sum += chunk.forward(in.data(), tg.data(), B, 0);
          if (pp > 1) device->synchronize();
          if (!last) {
            const auto [to, to_chunk] = next_stage(c);
            send(chunk.stage_io(0).output, io, to, kEvalTags + tag_of(mb, to_chunk, 0));
          }
        }
    for (auto& f : inflight) peer_wait(std::move(f.req), "a send to", me.pp);
    for (auto& f : inflight) spare.push_back(std::move(f.data));
    inflight.clear();
    double loss = sum / (double(t.eval_iters) * accum);
    if (pp > 1) loss = dist->sum(*dist->comms.pp, loss);
    if (dist) loss = dist->sum(*dist->comms.dp, loss) / dp;
    return loss;
  };

  // Checkpoints: this rank's place, and how every rank hears of every other's file.
  CheckpointRank ck_rank;
  ck_rank.rank = env.rank;
  ck_rank.world = env.world_size;
  ck_rank.coords = me;
  ck_rank.world_gather = [&](const std::vector<uint8_t>& mine) {
    if (!dist) return mine;
    // Bytes as they are (a gather never computes on them), in 4-byte words on the device.
    const size_t words = (mine.size() + 3) / 4, n = words * size_t(env.world_size);
    std::vector<uint8_t> host(n * 4, 0);
    std::memcpy(host.data(), mine.data(), mine.size());
    Buffer<float> send(*device, words, "checkpoint reports"),
        recv(*device, n, "checkpoint reports");
    device->to_device(send.data(), host.data(), words * 4);
    dist->world.all_gather(send.data(), recv.data(), n, dl_float32(), device->dl_device())
        .wait(dist->timeout);
    device->to_host(host.data(), recv.data(), n * 4);
    std::vector<uint8_t> all;
    for (int r = 0; r < env.world_size; ++r)
      all.insert(all.end(), host.begin() + long(size_t(r) * words * 4),
                 host.begin() + long(size_t(r) * words * 4 + mine.size()));
    return all;
  };
  // SIGTERM / SIGINT (stop_signals.hpp): the step in progress finishes, the ranks agree to stop
  // after the same step, save a checkpoint when checkpoint.save is set, and the run ends.
  const StopSignalsArmed stop_signals;
  std::string last_checkpoint;
  for (int step = start_step + 1; step <= t.train_iters; ++step) {
    rank_status_step(step);
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = learning_rate(cfg.optimizer, cfg.lr_schedule, t.train_iters, step);
    model.zero_grad();
    double loss = 0, norm = 0;
    double busy_ms = 0;  // this stage's forward and backward compute
    // The executor: one dispatch per instruction of this stage's schedule.
    for (size_t i = 0; i < schedule.instrs.size(); ++i) {
      const triad_pipe_instr_v1& in = schedule.instrs[i];
      const int mb = in.micro_batch, buf = in.buffer, c = in.chunk;
      GPT& chunk = *chunks[size_t(c)];
      const size_t slot = size_t(c) * schedule.buffers + size_t(buf);
      const size_t io = model.stage_bytes(B) / dtype_bytes(act);  // elements of a stage boundary
      switch (in.op) {
        case TRIAD_PIPE_LOAD_MICRO_BATCH:
          data->micro_batch(step - 1, mb, inputs[slot].data(), targets[slot].data());
          break;
        case TRIAD_PIPE_FORWARD: {
          const auto b0 = std::chrono::steady_clock::now();
          loss += chunk.forward(inputs[slot].data(), targets[slot].data(), B, buf);
          if (pp > 1) device->synchronize();
          busy_ms += ms_since(b0);
          break;
        }
        case TRIAD_PIPE_SEND_ACTIVATION: {
          const auto [to, to_chunk] = next_stage(c);
          send(chunk.stage_io(buf).output, io, to, tag_of(mb, to_chunk, 0));
          break;
        }
        case TRIAD_PIPE_RECV_ACTIVATION:
          peer_wait(ppc->recv(chunk.stage_io(buf).input, io, dl_dtype(act), prev_stage(c).first,
                              tag_of(mb, c, 0), device->dl_device()),
                    "receiving an activation from", prev_stage(c).first);
          break;
        case TRIAD_PIPE_RECV_GRAD:
          peer_wait(ppc->recv(chunk.stage_io(buf).output_grad, io, dl_dtype(act),
                              next_stage(c).first, tag_of(mb, c, 1), device->dl_device()),
                    "receiving a gradient from", next_stage(c).first);
          break;
        case TRIAD_PIPE_BACKWARD: {
          const bool last = i == last_backward[size_t(c)];
          GPT::GradsReady ready;
          const auto tied = [&](size_t off, size_t n) {
            return tied_split && off == tied_range.begin && n == tied_range.size();
          };
          if (partitioned)
            ready = [&](size_t off, size_t n) {
              if (!tied(off, n)) state.grads_done({off, off + n});
            };
          else if (dist && overlap && last)
            ready = [&](size_t off, size_t n) {
              if (!tied(off, n)) dist->data->grads_ready(model.grads(), off, n);
            };
          const auto b0 = std::chrono::steady_clock::now();
          chunk.backward(grad_scale, ready, last, buf);
          if (pp > 1) device->synchronize();
          busy_ms += ms_since(b0);
          break;
        }
        case TRIAD_PIPE_SEND_GRAD: {
          const auto [to, to_chunk] = prev_stage(c);
          send(chunk.stage_io(buf).input_grad, io, to, tag_of(mb, to_chunk, 1));
          break;
        }
        case TRIAD_PIPE_REDUCE_TIED_GRADS:
          if (tied_split && dist->embedding)
            dist->embedding
                .all_reduce(state.grad(wte_off), state.grad(wte_off), wte_n, dl_float32(),
                            TRIAD_REDUCE_SUM, device->dl_device())
                .wait(timeout);
          if (tied_split && partitioned)
            state.grads_done(tied_range);
          else if (tied_split && overlap && dist)
            dist->data->grads_ready(model.grads(), tied_range.begin, tied_range.size());
          break;
        case TRIAD_PIPE_REDUCE_GRADS:
          for (auto& f : inflight) peer_wait(std::move(f.req), "a send to", me.pp);
          for (auto& f : inflight) spare.push_back(std::move(f.data));
          inflight.clear();
          if (partitioned) {
            state.finish_grads();
          } else if (dist) {
            if (!overlap) dist->data->grads_ready(model.grads(), 0, model.num_params());
            dist->data->finish_grads(model.grads());
          }
          break;
        case TRIAD_PIPE_OPTIMIZER_STEP: {
          // The global gradient norm: every split tensor's slices, each replicated tensor once
          // per tensor group, the tied word embedding once (on the first stage).
          // With ZeRO-2/3 this rank holds its slices of those tensors only (summed over the
          // data-parallel group below); otherwise the whole arena.
          double sq = 0;
          if (!partitioned && tp == 1 && pp == 1) {
            sq = device->sum_squares(model.grads(), model.num_params());
          } else {
            const std::vector<ModelState::Piece> whole{{0, state.size(), 0}};
            for_each_overlap(
                partitioned ? state.pieces() : whole, spec.tensors,
                [&](const ModelState::Piece& pc, const TensorSpec& ts, size_t k, size_t n) {
                  if (ts.replicated_in_tp && me.tp != 0) return;
                  if (ts.tie_group == "wte" && pp > 1 && me.pp != 0) return;
                  sq += device->sum_squares(state.piece_grads(pc) + k, n);
                });
            if (partitioned) sq = dist->sum(*dist->comms.dp, sq);
            if (tp > 1) sq = dist->sum(*dist->comms.tp, sq);
            if (pp > 1) sq = dist->sum(*dist->comms.pp, sq);
          }
          norm = std::sqrt(sq);
          if (step == 1 && !opts.grads_dump_dir.empty()) {
            const Buffer<float> whole = state.whole_grads();
            const std::vector<float> g = whole_model(model, dist.get(), whole.data());
            if (env.rank == 0) write_grads(opts.grads_dump_dir, model.full_layout(), g);
          }
          if (cfg.optimizer.clip_grad > 0 && norm > cfg.optimizer.clip_grad)
            device->scale_inplace(state.grads(), state.grads_size(),
                                  float(cfg.optimizer.clip_grad / (norm + 1e-6)));
          if (state.host())
            offloaded_bytes += offloaded_adamw_step(state, arena, cfg.optimizer, lr, step);
          else
            adamw_step(state, arena, cfg.optimizer, lr, step);
          if (dist) {
            dist->data->after_step(model.params());
            // Parameters other ranks stepped arrived in fp32: refresh their compute copy.
            if (state.opt_count() != state.size() && !state.params_partitioned())
              state.sync_compute();
          }
          break;
        }
        default:
          throw UserError("pipeline plugin '" + pipeline.name() + "' sent instruction " +
                          std::to_string(in.op) + ", which this executor does not know");
      }
    }
    loss /= accum;
    // The last stage computed the loss; every rank reports the data-parallel mean. A stop
    // signal any rank received rides along, so that every rank stops after the same step.
    std::vector<double> agreed{loss, double(stop_signal() != 0)};
    if (pp > 1) agreed = dist->sum(*dist->comms.pp, agreed);
    if (dist) agreed = dist->sum(*dist->comms.dp, agreed);
    if (tp > 1) agreed[1] = dist->sum(*dist->comms.tp, agreed[1]);
    loss = agreed[0] / (dist ? dp : 1);
    const bool stop_requested = agreed[1] > 0;
    device->synchronize();  // the step's time includes its device work
    const double ms = ms_since(t0);
    // Pipeline efficiency: the stages' compute time over stages x the step time (1 - bubble,
    // communication and waiting included); and each stage's peak memory (GPipe's grows with
    // the micro-batches, 1F1B's with the stages). One all-reduce over the stages: this stage's
    // busy time, then its peak in its own slot.
    double efficiency = 0;
    std::vector<double> stage_peak;
    if (pp > 1) {
      std::vector<double> mine(size_t(pp) + 1, 0.0);
      mine[0] = busy_ms;
      mine[size_t(me.pp) + 1] = double(device->peak_bytes() + services.peak_bytes());
      const std::vector<double> all = dist->sum(*dist->comms.pp, mine);
      efficiency = all[0] / (pp * ms);
      stage_peak.assign(all.begin() + 1, all.end());
    }
    // Validation every eval_interval steps, and after the last step (Megatron's end-of-training
    // evaluation) when that is not one of them.
    const int every_eval = t.eval_interval;
    double valid_loss = std::nan("");
    if (valid && (step % every_eval == 0 || step == t.train_iters)) {
      const int64_t round = step % every_eval == 0 ? step / every_eval - 1 : step / every_eval;
      valid_loss = evaluate(round);
      result.valid_loss = valid_loss;
      if (!opts.quiet)
        spdlog::info("validation loss at step {} | loss {:.4f} | perplexity {:.3f} | {} batches",
                     step, valid_loss, std::exp(valid_loss), t.eval_iters);
    }

    StepRecord r;
    r.valid_loss = valid_loss;
    r.step = step;
    r.loss = loss;
    r.lr = lr;
    r.grad_norm = norm;
    r.ms = ms;
    r.samples_per_s = t.global_batch_size / (ms / 1e3);
    r.tokens_per_s = r.samples_per_s * T;
    r.tflops = flops / (ms / 1e3) / 1e12 / env.world_size;
    r.mfu = peak_tflops > 0 ? r.tflops / peak_tflops : 0;
    r.peak_bytes = device->peak_bytes() + services.peak_bytes();
    result.steps.push_back(r);
    if (!std::isfinite(loss))
      throw UserError("loss is " + std::to_string(loss) + " at step " + std::to_string(step) +
                      "; lower optimizer.lr or enable clip_grad");
    if (jsonl) {
      nlohmann::json j{
          {"step", step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", norm},
          {"ms_per_step", ms},
          {"samples_per_s", r.samples_per_s},
          {"tokens_per_s", r.tokens_per_s},
          {"tflops_per_device", r.tflops},
          {"mfu", peak_tflops > 0 ? nlohmann::json(r.mfu) : nlohmann::json()},
          {"pipeline_efficiency", pp > 1 ? nlohmann::json(efficiency) : nlohmann::json()},
          {"stage_peak_memory_bytes", pp > 1 ? nlohmann::json(stage_peak) : nlohmann::json()},
          {"peak_memory_bytes", r.peak_bytes}};
      if (std::isfinite(valid_loss)) {
        j["valid_loss"] = valid_loss;
        j["valid_ppl"] = std::exp(valid_loss);
      }
      jsonl->write_line(j.dump());
    }
    if (!opts.quiet && (step % t.log_interval == 0 || step == 1 || step == t.train_iters))
      spdlog::info(
          "step {:>5}/{} | loss {:.4f} | lr {:.3e} | grad-norm {:.3f} | {:.1f} ms | "
          "{:.1f} samples/s | {:.0f} tokens/s | {:.3f} TFLOP/s{} | peak {}",
          step, t.train_iters, loss, lr, norm, ms, r.samples_per_s, r.tokens_per_s, r.tflops,
          (peak_tflops > 0 ? fmt::format(" | MFU {:.1f}%", 100 * r.mfu) : std::string()) +
              (pp > 1 ? fmt::format(" | pipeline {:.0f}%", 100 * efficiency) : std::string()),
          mib(r.peak_bytes));

    // Megatron's --exit-interval, and a stop signal: save (when checkpoints are on) and end.
    const bool exit_now = stop_requested || (t.exit_interval > 0 && step % t.exit_interval == 0 &&
                                             step < t.train_iters);
    const int every = cfg.checkpoint.save_interval;
    if (!cfg.checkpoint.save.empty() &&
        (step == t.train_iters || exit_now || (every > 0 && step % every == 0))) {
      const auto s0 = std::chrono::steady_clock::now();
      last_checkpoint = save_checkpoint(cfg, spec, state, ck_rank, step);
      if (!opts.quiet)
        spdlog::info("saved checkpoint {} in {:.0f} ms", last_checkpoint, ms_since(s0));
    }
    if (exit_now) {
      result.stop_signal = stop_requested ? (stop_signal() ? stop_signal() : SIGTERM) : 0;
      result.stopped_at = step;
      break;
    }
  }
  result.checkpoint = last_checkpoint;
  if (jsonl) jsonl->close();
  const double ran = std::max<size_t>(1, result.steps.size());
  // The tensor group's traffic per step, as counted against Megatron's formula.
  TensorTraffic counted;
  for (const auto& ch : chunks) {
    const TensorCommVolume& vol = ch->comm_volume();
    counted.activations += vol.activations / ran;
    counted.logits += vol.logits / ran;
    counted.replicated_grads += vol.replicated_grads / ran;
  }
  result.tensor_traffic_counted = counted;
  result.tensor_traffic_formula = tensor_traffic_formula(cfg, me.pp);
  if (host_device && !opts.quiet)
    spdlog::info(
        "optimizer offloaded to the host: {} each way per step (gradients down, weights up); "
        "host memory {} (master weights and Adam moments of this rank's shard), training device "
        "peak {}",
        mib(size_t(double(offloaded_bytes) / ran)), mib(host_device->peak_bytes()),
        mib(device->peak_bytes()));
  if (dist) {
    // The paper counts one forward and backward per step: 2Ψ (reduce-scatter + all-gather, or
    // an all-reduce) for stages 0-2, 3Ψ for stage 3, each times (N-1)/N in ring accounting.
    result.zero_traffic_counted = dist->data->take_traffic() / ran;
    result.zero_traffic_paper = (zstage == 3 ? 3 : 2) * psi * 4 * (nd - 1) / nd;
    if (!opts.quiet)
      spdlog::info(
          "data-parallel traffic per step per rank: counted {:.0f} B ({:.2f}Ψ over {} "
          "micro-batches); the ZeRO paper's {}Ψ = {:.0f} B (one micro-batch per step)",
          result.zero_traffic_counted,
          nd > 1 ? result.zero_traffic_counted / (psi * 4 * (nd - 1) / nd) : 0.0, accum,
          zstage == 3 ? 3 : 2, result.zero_traffic_paper);
  }
  if (tp > 1 && !opts.quiet) {
    const TensorTraffic& c = result.tensor_traffic_counted;
    const TensorTraffic& f = result.tensor_traffic_formula;
    spdlog::info(
        "tensor-parallel traffic per step per rank: counted {:.0f} B (activations {:.0f}, "
        "logits {:.0f}, replicated grads {:.0f}); Megatron's formula {:.0f} B ({:.0f}, {:.0f}, "
        "{:.0f})",
        c.total(), c.activations, c.logits, c.replicated_grads, f.total(), f.activations, f.logits,
        f.replicated_grads);
  }
  if (!cfg.output.export_hf.empty() && result.stopped_at == 0) {
    // Every tensor-parallel rank takes part in the gather; rank 0 writes.
    const Buffer<float> whole = state.whole_params();
    const std::vector<float> full = whole_model(model, dist.get(), whole.data());
    if (env.rank == 0) {
      export_hf(cfg.output.export_hf, m, model.full_layout(), full.data());
      if (!opts.quiet) spdlog::info("exported Hugging Face GPT-2 folder: {}", cfg.output.export_hf);
    }
  }
  return result;
}

}  // namespace triad
