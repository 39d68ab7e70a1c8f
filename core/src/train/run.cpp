#include "triad/core/train/run.hpp"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "triad/core/dist/rank_status.hpp"
#include "triad/core/error.hpp"
#include "triad/core/io/hf.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/units.hpp"

namespace triad {

std::chrono::milliseconds collective_timeout_ms(const TrainingConfig& t) {
  constexpr double kWeek = 7 * 24 * 3600;
  const double s = t.collective_timeout;
  if (!(s >= 0.001 && s <= kWeek)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", s);
    throw UserError("training.collective_timeout " + std::string(text) +
                    " is not a number of seconds from 0.001 to 604800 (a week): shorter rounds to "
                    "0 ms, which turns the watch off, longer is no bound; give e.g. 300");
  }
  return std::chrono::milliseconds(int64_t(s * 1000));
}

std::chrono::milliseconds wait_bound(const TrainingConfig& t) {
  const std::chrono::milliseconds own = collective_timeout_ms(t);
  if (!rank_status_watched()) return own;
  return own + std::max(std::chrono::milliseconds(1000), own / 4);
}

std::vector<double> DistributedRun::sum(Communicator& comm, const std::vector<double>& xs) {
  // Each value as two floats, its float and the rest: a value one rank gives (a stage's peak
  // bytes) comes back exact up to 2^48, where one float would round it to 24 bits.
  const size_t n = xs.size();
  std::vector<float> v(2 * n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = float(xs[i]);
    v[n + i] = std::isfinite(v[i]) ? float(xs[i] - double(v[i])) : 0.0f;  // inf stays inf
  }
  // Sized once (collective_scalars), so the memory plan counts it; growing it here would not be.
  if (scalars.size() < v.size())
    throw std::logic_error("DistributedRun::sum: " + std::to_string(n) +
                           " scalars, more than collective_scalars() makes room for");
  device->to_device(scalars.data(), v.data(), v.size() * sizeof(float));
  comm.all_reduce(scalars.data(), scalars.data(), v.size(), dl_float32(), TRIAD_REDUCE_SUM,
                  device->dl_device())
      .wait(timeout);
  device->to_host(v.data(), scalars.data(), v.size() * sizeof(float));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = double(v[i]) + double(v[n + i]);
  return out;
}

std::vector<float> DistributedRun::gather_tp(const float* src, size_t n) {
  Communicator& tp = *comms.tp;
  Buffer<float> all(*device, n * size_t(tp.size()), "tensor-parallel gather");
  tp.all_gather(src, all.data(), n * size_t(tp.size()), dl_float32(), device->dl_device())
      .wait(timeout);
  std::vector<float> host(all.size());
  device->to_host(host.data(), all.data(), host.size() * sizeof(float));
  return host;
}

namespace {

bool stage_transport_forced() {
  const char* v = std::getenv("TRIAD_STAGE_TRANSPORT");
  return v && std::string(v) == "1";
}

// Refuses a transport that cannot touch the run's device memory, before anyone connects, and
// names the installed transports that can.
void check_transport_memory(const Transport& chosen, const std::string& device_name,
                            uint32_t memory, const CoreServices& services) {
  if (chosen.capabilities().memory & memory) return;
  const std::string fix = other_plugins_fix(
      "transport", chosen.name(),
      [&](std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams& params) {
        const Transport other(std::move(plugin), params, services.c_services());
        return (other.capabilities().memory & memory) != 0;
      },
      "no installed transport can");
  throw UserError("transport '" + chosen.name() + "' cannot touch " +
                  (memory == TRIAD_MEM_BIT_HOST ? "host" : "CUDA") +
                  " memory, which device: " + device_name + " needs; " + fix);
}

// pipeline_order: the streams' first message out of order between stages ("" when none).
std::unique_ptr<DistributedRun> start_distributed(const Config& cfg, const DistEnv& env,
                                                  const ProcessGroups& groups,
                                                  const PluginLoader& loader,
                                                  const CoreServices& services, Device& device,
                                                  const std::string& pipeline_order) {
  auto run = std::make_unique<DistributedRun>();
  run->timeout = wait_bound(cfg.training);
  run->device = &device;
  run->scalars = Buffer<float>(
      device, collective_scalars(cfg.parallel.pipeline_model_parallel_size), "collective scalars");
  // Load and check both plugins before connecting to anyone.
  auto tplugin = loader.load("transport", cfg.transport.name);
  const ResolvedParams tparams =
      resolve_params(tplugin->descriptor(), cfg.transport.params, cfg.transport.yaml_path);
  run->data = make_data_plugin(cfg, loader, services);
  run->transport = std::make_unique<Transport>(tplugin, tparams, services.c_services());
  const uint32_t memory =
      device.dl_device().device_type == kDLCPU ? TRIAD_MEM_BIT_HOST : TRIAD_MEM_BIT_CUDA;
  // A transport that reaches host memory only carries device memory through host buffers
  // (several ranks can then share one GPU); TRIAD_STAGE_TRANSPORT=1 stages host memory too, so
  // that the CPU device runs that path (a test double).
  const uint32_t reach = run->transport->capabilities().memory;
  const bool force = stage_transport_forced();
  if (force || (!(reach & memory) && (reach & TRIAD_MEM_BIT_HOST)))
    run->transport->stage_through_host(
        [&device](void* host, const void* src, size_t n) { device.to_host(host, src, n); },
        [&device](void* dst, const void* host, size_t n) { device.to_device(dst, host, n); },
        force);
  check_transport_memory(*run->transport, cfg.device, memory, services);
  // A transport on device memory itself (NCCL) takes one GPU per rank; several ranks share one
  // only through host buffers.
  const int gpus = memory == TRIAD_MEM_BIT_CUDA ? cuda_devices_visible() : 0;
  if (gpus > 0 && !run->transport->staged() && env.local_world_size > gpus)
    throw UserError("transport '" + run->transport->name() + "' takes one GPU per rank, but " +
                    std::to_string(env.local_world_size) + " ranks on this node see " +
                    std::to_string(gpus) + " GPU" + (gpus > 1 ? "s" : "") + "; launch at most " +
                    std::to_string(gpus) +
                    " per node (--nproc-per-node), or use transport: ucx, which shares a GPU "
                    "through host buffers");
  uint32_t ops = run->data->capabilities().transport_ops | TRIAD_TRANSPORT_OP_ALL_REDUCE |
                 TRIAD_TRANSPORT_OP_SPLIT;
  if (groups.tp_size() > 1)
    ops |= TRIAD_TRANSPORT_OP_ALL_GATHER | TRIAD_TRANSPORT_OP_REDUCE_SCATTER;
  // parallel.tp_comm_overlap's ring: untagged send/recv on the tensor group.
  if (groups.tp_size() > 1 && cfg.parallel.sequence_parallel && cfg.parallel.tp_comm_overlap)
    ops |= TRIAD_TRANSPORT_OP_SEND_RECV;
  if (groups.pp_size() > 1) {
    ops |= TRIAD_TRANSPORT_OP_SEND_RECV;
    // Without tags (nccl) the stages' messages match in the order posted: every schedule whose
    // stages send in the order their peers receive runs so.
    if (!run->tagged() && !pipeline_order.empty())
      throw UserError("pipeline '" + cfg.pipeline.name + "' with transport '" +
                      run->transport->name() + "': " + pipeline_order +
                      "; this transport's messages carry no tags and match in the order posted, "
                      "so it cannot run this schedule; use transport: ucx or another schedule");
  }
  run->transport->check_supported(memory, TRIAD_DTYPE_BIT_FP32, ops);
  check_context_parallel_transport(*run->transport, groups.cp_size(),
                                   cfg.parallel.context_parallel_method);
  run->data->explain_failures_with([t = run->transport.get()] { return t->last_error(); });
  run->store = std::make_unique<RendezvousClient>(env.master_addr, env.master_port, env.token);
  run->world = run->transport->init_world(env.rank, env.world_size, *run->store,
                                          "transport/" + cfg.transport.name + "/");
  run->comms = make_parallel_comms(run->world, groups);
  if (groups.pp_size() > 1) {
    const RankCoords c = groups.coords(env.rank);
    const bool ends = c.pp == 0 || c.pp == groups.pp_size() - 1;
    // One group per (tp, cp, dp) place: the first and last stage of the same pipeline.
    const int place = c.tp + groups.tp_size() * (c.cp + groups.cp_size() * c.dp);
    run->embedding = run->world.split(ends ? place : TRIAD_COMM_SPLIT_NONE, c.pp);
    run->embedding.trace_group("pp");  // the tied embedding's sum over the end stages
  }
  return run;
}

// Refuses a shape the chosen attention backend cannot run before anything is allocated, and
// names the installed backends that can.
void check_attention(const AttentionBackend& chosen, const ModelConfig& m, int tp, int micro_batch,
                     DLDevice device, DType act, const CoreServices& services) {
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
    for (const auto& name : other_plugins_that_fit(
             "attention", chosen.name(),
             [&](std::shared_ptr<const LoadedPlugin> plugin, const ResolvedParams&params) {
               const AttentionBackend other(std::move(plugin), params, services.c_services());
               other.check_supported(shape);  // throws when it cannot
               return true;
             }))
      can += (can.empty() ? "" : ", ") + name;
    throw UserError(std::string(e.what()) +
                    (can.empty() ? "; no installed attention backend can run this shape"
                                 : "; attention backends that can: " + can));
  }
}

// The job's layout, refused when the job has another number of ranks.
ProcessGroups checked_groups(const Config& cfg, const DistEnv& env) {
  const auto& par = cfg.parallel;
  const int tp = par.tensor_model_parallel_size, dp = par.data_parallel_size;
  const int cp = par.context_parallel_size;
  if (env.world_size != dp * tp * cp * par.pipeline_model_parallel_size)
    throw UserError("the job has " + std::to_string(env.world_size) +
                    " ranks but the config's layout is tp " + std::to_string(tp) +
                    (cp > 1 ? " x cp " + std::to_string(cp) : "") + " x pp " +
                    std::to_string(par.pipeline_model_parallel_size) + " x dp " +
                    std::to_string(dp) + "; load the config with the job's world size");
  return ProcessGroups(env.world_size, tp, par.pipeline_model_parallel_size, dp, cp);
}

TrainOptions speaking_for_the_job(const TrainOptions& in) {
  TrainOptions opts = in;
  if (in.dist.rank != 0) {
    // Rank 0 speaks for the job (DeepSpeed's habit): one log, one output folder.
    opts.quiet = true;
    opts.write_output = false;
  }
  return opts;
}

}  // namespace

std::unique_ptr<DataParallelBackend> make_data_plugin(const Config& cfg, const PluginLoader& loader,
                                                      const CoreServices& services,
                                                      std::vector<std::string>* notes) {
  const PluginChoice& choice = cfg.data_parallel;
  auto plugin = loader.load("data", choice.name);
  // DeepSpeed's zero_optimization keys reach the plugin where it declares them (zero declares
  // all four); its own section's parameters come on top. The stage is checked below either way.
  const auto& z = cfg.zero_optimization;
  const std::map<std::string, std::string> zero_keys = {
      {"stage", std::to_string(z.stage)},
      {"reduce_bucket_size", std::to_string(z.reduce_bucket_size)},
      {"overlap_comm", z.overlap_comm ? "true" : "false"},
      {"reduce_scatter", z.reduce_scatter ? "true" : "false"},
      {"overlap_param_gather", z.overlap_param_gather ? "true" : "false"}};
  const triad_plugin_v1& desc = plugin->descriptor();
  std::map<std::string, std::string> given = choice.params;
  std::set<std::string> declared;
  for (size_t i = 0; i < desc.num_params; ++i) {
    declared.insert(desc.params[i].name);
    if (auto it = zero_keys.find(desc.params[i].name); it != zero_keys.end()) given.insert(*it);
  }
  for (const auto& [key, value] : zero_keys) {
    const auto it = cfg.given.find("zero_optimization." + key);
    if (!notes || key == "stage" || declared.count(key) || it == cfg.given.end()) continue;
    notes->push_back("zero_optimization." + key + " (" + it->second +
                     "): no effect with data plugin '" + choice.name + "' (" + plugin->path() +
                     "), which does not declare it");
  }
  const ResolvedParams params = resolve_params(desc, given, choice.yaml_path);
  auto data = std::make_unique<DataParallelBackend>(plugin, params, services.c_services());
  const uint32_t stages = data->capabilities().stages;
  if (z.stage < 0 || z.stage > 31 || !(stages & (1u << z.stage))) {
    std::string have;
    for (int s = 0; s < 32; ++s)
      if (stages & (1u << s)) have += (have.empty() ? "" : ", ") + std::to_string(s);
    const auto where = cfg.given.find("zero_optimization.stage");
    throw UserError("zero_optimization.stage " + std::to_string(z.stage) + " (" +
                    (where != cfg.given.end() ? where->second : cfg.source_path) +
                    ") is not implemented by data plugin '" + choice.name + "' (" + plugin->path() +
                    "), which implements stages " + have + "; use one of those");
  }
  return data;
}

Run::Run(const Config& cfg_in, const TrainOptions& opts_in)
    : cfg(cfg_in),
      opts(speaking_for_the_job(opts_in)),
      groups(checked_groups(cfg_in, opts_in.dist)),
      me(groups.coords(opts_in.dist.rank)) {
  // Everything that can fail on bad input happens before the output folder is touched.
  check_runnable(cfg);
  check_sizes_fit(cfg);
  wait_bound(cfg.training);  // a collective_timeout no wait can use is refused here
  device = make_device(cfg.device, opts.dist.local_rank, cfg.allow_tf32, cfg.device_gemm);
  // A GPU's memory is known only here (the launcher checked the host's for a CPU run): the
  // estimate against what the device has free, refused before anything is allocated.
  if (const size_t free = device->memory_free()) check_memory_fits(cfg, opts.dist.world_size, free);
  peak_tflops =
      cfg.peak_tflops > 0 ? cfg.peak_tflops : device->peak_tflops(cfg.precision, cfg.allow_tf32);
  load_plugins();
  place_model();
  open_checkpoint();
  // This stage's instructions for one step (the one-stage schedule is plain gradient
  // accumulation).
  pipeline_plugin = loader.load("pipeline", cfg.pipeline.name);
  pipeline = std::make_unique<PipelineBackend>(
      pipeline_plugin,
      resolve_params(pipeline_plugin->descriptor(), cfg.pipeline.params, cfg.pipeline.yaml_path),
      services->c_services());
  // Every stage's stream (this one's, as schedule() gives it, checked to run with the others):
  // the send copies come from all of them.
  const std::vector<PipeSchedule> streams =
      pipeline->schedules(stages(), cfg.training.gradient_accumulation_steps, chunks_per_stage);
  schedule = streams[size_t(me.pp)];
  send_copies = pipeline_send_copies(streams)[size_t(me.pp)];
  pipeline_order = pipeline_order_mismatch(streams);
  connect();
  open_data();
  build_model();
  shard_state();
}

// The attention plugin (its shape checked), and the tensor plugin's plan of the layout.
void Run::load_plugins() {
  const auto& m = cfg.model;
  attention_plugin = loader.load("attention", cfg.attention.name);
  const ResolvedParams aparams =
      resolve_params(attention_plugin->descriptor(), cfg.attention.params, cfg.attention.yaml_path);
  services = std::make_unique<CoreServices>(omp_get_max_threads(), device->stream());
  attention = std::make_unique<AttentionBackend>(attention_plugin, aparams, services->c_services());
  act = precision_dtype(cfg.precision);
  check_attention(*attention, m, tp(), cfg.training.micro_batch_size, device->dl_device(), act,
                  *services);
  auto tplugin = loader.load("tensor", cfg.tensor.name);
  tensor = std::make_unique<TensorBackend>(
      tplugin, resolve_params(tplugin->descriptor(), cfg.tensor.params, cfg.tensor.yaml_path),
      services->c_services());
  plan = tensor->plan(tp(), cfg.parallel.sequence_parallel);
}

// This rank's tensors: its tensor-parallel slice of its pipeline stage's layers.
void Run::place_model() {
  const auto& m = cfg.model;
  Placement place;
  place.tp_rank = me.tp;
  place.tp_size = tp();
  place.make_vocab_size_divisible_by = m.make_vocab_size_divisible_by;
  place.split = plan.split;
  const int pp = stages();
  layers = pipeline_partition(cfg);
  for (int st = 0; st < me.pp; ++st) place.first_layer += layers[st];
  place.num_layers = layers[me.pp];
  place.has_embedding = me.pp == 0;
  place.has_head = me.pp == pp - 1;
  // Interleaved: model chunk c of this stage is virtual stage c * pp + stage, each
  // num_layers / (pp * v) layers.
  const int v = chunks_per_stage = cfg.parallel.virtual_pipeline_model_parallel_size;
  chunk_layers = m.num_layers / (pp * v);
  if (v > 1)
    for (int c = 0; c < v; ++c)
      place.chunks.push_back({(c * pp + me.pp) * chunk_layers, chunk_layers});
  spec = build_param_spec(m, place);
}

// A checkpoint to start from, checked whole (its files, sizes, checksums, the model and the
// batch) before anything is allocated, connected or written.
void Run::open_checkpoint() {
  const std::string dir = checkpoint_to_load(cfg);
  if (dir.empty()) return;
  ckpt = std::make_unique<Checkpoint>(dir);
  ckpt->check_continues(cfg);
  ckpt->verify();
  start_step = ckpt->step();
  progress = ckpt->progress();
}

// The transport before the model: one that cannot touch this device's memory stops the run
// here, before any rank connects or allocates the model.
void Run::connect() {
  if (opts.dist.distributed())
    dist = start_distributed(cfg, opts.dist, groups, loader, *services, *device, pipeline_order);
  else
    make_data_plugin(cfg, loader, *services);  // a ZeRO stage it lacks is refused alike
}

// The training data, and the validation data (training.eval_interval): data.split's validation
// part, or data.valid_path whole; opened now, so a part too small is refused before anything
// trains.
void Run::open_data() {
  const auto& t = cfg.training;
  const uint64_t seed = cfg.data.seed ? cfg.data.seed : t.seed;
  data = make_data_loader(cfg.data, cfg.model, t.micro_batch_size, t.global_batch_size, seed, me.dp,
                          dp(), DataPart::train, megatron_num_samples(t, DataPart::train));
  if (t.eval_interval <= 0) return;
  DataConfig vd = cfg.data;
  DataPart part = DataPart::valid;
  if (!vd.valid_path.empty()) {
    vd.path = vd.valid_path;
    vd.path_list.clear();
    vd.split.clear();
    part = DataPart::train;  // the whole file
  }
  valid = make_data_loader(vd, cfg.model, t.micro_batch_size, t.global_batch_size, seed, me.dp,
                           dp(), part, megatron_num_samples(t, DataPart::valid));
}

// The model chunks over one ModelState, their weights (a checkpoint, a Hugging Face folder or
// the seed), and every data-parallel replica on its group's first rank's weights.
void Run::build_model() {
  const auto& t = cfg.training;
  tpc.rank = me.tp;
  tpc.size = tp();
  tpc.sequence_parallel = cfg.parallel.sequence_parallel;
  tpc.overlap_backward = cfg.parallel.overlap_tensor_comm;
  tpc.overlap_ring = cfg.parallel.tp_comm_overlap;
  tpc.boundary = plan.boundary;
  tpc.comm = dist ? dist->comms.tp.get() : nullptr;
  timeout = wait_bound(t);
  tpc.timeout = timeout;
  ContextParallel cpc;
  if (cp() > 1) {
    cpc = {me.cp, cp(), parse_context_method(cfg.parallel.context_parallel_method),
           dist->comms.cp.get()};
  }
  // AdamW's moments come once the data plugin says which range this rank steps.
  // ZeRO-Offload's host device: its memory is counted apart from the training device's.
  if (cfg.zero_optimization.offload_optimizer.device == "cpu") host_device = make_device("cpu");
  state = std::make_unique<ModelState>(spec, *device, act, /*optimizer=*/false,
                                       /*gradients=*/false);
  // One GPT per model chunk of this stage (one without interleaving), over the same state.
  // Their activation sets share the stage's pool, allocated once all of them have said how
  // much a set of theirs needs.
  const int v = chunks_per_stage, pp = stages();
  activations = std::make_unique<ActivationPool>(*device, schedule.buffers);
  for (int c = 0; c < v; ++c) {
    StageChunk sc;
    if (v > 1)
      sc = {c * chunk_layers, chunk_layers, me.pp == 0 && c == 0, me.pp == pp - 1 && c == v - 1};
    chunks.push_back(std::make_unique<GPT>(cfg.model, *state, tpc, *attention, t.micro_batch_size,
                                           schedule.buffers, sc, recompute_of(t), cpc,
                                           activations.get()));
  }
  // The stage-boundary tensors: as many slots as this stage's stream holds at once (the
  // evaluation stream, one pass at a time, holds fewer).
  std::vector<BoundaryUse> use;
  for (const auto& c : chunks) use.push_back(c->boundary_use());
  activations->reserve_boundaries(boundary_slots(schedule.instrs, use).slots,
                                  chunks[0]->stage_bytes(t.micro_batch_size));
  activations->allocate();
  GPT& gpt = model();
  if (ckpt) {
    state->params_from_host(ckpt->params(spec));
  } else if (!cfg.output.init_from_hf.empty()) {
    std::vector<float> full(gpt.full_layout().total);
    import_hf(cfg.output.init_from_hf, cfg.model, gpt.full_layout(), full.data());
    gpt.params_from_full(full.data());
  } else {
    gpt.init_weights(t.seed);
  }
  arena = arena_layout(spec);
  units = arena_units(spec);
  if (!dist) return;
  // Transfers in flight (pipeline sends, ZeRO's prefetches and reductions, the data plugin's
  // buckets) move on after each block, not only when the rank next waits: a transport that
  // progresses only inside its calls (ucx) would otherwise leave them where they are while the
  // layers compute.
  for (auto& c : chunks) c->set_progress([t = dist->transport.get()] { t->progress(); });
  // Gradients are summed (and ZeRO shards kept) over data x context parallel ranks: each holds
  // other tokens of the same weights.
  Communicator& dpc = dist->comms.grad_reduce();
  std::vector<std::pair<size_t, size_t>> unit_list;
  for (const ArenaRange& r : units) unit_list.emplace_back(r.begin, r.size());
  dist->data->setup(arena, unit_list, device->dl_device(), dpc.rank(), dpc.size(), dpc.c_ref(),
                    dist->timeout.count());
  // Every data-parallel replica starts from its group's first rank's weights, whatever it
  // initialised or loaded.
  dpc.broadcast(gpt.params(), gpt.num_params(), dl_float32(), 0, device->dl_device())
      .wait(dist->timeout);
  gpt.sync_compute_weights();
}

// AdamW's moments: the whole arena, or with ZeRO stage 1+ this rank's shard only (one range, or
// its slice of each unit); with stage 2
// the gradients, with stage 3 the parameters too. Then the model states against the ZeRO
// paper's formula.
void Run::shard_state() {
  if (host_device) state->offload_optimizer(*host_device);
  const uint32_t partitioning = dist ? dist->data->partitioning() : 0u;
  if (partitioning & TRIAD_DATA_PARTITION_GRADS) {
    shard_comm = std::make_unique<DataShardComm>(*dist->data);
    state->partition(units, dist->data->shard(), partitioning & TRIAD_DATA_PARTITION_PARAMS,
                     *shard_comm);
  } else if (partitioning & TRIAD_DATA_PARTITION_BY_UNIT) {
    state->shard_optimizer(dist->data->shard());
  } else {
    size_t own_off = 0, own_n = state->size();
    if (dist) dist->data->owned_range(&own_off, &own_n);
    state->shard_optimizer(own_off, own_n);
  }
  if (ckpt) ckpt->load_optimizer(*state);
  // Model states against the ZeRO paper (fp32 weights, gradients and Adam's two moments; a
  // mixed-precision compute copy is counted apart by the device, not here).
  const int zstage = cfg.zero_optimization.stage;
  const double psi = double(state->size()), nd = dist ? dist->comms.grad_reduce().size() : 1;
  model_state_bytes = 4.0 * (state->params_size() + state->grads_size()) + 8.0 * state->opt_count();
  model_state_paper = zstage == 0   ? 16 * psi
                      : zstage == 1 ? 8 * psi + 8 * psi / nd
                      : zstage == 2 ? 4 * psi + 12 * psi / nd
                                    : 16 * psi / nd;
  if (dist && !opts.quiet)
    spdlog::info(
        "ZeRO stage {} over {} {} ranks: model states {} per rank (parameters {}, "
        "gradients {}, Adam moments {}); the ZeRO paper's {} = {} ({:.0f} B counted, {:.0f} B "
        "by the formula)",
        zstage, int(nd), cp() > 1 ? "data x context-parallel" : "data-parallel",
        mib(size_t(model_state_bytes)), mib(state->params_size() * 4), mib(state->grads_size() * 4),
        mib(state->opt_count() * 8),
        zstage == 0   ? "16Ψ"
        : zstage == 1 ? "8Ψ + 8Ψ/N"
        : zstage == 2 ? "4Ψ + 12Ψ/N"
                      : "16Ψ/N",
        mib(size_t(model_state_paper)), model_state_bytes, model_state_paper);
  if ((partitioning & TRIAD_DATA_GATHER_DEFERRED) && !opts.quiet)
    spdlog::info(
        "ZeRO stage {}: each layer's parameter all-gather after the step runs behind the "
        "next forward pass, waited for where the layer is first read{} "
        "(zero_optimization.overlap_param_gather)",
        zstage, act == DType::f32 ? "" : ", in the compute dtype");
  if (dist) dist->data->take_traffic();  // from here on: the steps' own
}

void Run::describe() const {
  const auto& m = cfg.model;
  const auto& t = cfg.training;
  const int pp = stages();
  spdlog::info(
      "model: {} layers, hidden {}, {} heads, seq {}, vocab {} (padded {}), {} positions: {} "
      "parameters",
      m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size,
      spec.padded_vocab_size, m.position_embedding, model().full_layout().total);
  const bool sp = cfg.parallel.sequence_parallel && tp() > 1;
  spdlog::info("layout: {}; tensor: {}{}{}{}; {} parameters on each tensor-parallel rank",
               groups.describe(), tensor->name(), sp ? " with sequence parallelism" : "",
               cfg.parallel.overlap_tensor_comm && tp() > 1
                   ? ", its backward collectives behind the GEMMs (parallel.overlap_tensor_comm)"
                   : "",
               !cfg.parallel.tp_comm_overlap || tp() == 1 ? ""
               : sp ? ", its forward gathers and reduce-scatters around a ring behind the "
                      "GEMMs (parallel.tp_comm_overlap)"
                    : ", parallel.tp_comm_overlap without effect (it needs sequence_parallel)",
               model().num_params());
  spdlog::info("batch: global {} = micro {} x accumulation {} x data-parallel {}",
               t.global_batch_size, t.micro_batch_size, t.gradient_accumulation_steps, dp());
  if (pp > 1) {
    const int accum = t.gradient_accumulation_steps;
    std::string parts;
    for (int st = 0; st < pp; ++st) parts += (st ? ", " : "") + std::to_string(layers[st]);
    spdlog::info(
        "pipeline: {} over {} stages (layers {}), {} micro-batches per step, {} "
        "activation buffers on stage 0; ideal efficiency m/(m+p-1) = {:.1f}%",
        pipeline->name(), pp, parts, accum, schedule.buffers, 100.0 * accum / (accum + pp - 1));
    if (accum < pp)
      spdlog::warn(
          "pipeline: {} micro-batches for {} stages leaves stages idle most of the "
          "step (at best {:.1f}% efficiency); raise "
          "training.gradient_accumulation_steps to "
          "at least {}",
          accum, pp, 100.0 * accum / (accum + pp - 1), pp);
  }
  const std::string gemms = device->gemm_library();
  spdlog::info("attention: {} ({}); data: {}; threads: {}{}", attention->name(),
               attention_plugin->path(), data->describe(), omp_get_max_threads(),
               gemms.empty() ? std::string() : "; GEMMs: " + gemms);
  if (dist)
    spdlog::info("transport: {}{}", dist->transport->name(),
                 dist->transport->staged()
                     ? " through host buffers (each operation on device memory runs on a host "
                       "copy: copied down, its result up)"
                     : "");
}

size_t Run::peak_bytes() const {
  return device->peak_bytes() + services->peak_bytes();
}

std::vector<float> Run::whole_model(const float* arena) const {
  const GPT& gpt = model();
  std::vector<float> full(gpt.full_layout().total, 0.0f);
  const int tps = spec.placement.tp_size;
  if (tps == 1) {
    std::vector<float> local(spec.total);
    device->to_host(local.data(), arena, local.size() * sizeof(float));
    full_from_local(spec, 0, gpt.full_layout(), local.data(), full.data());
  } else {
    const std::vector<float> all = dist->gather_tp(arena, spec.total);
    for (int r = 0; r < tps; ++r)
      full_from_local(spec, r, gpt.full_layout(), all.data() + size_t(r) * spec.total, full.data());
  }
  if (dist && dist->comms.pp && dist->comms.pp->size() > 1) {
    // Each stage filled its own tensors and left zeros elsewhere; the last stage's copy of the
    // tied wte is dropped so that the sum over the stages holds every tensor once.
    if (!spec.placement.has_embedding && spec.placement.has_head) {
      const ParamInfo& w = gpt.full_layout().find("wte.weight");
      std::fill(full.begin() + w.offset, full.begin() + w.offset + w.numel, 0.0f);
    }
    Buffer<float> buf(*device, full.size(), "pipeline gather");
    device->to_device(buf.data(), full.data(), full.size() * sizeof(float));
    dist->comms.pp
        ->all_reduce(buf.data(), buf.data(), full.size(), dl_float32(), TRIAD_REDUCE_SUM,
                     device->dl_device())
        .wait(dist->timeout);
    device->to_host(full.data(), buf.data(), full.size() * sizeof(float));
  }
  return full;
}

}  // namespace triad
