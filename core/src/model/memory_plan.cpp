// The memory estimator. It replays, without allocating, what the engine allocates through its
// counting Device for one rank of each pipeline stage (tensor- and data-parallel rank 0):
//   train/ (the run)      the collectives' scalars (collective_scalars), the executor's send
//                         staging copies (pipeline_send_copies), the export's gathers;
//   ModelState            parameters, gradients, the compute copy (bf16), AdamW's moments (whole,
//                         the data plugin's owned block at stage 1, the owned shard at 2-3); at
//                         stages 2-3 the gradient windows and, at 3, the gathered weights, with
//                         the same open / reduce / complete / gather / release rules;
//   ActivationPool        per stage: `buffers` activation sets (the pipeline schedule's count),
//                         each the largest of the stage's model chunks' sets (buffer indices are
//                         stage-wide: a buffer holds one pass of one chunk at a time);
//   GPT (model.cpp)       per model chunk: recomputation's work set, backward scratch, the
//                         tensor-parallel exchange buffers and the attention plugin's workspace.
// Sizes come from the same ParamSpec, tensor plan, schedule and workspace_size() the engine uses;
// the windows and send copies from running the schedule's instruction streams through the same
// call order as GPT::forward / GPT::backward and the executor. Nothing here is measured.
// Not counted: the plugins' own allocations through the core's allocator service (none of the
// bundled plugins makes any; the engine adds their peak to peak_memory_bytes) and the test-only
// gradient dump.
#include "triad/core/model/memory_plan.hpp"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>

#include "triad/core/device/device.hpp"
#include "triad/core/error.hpp"
#include "triad/core/model/activation_pool.hpp"
#include "triad/core/model/boundary_slots.hpp"
#include "triad/core/model/context_attention.hpp"
#include "triad/core/model/gpt_layout.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/plugins/attention.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/plugins/tensor_backend.hpp"
#include "triad/core/train/engine.hpp"
#include "triad/sdk/pipeline_v2.h"
#include "triad/sdk/transport_v1.h"

namespace triad {

const char* MemoryEstimate::peak_phase() const {
  const size_t s = step();
  if (export_hf > s && export_hf >= setup) return "export_hf";
  if (setup > s) return "setup";
  return "step";
}

size_t parse_bytes(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit;
  for (size_t i = pos; i < text.size(); ++i)
    if (!std::isspace(static_cast<unsigned char>(text[i])))
      unit += char(std::toupper(static_cast<unsigned char>(text[i])));
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1},       {"B", 1},        {"K", 0x1p10},   {"KIB", 0x1p10}, {"KB", 1e3},
      {"M", 0x1p20}, {"MIB", 0x1p20}, {"MB", 1e6},     {"G", 0x1p30},   {"GIB", 0x1p30},
      {"GB", 1e9},   {"T", 0x1p40},   {"TIB", 0x1p40}, {"TB", 1e12}};
  // At least a byte, and below 2^63 bytes (8 EiB): what a size_t holds, with room.
  if (pos > 0 && value > 0)
    for (const auto& [name, scale] : units)
      if (unit == name && value * scale >= 1 && value * scale < 0x1p63)
        return size_t(value * scale);
  throw UserError(what + " '" + text +
                  "' is not a size; give a positive number with an optional unit, from 1 byte to "
                  "8 EiB, e.g. 80GiB, 16G, 512MiB or 40GB");
}

std::string memory_text(double bytes) {
  char buf[48];
  if (bytes >= 1024.0 * 1024.0 * 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

namespace {

constexpr size_t kNone = size_t(-1);

// A count the engine holds in size_t: the product `scale` x the keys' values (each to its power).
struct SizeTerm {
  const char* what;
  long double scale;
  std::vector<std::tuple<const char*, long double, int>> keys;  // key, value, power

  long double bytes() const {
    long double b = scale;
    for (const auto& [key, v, power] : keys) b *= std::pow(v, power);
    return b;
  }
  // The key that makes the term large: the largest factor (value to its power).
  std::pair<const char*, long double> culprit() const {
    const auto* top = &keys.front();
    for (const auto& k : keys)
      if (std::get<2>(k) * std::log(std::get<1>(k)) >
          std::get<2>(*top) * std::log(std::get<1>(*top)))
        top = &k;
    return {std::get<0>(*top), std::get<1>(*top)};
  }
};

}  // namespace

void check_sizes_fit(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const long double C = m.hidden_size, L = m.num_layers, H = m.num_attention_heads,
                    V = m.vocab_size, T = m.seq_length, P = context_length(m),
                    B = std::max(1, cfg.training.micro_batch_size);
  const char* ctx =
      m.max_position_embeddings ? "model.max_position_embeddings" : "model.seq_length";
  // Whole-model counts before any parallelism divides them, with room: every estimate multiplies
  // and adds a few of them, so each must stay far below 2^64 (here 2^60 bytes, an exbibyte).
  const std::vector<SizeTerm> terms = {
      {"parameters, gradients and Adam moments",
       16 * 12,
       {{"model.num_layers", L, 1}, {"model.hidden_size", C, 2}}},
      {"parameters, gradients and Adam moments",
       16,
       {{"model.vocab_size", V, 1}, {"model.hidden_size", C, 1}}},
      {"parameters, gradients and Adam moments", 16, {{ctx, P, 1}, {"model.hidden_size", C, 1}}},
      {"activations",
       64,
       {{"model.num_layers", L, 1},
        {"training.micro_batch_size", B, 1},
        {"model.seq_length", T, 1},
        {"model.hidden_size", C, 1}}},
      {"attention scores (seq_length squared per head)",
       4,
       {{"training.micro_batch_size", B, 1},
        {"model.num_attention_heads", H, 1},
        {"model.seq_length", T, 2}}},
      {"logits",
       8,
       {{"training.micro_batch_size", B, 1},
        {"model.seq_length", T, 1},
        {"model.vocab_size", V, 1}}},
  };
  constexpr long double kLimit = 1ULL << 60;
  for (const SizeTerm& t : terms) {
    if (t.bytes() < kLimit) continue;
    const auto [key, value] = t.culprit();
    char bytes[32];
    std::snprintf(bytes, sizeof bytes, "%.3Lg", t.bytes());
    throw UserError(std::string(key) + " " + std::to_string((long long)value) + " makes the " +
                    t.what + " alone " + bytes +
                    " bytes, past what 64-bit sizes count (an exbibyte at most); give a smaller " +
                    key);
  }
}

namespace {

// The plugins whose answers decide allocations, loaded once for every estimate of one config
// (the fix search re-plans the same layout many times).
struct Plugins {
  PluginLoader loader;
  // The engine gives plugins omp_get_max_threads() threads; the flash plugins' workspaces are
  // per thread.
  CoreServices services{omp_get_max_threads(), nullptr};
  std::unique_ptr<AttentionBackend> attention;
  std::unique_ptr<TensorBackend> tensor;
  std::unique_ptr<PipelineBackend> pipeline;
  TensorPlan plan;

  explicit Plugins(const Config& cfg) {
    check_sizes_fit(cfg);  // every estimate starts here
    auto a = loader.load("attention", cfg.attention.name);
    attention = std::make_unique<AttentionBackend>(
        a, resolve_params(a->descriptor(), cfg.attention.params, cfg.attention.yaml_path),
        services.c_services());
    auto t = loader.load("tensor", cfg.tensor.name);
    tensor = std::make_unique<TensorBackend>(
        t, resolve_params(t->descriptor(), cfg.tensor.params, cfg.tensor.yaml_path),
        services.c_services());
    plan = tensor->plan(cfg.parallel.tensor_model_parallel_size, cfg.parallel.sequence_parallel);
    auto p = loader.load("pipeline", cfg.pipeline.name);
    pipeline = std::make_unique<PipelineBackend>(
        p, resolve_params(p->descriptor(), cfg.pipeline.params, cfg.pipeline.yaml_path),
        services.c_services());
  }
};

// One GPT object of a stage (model.hpp StageChunk): its blocks (indices into spec.layers) and
// whether it starts with the embedding / ends with the head.
struct Chunk {
  int first_block = 0, blocks = 0;
  bool embedding = false, head = false;
};

// ---------------------------------------------------------------------------------------------
// ZeRO-2/3 windows: ModelState's unit rules, counting bytes instead of allocating.
class WindowSim {
 public:
  WindowSim(const std::vector<size_t>& unit_sizes, bool params_sharded, size_t act_bytes)
      : sharded_(params_sharded), act_bytes_(act_bytes), units_(unit_sizes.size()) {
    for (size_t u = 0; u < units_.size(); ++u) units_[u].n = unit_sizes[u];
  }
  // ModelState::grad(): opens the unit's window (after completing its last reduction).
  void grad(size_t u) {
    Unit& w = units_[u];
    if (w.open) return;
    complete(u);
    grads_ += w.n * 4;
    w.open = true;
    note();
  }
  // ModelState::weight(): gathered and waited for on first use (ZeRO-3).
  void weight(size_t u) {
    if (!sharded_ || units_[u].resident) return;
    prefetch(u);
    complete(u);
  }
  void prefetch(size_t u) {
    if (!sharded_ || u == kNone) return;
    Unit& w = units_[u];
    if (w.resident || w.gathering) return;
    params_ += w.n * act_bytes_;
    w.gathered = w.gathering = true;
    note();
  }
  void release(size_t u) {
    if (!sharded_ || u == kNone) return;
    Unit& w = units_[u];
    complete(u);
    if (w.gathered) params_ -= w.n * act_bytes_;
    w.gathered = w.resident = false;
  }
  // ModelState::grads_done(): the window is reduced; one reduction stays in flight.
  void grads_done(size_t u) {
    if (u == kNone) return;
    Unit& w = units_[u];
    if (!w.open) grad(u);
    w.open = false;
    w.reducing = true;
    reducing_.push_back(u);
    while (reducing_.size() > 1) complete(reducing_.front());
  }
  void finish() {
    for (size_t u = 0; u < units_.size(); ++u) complete(u);
  }
  size_t peak = 0, peak_grads = 0, peak_params = 0;

 private:
  struct Unit {
    size_t n = 0;
    bool open = false, reducing = false, gathering = false, resident = false, gathered = false;
  };
  void complete(size_t u) {
    Unit& w = units_[u];
    if (w.reducing) {
      w.reducing = false;
      grads_ -= w.n * 4;
      reducing_.erase(std::find(reducing_.begin(), reducing_.end(), u));
    }
    if (w.gathering) {
      w.gathering = false;
      w.resident = true;
    }
  }
  void note() {
    if (grads_ + params_ > peak) {
      peak = grads_ + params_;
      peak_grads = grads_;
      peak_params = params_;
    }
  }
  bool sharded_;
  size_t act_bytes_;
  std::vector<Unit> units_;
  std::deque<size_t> reducing_;
  size_t grads_ = 0, params_ = 0;
};

// The windows of one stage over `steps` steps of its instruction stream: GPT::forward and
// GPT::backward's prefetch / weight / grad / release order, and the executor's reductions.
struct WindowPeak {
  size_t grads = 0, params = 0;
};
WindowPeak simulate_windows(const ParamSpec& spec, const std::vector<Chunk>& chunks,
                            const PipeSchedule& stream, int pp, bool params_sharded,
                            size_t act_bytes, int steps) {
  const std::vector<ArenaRange> ranges = arena_units(spec);  // the engine's units
  auto unit_of = [&](const ArenaRange& r) {
    if (r.size() == 0) return kNone;
    for (size_t u = 0; u < ranges.size(); ++u)
      if (ranges[u].begin == r.begin) return u;
    return kNone;
  };
  std::vector<size_t> sizes;
  for (const ArenaRange& r : ranges) sizes.push_back(r.size());
  WindowSim w(sizes, params_sharded, act_bytes);
  const size_t E = unit_of(spec.embedding), H = unit_of(spec.head);
  const size_t wte = E != kNone ? E : H;  // where the layers read the tied word embedding
  // A pipeline's tied embedding is reduced over the first and last stage first: its unit's
  // window stays open until REDUCE_TIED_GRADS.
  const bool tied_split = pp > 1;
  const size_t tied = spec.placement.has_embedding ? E : H;
  auto ready = [&](size_t u) {
    if (!(tied_split && u == tied)) w.grads_done(u);
  };
  auto block = [&](const Chunk& c, int i) {
    return unit_of(spec.layers[size_t(c.first_block + i)].range);
  };
  auto forward = [&](const Chunk& c) {
    const int nl = c.blocks;
    if (c.embedding) {
      w.prefetch(E);
      if (nl) w.prefetch(block(c, 0));
      w.weight(E);
      if (!c.head) w.release(E);
    }
    for (int i = 0; i < nl; ++i) {
      w.prefetch(i + 1 < nl ? block(c, i + 1) : H);
      w.weight(block(c, i));
      w.release(block(c, i));
    }
    if (!c.head) return;
    w.weight(H);
    w.weight(wte);
    w.release(H);
    w.release(E);
  };
  // GPT::backward (whole) or backward_input's half, which reads the weights and writes the
  // layernorms' and the embedding's gradients (the LM head's and the GEMMs' wait for
  // backward_weight, and so do the reports).
  auto backward = [&](const Chunk& c, bool whole) {
    const auto done = [&](size_t u) {
      if (whole) ready(u);
    };
    const int nl = c.blocks;
    if (nl) w.prefetch(block(c, nl - 1));
    if (c.head) {
      w.prefetch(H);
      w.prefetch(E);
      w.weight(wte);
      if (whole) w.grad(wte);
      w.weight(H);
      w.grad(H);
      w.release(H);
      w.release(E);
      done(H);
    }
    for (int i = nl; i-- > 0;) {
      if (i > 0) w.prefetch(block(c, i - 1));
      w.weight(block(c, i));
      w.grad(block(c, i));
      w.release(block(c, i));
      done(block(c, i));
    }
    if (c.embedding) {
      w.grad(E);
      done(E);
    }
  };
  auto backward_weight = [&](const Chunk& c) {
    if (c.head) {
      w.grad(wte);
      w.grad(H);
      ready(H);
    }
    for (int i = c.blocks; i-- > 0;) {
      w.grad(block(c, i));
      ready(block(c, i));
    }
    if (c.embedding) ready(E);
  };
  for (int s = 0; s < steps; ++s)
    for (const triad_pipe_instr_v1& in : stream.instrs) {
      switch (in.op) {
        case TRIAD_PIPE_FORWARD:
          forward(chunks[size_t(in.chunk)]);
          break;
        case TRIAD_PIPE_BACKWARD:
        case TRIAD_PIPE_BACKWARD_INPUT:
          backward(chunks[size_t(in.chunk)], in.op == TRIAD_PIPE_BACKWARD);
          break;
        case TRIAD_PIPE_BACKWARD_WEIGHT:
          backward_weight(chunks[size_t(in.chunk)]);
          break;
        case TRIAD_PIPE_REDUCE_TIED_GRADS:
          if (tied_split && wte != kNone) {
            w.grad(wte);  // the all-reduce over the first and last stage writes it
            w.grads_done(tied);
          }
          break;
        case TRIAD_PIPE_REDUCE_GRADS:
          w.finish();
          break;
        default:
          break;
      }
    }
  return {w.peak_grads, w.peak_params};
}

// A message between stages: (receiving stage, kind 0 activation / 1 gradient, micro-batch, the
// receiver's chunk), from either end's instruction.
using MsgKey = std::tuple<int, int, int, int>;
MsgKey recv_key(int s, const triad_pipe_instr_v1& in) {
  return MsgKey{s, in.op == TRIAD_PIPE_RECV_GRAD, in.micro_batch, in.chunk};
}
MsgKey send_key(int pp, int s, const triad_pipe_instr_v1& in) {
  if (in.op == TRIAD_PIPE_SEND_ACTIVATION)  // PipelineExecutor::next_stage
    return MsgKey{(s + 1) % pp, 0, in.micro_batch, in.chunk + (s == pp - 1)};
  return MsgKey{(s + pp - 1) % pp, 1, in.micro_batch, in.chunk - (s == 0)};  // prev_stage
}
bool is_send(const triad_pipe_instr_v1& in) {
  return in.op == TRIAD_PIPE_SEND_ACTIVATION || in.op == TRIAD_PIPE_SEND_GRAD;
}
bool is_recv(const triad_pipe_instr_v1& in) {
  return in.op == TRIAD_PIPE_RECV_ACTIVATION || in.op == TRIAD_PIPE_RECV_GRAD;
}
std::string describe(const MsgKey& k) {
  return std::string(std::get<1>(k) ? "the gradient" : "the activation") + " of micro-batch " +
         std::to_string(std::get<2>(k)) + " (chunk " + std::to_string(std::get<3>(k)) + ")";
}
}  // namespace

std::string pipeline_order_mismatch(const std::vector<PipeSchedule>& streams) {
  const int pp = int(streams.size());
  // Per (sender, receiver): the messages in the order the sender sends them, and in the order
  // the receiver posts their receives.
  std::map<std::pair<int, int>, std::vector<MsgKey>> sent, received;
  for (int s = 0; s < pp; ++s)
    for (const triad_pipe_instr_v1& in : streams[size_t(s)].instrs) {
      if (is_send(in)) {
        const MsgKey k = send_key(pp, s, in);
        sent[{s, std::get<0>(k)}].push_back(k);
      } else if (is_recv(in)) {
        const int from = in.op == TRIAD_PIPE_RECV_GRAD ? (s + 1) % pp : (s + pp - 1) % pp;
        received[{from, s}].push_back(recv_key(s, in));
      }
    }
  for (const auto& [pair, out] : sent) {
    const std::vector<MsgKey>& in = received[pair];
    for (size_t i = 0; i < std::min(out.size(), in.size()); ++i)
      if (out[i] != in[i])
        return "stage " + std::to_string(pair.first) + " sends " + describe(out[i]) +
               " as its message " + std::to_string(i + 1) + " to stage " +
               std::to_string(pair.second) + ", which receives " + describe(in[i]) + " there";
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Pipeline send staging. The executor copies what it sends into one of a fixed set of staging
// buffers, made at its first stream, and takes a copy back once its send has finished; when all
// are in flight it waits for one. That wait must never need the peer to do anything more, or two
// stages could wait on each other: so the set is as large as the most sends a stage can have in
// flight whose receive it cannot yet know the peer has posted. A stage knows that only from a
// message the peer sent after posting it (vector clocks over the streams: a blocking receive
// merges the sender's clock), whatever the machine's timing; a send known posted finishes with
// the transport's progress alone. REDUCE_GRADS waits for every send. The count depends on the
// streams only, so memory is the same on every run: GPipe's stages m copies, 1F1B's first stage
// p, its last two; one stage none.
std::vector<int> pipeline_send_copies(const std::vector<PipeSchedule>& streams) {
  const int pp = int(streams.size());
  using Key = MsgKey;
  using Clock = std::vector<int>;  // per stage: how many of its instructions are known reached
  std::map<Key, Clock> sent;       // each message with its sender's clock
  std::map<Key, int> posted;       // the receiver's own clock when it posted the receive
  struct Stage {
    size_t pc = 0;
    Clock clock;
    std::vector<Key> unknown;  // sends in flight not yet known posted
    int copies = 0;
  };
  std::vector<Stage> st(static_cast<size_t>(pp));
  for (Stage& g : st) g.clock.assign(size_t(pp), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < pp; ++s) {
      Stage& g = st[size_t(s)];
      const auto& instrs = streams[size_t(s)].instrs;
      while (g.pc < instrs.size()) {
        const triad_pipe_instr_v1& in = instrs[g.pc];
        const bool receive = is_recv(in);
        g.clock[size_t(s)] = int(g.pc) + 1;
        if (receive) {
          const Key k = recv_key(s, in);
          posted.emplace(k, g.clock[size_t(s)]);
          const auto it = sent.find(k);
          if (it == sent.end()) break;  // blocked until the sender gets there
          for (int t = 0; t < pp; ++t)
            g.clock[size_t(t)] = std::max(g.clock[size_t(t)], it->second[size_t(t)]);
        } else if (is_send(in)) {
          std::erase_if(g.unknown, [&](const Key& k) {
            const auto it = posted.find(k);
            return it != posted.end() && g.clock[size_t(std::get<0>(k))] >= it->second;
          });
          const Key k = send_key(pp, s, in);
          sent.emplace(k, g.clock);
          g.unknown.push_back(k);
          g.copies = std::max(g.copies, int(g.unknown.size()));
        } else if (in.op == TRIAD_PIPE_REDUCE_GRADS) {
          g.unknown.clear();
        }
        ++g.pc;
        moved = true;
      }
    }
  }
  std::vector<int> copies;
  for (const Stage& g : st) copies.push_back(g.copies);
  return copies;
}

size_t collective_scalars(int stages) {
  return 2 * (stages > 1 ? 3 * size_t(stages) : 2);
}

namespace {

// ---------------------------------------------------------------------------------------------
// The estimate of one layout, with the plugins already loaded.

// One micro-batch's activation sizes under the layout (model.cpp GPT::setup), in bytes.
struct ActShapes {
  size_t a = 4, cb = 0;  // bytes of an activation element; of the compute copy per weight
  bool full = false, selective = false, sp = false, gather_in = false, vocab_parallel_ce = false;
  size_t T = 0, C = 0, BT = 0, BTs = 0;  // BT tokens of a micro-batch, BTs of token-split regions
  size_t set_per_block = 0;              // what a set keeps of each block, its input included
  size_t recompute_work = 0;             // the recomputation's shared work set (per chunk)
  size_t scratch = 0;                    // backward scratch (per chunk)
  size_t exchange = 0;                   // the tensor-parallel exchange buffers (per chunk)
  size_t context = 0;                    // context attention's exchange buffers (per chunk)
  size_t positions = 0;  // the embedding chunk's rows of the learned position table, and their
                         // gradient, for this rank's tokens under context parallelism
  size_t workspace = 0;  // the attention plugin's (per chunk)
  TensorShards shards;   // the parts the plan splits
};

// Context attention's workspace per model chunk, in bytes, as ContextAttention
// (core/include/triad/core/model/context_attention.hpp) allocates it once for the largest
// micro-batch: u = one (B, H/tp, T/cp, D) tensor of this rank's tokens (`tokens_channels` =
// B·T/cp · C/tp elements, in the activation dtype: fp32 today), `tokens_heads` = B·T/cp · H/tp
// (one lse). Per chunk, not per block: the blocks of a chunk take turns.
//  - ulysses: 10u: head-split q, k, v, out, dout, dq, dk, dv (8u; nothing head-split is kept
//    per block, so the backward all-to-alls q, k, v and out again) and the all-to-all's send and
//    receive staging (2u).
//  - ring: 9.5u + one lse: the key/value block in use and the one arriving (4u), the dk/dv block
//    and the one arriving (4u), a chunk pair's partial output or its dq, dk, dv (1.5u), and the
//    lse of a pair / of both query chunks.
size_t context_buffers(size_t cp, bool ulysses, size_t tokens_channels, size_t tokens_heads,
                       size_t a) {
  if (cp <= 1) return 0;
  const size_t u = tokens_channels * a;
  if (ulysses) return 10 * u;
  return 9 * u + u / 2 + context_lse_bytes(tokens_heads);
}

ActShapes act_shapes(const Config& cfg, const Plugins& plugins) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& par = cfg.parallel;
  const int tp = par.tensor_model_parallel_size, micro = cfg.training.micro_batch_size;
  const Recompute recompute = recompute_of(cfg.training);
  // fp16's compute copy is as large as bf16's (the loss scaler keeps a few scalars).
  const DType act = precision_dtype(cfg.precision);
  const TensorPlan& plan = plugins.plan;
  ActShapes s;
  s.full = recompute == Recompute::full;
  s.selective = recompute == Recompute::selective;
  s.a = dtype_bytes(act);
  s.cb = act == DType::f32 ? 0 : s.a;
  s.sp = tp > 1 && par.sequence_parallel;
  Placement place;
  place.tp_size = tp;
  place.split = plan.split;
  s.shards = tensor_shards(place);
  s.gather_in =
      s.sp || plan.boundary[TRIAD_TENSOR_BOUNDARY_COLUMN_INPUT].forward == TRIAD_TENSOR_ALL_GATHER;
  s.vocab_parallel_ce = s.shards.vocab > 1 && plan.boundary[TRIAD_TENSOR_BOUNDARY_LOGITS].forward !=
                                                  TRIAD_TENSOR_IDENTITY;
  const size_t a = s.a;
  const size_t cp = size_t(par.context_parallel_size);
  s.T = size_t(m.seq_length);
  s.C = size_t(m.hidden_size);
  // Context parallelism splits every sequence over the cp ranks from the embedding to the loss:
  // each activation below holds this rank's T / cp tokens of each sequence.
  s.BT = size_t(micro) * s.T / cp;
  s.BTs = s.sp ? s.BT / size_t(tp) : s.BT;
  const size_t BT = s.BT, BTs = s.BTs, C = s.C;
  const size_t Cl = C / size_t(s.shards.attention), Fl = 4 * C / size_t(s.shards.mlp);
  const size_t Hl = size_t(m.num_attention_heads / s.shards.attention);
  // alloc_block_acts: one block's activations; core_acts the attention core's output and lse
  // among them (what selective recomputation keeps one of per model chunk, in work_).
  const size_t core_acts = BT * Cl * a /* attn_out */ + BT * Hl * 4 /* lse */;
  const size_t block_acts = BTs * C * a * 3 /* ln1, res_mid, ln2 */ + 4 * BTs * 4 /* stats */ +
                            BT * 3 * Cl * a /* qkv */ + core_acts +
                            2 * BT * Fl * a /* mlp_pre, mlp_act */;
  // The same pieces cut from an ActivationPool region, each on ActivationPool::kAlign.
  constexpr auto al = ActivationPool::aligned;
  const size_t core_set = al(BT * Cl * a) + al(BT * Hl * 4);
  const size_t block_set =
      3 * al(BTs * C * a) + 4 * al(BTs * 4) + al(BT * 3 * Cl * a) + core_set + 2 * al(BT * Fl * a);
  s.set_per_block = al(BTs * C * a) /* res_in */ + (s.full        ? 0
                                                    : s.selective ? block_set - core_set
                                                                  : block_set);
  s.recompute_work = s.full ? block_acts + BTs * C * a : s.selective ? core_acts : 0;
  // Backward scratch: dres, dln, dqkv, dattn_out, dmlp_pre, dmlp_act.
  s.scratch = 2 * BTs * C * a + BT * 4 * Cl * a + 2 * BT * Fl * a;
  // row_partial_, drow_full_, dln_full_, grad_pack_; col_full_ where column inputs are gathered
  // (the layernorm outputs gathered for each use, not kept gathered per block).
  s.exchange = (tp > 1 ? 3 * BT * C * a + 6 * C * 4 : 0) + (s.gather_in ? BT * C * a : 0);
  const bool ulysses = cp > 1 && par.context_parallel_method == "ulysses";
  s.context = context_buffers(cp, ulysses, BT * Cl, BT * Hl, a);
  // GPT::setup: wpe_own_ (activation dtype) and dwpe_own_ (fp32), T / cp rows each.
  if (cp > 1 && m.position_embedding != "rope") s.positions = s.T / cp * C * (a + 4);
  // The attention plugin's shape: without context parallelism the whole sequence; Ulysses runs
  // it on the whole sequence with Hl / cp heads, ring on pairs of chunks of T / (2 cp) queries
  // and keys (the same shape for every pair).
  const DLDevice dev{cfg.device == "cuda" ? kDLCUDA : kDLCPU, 0};
  const bool ring = cp > 1 && !ulysses;
  const triad_attention_shape_v1 shape{micro,
                                       int(ulysses ? Hl / cp : Hl),
                                       int(ring ? s.T / (2 * cp) : s.T),
                                       m.hidden_size / m.num_attention_heads,
                                       1,
                                       dl_dtype(act),
                                       dev};
  size_t f = 0, b = 0;
  plugins.attention->workspace_size(shape, &f, &b);
  s.workspace = std::max(f, b);
  return s;
}

// A pipeline stage's tensors (tensor rank 0) and its model chunks.
struct StagePlan {
  ParamSpec spec;
  std::vector<Chunk> chunks;
};

std::vector<StagePlan> stage_plans(const Config& cfg, const Plugins& plugins) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& par = cfg.parallel;
  const int tp = par.tensor_model_parallel_size, pp = par.pipeline_model_parallel_size;
  const int v = par.virtual_pipeline_model_parallel_size;
  const std::vector<int> layers = pipeline_partition(cfg);
  const int chunk_layers = m.num_layers / (pp * v);
  std::vector<StagePlan> out;
  int first = 0;
  for (int st = 0; st < pp; ++st) {
    Placement place;
    place.tp_size = tp;
    place.make_vocab_size_divisible_by = m.make_vocab_size_divisible_by;
    place.split = plugins.plan.split;
    place.first_layer = first;
    place.num_layers = layers[size_t(st)];
    place.has_embedding = st == 0;
    place.has_head = st == pp - 1;
    if (v > 1)
      for (int c = 0; c < v; ++c)
        place.chunks.push_back({(c * pp + st) * chunk_layers, chunk_layers});
    first += layers[size_t(st)];
    StagePlan plan;
    plan.spec = build_param_spec(m, place);
    if (v > 1) {
      for (int c = 0; c < v; ++c)
        plan.chunks.push_back(
            {c * chunk_layers, chunk_layers, st == 0 && c == 0, st == pp - 1 && c == v - 1});
    } else {
      plan.chunks.push_back({0, int(plan.spec.layers.size()), st == 0, st == pp - 1});
    }
    out.push_back(std::move(plan));
  }
  return out;
}

// The ZeRO paper's model states (Rajbhandari et al. 2020, fp32 here) of P elements over N
// data-parallel ranks, with cb bytes of compute copy per element.
void set_paper_model_states(MemoryEstimate& e, int zero_stage, double P, double N, size_t cb) {
  const double c = double(cb);
  switch (zero_stage) {
    case 0:
      e.paper_model_states = 16 * P + c * P;
      e.paper_formula = cb ? "18Ψ" : "16Ψ";
      break;
    case 1:
      e.paper_model_states = 8 * P + 8 * P / N + c * P;
      e.paper_formula = cb ? "10Ψ+8Ψ/N" : "8Ψ+8Ψ/N";
      break;
    case 2:
      e.paper_model_states = 4 * P + 12 * P / N + c * P;
      e.paper_formula = cb ? "6Ψ+12Ψ/N" : "4Ψ+12Ψ/N";
      break;
    default:
      e.paper_model_states = (16 + c) * P / N;
      e.paper_formula = cb ? "18Ψ/N" : "16Ψ/N";
      break;
  }
}

// The model states of a rank of a stage (ModelState, and the data plugin's ownership for
// rank 0): parameters, gradients, AdamW's moments or the offload host's copies.
void set_model_states(MemoryEstimate& e, const Config& cfg, const ParamSpec& spec, int zero_stage,
                      bool distributed, size_t cb, size_t* shard_out) {
  const int dp = zero_shards(cfg.parallel);  // the data plugin's group: DP x CP
  const bool part_grads = distributed && zero_stage >= 2;
  const bool part_params = distributed && zero_stage >= 3;
  const size_t psi = spec.total;
  size_t shard = 0;
  std::vector<size_t> sizes;
  if (spec.embedding.size()) sizes.push_back(spec.embedding.size());
  for (const LayerRange& l : spec.layers) sizes.push_back(l.range.size());
  if (spec.head.size()) sizes.push_back(spec.head.size());
  for (size_t n : sizes) {
    uint64_t off = 0, cnt = 0;
    triad_transport_block(n, dp, 0, &off, &cnt);
    shard += cnt;
  }
  // Stage 1 steps one block of the arena, or with reduce_scatter (the zero plugin's
  // TRIAD_DATA_PARTITION_BY_UNIT) the slice of each unit, as stage 2 does.
  const bool by_unit = zero_stage == 1 && cfg.zero_optimization.reduce_scatter;
  uint64_t block_off = 0, block = psi;
  if (distributed && zero_stage == 1) triad_transport_block(psi, dp, 0, &block_off, &block);
  e.params = part_params ? (4 + cb) * shard : (4 + cb) * psi;
  e.grads = part_grads ? 4 * shard : 4 * psi;
  // elements this rank steps
  const size_t opt = part_grads || (distributed && by_unit) ? shard : size_t(block);
  // ZeRO-Offload moves the moments to the host device, beside an fp32 master copy of the
  // weights and the gradients it steps with (ModelState::offload_optimizer).
  // (Stage 1 and above: stage 0 has no shard to offload and is refused with it.)
  const bool offload = cfg.zero_optimization.offload_optimizer.device == "cpu" && zero_stage >= 1;
  e.optimizer = offload ? 0 : 8 * opt;
  e.host = offload ? 16 * opt : 0;
  *shard_out = shard;
}

// A rank of one stage: its activations, workspaces, sends, model states, windows, the set-up's
// and the export's peaks.
MemoryEstimate stage_estimate(const Config& cfg, int world_size, int zero_stage, const ActShapes& s,
                              const StagePlan& plan, const PipeSchedule& stream, int send_copies) {
  const int tp = cfg.parallel.tensor_model_parallel_size;
  const int pp = cfg.parallel.pipeline_model_parallel_size;
  const int dp = zero_shards(cfg.parallel);
  const bool distributed = world_size > 1;
  const bool part_params = distributed && zero_stage >= 3;
  const ParamSpec& spec = plan.spec;
  const size_t a = s.a, C = s.C, BT = s.BT, BTs = s.BTs;
  MemoryEstimate e;
  e.zero_stage = zero_stage;
  const size_t psi = spec.total;
  e.elements = psi;
  // Activations: the stage's ActivationPool, `buffers` regions each as large as the largest of
  // its chunks' sets (make_act_set, its pieces each on ActivationPool::kAlign), as every chunk's
  // pass takes a region by its stage-wide buffer index; the pool's boundary slots, as many as
  // the stream's passes hold at once (boundary_slots, as the engine colours them); per chunk
  // recomputation's work set and the backward scratch.
  constexpr auto al = ActivationPool::aligned;
  size_t acts = 0, largest_set = 0;
  std::vector<BoundaryUse> use;
  for (const Chunk& c : plan.chunks) {
    const size_t nl = size_t(c.blocks), io = al(BTs * C * a);
    const bool pipelined = !(c.embedding && c.head);
    use.push_back({pipelined, c.embedding, c.head, !s.full && nl > 0});
    size_t set = nl * s.set_per_block + (pipelined ? 0 : io) /* res_out */ + (nl == 0 ? io : 0) +
                 2 * al(BT * 4) /* token ids */;
    if (c.head) {
      const size_t Vl = size_t(spec.padded_vocab_size / s.shards.vocab);
      set += io + (s.gather_in ? al(BT * C * a) : 0) + 2 * al(BTs * 4) +
             al(BT * Vl * a) /* logits */ + 2 * al(BT * 4) +
             (s.vocab_parallel_ce ? al(BT * 4) + al(2 * BT * 4) : 0);
    }
    largest_set = std::max(largest_set, set);
    acts += s.recompute_work + s.scratch;
    e.workspace += s.workspace;
    e.tensor_exchange += s.exchange;
    e.context_exchange += s.context + (c.embedding ? s.positions : 0);
  }
  const size_t io = BTs * C * a;  // one stage boundary (GPT::stage_bytes)
  acts +=
      size_t(stream.buffers) * largest_set + size_t(boundary_slots(stream.instrs, use).slots) * io;
  e.activations = acts;
  e.pipeline_sends = size_t(send_copies) * io;
  // The collectives' scalars, allocated with the communicators.
  e.scalars = distributed ? collective_scalars(pp) * 4 : 0;
  size_t shard = 0;
  set_model_states(e, cfg, spec, zero_stage, distributed, s.cb, &shard);
  if (distributed && zero_stage >= 2) {
    const WindowPeak wp = simulate_windows(spec, plan.chunks, stream, pp, part_params, a, 2);
    e.grad_windows = wp.grads;
    e.param_windows = wp.params;
  }
  // Before the step: ModelState's constructor holds the whole weights (and their compute
  // copy; the gradient arena is deferred to shard_optimizer / partition, which allocate what
  // the stage keeps) beside every GPT allocation; at stage 3 ModelState::partition briefly
  // holds the whole weights, their shard copy and the gradient shard. (With offload the
  // moments are allocated on the host device from the start.)
  const size_t model_side = acts + e.workspace + e.tensor_exchange + e.context_exchange + e.scalars;
  e.setup = (4 + s.cb) * psi + model_side;
  if (part_params) e.setup = std::max(e.setup, (4 + s.cb) * psi + 8 * shard + model_side);
  if (!cfg.output.export_hf.empty()) {
    // ModelState::whole_params, then whole_model's tensor-parallel and pipeline gathers.
    const size_t F = gpt_layout(cfg.model).total;
    const size_t end = e.model_states() + acts + e.workspace + e.tensor_exchange +
                       e.context_exchange + e.pipeline_sends + e.scalars;
    e.export_hf =
        end + 4 * psi + std::max(tp > 1 ? 4 * psi * size_t(tp) : 0, pp > 1 ? 4 * F : size_t(0));
  }
  set_paper_model_states(e, zero_stage, double(psi), double(distributed ? dp : 1), s.cb);
  return e;
}

std::vector<MemoryEstimate> estimate(const Config& cfg, int world_size, int zero_stage,
                                     const Plugins& plugins) {
  const int pp = cfg.parallel.pipeline_model_parallel_size;
  const ActShapes shapes = act_shapes(cfg, plugins);
  const std::vector<PipeSchedule> streams =
      plugins.pipeline->schedules(pp, cfg.training.gradient_accumulation_steps,
                                  cfg.parallel.virtual_pipeline_model_parallel_size);
  const std::vector<StagePlan> plans = stage_plans(cfg, plugins);
  const std::vector<int> copies = pipeline_send_copies(streams);
  std::vector<MemoryEstimate> out;
  for (int st = 0; st < pp; ++st)
    out.push_back(stage_estimate(cfg, world_size, zero_stage, shapes, plans[size_t(st)],
                                 streams[size_t(st)], copies[size_t(st)]));
  return out;
}

// A candidate change for the fix search.
struct Candidate {
  int stage;
  int micro;
  Recompute recompute;
};

// Recomputation's cost, cheapest first: selective reruns the attention core, full whole blocks.
int recompute_cost(Recompute r) {
  return r == Recompute::none ? 0 : r == Recompute::selective ? 1 : 2;
}

const char* granularity_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

}  // namespace

std::vector<MemoryEstimate> estimate_memory(const Config& cfg, int world_size,
                                            std::optional<int> zero_stage) {
  const Plugins plugins(cfg);
  return estimate(cfg, world_size, zero_stage.value_or(cfg.zero_optimization.stage), plugins);
}

std::array<int32_t, TRIAD_TENSOR_ROLE_COUNT> planned_splits(const Config& cfg) {
  return Plugins(cfg).plan.split;
}

std::array<std::vector<MemoryEstimate>, 4> estimate_memory_zero_stages(const Config& cfg,
                                                                       int world_size) {
  const Plugins plugins(cfg);
  std::array<std::vector<MemoryEstimate>, 4> all;
  for (int s = 0; s < 4; ++s) all[size_t(s)] = estimate(cfg, world_size, s, plugins);
  return all;
}

size_t peak_per_rank(const std::vector<MemoryEstimate>& stages, bool with_host) {
  size_t p = 0;
  for (const MemoryEstimate& e : stages) p = std::max(p, e.total() + (with_host ? e.host : 0));
  return p;
}

std::optional<MemoryFix> cheapest_memory_fix(const Config& cfg, int world_size,
                                             size_t limit_bytes) {
  const Plugins plugins(cfg);
  const int s0 = cfg.zero_optimization.stage, b0 = cfg.training.micro_batch_size;
  const Recompute c0 = recompute_of(cfg.training);
  const int dp = std::max(1, cfg.parallel.data_parallel_size);
  const int per_rank = cfg.training.global_batch_size / dp;  // micro x accumulation
  // The choices of each knob, cheapest first: ZeRO stages above the configured one (only where
  // there is a data-parallel group to partition over), smaller micro-batches that divide the
  // per-rank batch (largest first), recomputation (selective, then full).
  std::vector<int> stages{s0}, micros{b0};
  std::vector<Recompute> ckpts{c0};
  if (world_size > 1 && zero_shards(cfg.parallel) > 1)
    for (int s = s0 + 1; s <= 3; ++s) stages.push_back(s);
  // The divisors of per_rank below b0 in O(sqrt(per_rank)) steps, not b0: a micro-batch of
  // two billion is answered at once.
  std::vector<int> divisors;
  // A micro-batch whose accumulation the config would refuse is no fix (and its schedule of
  // millions of micro-batches would take minutes to estimate).
  for (int d = 1; int64_t(d) * d <= per_rank; ++d)
    if (per_rank % d == 0)
      for (int q : {d, per_rank / d})
        if (q < b0 && per_rank / q <= kMaxGradientAccumulation) divisors.push_back(q);
  std::sort(divisors.begin(), divisors.end(), std::greater<>());
  divisors.erase(std::unique(divisors.begin(), divisors.end()), divisors.end());
  micros.insert(micros.end(), divisors.begin(), divisors.end());
  if (c0 == Recompute::none) ckpts.push_back(Recompute::selective);
  if (c0 != Recompute::full) ckpts.push_back(Recompute::full);
  // One knob changed, then two, then all three; among those, the knobs in that order (stage,
  // micro-batch, checkpointing; stage + micro-batch, stage + checkpointing, micro-batch +
  // checkpointing), then the lower stage, the larger micro-batch and the cheaper recomputation.
  std::vector<Candidate> order;
  for (Recompute ck : ckpts)
    for (int b : micros)
      for (int s : stages)
        if (s != s0 || b != b0 || ck != c0) order.push_back({s, b, ck});
  const auto key = [&](const Candidate& c) {
    const int mask = (c.stage != s0) * 1 + (c.micro != b0) * 2 + (c.recompute != c0) * 4;
    const int changed = (mask & 1) + ((mask >> 1) & 1) + ((mask >> 2) & 1);
    return std::tuple{changed, mask, c.stage, -c.micro, recompute_cost(c.recompute)};
  };
  std::sort(order.begin(), order.end(),
            [&](const Candidate& x, const Candidate& y) { return key(x) < key(y); });
  for (const Candidate& c : order) {
    Config alt = cfg;
    alt.zero_optimization.stage = c.stage;
    alt.training.micro_batch_size = c.micro;
    alt.training.gradient_accumulation_steps = per_rank / c.micro;
    alt.training.recompute_granularity = granularity_name(c.recompute);
    alt.training.checkpoint_activations = c.recompute == Recompute::full;
    alt.training.recompute_activations = c.recompute == Recompute::selective;
    size_t bytes = 0;
    try {
      bytes = peak_per_rank(estimate(alt, world_size, c.stage, plugins), alt.device == "cpu");
    } catch (const UserError&) {
      continue;  // e.g. a schedule that cannot take that many micro-batches
    }
    if (bytes > limit_bytes) continue;
    MemoryFix fix;
    fix.bytes = bytes;
    auto add = [&](const std::string& set, const std::string& text) {
      fix.sets.push_back(set);
      fix.text += (fix.text.empty() ? "" : " + ") + text;
    };
    if (c.stage != s0)
      add("zero_optimization.stage=" + std::to_string(c.stage),
          "ZeRO stage " + std::to_string(c.stage));
    if (c.micro != b0) {
      add("training.micro_batch_size=" + std::to_string(c.micro),
          "micro-batch " + std::to_string(c.micro) + " x accumulation " +
              std::to_string(per_rank / c.micro) + " (the same global batch)");
      fix.sets.push_back("training.gradient_accumulation_steps=" +
                         std::to_string(per_rank / c.micro));
    }
    if (c.recompute != c0) {
      add(std::string("training.recompute_granularity=") + granularity_name(c.recompute),
          c.recompute == Recompute::full ? "activation checkpointing (full recomputation)"
                                         : "selective recomputation (the attention core)");
      // The shorthand of the configured granularity would contradict the new one.
      if (c0 == Recompute::selective) fix.sets.push_back("training.recompute_activations=false");
    }
    return fix;
  }
  return std::nullopt;
}

std::string memory_refusal(const Config& cfg, int world_size, size_t limit_bytes) {
  const std::vector<MemoryEstimate> est = estimate_memory(cfg, world_size);
  // A CPU run's offloaded optimizer state lives in the same memory.
  const bool with_host = cfg.device == "cpu";
  const size_t need = peak_per_rank(est, with_host);
  if (need <= limit_bytes) return "";
  size_t worst = 0;
  for (size_t s = 0; s < est.size(); ++s)
    if (peak_per_rank({est[s]}, with_host) > peak_per_rank({est[worst]}, with_host)) worst = s;
  const MemoryEstimate& e = est[worst];
  std::ostringstream msg;
  msg << "the run needs an estimated " << memory_text(double(need)) << " per rank";
  if (est.size() > 1) msg << " (pipeline stage " << worst << ")";
  msg << " but " << memory_text(double(limit_bytes)) << " is available: ZeRO stage "
      << cfg.zero_optimization.stage << " keeps parameters " << memory_text(double(e.params))
      << ", gradients " << memory_text(double(e.grads)) << ", optimizer states "
      << memory_text(double(e.optimizer)) << ", activations "
      << memory_text(double(e.activations + e.workspace)) << ", buffers "
      << memory_text(double(e.buffers()));
  if (e.host)
    msg << (with_host ? " and " : ", beside ") << memory_text(double(e.host))
        << " of offloaded optimizer state on the host";
  if (std::string(e.peak_phase()) != "step")
    msg << " (its peak is at " << e.peak_phase() << ", " << memory_text(double(e.total())) << ")";
  const std::optional<MemoryFix> fix = cheapest_memory_fix(cfg, world_size, limit_bytes);
  if (fix) {
    msg << "; the cheapest change that fits: " << fix->text << ", "
        << memory_text(double(fix->bytes)) << " per rank:";
    for (const std::string& set : fix->sets) msg << " --set " << set;
  } else {
    msg << "; no higher ZeRO stage, smaller micro-batch or activation checkpointing fits: use "
           "more ranks (tensor or pipeline parallelism) or a smaller model";
  }
  return msg.str();
}

void check_memory_fits(const Config& cfg, int world_size, size_t limit_bytes) {
  if (std::string refusal = memory_refusal(cfg, world_size, limit_bytes); !refusal.empty())
    throw UserError(refusal);
}

namespace {

// The first number in a file, or nullopt.
std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
    return std::nullopt;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

size_t host_memory_available(std::string* how) {
  size_t avail = 0;
  {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    uint64_t kb = 0;
    while (f >> key >> kb) {
      std::getline(f, unit);
      if (key == "MemAvailable:") {
        avail = size_t(kb) * 1024;
        break;
      }
    }
  }
  if (how) *how = "MemAvailable";
  // The memory cgroup: this process's (from /proc/self/cgroup), v2 then v1, also at the mount
  // root (a cgroup namespace shows its own group there).
  std::string v2 = "/", v1 = "/";
  {
    std::ifstream f("/proc/self/cgroup");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
      const size_t p = line.find(":memory:");
      if (p != std::string::npos) v1 = line.substr(p + 8);
    }
  }
  const std::vector<std::pair<std::string, std::string>> dirs = {
      {"/sys/fs/cgroup" + v2, "v2"},
      {"/sys/fs/cgroup", "v2"},
      {"/sys/fs/cgroup/memory" + v1, "v1"},
      {"/sys/fs/cgroup/memory", "v1"}};
  for (const auto& [dir, kind] : dirs) {
    const std::optional<uint64_t> limit =
        read_number(dir + (kind == "v2" ? "/memory.max" : "/memory.limit_in_bytes"));
    const std::optional<uint64_t> used =
        read_number(dir + (kind == "v2" ? "/memory.current" : "/memory.usage_in_bytes"));
    if (!limit) continue;
    if (*limit >= (uint64_t(1) << 60)) break;  // unlimited
    const size_t left = size_t(*limit > used.value_or(0) ? *limit - used.value_or(0) : 0);
    if (avail == 0 || left < avail) {
      avail = left;
      if (how) *how = "cgroup limit";
    }
    break;
  }
  return avail;
}

}  // namespace triad
