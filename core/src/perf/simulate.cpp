#include "triad/core/perf/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "triad/core/error.hpp"
#include "triad/core/model/memory_plan.hpp"
#include "triad/core/model/param_spec.hpp"
#include "triad/core/plugins/pipeline_backend.hpp"
#include "triad/core/plugins/plugin_loader.hpp"
#include "triad/core/plugins/services.hpp"
#include "triad/core/train/engine.hpp"

namespace triad {

double collective_time(const Link& link, const std::string& op, double bytes, int n) {
  if (n <= 1) return 0;
  const auto [bw, alpha] = link.of(op);
  const double ring = double(n - 1) / n;
  if (op == "all_reduce") return 2 * (n - 1) * alpha + 2 * ring * bytes / bw;
  if (op == "all_gather" || op == "reduce_scatter") return (n - 1) * alpha + ring * bytes / bw;
  return alpha + bytes / bw;  // p2p
}

namespace {

// The layout and the machine as the model sees them.
struct Setup {
  Setup(const Config& c, const Machine& machine) : cfg(c), mc(machine) {}
  const Config& cfg;
  const Machine& mc;
  int tp = 1, pp = 1, dp = 1, v = 1, m = 1, world = 1, per_node = 1;
  double b = 1, s = 1, h = 1, heads = 1, vocab = 1;  // vocab: padded
  double act = 4;                                    // bytes of an activation element
  double peak = 0;                                   // FLOP/s of the whole device
  int sharers = 1;   // ranks per device (more than one where ranks outnumber devices_per_node)
  double share = 1;  // a rank's share of its device's rate
  TensorShards shards;
  Recompute recompute = Recompute::none;
  std::vector<int> layers;                       // per stage
  std::vector<size_t> stage_params;              // elements per rank, per stage
  std::vector<std::vector<size_t>> stage_units;  // per stage: each unit's elements, arena order
  const Link& group_link(int size, int stride) const {
    return size * stride <= per_node ? mc.intra_node : mc.inter_node;
  }
  const Link& tp_link() const { return group_link(tp, 1); }
  const Link& dp_link() const { return group_link(dp, tp); }
  // Between two stages: ranks are numbered tensor rank first, then data-parallel, then stage
  // (process_groups.cpp, rank_at), so a rank's peer in the next stage is tp·dp ranks on; within
  // a node where both lie in the same one.
  const Link& stage_link(int from, int to) const {
    const int apart = tp * dp;
    return from * apart / per_node == to * apart / per_node ? mc.intra_node : mc.inter_node;
  }
};

// One pass of one piece of a stage: its compute (FLOPs and element-wise work) and its
// tensor-parallel collectives, forward and backward (recomputation included in the backward).
// bwd_hidden: the part of bwd_comm a whole backward runs behind its column-parallel GEMMs
// (parallel.overlap_tensor_comm); a split backward's input half hides none of it (its weight GEMMs
// wait for the other half). fwd_hidden and input_hidden: what parallel.tp_comm_overlap's ring
// hides of fwd_comm and of bwd_comm behind the forward's GEMMs and the backward's input-gradient
// GEMMs (a split backward's input half too).
struct PassTime {
  double fwd = 0, fwd_comm = 0, fwd_hidden = 0, bwd = 0, bwd_comm = 0, bwd_hidden = 0,
         input_hidden = 0;
  void add(const PassTime& o) {
    fwd += o.fwd, fwd_comm += o.fwd_comm, fwd_hidden += o.fwd_hidden, bwd += o.bwd;
    bwd_comm += o.bwd_comm, bwd_hidden += o.bwd_hidden, input_hidden += o.input_hidden;
  }
  double fwd_exposed() const { return fwd_comm - fwd_hidden; }
  double bwd_exposed() const { return bwd_comm - bwd_hidden - input_hidden; }
  double input_half_exposed() const { return bwd_comm - input_hidden; }
};

// What parallel.overlap_tensor_comm hides of a column-parallel GEMM's backward collectives: the
// input's gather (`gather`) behind the input-gradient GEMM and the input gradient's reduction
// (`reduce`) behind the weight-gradient GEMM, each as long as the forward GEMM (`gemm`, the same
// FLOPs), the machine's tensor-parallel overlap share of whichever is shorter.
double hidden_behind_column(const Setup& u, double gemm, double gather, double reduce) {
  if (!u.cfg.parallel.overlap_tensor_comm) return 0;
  return u.mc.overlap_tensor_parallel * (std::min(gather, gemm) + std::min(reduce, gemm));
}

// Whether the engine runs the tensor group's sequence-parallel traffic around a ring
// (parallel.tp_comm_overlap).
bool ring_tensor_comm(const Setup& u) {
  return u.cfg.parallel.tp_comm_overlap && u.cfg.parallel.sequence_parallel && u.tp > 1;
}

struct RingGemm {
  double time = 0, last = 0, extra = 0;
};
// What parallel.tp_comm_overlap's ring hides of a gather feeding the GEMM `g` or a
// reduce-scatter it feeds (GPT::ring_gather, ring_reduce_scatter): each of its t - 1 steps moves
// one rank's block beside the GEMM of another's, so all of it up to the GEMMs but one (g.last,
// the step with nothing in flight), the machine's tensor-parallel overlap share of that.
double hidden_by_ring(const Setup& u, const RingGemm& g, double gather, double reduce) {
  if (!ring_tensor_comm(u)) return 0;
  const double beside = g.time - g.last;
  return u.mc.overlap_tensor_parallel * (std::min(gather, beside) + std::min(reduce, beside));
}

double flops_time(const Setup& u, double flops, const Curve& curve) {
  if (flops <= 0) return 0;
  return flops / (u.peak * curve.at(flops) * u.share);
}

double bytes_time(const Setup& u, double bytes) {
  return bytes / (u.mc.memory_bandwidth * u.share);
}

// A GEMM of `flops` as parallel.tp_comm_overlap's ring runs it: t GEMMs of flops/t, one per
// rank's tokens, on the curve by their own FLOPs; one feeding a reduce-scatter adds each step's
// sum received to its block (t - 1 adds of a (b·s/t, h) block: two reads and a write).
// `last`: one of them; `extra`: its time over the whole GEMM's.
RingGemm ring_gemm(const Setup& u, double flops, bool feeds_reduce) {
  const double t = u.tp, block = u.b * u.s / t * u.h * u.act;
  RingGemm g;
  g.last = flops_time(u, flops / t, u.mc.efficiency);
  g.time = t * g.last + (feeds_reduce ? bytes_time(u, 3 * block * (t - 1)) : 0.0);
  g.extra = g.time - flops_time(u, flops, u.mc.efficiency);
  return g;
}

// A block's four matrix products, each on the curve by its own FLOPs (cuBLAS runs them as four
// GEMMs): qkv (6·t·h²) and the attention's projection (2·t·h²) over the attention split, fc and
// its projection (8·t·h² each) over the MLP's.
double dense_time(const Setup& u, double tokens) {
  const double th2 = tokens * u.h * u.h, ta = u.shards.attention, tm = u.shards.mlp;
  double t = 0;
  for (const double flops : {6 * th2 / ta, 2 * th2 / ta, 8 * th2 / tm, 8 * th2 / tm})
    t += flops_time(u, flops, u.mc.efficiency);
  return t;
}

// Triad's unfused CUDA attention (kernels/cuda/attention_naive.cu), one batch element at a time:
// batched GEMMs over the rank's heads and row kernels over the fp32 (T, T) scores. Each kernel
// takes the longer of its FLOPs on the attention curve and its bytes at the memory bandwidth, one
// after another. Bytes per score element: the GEMMs write the fp32 scores (4) or read the P / dS
// operand (e: the compute dtype's copy, or the fp32 matrix itself in fp32); the row kernels read
// the causal half of their fp32 inputs and write every element.
struct AttentionTime {
  double fwd = 0, bwd = 0;
};

AttentionTime naive_cuda_attention(const Setup& u, const Curve& curve) {
  const double ta = u.shards.attention, e = u.act, copy = u.act < 4 ? u.act : 0;
  const double elems = u.heads / ta * u.s * u.s;  // score elements of one batch element
  const double gemm = 2 * u.s * u.s * u.h / ta;   // one (T, T, D) product over the heads
  auto kernel = [&](double flops, double bytes_per_element) {
    return std::max(flops_time(u, flops, curve), bytes_time(u, elems * bytes_per_element));
  };
  AttentionTime t;
  // S = QKᵀ; softmax (S read, P written in e); out = PV.
  t.fwd = kernel(gemm, 4) + kernel(0, 2 + e) + kernel(gemm, e);
  // P recomputed (QKᵀ, then exp(S - lse) in place and its e copy); dV = PᵀdO; dP = dO Vᵀ (fp32);
  // dS = P∘(dP - rowsum) (P and dP read, dS written in e); dQ = dS K and dK = dSᵀQ.
  t.bwd = kernel(gemm, 4) + kernel(0, 2 + 4 + copy) + kernel(gemm, e) + kernel(gemm, 4) +
          kernel(0, 4 + e) + 2 * kernel(gemm, e);
  t.fwd *= u.b;
  t.bwd *= u.b;
  return t;
}

// The attention plugin's QKᵀ and PV, forward and backward: Triad's unfused CUDA kernels as they
// run (above); otherwise the plugin's FLOPs on its curve (the flash plugins skip the causal
// mask's empty half, the naive one computes the whole score matrix; on a CPU its softmax is in
// its curve), its backward `attention_backward_ratio` of that.
AttentionTime attention_time(const Setup& u, double flops) {
  const std::string& plugin = u.cfg.attention.name;
  const auto it = u.mc.attention.find(plugin);
  const Curve& curve = it != u.mc.attention.end() ? it->second : u.mc.efficiency;
  if (plugin == "naive" && u.cfg.device == "cuda") return naive_cuda_attention(u, curve);
  const auto own = u.mc.attention_backward_ratio.find(plugin);
  const double ratio =
      own != u.mc.attention_backward_ratio.end() ? own->second : u.mc.backward_ratio;
  AttentionTime t;
  t.fwd = flops_time(u, flops, curve);
  t.bwd = ratio * t.fwd;
  return t;
}

// A transformer block on one rank, per micro-batch.
PassTime block_time(const Setup& u) {
  const double tokens = u.b * u.s, h = u.h;
  const double ta = u.shards.attention, tm = u.shards.mlp;
  // qkv and the projection (8·t·h² over the attention split), fc and its projection (16·t·h²).
  const double dense = 8 * tokens * h * h / ta + 16 * tokens * h * h / tm;
  const std::string& plugin = u.cfg.attention.name;
  const bool skips_masked = plugin == "flash1" || plugin == "flash2";
  const double attn = (skips_masked ? 2 : 4) * u.b * u.s * u.s * h / ta;
  // Element-wise bytes: two layernorms and two residual adds (10h), the MLP's bias and GeLU
  // (12h over its split), the attention's biases (4h over its split).
  const double elementwise = tokens * u.act * (10 * h + 12 * h / tm + 4 * h / ta);
  const AttentionTime at = attention_time(u, attn);
  double attn_t = at.fwd;
  const double rest_t = dense_time(u, tokens) + bytes_time(u, elementwise);
  PassTime p;
  p.fwd = rest_t + attn_t;
  double bwd = u.mc.backward_ratio * rest_t + at.bwd;
  if (const auto blk = u.mc.blocks.find(plugin); blk != u.mc.blocks.end()) {
    // Measured whole blocks: the forward by all its FLOPs; the attention's part in proportion.
    const double flops = dense + attn;
    p.fwd = flops_time(u, flops, blk->second.efficiency);
    attn_t = p.fwd * attn / flops;
    bwd = blk->second.backward_ratio * p.fwd;
  }
  // Per split part one all-reduce of the (b, s, h) activations forward and one backward; with
  // sequence parallelism an all-gather and a reduce-scatter (the same time), and a whole part
  // half of that (its input gathered, its output's gradient too).
  const double msg = tokens * h * u.act;
  const double ar = collective_time(u.tp_link(), "all_reduce", msg, u.tp);
  auto part = [&](double ways) {
    return ways > 1 ? ar : u.cfg.parallel.sequence_parallel ? ar / 2 : 0.0;
  };
  p.fwd_comm = part(ta) + part(tm);
  p.bwd = bwd;
  // Under sequence parallelism the backward gathers each part's layernorm output again for its
  // weight gradient (the engine keeps it token-split, model.cpp's col_full_).
  const bool sp = u.cfg.parallel.sequence_parallel;
  const double gather = sp ? collective_time(u.tp_link(), "all_gather", msg, u.tp) : 0.0;
  p.bwd_comm = p.fwd_comm + 2 * gather;
  // Each part's first GEMM (qkv, fc) hides the gather again behind its input gradient and, where
  // the part is split, its input gradient's reduce-scatter (all-reduce without sequence
  // parallelism) behind its weight gradient.
  const double th2 = tokens * h * h;
  const double reduce = sp ? ar / 2 : ar;  // as part() counts it
  p.bwd_hidden = hidden_behind_column(u, flops_time(u, 6 * th2 / ta, u.mc.efficiency), gather,
                                      ta > 1 ? reduce : 0.0) +
                 hidden_behind_column(u, flops_time(u, 8 * th2 / tm, u.mc.efficiency), gather,
                                      tm > 1 ? reduce : 0.0);
  // The ring (tp_comm_overlap): each part's first GEMM (qkv, fc) reads its gathered input, its
  // second (the projections) feeds the reduce-scatter of a split part's output forward and, in the
  // backward, reads the gathered output gradient for its input gradient (the same FLOPs as the
  // forward's, so the MLP projection's is fc's). The engine runs those GEMMs in pieces
  // (ring_gemm): their longer time is added.
  if (ring_tensor_comm(u)) {
    const double moved = ar / 2;  // one all-gather or reduce-scatter, as part() counts them
    const RingGemm qkv = ring_gemm(u, 6 * th2 / ta, false);
    const RingGemm proj = ring_gemm(u, 2 * th2 / ta, ta > 1);
    const RingGemm fc = ring_gemm(u, 8 * th2 / tm, false);
    const RingGemm fc_proj = ring_gemm(u, 8 * th2 / tm, tm > 1);
    const RingGemm proj_dx = ring_gemm(u, 2 * th2 / ta, false);  // its input gradient
    p.fwd += qkv.extra + proj.extra + fc.extra + fc_proj.extra;
    p.bwd += proj_dx.extra + fc.extra;
    p.fwd_hidden = hidden_by_ring(u, qkv, moved, 0) + hidden_by_ring(u, fc, moved, 0) +
                   hidden_by_ring(u, proj, 0, ta > 1 ? moved : 0) +
                   hidden_by_ring(u, fc_proj, 0, tm > 1 ? moved : 0);
    p.input_hidden = hidden_by_ring(u, proj_dx, moved, 0) + hidden_by_ring(u, fc, moved, 0);
  }
  if (u.recompute == Recompute::full) {
    p.bwd += p.fwd;
    p.bwd_comm += p.fwd_comm;
    p.input_hidden += p.fwd_hidden;
  } else if (u.recompute == Recompute::selective) {
    p.bwd += attn_t;
  }
  return p;
}

// The word and position embedding (first stage).
PassTime embedding_time(const Setup& u) {
  const double tokens = u.b * u.s, msg = tokens * u.h * u.act;
  PassTime p;
  p.fwd = bytes_time(u, 3 * msg);
  p.bwd = bytes_time(u, 3 * msg);
  if (u.shards.vocab > 1) p.fwd_comm = collective_time(u.tp_link(), "all_reduce", msg, u.tp);
  return p;
}

// The final layernorm, the LM head and the cross-entropy (last stage).
PassTime head_time(const Setup& u) {
  const double tokens = u.b * u.s, tv = u.shards.vocab;
  const double logits = tokens * u.vocab / tv;
  PassTime p;
  p.fwd = flops_time(u, 2 * tokens * u.h * u.vocab / tv, u.mc.efficiency) +
          bytes_time(u, logits * 4 * 3 + tokens * u.h * u.act * 2);
  p.bwd = u.mc.backward_ratio * p.fwd;
  if (tv > 1) {
    // Vocab-parallel cross-entropy: the max, the sum of exponentials and the target logit per
    // token forward; the head input's gradient all-reduced backward, behind the head's weight
    // gradient GEMM (its input is kept gathered: nothing to gather again).
    p.fwd_comm = 3 * collective_time(u.tp_link(), "all_reduce", tokens * 4, u.tp);
    p.bwd_comm = collective_time(u.tp_link(), "all_reduce", tokens * u.h * u.act, u.tp);
    p.bwd_hidden = hidden_behind_column(
        u, flops_time(u, 2 * tokens * u.h * u.vocab / tv, u.mc.efficiency), 0.0, p.bwd_comm);
  }
  return p;
}

// One chunk of one stage: its blocks, and the embedding / head where it holds them.
PassTime chunk_time(const Setup& u, int stage, int chunk) {
  const int blocks = u.layers[size_t(stage)] / u.v;
  PassTime p;
  const PassTime blk = block_time(u);
  for (int i = 0; i < blocks; ++i) p.add(blk);
  if (stage == 0 && chunk == 0) p.add(embedding_time(u));
  if (stage == u.pp - 1 && chunk == u.v - 1) p.add(head_time(u));
  return p;
}

// ZeRO-3's all-gathers of a unit's weights per micro-batch: forward, backward, and the
// recomputed forward.
double gathers(const Setup& u) {
  return u.recompute == Recompute::full ? 3 : 2;
}

// A collective as the transport runs it: `ready` is when it is launched, in seconds from the
// end of the stage's last pass (negative while that stage still computes), `time` how long it
// takes.
struct Reduction {
  double ready = 0, time = 0;
};

// What a stage's data-parallel traffic can hide behind, from its passes as the streams ran them.
struct StageWork {
  double fwd = 0, bwd = 0;  // the compute of all its forward and backward passes
  double last_bwd = 0;      // the last micro-batch's backward compute
  bool split = false;       // its backwards are split: the gradients are final in BACKWARD_WEIGHT
  // Under pipeline parallelism, on the first and the last stage: the all-reduce of the tied word
  // embedding's gradient over the two, launched once both are done with their passes.
  Reduction tied_sum;
  // When its first forward pass starts, from the step's start (the pipeline's warm-up before it).
  double first_forward = 0;
};

// Collectives launched in this order, run one after another (the transport's one stream), each
// starting once it is ready and the one before is done: how far past the end of the stage's last
// pass the last one ends, plus the share of their time before that end the machine does not
// hide (1 - overlap.data_parallel).
double exposed_time(const std::vector<Reduction>& reductions, double overlap) {
  if (reductions.empty()) return 0;
  double done = -std::numeric_limits<double>::infinity(), before = 0;
  for (const Reduction& r : reductions) {
    const double start = std::max(done, r.ready);
    done = start + r.time;
    before += std::max(0.0, std::min(done, 0.0) - start);
  }
  return std::max(0.0, done) + (1 - overlap) * before;
}

// ZeRO-1 partitioned by unit (zero.cpp, reduce_scatter: true): one in-place reduce-scatter of
// each unit's fp32 gradient (the embedding, each block, the head). With one chunk per stage and
// overlap_comm, each starts as soon as the last micro-batch's backward has finished its unit
// (GPT::backward_pass reports the head first and the embedding last; the weight half reports
// them when the backward is split), beside the backward of the units still to go (whose
// tensor-parallel collectives share the transport's stream: only their compute hides it). Under
// pipeline parallelism the tied word embedding (stage 0's embedding, the last stage's copy in
// its head) is reported only once the end stages have summed it (reduce_tied_grads), that sum
// queued after the others. Otherwise (interleaved chunks: the core reports the whole arena at
// REDUCE_GRADS; overlap_comm off: the plugin waits for finish_grads) they all start after the
// backward, and after the tied sum.
std::vector<Reduction> unit_reductions(const Setup& u, int stage, const StageWork& w,
                                       bool overlaps) {
  const std::vector<size_t>& sizes = u.stage_units[size_t(stage)];
  const size_t n = sizes.size();
  const bool first = stage == 0, last = stage == u.pp - 1, ends = u.pp > 1 && (first || last);
  const double part = w.split ? 0.5 : 1.0;
  const double block = block_time(u).bwd * part, embedding = embedding_time(u).bwd * part;
  const double head = head_time(u).bwd * part;
  // Unit i's backward compute in the last pass (units in arena order: embedding, blocks, head).
  auto backward = [&](size_t i) {
    return first && i == 0 ? embedding : last && i + 1 == n ? head : block;
  };
  auto tied = [&](size_t i) { return ends && ((first && i == 0) || (last && i + 1 == n)); };
  double to_go = 0;  // the backward compute of the units before i in the arena, after it in time
  for (size_t i = 0; i < n; ++i) to_go += backward(i);
  std::vector<Reduction> out, after;
  if (ends) after.push_back(w.tied_sum);
  for (size_t i = n; i-- > 0;) {
    to_go -= backward(i);
    const double time = collective_time(u.dp_link(), "reduce_scatter", double(sizes[i]) * 4, u.dp);
    if (overlaps && !tied(i))
      out.push_back({-to_go, time});
    else
      after.push_back({w.tied_sum.ready, time});
  }
  out.insert(out.end(), after.begin(), after.end());
  return out;
}

// Where the parameter gathers after the step go with overlap_param_gather (ZeRO-1 by unit,
// ZeRO-2): the step only starts each unit's in-place all-gather, in arena order, one after
// another on the data-parallel communicator from the step's end (the next step's start here), so
// unit i's is done at the sum of the first i + 1 gathers. In fp32 they gather the master weights;
// in mixed precision the compute copy itself, act bytes an element with nothing to convert
// (optimizer.cpp, start_gathers). The next forward waits for a unit's just before it first reads
// it, then computes it: the stage's first forward, from `w.first_forward` (gathers done before
// then ran while the stage waited for the pipeline), unit by unit in arena order (the embedding,
// the blocks, the head). Exposed: the waits, plus the share of the gathers' time under that
// forward the machine does not hide (1 - overlap.data_parallel). With interleaved chunks the
// stage's units are taken as one forward; a later chunk's first forward in fact starts later
// still, so its gathers are hidden at least this well.
double overlapped_param_gather(const Setup& u, int stage, const StageWork& w) {
  const std::vector<size_t>& sizes = u.stage_units[size_t(stage)];
  const size_t n = sizes.size();
  const bool first = stage == 0, last = stage == u.pp - 1;
  auto forward = [](const PassTime& p) { return p.fwd + p.fwd_exposed(); };
  const double block = forward(block_time(u)), embedding = forward(embedding_time(u));
  const double head = forward(head_time(u));
  double gathered = 0, clock = w.first_forward, waited = 0;
  for (size_t i = 0; i < n; ++i) {
    gathered += collective_time(u.dp_link(), "all_gather", double(sizes[i]) * u.act, u.dp);
    const double compute = first && i == 0 ? embedding : last && i + 1 == n ? head : block;
    waited += std::max(0.0, gathered - clock);
    clock = std::max(clock, gathered) + compute;
  }
  // The gathers end before the last unit's forward starts: from the forward's start to then the
  // stage either waited or computed.
  const double under_compute = std::max(0.0, gathered - w.first_forward) - waited;
  return waited + (1 - u.mc.overlap_data_parallel) * under_compute;
}

// Exposed data-parallel time of a stage. As the "zero" plugin and the core run it: gradients
// reduce in fp32 (the plugin takes no other dtype). Stage 0 (and stage 1 with reduce_scatter
// off) all-reduces them in buckets, with overlap_comm and one chunk per stage behind the last
// micro-batch's backward (training_step.cpp's overlap_; interleaved chunks report the whole
// arena after the backward); stage 1 reduce-scatters each unit (unit_reductions). Stages 1 and 2
// all-gather the fp32 master weights after the step (zero.cpp, after_step: one gather per unit,
// or of the whole arena with reduce_scatter off) and then convert the whole arena into the
// compute copy (optimizer.cpp, after_step; model_state.cpp, sync_compute); stage 2
// reduce-scatters each unit per micro-batch behind the backward; stage 3 gathers each unit's
// compute copy (model_state.cpp, prefetch) and zeroes only the gradient windows (unit_grad).
// With overlap_param_gather the per-unit gathers of stages 1 and 2 run behind the next forward
// instead (overlapped_param_gather).
double data_parallel_time(const Setup& u, int stage, const StageWork& w) {
  if (u.dp <= 1) return 0;
  const double psi = double(u.stage_params[size_t(stage)]), grads = psi * 4;
  const Link& link = u.dp_link();
  const ZeroConfig& zero = u.cfg.zero_optimization;
  const int z = zero.stage;
  const bool by_unit = z == 1 && zero.reduce_scatter;
  const double units = double(u.stage_units[size_t(stage)].size());
  auto many = [&](const char* op, double bytes, double count) {
    // `count` collectives sharing `bytes`: each pays its latency.
    const auto [bw, alpha] = link.of(op);
    const double steps = std::string(op) == "all_reduce" ? 2.0 * (u.dp - 1) : u.dp - 1.0;
    return collective_time(link, op, bytes, u.dp) + (count - 1) * steps * alpha;
  };
  // Stages 1 and 2 after the step: the fp32 gather, then the compute copy from the whole arena;
  // or, overlapped, each unit's gather waited for in the next forward.
  const double gather = (by_unit || z == 2) && zero.overlap_param_gather
                            ? overlapped_param_gather(u, stage, w)
                            : many("all_gather", grads, by_unit || z == 2 ? units : 1.0) +
                                  (u.act < 4 ? bytes_time(u, psi * (4 + u.act)) : 0.0);
  const bool overlaps = zero.overlap_comm && u.v == 1;
  std::vector<Reduction> reductions;
  double after = 0;
  if (by_unit) {
    reductions = unit_reductions(u, stage, w, overlaps);
    after = gather;
  } else if (z <= 1) {
    const double buckets = std::ceil(psi / double(std::max<int64_t>(1, zero.reduce_bucket_size)));
    reductions = {{overlaps ? -w.last_bwd : 0.0, many("all_reduce", grads, buckets)}};
    if (z == 1) after = gather;
  } else if (z == 2) {
    reductions = {{-w.bwd, u.m * many("reduce_scatter", grads, units)}};
    after = gather;
  } else {
    reductions = {{-(w.fwd + w.bwd), u.m * (gathers(u) * many("all_gather", psi * u.act, units) +
                                            many("reduce_scatter", grads, units))}};
  }
  // ZeRO-2/3: each unit's fp32 gradient window is zeroed per micro-batch at the memory bandwidth
  // (the gathered weights are written by the gather, not zeroed).
  const double windows = z >= 2 ? u.m * grads : 0.0;
  return exposed_time(reductions, u.mc.overlap_data_parallel) + after + bytes_time(u, windows);
}

// The optimizer's step on a stage: AdamW reads the weight, its gradient and two moments and
// writes three of them (fp32, 28 bytes an element), plus the compute copy in mixed precision;
// offloaded, the gradients go down and the weights come up over the host link.
double optimizer_time(const Setup& u, int stage) {
  const double psi = double(u.stage_params[size_t(stage)]);
  const double owned = u.cfg.zero_optimization.stage >= 1 ? psi / u.dp : psi;
  const double bytes = owned * (28 + (u.act < 4 ? 2 : 0));
  if (u.cfg.zero_optimization.offload_optimizer.device == "cpu" &&
      u.cfg.zero_optimization.stage >= 1) {
    const double link =
        u.cfg.device == "cpu" ? 0 : 2 * collective_time(u.mc.host, "p2p", owned * 4, 2);
    return bytes / u.mc.host_memory_bandwidth + link;
  }
  return bytes_time(u, bytes);
}

// busy: the share of the step the ranks spend computing (1 until a first estimate says).
Setup make_setup(const Config& cfg, int world, int nodes, const Machine& mc, const RunPlan& plan,
                 double busy) {
  Setup u(cfg, mc);
  const auto& par = cfg.parallel;
  u.tp = par.tensor_model_parallel_size;
  u.pp = par.pipeline_model_parallel_size;
  u.dp = std::max(1, par.data_parallel_size);
  u.v = par.virtual_pipeline_model_parallel_size;
  u.m = cfg.training.gradient_accumulation_steps;
  u.world = world;
  if (nodes < 1 || world % nodes != 0)
    throw UserError("--nodes " + std::to_string(nodes) + " does not divide the job's " +
                    std::to_string(world) + " ranks evenly; give a number of nodes that does");
  u.per_node = world / nodes;
  u.b = cfg.training.micro_batch_size;
  u.s = cfg.model.seq_length;
  u.h = cfg.model.hidden_size;
  u.heads = cfg.model.num_attention_heads;
  u.vocab = double(plan.padded_vocab_size);
  u.act = cfg.precision == "fp32" ? 4 : 2;
  u.peak = mc.peak_for(cfg.precision, cfg.allow_tf32);
  // Ranks sharing a device: those busy at once split its cores (a rank waiting for a message or
  // a stage waiting for its turn leaves them to the others).
  u.sharers = (u.per_node + mc.devices_per_node - 1) / mc.devices_per_node;
  u.share = u.sharers > 1
                ? mc.share_efficiency / std::max(mc.cores, std::max(1.0, u.sharers * busy))
                : 1.0;
  u.recompute = recompute_of(cfg.training);
  u.layers = plan.stage_layers;
  u.stage_params = plan.stage_params;
  u.stage_units = plan.stage_units;
  u.shards = plan.shards;
  return u;
}

// One step of the layout with the ranks' sharing of their device as `u` says: the step's time,
// its breakdown on the last stage to finish, and the share of the step the ranks compute
// (passes and the optimizer, averaged over the stages).
struct StepTime {
  double step = 0, busy = 1;
  int slowest = 0;
  StepBreakdown breakdown;
};

StepTime step_time(const Setup& u, const std::vector<PipeSchedule>& streams) {
  const Machine& mc = u.mc;
  std::vector<std::vector<PassTime>> chunks(size_t(u.pp));
  for (int st = 0; st < u.pp; ++st)
    for (int c = 0; c < u.v; ++c) chunks[size_t(st)].push_back(chunk_time(u, st, c));
  PipeCosts costs;
  costs.pass = [&](int st, int c, bool backward) {
    const PassTime& p = chunks[size_t(st)][size_t(c)];
    return (backward ? p.bwd + p.bwd_exposed() : p.fwd + p.fwd_exposed()) + mc.per_pass;
  };
  // A split backward (BACKWARD_INPUT, then BACKWARD_WEIGHT): half of the compute each (a GEMM's
  // input and weight gradients cost the same), the tensor-parallel collectives in the input half
  // (they carry the input gradient), and each half one pass's overhead.
  costs.half = [&](int st, int c, bool weight) {
    const PassTime& p = chunks[size_t(st)][size_t(c)];
    return p.bwd / 2 + (weight ? 0.0 : p.input_half_exposed()) + mc.per_pass;
  };
  // Every tensor rank sends its own copy of the stage's (b, s, h) output, or its 1/tp of the
  // tokens under sequence parallelism (GPT::stage_bytes), to its peer at once; links are per
  // device (a DGX's adapter per GPU), so each send has its link to itself.
  const double msg =
      u.b * u.s * u.h * u.act / (u.cfg.parallel.sequence_parallel ? double(u.tp) : 1.0);
  costs.transfer = [&](int st, int, bool grad) {
    const int to = (st + (grad ? u.pp - 1 : 1)) % u.pp;  // interleaved chunks wrap around
    return collective_time(u.stage_link(st, to), "p2p", msg, 2);
  };
  const PipeTiming timing = pipeline_timing(streams, u.m, u.v, costs);

  StepTime out;
  const double other = mc.per_step + mc.per_micro_batch * u.m;
  double computing = 0;
  // The tied word embedding's gradient, summed over the first and the last stage once both are
  // done with their passes (REDUCE_TIED_GRADS; each tensor rank its slice of the vocabulary).
  const double tied_start = std::max(timing.end.front(), timing.end.back());
  const double tied_sum = collective_time(u.stage_link(0, u.pp - 1), "all_reduce",
                                          u.vocab / u.shards.vocab * u.h * 4, 2);
  // Each stage's first forward (the first micro-batch's, chunk 0) starts once the stage before
  // has run its own and sent the activation.
  double first_forward = 0;
  for (int st = 0; st < u.pp; ++st) {
    StepBreakdown b;
    StageWork w;
    w.first_forward = first_forward;
    first_forward += costs.pass(st, 0, false) + costs.transfer(st, 0, false);
    for (const PassTime& p : chunks[size_t(st)]) {
      w.fwd += p.fwd * u.m;
      w.bwd += p.bwd * u.m;
      w.last_bwd += p.bwd;
    }
    // The tensor-parallel time each pass exposes, as costs.pass and costs.half charge it.
    for (const triad_pipe_instr_v1& in : streams[size_t(st)].instrs) {
      w.split = w.split || in.op == TRIAD_PIPE_BACKWARD_WEIGHT;
      if (in.chunk < 0) continue;
      const PassTime& p = chunks[size_t(st)][size_t(in.chunk)];
      if (in.op == TRIAD_PIPE_FORWARD) b.tensor += p.fwd_exposed();
      if (in.op == TRIAD_PIPE_BACKWARD) b.tensor += p.bwd_exposed();
      if (in.op == TRIAD_PIPE_BACKWARD_INPUT) b.tensor += p.input_half_exposed();
    }
    if (u.pp > 1 && (st == 0 || st == u.pp - 1))
      w.tied_sum = {tied_start - timing.end[size_t(st)], tied_sum};
    b.compute = timing.busy[size_t(st)] - b.tensor;
    b.pipeline = timing.end[size_t(st)] - timing.busy[size_t(st)];
    b.data_parallel = data_parallel_time(u, st, w);
    b.optimizer = optimizer_time(u, st);
    b.other = other;
    computing += b.compute + b.optimizer;
    if (b.total() > out.step) {
      out.step = b.total();
      out.breakdown = b;
      out.slowest = st;
    }
  }
  out.busy = out.step > 0 ? std::min(1.0, computing / u.pp / out.step) : 1.0;
  return out;
}

}  // namespace

Prediction predict(const Config& cfg, int world, int nodes, const Machine& mc) {
  const RunPlan plan = plan_run(cfg);
  const Setup first = make_setup(cfg, world, nodes, mc, plan, 1.0);
  PluginLoader loader;
  CoreServices services(1, nullptr);
  auto plugin = loader.load("pipeline", cfg.pipeline.name);
  PipelineBackend pipeline(
      plugin, resolve_params(plugin->descriptor(), cfg.pipeline.params, cfg.pipeline.yaml_path),
      services.c_services());
  const std::vector<PipeSchedule> streams = pipeline.schedules(first.pp, first.m, first.v);
  // Ranks sharing a device compute faster when fewer of them compute at once: the share of the
  // step they compute and the step's time settle together (a few rounds; the first assumes
  // they always compute).
  StepTime t = step_time(first, streams);
  double busy = 1.0;
  for (int round = 0; round < 16 && first.sharers > 1; ++round) {
    // A waiting rank keeps waiting_share of a core (a transport that polls spins on it).
    const double wanted = t.busy + mc.waiting_share * (1 - t.busy);
    busy = 0.5 * (busy + wanted);  // damped, so that the rounds do not swing
    const StepTime next = step_time(make_setup(cfg, world, nodes, mc, plan, busy), streams);
    const bool settled = std::abs(next.step - t.step) <= 1e-4 * t.step;
    t = next;
    if (settled) break;
  }
  const Setup& u = first;
  const double step = t.step;
  Prediction pr;
  pr.world = world;
  pr.nodes = nodes;
  pr.breakdown = t.breakdown;
  pr.slowest_stage = t.slowest;
  pr.step_s = step;
  const double samples = cfg.training.global_batch_size;
  pr.samples_per_s = samples / step;
  pr.tokens_per_s = pr.samples_per_s * cfg.model.seq_length;
  const double flops = model_flops_per_step(cfg.model, cfg.training.global_batch_size);
  pr.tflops = flops / step / world / 1e12;
  // Megatron prints recomputation's extra forward in its TFLOP/s: 4/3 of the model's with full
  // recomputation; selective adds the attention products' forward.
  double hw = flops;
  if (u.recompute == Recompute::full) hw = flops * 4.0 / 3.0;
  if (u.recompute == Recompute::selective)
    hw += 4.0 * samples * u.s * u.s * u.h * cfg.model.num_layers;
  pr.tflops_hw = hw / step / world / 1e12;
  pr.mfu = pr.tflops * 1e12 / u.peak;
  const bool with_host = cfg.device == "cpu";
  pr.memory = double(peak_per_rank(plan.stage_memory, with_host));
  pr.memory_limit = mc.memory / u.sharers;
  pr.fits = pr.memory <= pr.memory_limit;
  return pr;
}

}  // namespace triad
