#include "triad/core/engine.hpp"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "triad/core/attention.hpp"
#include "triad/core/data.hpp"
#include "triad/core/data_parallel.hpp"
#include "triad/core/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/gpt_layout.hpp"
#include "triad/core/hf.hpp"
#include "triad/core/model.hpp"
#include "triad/core/plugin_loader.hpp"
#include "triad/core/rendezvous.hpp"
#include "triad/core/services.hpp"
#include "triad/core/transport.hpp"

namespace triad {

namespace fs = std::filesystem;

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

RunPlan plan_run(const Config& cfg) {
  RunPlan p;
  const auto layout = gpt_layout(cfg.model);
  const auto& m = cfg.model;
  p.num_params = layout.total;
  p.param_bytes = layout.total * 4;
  p.grad_bytes = layout.total * 4;
  p.optimizer_bytes = layout.total * 8;  // Adam m and v
  const size_t BT = size_t(cfg.training.micro_batch_size) * m.seq_length, C = m.hidden_size;
  // Per layer: res_in, ln1, qkv(3), atty, res_mid, ln2, fch(4), fch_gelu(4) = 16 C per token,
  // plus 4 row statistics and H lse values. Then the head and the backward scratch.
  const size_t per_layer = BT * (16 * C + 4 + m.num_attention_heads);
  const size_t head = BT * (2 * C + 3) + BT * size_t(m.vocab_size);
  const size_t scratch = BT * C * (1 + 1 + 3 + 1 + 4 + 4);
  p.activation_bytes = 4 * (per_layer * m.num_layers + head + scratch);
  p.flops_per_step = model_flops_per_step(m, cfg.training.global_batch_size);
  return p;
}

namespace {

std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

// AdamW over each parameter tensor, decaying only matmul weights and embeddings.
struct AdamW {
  Buffer<float> m, v;
  AdamW(Device& dev, size_t n) : m(dev, n, "Adam first moment"), v(dev, n, "Adam second moment") {}
  // compute: the model's copy of the weights in `act` (mixed precision), refreshed in the same
  // pass; null in fp32.
  void step(Device& dev, const GptLayout& layout, float* params, const float* grads, void* compute,
            DType act, const OptimizerConfig& o, double lr, int t) {
    for (const auto& p : layout.params) {
      dev.adamw_update(params + p.offset, grads + p.offset, m.data() + p.offset,
                       v.data() + p.offset, p.numel, float(lr), float(o.adam_beta1),
                       float(o.adam_beta2), float(o.adam_eps),
                       p.weight_decay ? float(o.weight_decay) : 0.0f, t,
                       compute ? advance(compute, p.offset, act) : nullptr, act);
    }
  }
};

}  // namespace

namespace {

// Everything a rank of a data-parallel job needs beyond the single-process run: the
// rendezvous client, the transport, the world communicator and the data plugin.
struct DataParallelRun {
  std::unique_ptr<RendezvousClient> store;
  std::unique_ptr<Transport> transport;
  Communicator world;
  std::unique_ptr<DataParallelBackend> data;
  Device* device = nullptr;
  Buffer<float> scalar;  // on the run's device: the transport moves that device's memory

  // Mean of x over the ranks.
  double average(double x) {
    float v = static_cast<float>(x);
    device->to_device(scalar.data(), &v, sizeof v);
    world
        .all_reduce(scalar.data(), scalar.data(), 1, dl_float32(), TRIAD_REDUCE_SUM,
                    device->dl_device())
        .wait(kCollectiveTimeout);
    device->to_host(&v, scalar.data(), sizeof v);
    return v / world.size();
  }
  static constexpr std::chrono::milliseconds kCollectiveTimeout{300000};
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

std::unique_ptr<DataParallelRun> start_data_parallel(const Config& cfg, const DistEnv& env,
                                                     const PluginLoader& loader,
                                                     const CoreServices& services, Device& device) {
  auto run = std::make_unique<DataParallelRun>();
  run->device = &device;
  run->scalar = Buffer<float>(device, 1, "data-parallel loss scalar");
  // Load and check both plugins before connecting to anyone.
  auto tplugin = loader.load("transport", cfg.transport.name);
  const ResolvedParams tparams =
      resolve_params(tplugin->descriptor(), cfg.transport.params, cfg.transport.yaml_path);
  auto dplugin = loader.load("data", "zero");
  const auto& z = cfg.zero_optimization;
  const ResolvedParams dparams =
      resolve_params(dplugin->descriptor(),
                     {{"stage", std::to_string(z.stage)},
                      {"reduce_bucket_size", std::to_string(z.reduce_bucket_size)},
                      {"overlap_comm", z.overlap_comm ? "true" : "false"}},
                     "zero_optimization");
  run->data = std::make_unique<DataParallelBackend>(dplugin, dparams, services.c_services());
  run->transport = std::make_unique<Transport>(tplugin, tparams, services.c_services());
  const uint32_t memory =
      device.dl_device().device_type == kDLCPU ? TRIAD_MEM_BIT_HOST : TRIAD_MEM_BIT_CUDA;
  check_transport_memory(*run->transport, cfg.device, memory, loader, services);
  run->transport->check_supported(
      memory, TRIAD_DTYPE_BIT_FP32,
      run->data->capabilities().transport_ops | TRIAD_TRANSPORT_OP_ALL_REDUCE);
  run->store = std::make_unique<RendezvousClient>(env.master_addr, env.master_port, env.token);
  run->world = run->transport->init_world(env.rank, env.world_size, *run->store,
                                          "transport/" + cfg.transport.name + "/");
  return run;
}

}  // namespace

namespace {

// Refuses a shape the chosen attention backend cannot run before anything is allocated, and
// names the installed backends that can.
void check_attention(const AttentionBackend& chosen, const ModelConfig& m, int micro_batch,
                     DLDevice device, DType act, const PluginLoader& loader,
                     const CoreServices& services) {
  const triad_attention_shape_v1 shape{
      micro_batch, m.num_attention_heads, m.seq_length, m.hidden_size / m.num_attention_heads,
      1,           dl_dtype(act),         device};
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
  if (env.world_size != cfg.parallel.data_parallel_size * cfg.parallel.tensor_model_parallel_size *
                            cfg.parallel.pipeline_model_parallel_size)
    throw UserError("the job has " + std::to_string(env.world_size) +
                    " ranks but the config's layout is tp " +
                    std::to_string(cfg.parallel.tensor_model_parallel_size) + " x pp " +
                    std::to_string(cfg.parallel.pipeline_model_parallel_size) + " x dp " +
                    std::to_string(cfg.parallel.data_parallel_size) +
                    "; load the config with the job's world size");
  // Everything that can fail on bad input happens before the output folder is touched.
  auto device = make_device(cfg.device, env.local_rank, cfg.allow_tf32);
  const double peak_tflops =
      cfg.peak_tflops > 0 ? cfg.peak_tflops : device->peak_tflops(cfg.precision, cfg.allow_tf32);
  PluginLoader loader;
  auto plugin = loader.load("attention", cfg.attention.name);
  const ResolvedParams aparams =
      resolve_params(plugin->descriptor(), cfg.attention.params, cfg.attention.yaml_path);
  CoreServices services(omp_get_max_threads(), device->stream());
  AttentionBackend attention(plugin, aparams, services.c_services());
  const DType act = cfg.precision == "bf16" ? DType::bf16 : DType::f32;
  check_attention(attention, m, t.micro_batch_size, device->dl_device(), act, loader, services);
  // Data parallelism before the model: a transport that cannot touch this device's memory
  // stops the run here, before any rank connects or allocates the model.
  std::unique_ptr<DataParallelRun> dp;
  if (env.distributed()) dp = start_data_parallel(cfg, env, loader, services, *device);
  auto data = make_data_loader(cfg.data, m, t.micro_batch_size, t.global_batch_size,
                               cfg.data.seed ? cfg.data.seed : t.seed, env.rank,
                               cfg.parallel.data_parallel_size);
  GPT model(m, *device, attention, t.micro_batch_size, act);
  if (!cfg.output.init_from_hf.empty()) {
    std::vector<float> host(model.num_params());
    import_hf(cfg.output.init_from_hf, m, model.layout(), host.data());
    model.params_from_host(host);
  } else {
    model.init_weights(t.seed);
  }
  AdamW adam(*device, model.num_params());
  if (dp) {
    dp->data->setup(model.layout(), device->dl_device(), env.rank, env.world_size,
                    dp->world.c_ref(), DataParallelRun::kCollectiveTimeout.count());
    // Every rank starts from rank 0's weights, whatever it initialised or loaded.
    dp->world.broadcast(model.params(), model.num_params(), dl_float32(), 0, device->dl_device())
        .wait(DataParallelRun::kCollectiveTimeout);
    model.sync_compute_weights();
  }

  RunResult result;
  result.output_dir = cfg.output.dir;
  std::ofstream jsonl;
  if (opts.write_output) {
    fs::create_directories(cfg.output.dir);
    std::ofstream(fs::path(cfg.output.dir) / "config.yaml") << to_yaml(cfg);
    jsonl.open(fs::path(cfg.output.dir) / "metrics.jsonl", std::ios::trunc);
  }
  if (!opts.quiet) {
    spdlog::info(
        "model: {} layers, hidden {}, {} heads, seq {}, vocab {}, {} positions: {} parameters",
        m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size,
        m.position_embedding, model.num_params());
    spdlog::info("batch: global {} = micro {} x accumulation {} x data-parallel {}",
                 t.global_batch_size, t.micro_batch_size, t.gradient_accumulation_steps,
                 cfg.parallel.data_parallel_size);
    spdlog::info("attention: {} ({}); data: {}; threads: {}", attention.name(), plugin->path(),
                 data->describe(), omp_get_max_threads());
  }

  const int B = t.micro_batch_size, T = m.seq_length;
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  const double flops = model_flops_per_step(m, t.global_batch_size);
  const int accum = t.gradient_accumulation_steps;
  // With data parallelism each rank also scales by 1/dp, so the data plugin's sum over the
  // group is the mean (zero_optimization: no pass over the gradients after the reduction).
  const float grad_scale = 1.0f / (float(accum) * float(dp ? env.world_size : 1));
  for (int step = 1; step <= t.train_iters; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = learning_rate(cfg.optimizer, cfg.lr_schedule, t.train_iters, step);
    model.zero_grad();
    double loss = 0;
    for (int micro = 0; micro < accum; ++micro) {
      data->micro_batch(step - 1, micro, inputs.data(), targets.data());
      loss += model.forward(inputs.data(), targets.data(), B);
      if (dp && micro == accum - 1) {
        // The last micro-batch's backward finishes gradients layer by layer; hand each range
        // to the data plugin at once so its all-reduce overlaps the rest of the backward.
        model.backward(grad_scale,
                       [&](size_t off, size_t n) { dp->data->grads_ready(model.grads(), off, n); });
      } else {
        model.backward(grad_scale);
      }
    }
    loss /= accum;
    if (dp) {
      dp->data->finish_grads(model.grads());
      loss = dp->average(loss);
    }
    const double norm = std::sqrt(device->sum_squares(model.grads(), model.num_params()));
    if (cfg.optimizer.clip_grad > 0 && norm > cfg.optimizer.clip_grad)
      device->scale_inplace(model.grads(), model.num_params(),
                            float(cfg.optimizer.clip_grad / (norm + 1e-6)));
    adam.step(*device, model.layout(), model.params(), model.grads(), model.compute_params(), act,
              cfg.optimizer, lr, step);
    if (dp) dp->data->after_step(model.params());
    device->synchronize();  // the step's time includes its device work
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    StepRecord r;
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
    if (jsonl.is_open()) {
      nlohmann::json j{{"step", step},
                       {"loss", loss},
                       {"lr", lr},
                       {"grad_norm", norm},
                       {"ms_per_step", ms},
                       {"samples_per_s", r.samples_per_s},
                       {"tokens_per_s", r.tokens_per_s},
                       {"tflops_per_device", r.tflops},
                       {"mfu", peak_tflops > 0 ? nlohmann::json(r.mfu) : nlohmann::json()},
                       {"peak_memory_bytes", r.peak_bytes}};
      jsonl << j.dump() << "\n" << std::flush;
    }
    if (!opts.quiet && (step % t.log_interval == 0 || step == 1 || step == t.train_iters))
      spdlog::info(
          "step {:>5}/{} | loss {:.4f} | lr {:.3e} | grad-norm {:.3f} | {:.1f} ms | "
          "{:.1f} samples/s | {:.0f} tokens/s | {:.3f} TFLOP/s{} | peak {}",
          step, t.train_iters, loss, lr, norm, ms, r.samples_per_s, r.tokens_per_s, r.tflops,
          peak_tflops > 0 ? fmt::format(" | MFU {:.1f}%", 100 * r.mfu) : std::string(),
          mib(r.peak_bytes));
  }
  if (!cfg.output.export_hf.empty() && env.rank == 0) {
    export_hf(cfg.output.export_hf, m, model.layout(), model.params_to_host().data());
    if (!opts.quiet) spdlog::info("exported Hugging Face GPT-2 folder: {}", cfg.output.export_hf);
  }
  return result;
}

}  // namespace triad
