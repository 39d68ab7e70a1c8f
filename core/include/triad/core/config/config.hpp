// The resolved run configuration. Parsed from YAML (config.cpp), validated against the
// schema before anything runs; every field here has a default or was required.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace triad {

struct ModelConfig {
  int num_layers = 4;                          // Megatron --num-layers (alias n_layer)
  int hidden_size = 128;                       // --hidden-size (alias n_embd)
  int num_attention_heads = 4;                 // --num-attention-heads (alias n_head)
  int seq_length = 64;                         // --seq-length: tokens per sample (T)
  int max_position_embeddings = 0;             // context size; 0 = seq_length
  int vocab_size = 256;                        // byte-level text: 256
  std::string position_embedding = "learned";  // learned | rope
  double rope_base = 10000.0;
  double init_std = 0.02;
  double layernorm_epsilon = 1e-5;
  // The vocabulary is padded to a multiple of this × tensor_model_parallel_size (Megatron's
  // --make-vocab-size-divisible-by); the padding never receives probability.
  int make_vocab_size_divisible_by = 128;
};

struct DataConfig {
  std::string kind = "synthetic";  // synthetic | text | tokens | indexed
  // text: UTF-8 file; tokens: flat uint16 file; indexed: the prefix P of Megatron's P.bin/P.idx
  std::string path;
  // data.path written as a list (kind indexed; `path` is then empty): Megatron's --data-path
  // blend [w1, P1, w2, P2, ...] or [P1, P2, ...], each item as written (data/blend.hpp).
  std::vector<std::string> path_list;
  bool shuffle = false;
  uint64_t seed = 0;  // 0 = training.seed
  // Megatron's --split: the train,validation,test weights of each dataset ("969,30,1"); empty:
  // everything trains.
  std::string split;
  // A separate validation set of the same kind (Megatron's --valid-data-path); used whole.
  std::string valid_path;
  // Whose dataset builder the samples follow where the two differ: megatron-deepspeed (legacy
  // megatron/data: --split rounds each part, a blend asks each dataset for ceil(N·w·1.005)
  // samples) or megatron-lm (megatron/core/datasets: --split rounds the cumulative boundaries,
  // ceil(ceil(N·w)·1.005)).
  std::string builder = "megatron-deepspeed";
  // data.kind text: bytes (one token per byte) or gpt2 (GPT-2's BPE, read from vocab_file and
  // merge_file; empty = the files tools/bootstrap installs). Megatron's --tokenizer-type,
  // --vocab-file, --merge-file.
  std::string tokenizer = "bytes";
  std::string vocab_file, merge_file;
};

struct TrainingConfig {
  int train_iters = 100;
  // Megatron's --train-samples: the samples the training dataset's indices are built for (their
  // epochs, and so the order); 0 = train_iters × global batch. Megatron trains
  // train_samples // global batch steps, so it is at least what the run draws.
  int64_t train_samples = 0;
  // Batch sizes (samples). Any two given derive the third; 0 = not given.
  int micro_batch_size = 0;             // train_micro_batch_size_per_gpu / micro_batch_size
  int gradient_accumulation_steps = 0;  // gradient_accumulation_steps
  int global_batch_size = 0;            // train_batch_size / global_batch_size
  uint64_t seed = 1234;
  int log_interval = 1;
  // What backward recomputes instead of keeping from the forward (Megatron's
  // --recompute-granularity): none; full (each block's forward, from the block's input); or
  // selective (the attention core: the plugin's forward from the kept q, k, v). The two switches
  // are its shorthands, kept equal to it once the config is checked: checkpoint_activations
  // (DeepSpeed's name) is full, recompute_activations (Megatron's --recompute-activations)
  // selective.
  std::string recompute_granularity = "none";
  bool checkpoint_activations = false;
  bool recompute_activations = false;
  // Seconds any one collective or point-to-point wait of a multi-rank run may take before the
  // rank gives up and names what it waited for (the launcher's --collective-timeout). 300 s:
  // past any single step of the CPU configurations here (GPT-2 small at B 4: ~5 s) and a GPU's
  // start-up, and half PyTorch's 10-minute NCCL watchdog, so a stuck job ends in minutes.
  double collective_timeout = 300;
  // Validation (Megatron's --eval-interval / --eval-iters): every eval_interval steps and after
  // the last, the loss over eval_iters global batches of the validation data; 0 = never.
  int eval_interval = 0;
  int eval_iters = 100;
  // Stop cleanly after a step that is a multiple of this (saving a checkpoint first when
  // checkpoint.save is set); 0 = never (Megatron's --exit-interval).
  int exit_interval = 0;
  // The step trace (issue 30, --profile-steps): the steps each rank records spans of, written
  // as a list [3, 4] (profile_steps_list) or a text of numbers and ranges "3-4,7"; empty = off.
  // The checked config holds the step numbers in profile_step_numbers.
  std::string profile_steps;
  std::vector<std::string> profile_steps_list;
  std::vector<int> profile_step_numbers;
  // Where trace.json goes; empty = output.dir.
  std::string profile_dir;
};

enum class Recompute { none, full, selective };
// The checked config's recompute_granularity.
inline Recompute recompute_of(const TrainingConfig& t) {
  return t.recompute_granularity == "full"        ? Recompute::full
         : t.recompute_granularity == "selective" ? Recompute::selective
                                                  : Recompute::none;
}

struct OptimizerConfig {
  std::string type = "adamw";
  double lr = 1e-3;
  double min_lr = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  double weight_decay = 0.1;
  double clip_grad = 1.0;  // 0 = no clipping (DeepSpeed gradient_clipping)
};

struct LrScheduleConfig {
  int lr_warmup_iters = 0;
  std::string lr_decay_style = "cosine";  // cosine | linear | constant | inverse-square-root
  // linear (Megatron's) | log (DeepSpeed's WarmupLR default: log(step + 1) / log(warmup))
  std::string lr_warmup_style = "linear";
  int lr_decay_iters = 0;  // 0 = train_iters
  // Megatron's sample counts and warm-up fraction, in place of the iteration counts: a phase
  // need not end on a whole step (Megatron counts its schedule in samples). 0 = not given.
  double lr_warmup_samples = 0, lr_decay_samples = 0, lr_warmup_fraction = 0;
  // Step k applies the schedule's value at step k - lr_lag_steps: 0 (Triad's own), 1 as
  // Megatron (its scheduler steps after the update, so step k applies the value it logged at
  // k - 1), 2 as DeepSpeed's schedulers (set once before step 1, stepped after each update).
  int lr_lag_steps = 0;
};

// Where the schedule's warm-up ends and its decay ends, in steps (not always whole: Megatron
// counts samples). `train_iters` and `global_batch` are the run's.
struct LrPhases {
  double warmup = 0, decay = 0;
};
LrPhases lr_phases(const LrScheduleConfig& s, int train_iters, int global_batch);

struct ParallelConfig {
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int data_parallel_size = 1;  // derived: world / (tp * cp * pp) when 0
  // Context parallelism (Megatron's --context-parallel-size): the sequence of every micro-batch
  // split over cp ranks from the embedding to the loss; gradients reduce over dp x cp.
  int context_parallel_size = 1;
  // How attention sees the whole sequence under cp > 1: "ring" (Megatron's: key/value blocks
  // passed around the group, causal chunks load-balanced) or "ulysses" (DeepSpeed-Ulysses:
  // all-to-all from sequence-split to head-split around the attention plugin).
  std::string context_parallel_method = "ring";
  // Megatron's sequence parallelism: layernorm/residual regions split along the tokens over
  // the tensor group (no effect at tp 1).
  bool sequence_parallel = false;
  // Layers per pipeline stage, comma-separated ("3,5"); empty = num_layers / pp each.
  std::string pipeline_partition;
  // Derived by load_config's checks: the layers of each pipeline stage (the partition given,
  // else num_layers / pp each).
  std::vector<int> stage_layers;
  // Model chunks per stage (Megatron's interleaved schedule); 1 = not interleaved.
  int virtual_pipeline_model_parallel_size = 1;
  // In each column-parallel GEMM's backward (qkv, the MLP's first, the vocab-parallel head) the
  // tensor group's collectives run behind the GEMMs: the input's gather again (sequence
  // parallelism) behind the input-gradient GEMM, the input gradient's all-reduce or
  // reduce-scatter behind the weight-gradient GEMM, as Megatron's linear layers do by default
  // (--no-async-tensor-model-parallel-allreduce turns that off). The same bits either way.
  bool overlap_tensor_comm = true;
  // Under sequence parallelism, the rest of the tensor group's traffic around a ring of
  // send/recv: each column-parallel GEMM's forward gather, each row-parallel GEMM's forward
  // reduce-scatter and its backward gather of the output gradient, each step's transfer behind
  // the GEMM of another rank's tokens, this rank's own first (Megatron's --tp-comm-overlap). The
  // same bits at tp 2; at larger tp the ring adds a token's parts in its own order.
  bool tp_comm_overlap = false;
};

// DeepSpeed's zero_optimization section.
struct ZeroConfig {
  int stage = 0;  // 0 until ZeRO stages 1-3 land
  // Elements (not bytes) per gradient all-reduce bucket; 25 MiB of fp32 by default.
  int64_t reduce_bucket_size = 6553600;
  // Start each bucket's all-reduce as soon as its gradients are complete, during backward.
  bool overlap_comm = true;
  // Stage 1: gradients reduce-scattered to their owners after the last micro-batch's backward,
  // then the updated parameters all-gathered (2Ψ); false all-reduces them in buckets during the
  // backward pass instead (3Ψ with the gather, but overlapped). Stages 2 and 3 always
  // reduce-scatter, stage 0 always all-reduces.
  bool reduce_scatter = true;
  // Stages 1 (with reduce_scatter) and 2: the parameter all-gather after the step only starts;
  // each layer's is waited for just before the next forward pass first reads the layer, so the
  // gathers of later layers run behind the earlier layers' compute (Megatron's
  // --overlap-param-gather). false waits for every gather before the step returns.
  bool overlap_param_gather = true;
  // offload_optimizer: {device: cpu}: the fp32 master weights and Adam's moments of this rank's
  // shard live on the host and are stepped there (stage 1 and above); "none" keeps them on the
  // training device. pin_memory is accepted for DeepSpeed configs (host memory is what the
  // host device allocates).
  struct Offload {
    std::string device = "none";
    bool pin_memory = false;
  } offload_optimizer;
};

// DeepSpeed's fp16 section: mixed precision with loss scaling. The loss is multiplied by the scale
// before backward; a step whose gradients hold an inf or a NaN anywhere in the job is skipped
// (weights, Adam's moments and the learning-rate schedule untouched) and the dynamic scale
// halved; loss_scale_window steps without overflow double it. With precision fp32 (and
// fp16.enabled) the scaler runs over fp32 math: no fp16 speed or memory, the scaler at work.
struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0;                // 0: dynamic; > 0: this static scale
  int initial_scale_power = 16;         // the dynamic scale starts at 2^this
  int loss_scale_window = 1000;         // steps without overflow before the scale doubles
  int hysteresis = 2;                   // overflows in a row before the scale halves
  bool consecutive_hysteresis = false;  // a step without overflow refills the hysteresis
  double min_loss_scale = 1;            // the dynamic scale never goes below
  // An overflow with the scale at min_loss_scale ends the run (DeepSpeed's); false: the scale
  // stays there and the step is skipped (Megatron's).
  bool raise_error_at_min_scale = true;
};

// A plugin choice: its name plus its YAML section (validated against the plugin's schema
// once the plugin is loaded).
struct PluginChoice {
  std::string name;
  std::map<std::string, std::string> params;  // key -> value as written in YAML
  std::string yaml_path;                      // where it came from, for messages
};

// Megatron's --save / --save-interval / --load, plus how many to keep and --resume.
struct CheckpointConfig {
  std::string save;  // the folder of the run's checkpoints (iter_NNNNNNN/ + latest); empty: none
  int save_interval = 0;  // save every this many steps; 0: at the end only (and on SIGTERM/SIGINT)
  std::string load;   // start from this checkpoint folder (its latest) or one iteration's folder
  int keep_last = 0;  // keep this many newest checkpoints in `save`; 0: keep all
  // Continue from the newest checkpoint of `load` (or else `save`) when there is one, and from
  // the start when there is none (the same command for every start of a requeued job).
  bool resume = false;
};

struct OutputConfig {
  std::string dir = "runs/default";
  // A folder that already holds a run (metrics.jsonl) is refused unless this is set (or the run
  // resumes a checkpoint, and then appends).
  bool overwrite = false;
  std::string export_hf;     // write model.safetensors + config.json here at the end
  std::string init_from_hf;  // start from such a folder
};

// TensorBoard event files (Megatron's --tensorboard-dir, --tensorboard-log-interval): rank 0 adds
// one events.out.tfevents.* file per run (a resumed run adds another) with Megatron's scalar tags,
// the step's values every tensorboard_log_interval steps; empty tensorboard_dir = none.
struct LoggingConfig {
  std::string tensorboard_dir;
  int tensorboard_log_interval = 1;
  // megatron-lm: Megatron-LM's flat tags ("lm loss", "learning-rate vs samples");
  // megatron-deepspeed: Megatron-DeepSpeed's grouped ones ("lm-loss-training/lm loss", each also
  // "vs samples" and "vs tokens", and its steps-vs-samples / steps-vs-tokens series).
  std::string tensorboard_tags = "megatron-lm";
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  ParallelConfig parallel;
  ZeroConfig zero_optimization;
  Fp16Config fp16;
  bool bf16_enabled = false;  // DeepSpeed's bf16: {enabled: true}, the same as precision: bf16
  PluginChoice attention{"naive", {}, "attention"};
  PluginChoice transport{"ucx", {}, "transport"};
  // The tensor-parallel plan; empty = "megatron" when tp > 1, else "none".
  PluginChoice tensor{"", {}, "tensor"};
  // The pipeline schedule (also the one-stage schedule of plain gradient accumulation); empty =
  // "interleaved" with virtual stages, else "1f1b".
  PluginChoice pipeline{"", {}, "pipeline"};
  // The data-parallel plugin (kind "data"); it gets zero_optimization's keys it declares.
  PluginChoice data_parallel{"zero", {}, "data_parallel"};
  CheckpointConfig checkpoint;
  OutputConfig output;
  LoggingConfig logging;
  std::string device = "cpu";      // cpu | cuda (device: cpu is short for device.name: cpu)
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (cuda); fp16.enabled alone means fp16
  bool allow_tf32 = false;         // fp32 GEMMs on the GPU may use TF32 tensor cores
  double peak_tflops = 0;          // the device's peak for MFU; 0 = known GPUs' table
  std::string source_path;         // the YAML file it was read from
  // device.gemm: the library of the CPU device's GEMMs, onednn | openblas (cuda: cuBLAS).
  std::string device_gemm = "onednn";
  // Keys of an imported configuration (deepspeed_config: a ds_config.json, or Megatron's
  // arguments) accepted without effect in Triad, each "SOURCE: no effect in Triad (WHY)"; the
  // launcher logs them once.
  std::vector<std::string> import_notes;
  // The keys the configuration gave (canonical paths, "zero_optimization.overlap_comm") and
  // where each came from ("FILE:LINE:COL", "--set", the JSON's key), for later notes.
  std::map<std::string, std::string> given;
};

// The most micro-batches a step accumulates (training.gradient_accumulation_steps).
inline constexpr int kMaxGradientAccumulation = 1000000;

// Reads, overrides (--set a.b=c, in order) and validates. Throws UserError with one clear
// message (file, line:column, key path, value, and the fix) on any problem. A top-level
// deepspeed_config: FILE (or --set deepspeed_config=FILE) merges DeepSpeed's JSON into the YAML
// first: a key both give with different values is an error naming both; --set wins over either.
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size = 1);

// The paths a run would otherwise trip over only once started, checked before any rank starts:
// data.path (data.kind text or tokens) must be a regular file that opens for reading (a FIFO
// is refused, never opened), and for data.kind indexed each prefix's .bin and .idx alike; with
// writes_output (the launcher that runs rank 0), output.dir and output.export_hf must be folders
// that exist or can be created, and can be written. Leaves nothing behind. Throws UserError naming
// the key, the value and the fix.
void check_run_paths(const Config& c, bool writes_output);

// What a run needs of its device beyond a valid config (load_config accepts any layout on any
// device, so that --dry-run and triad-estimate plan it): a build with that device and kernels
// for its precision (fp16 on cuda is not built). Throws UserError naming the key and the fix;
// runnable_refusal returns that line, or "" when the run may go.
void check_runnable(const Config& c);
std::string runnable_refusal(const Config& c);

// Whether `dir` holds a checkpoint to load: a save folder with `latest`, or an iteration folder.
bool has_checkpoint(const std::string& dir);
// The step an iteration folder's name holds ("iter_0000042" -> 42), or -1 for any other name.
int checkpoint_folder_step(const std::string& name);
// The iteration folders (iter_NNNNNNN) in `dir`, oldest first; none when it is no folder.
std::vector<std::string> checkpoint_folders(const std::string& dir);
// Whether the run replaces the checkpoints another run left in checkpoint.save: --overwrite,
// neither resuming nor loading from that folder. Its first save removes their iteration
// folders (never before the run has a checkpoint of its own).
bool replaces_saved_checkpoints(const Config& c);
// The checkpoint a run starts from: checkpoint.load; with checkpoint.resume, the one in
// checkpoint.load (or else checkpoint.save) if there is one. Empty: start from the beginning.
std::string checkpoint_to_load(const Config& cfg);

// The ranks ZeRO shards the model states over and gradients are reduced over: data parallel x
// context parallel (Megatron's distributed optimizer with context parallelism); at least 1.
int zero_shards(const ParallelConfig& p);

// Resolves micro × accumulation × dp = global. Throws UserError naming all three and the
// layout when inconsistent.
void resolve_batch_sizes(TrainingConfig& t, int data_parallel_size);
// Same, with the whole layout (p.data_parallel_size is the dp used) and the config file named
// in the messages.
void resolve_batch_sizes(TrainingConfig& t, const ParallelConfig& p, int world_size,
                         const std::string& source = {});

// The resolved config as YAML text (for --dry-run and the run folder).
std::string to_yaml(const Config& c);

}  // namespace triad
