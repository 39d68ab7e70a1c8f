// A training run's parts, built from a Config and this rank's place in the job: the device, the
// plugins, the ParamSpec and ModelState, the model chunks of this pipeline stage, the data, the
// communicators and the checkpoint to load. Built in the order that refuses bad input before
// anything is allocated, connected or written; the executor, the optimizer and the step
// observers borrow these parts (train() in engine.cpp reads as the outline).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "triad/core/config/config.hpp"
#include "triad/core/data/data.hpp"
#include "triad/core/device/device.hpp"
#include "triad/core/dist/process_groups.hpp"
#include "triad/core/dist/rendezvous.hpp"
#include "triad/core/dist/transport.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/model.hpp"
#include "triad/core/model/model_state.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/data_parallel.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/plugins/tensor_backend.hpp"
#include "triad/core/train/checkpoint.hpp"
#include "triad/core/train/engine.hpp"

namespace triad {

// training.collective_timeout as a wait's bound; UserError outside 1 ms .. a week (shorter would
// round to 0 ms, which turns the watch off; longer would pass what milliseconds count).
std::chrono::milliseconds collective_timeout_ms(const TrainingConfig& t);

// Every wait's bound: training.collective_timeout, or a little more when a launcher watches
// this rank (rank_status.hpp). The launcher acts at the timeout itself, seeing every rank, so
// it names the rank the others wait for; a wait that runs out here is the backstop.
std::chrono::milliseconds wait_bound(const TrainingConfig& t);

// The data-parallel plugin with the zero_optimization section as its parameters; refuses a ZeRO
// stage the plugin's capabilities do not list, naming the ones it does. `notes`, when given,
// gets one line per zero_optimization key the configuration gave that the plugin does not
// declare (it has no effect with this plugin).
std::unique_ptr<DataParallelBackend> make_data_plugin(const Config& cfg, const PluginLoader& loader,
                                                      const CoreServices& services,
                                                      std::vector<std::string>* notes = nullptr);

// Everything a rank of a multi-rank job needs beyond the single-process run: the rendezvous
// client, the transport, the world and its tensor-/data-parallel communicators (Megatron's
// order), and the data plugin, which gets the data-parallel communicator only.
struct DistributedRun {
  std::unique_ptr<RendezvousClient> store;
  std::unique_ptr<Transport> transport;
  // The transport matches send/recv by tag (else in the order posted, as nccl).
  bool tagged() const { return transport->capabilities().ops & TRIAD_TRANSPORT_OP_TAGS; }
  Communicator world;
  ParallelComms comms;
  // The first and last pipeline stage of this rank's (tp, dp) position, which both hold the
  // tied word embedding; empty elsewhere and without pipeline parallelism.
  Communicator embedding;
  std::unique_ptr<DataParallelBackend> data;
  Device* device = nullptr;
  Buffer<float> scalars;  // on the run's device: the transport moves that device's memory
  // Every wait's bound (training.collective_timeout).
  std::chrono::milliseconds timeout{300000};

  // Element-wise sums of xs over a group, in one all-reduce (each value as two floats on the
  // wire: exact for a value one rank gives, up to 2^48).
  std::vector<double> sum(Communicator& comm, const std::vector<double>& xs);
  double sum(Communicator& comm, double x) { return sum(comm, std::vector<double>{x})[0]; }
  // Every tensor-parallel rank's `n` elements of `src` (device memory), rank order, on the host.
  std::vector<float> gather_tp(const float* src, size_t n);
};

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

// A run's parts. Members are declared in the order they are built, so they are torn down in
// reverse (a plugin's objects before its library, the model before its state).
class Run {
 public:
  // Throws UserError on bad input, before the output folder is touched.
  Run(const Config& cfg, const TrainOptions& opts);
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  GPT& model() const { return *chunks[0]; }
  // The pipeline's stages, interleaved model chunks per stage, and this rank's stage.
  int stages() const { return cfg.parallel.pipeline_model_parallel_size; }
  int tp() const { return cfg.parallel.tensor_model_parallel_size; }
  int dp() const { return cfg.parallel.data_parallel_size; }
  int cp() const { return cfg.parallel.context_parallel_size; }
  // The ranks a gradient is summed over (and ZeRO shards over): data x context parallel.
  int grad_ranks() const { return dp() * cp(); }
  // Logs what the run is (model, layout, batch, pipeline, attention, data).
  void describe() const;
  // The whole model's host copy of an arena (parameters or gradients) from every
  // tensor-parallel rank's slices and every stage, in the Hugging Face layout. Collective.
  std::vector<float> whole_model(const float* arena) const;
  // The most bytes this rank has held so far: the device's and the core services' together.
  size_t peak_bytes() const;

  const Config& cfg;
  TrainOptions opts;  // rank 0 speaks for the job: other ranks are quiet and write nothing
  ProcessGroups groups;
  RankCoords me;
  std::unique_ptr<Device> device;
  double peak_tflops = 0;
  PluginLoader loader;
  std::shared_ptr<const LoadedPlugin> attention_plugin;
  std::unique_ptr<CoreServices> services;
  std::unique_ptr<AttentionBackend> attention;
  DType act = DType::f32;
  std::unique_ptr<TensorBackend> tensor;
  TensorPlan plan;
  std::vector<int> layers;  // per pipeline stage
  int chunks_per_stage = 1, chunk_layers = 0;
  ParamSpec spec;
  std::unique_ptr<Checkpoint> ckpt;
  int start_step = 0;
  // Optimizer steps taken and the loss scaler's state: the checkpoint's, then each step's.
  TrainingProgress progress;
  std::shared_ptr<const LoadedPlugin> pipeline_plugin;
  std::unique_ptr<PipelineBackend> pipeline;
  PipeSchedule schedule;  // this stage's instructions for one step
  int send_copies = 0;    // the executor's send staging copies (pipeline_send_copies)
  // The streams' first message out of order between two stages (pipeline_order_mismatch; ""
  // when none).
  std::string pipeline_order;
  std::unique_ptr<DistributedRun> dist;
  std::unique_ptr<DataLoader> data, valid;
  TensorParallel tpc;
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<Device> host_device;  // ZeRO-Offload's host
  std::unique_ptr<ModelState> state;
  // The stage's activation sets, shared by its chunks (a buffer index holds one pass at a time).
  std::unique_ptr<ActivationPool> activations;
  std::vector<std::unique_ptr<GPT>> chunks;  // one per model chunk of this stage
  GptLayout arena;
  std::vector<ArenaRange> units;
  std::unique_ptr<DataShardComm> shard_comm;
  // This rank's model-state bytes against the ZeRO paper's formula (RunResult).
  double model_state_bytes = 0, model_state_paper = 0;

 private:
  void load_plugins();
  void place_model();
  void open_checkpoint();
  void connect();
  void open_data();
  void build_model();
  void shard_state();
};

}  // namespace triad
